"""Warnings of third-party packages that tell a user of ace_hybrid nothing, in one list.

grid2op warns that numba cannot be loaded once per process that imports it (three times in ``make run``'s output:
the command and its two workers), and grid2op, pandapower and pkg_resources warn about their own deprecations. The
command line (:func:`ace_hybrid.cli.main`) and the child processes ace_hybrid starts
(:func:`ace_hybrid.processes.start_child`) ignore them; the test suite allow-lists the same ones
(``tests/conftest.py`` adds them to pytest's ``filterwarnings``, whose first entry turns every other warning into an
error). Importing the package changes no warning filter.

A leaf module (standard library only).
"""

from __future__ import annotations

import builtins
import warnings

__all__ = ["KNOWN_WARNINGS", "ignore_known_warnings"]

KNOWN_WARNINGS = (
    "ignore:Numba cannot be loaded:UserWarning",
    "ignore::DeprecationWarning:grid2op.*",
    "ignore::DeprecationWarning:pandapower.*",
    "ignore::FutureWarning:pandapower.*",
    "ignore::UserWarning:grid2op.*",
    "ignore::DeprecationWarning:pkg_resources.*",
)
"""``action:message:category:module`` filters, as pytest's ``filterwarnings`` reads them (message and module are
regular expressions matched at the start)."""


def ignore_known_warnings() -> None:
    """Add :data:`KNOWN_WARNINGS` to this process's warning filters (in front of the others)."""
    for spec in KNOWN_WARNINGS:
        action, message, category, module = (spec.split(":") + ["", "", ""])[:4]
        warnings.filterwarnings(action, message=message, category=getattr(builtins, category or "Warning"),
                                module=module)
