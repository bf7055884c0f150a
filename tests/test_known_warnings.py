"""A first run prints what matters: the known third-party warnings are ignored by the command line, by the child
processes it starts and by the tests, from one list (ace_hybrid.known_warnings); any other warning still shows."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import tiny_settings  # tests/ is on sys.path: see conftest.py
from ace_hybrid.known_warnings import KNOWN_WARNINGS, ignore_known_warnings

NUMBA = "Numba cannot be loaded. You will gain possibly massive speed if installing it"


def test_the_list_filters_what_it_names_and_nothing_else() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ignore_known_warnings()
        warnings.warn(NUMBA, UserWarning)
        warnings.warn_explicit("old API", DeprecationWarning, "x.py", 1, module="grid2op.Backend.backend")
        warnings.warn_explicit("old API", FutureWarning, "x.py", 1, module="pandapower.toolbox")
        with pytest.raises(DeprecationWarning):
            warnings.warn_explicit("old API", DeprecationWarning, "x.py", 1, module="ace_hybrid.replay")
        with pytest.raises(UserWarning):
            warnings.warn("something of ours", UserWarning)


def test_pytest_allow_lists_the_same_warnings_and_errors_on_others(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.getini("filterwarnings") == ["error", *KNOWN_WARNINGS]  # pyproject's "error", conftest's list
    warnings.warn(NUMBA, UserWarning)  # allow-listed: no error
    with pytest.raises(UserWarning):
        warnings.warn("something of ours", UserWarning)


@pytest.mark.parametrize("entry", ["from ace_hybrid.cli import main; main(['report', 'nowhere'])",
                                   "import os; from ace_hybrid.processes import start_child; start_child(os.getppid())"])
def test_the_cli_and_every_child_process_ignore_the_known_warnings(entry: str) -> None:
    """The command line's entry and a child's first call (a fresh interpreter, as a spawned worker is) install the
    filters; another warning still reaches the user."""
    code = f"import warnings; {entry}; warnings.warn({NUMBA!r}, UserWarning); warnings.warn('ours', UserWarning)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "UserWarning: ours" in proc.stderr and "Numba" not in proc.stderr, proc.stderr


@pytest.mark.grid2op
@pytest.mark.slow
def test_the_cli_and_its_workers_print_no_known_warning(tmp_path: Path) -> None:
    """``make run``'s case: the command and its two workers each import grid2op: nothing but the table is printed."""
    pytest.importorskip("grid2op")
    spec = tiny_settings.experiment_file(tmp_path / "tiny.toml")
    proc = subprocess.run([sys.executable, "-m", "ace_hybrid.cli", "experiment", "--config", str(spec), "--out",
                           str(tmp_path / "out"), "--jobs", "2", "--no-progress", "--no-report"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2 cell(s) run" in proc.stdout
    assert "Warning" not in proc.stderr, proc.stderr[-2000:]
