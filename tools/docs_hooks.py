"""MkDocs hooks of the documentation site (mkdocs.yml: ``hooks: [tools/docs_hooks.py]``).

Three directives, written as HTML comments in the pages under ``docs/``, are replaced when the site is built, so no
generated text is pasted by hand:

``<!-- ace-hybrid:help-config -->``
    The output of ``ace-hybrid train --help-config`` (every configuration field, its default and its meaning), one
    table per section. The command runs under ``$ACE_HYBRID_DOCS_PYTHON`` (default: the Python running MkDocs), which
    must import ace_hybrid with its ``train`` extra, as ``make docs`` does.
``<!-- ace-hybrid:include PATH [MARKER] -->``
    The file PATH (relative to the repository root), or only its part between ``<!-- MARKER:begin -->`` and
    ``<!-- MARKER:end -->`` (the markers the benchmark scripts rewrite in ``benchmarks/RESULTS.md``).
``<!-- ace-hybrid:module-map -->``
    Placed in ``docs/architecture.md`` after the module map; checks that the map lists every module of
    ``python/ace_hybrid`` and nothing else (:func:`module_map_problems`, also run by ``tests/test_docs.py``).

A failure (a command that fails, a missing file or marker, a module missing from the map) is logged as an error,
which fails ``mkdocs build --strict``. This file imports nothing from MkDocs, so the tests can load it without it.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "ace_hybrid"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAP_BEGIN, MAP_END = "<!-- module-map:begin -->", "<!-- module-map:end -->"

log = logging.getLogger("mkdocs.plugins.ace_hybrid")

_DIRECTIVE = re.compile(r"<!--\s*ace-hybrid:(?P<name>[\w-]+)(?P<args>[^>]*?)\s*-->")
_ROW_MODULE = re.compile(r"^\|\s*`(?P<module>[^`]+)`")


# ----------------------------------------------------------------------------- the module map


def package_modules(package: Path = PACKAGE) -> set[str]:
    """The modules of the package as the map names them, relative to ``python/ace_hybrid``.

    A subpackage is ``name/`` (its ``__init__.py``), a module ``name.py`` or ``sub/name.py``, the package's own
    ``__init__.py`` is ``__init__.py``, and the compiled extension is ``_core`` (present as ``_core.pyi``).
    """
    out: set[str] = set()
    for path in package.rglob("*.py"):
        rel = path.relative_to(package)
        if "__pycache__" in rel.parts:
            continue
        if rel.name == "__init__.py" and len(rel.parts) > 1:
            out.add(rel.parent.as_posix() + "/")
        else:
            out.add(rel.as_posix())
    if (package / "_core.pyi").is_file():
        out.add("_core")
    return out


def map_modules(markdown: str) -> list[str]:
    """The modules a module map names: the code span opening each table row between the map's markers."""
    if MAP_BEGIN not in markdown or MAP_END not in markdown:
        raise ValueError(f"no module map: the page has no {MAP_BEGIN} ... {MAP_END} section")
    body = markdown.split(MAP_BEGIN, 1)[1].split(MAP_END, 1)[0]
    return [m["module"] for line in body.splitlines() if (m := _ROW_MODULE.match(line.strip()))]


def module_map_problems(markdown: str, package: Path = PACKAGE) -> list[str]:
    """What is wrong with a module map against the package tree, each as one instruction ([] when nothing)."""
    listed = map_modules(markdown)
    modules = package_modules(package)
    problems = [f"python/ace_hybrid/{m} is not in the module map of docs/architecture.md: add the row "
                f"| `{m}` | <what it holds> | under its layer's heading" for m in sorted(modules - set(listed))]
    problems += [f"there is no python/ace_hybrid/{m}: remove its row from the module map of docs/architecture.md"
                 for m in sorted(set(listed) - modules)]
    problems += [f"`{m}` is listed {listed.count(m)} times in the module map of docs/architecture.md: keep one row"
                 for m in sorted({m for m in listed if listed.count(m) > 1})]
    return problems


# ----------------------------------------------------------------------------- the configuration reference


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def config_reference_markdown(help_text: str) -> str:
    """``ace-hybrid train --help-config`` output as markdown: one heading and one table per ``[section]``."""
    out: list[str] = []
    for line in help_text.splitlines():
        if not line.strip():
            continue
        section = re.fullmatch(r"\[(?P<name>[\w.]+)\]", line.strip())
        if section:
            out += ["", f"### `[{section['name']}]`", "", "| key | default | meaning |", "|---|---|---|"]
            continue
        key, sep, rest = line.strip().partition(" = ")
        if not sep:
            raise ValueError(f"unexpected line in ace-hybrid train --help-config: {line!r}")
        value, _, doc = rest.partition("  # ")
        out.append(f"| `{key}` | `{_cell(value)}` | {_cell(doc)} |")
    if not out:
        raise ValueError("ace-hybrid train --help-config printed nothing")
    return "\n".join(out).strip() + "\n"


@cache
def help_config() -> str:
    """Run ``ace-hybrid train --help-config`` (``python -m ace_hybrid.cli``) and return its output."""
    python = os.environ.get("ACE_HYBRID_DOCS_PYTHON") or sys.executable
    command = [python, "-m", "ace_hybrid.cli", "train", "--help-config"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` exited {done.returncode}: {done.stderr.strip()[-800:]} (the docs "
                           f"need ace_hybrid with its train extra; set ACE_HYBRID_DOCS_PYTHON to a Python that has it)")
    return done.stdout


# ----------------------------------------------------------------------------- includes


def include(path: str, marker: str | None = None) -> str:
    """The text of ``ROOT/path``, or its part between ``<!-- marker:begin -->`` and ``<!-- marker:end -->``."""
    text = (ROOT / path).read_text()
    if marker is None:
        return text
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    if begin not in text or end not in text.split(begin, 1)[1]:
        raise ValueError(f"{path} has no {begin} ... {end} section")
    return text.split(begin, 1)[1].split(end, 1)[0].strip() + "\n"


def expand(markdown: str, page: str) -> str:
    """Replace every ``ace-hybrid:`` directive of a page's markdown; errors are logged (fatal under --strict)."""

    def replace(m: re.Match[str]) -> str:
        name, args = m["name"], m["args"].split()
        try:
            if name == "help-config" and not args:
                return config_reference_markdown(help_config())
            if name == "include" and 1 <= len(args) <= 2:
                return include(*args)
            if name == "module-map" and not args:
                for problem in module_map_problems(markdown):
                    log.error("%s: %s", page, problem)
                return ""
            raise ValueError(f"unknown directive {m.group(0)!r}")
        except (OSError, ValueError, RuntimeError, subprocess.TimeoutExpired) as exc:
            log.error("%s: %s", page, exc)
            return f"*(not generated: {exc})*"

    return _DIRECTIVE.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """MkDocs event: expand the directives of each page."""
    return expand(markdown, page.file.src_uri)
