"""The package's layers: imports flow one way, no module imports one above it, and there is no cycle.

    config, files, known_warnings, _core  <-  replay, sampling, masking, topology, processes  <-  sac, grid/  <-  llm/
        <-  training/  <-  agents  <-  experiment  <-  report  <-  cli

Every import counts, wherever it is written: at the top, inside a function (lazy) or under ``TYPE_CHECKING``. The
picture is drawn in docs/architecture.md; a new module must be given its layer here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "ace_hybrid"

#: Layer of each top-level module or subpackage; a module may import strictly lower layers and its own subpackage.
LAYERS = {
    "config": 0, "files": 0, "known_warnings": 0, "_core": 0,
    "replay": 1, "sampling": 1, "masking": 1, "topology": 1, "processes": 1,
    "sac": 2, "grid": 2,
    "llm": 3, "data": 3,
    "training": 4,
    "agents": 5,
    "experiment": 6,
    "report": 7,
    "cli": 8,
    "__init__": 9,  # the package's front door (ace_hybrid/__init__.py): re-exports; nothing inside imports it
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, known: set[str]) -> set[str]:
    """The package modules ``path`` imports, lazy and TYPE_CHECKING ones included."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known and name.startswith("ace_hybrid."):
                name = name.rsplit(".", 1)[0]
            if name in known or name == "ace_hybrid._core":
                out.add(name)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules) | {"ace_hybrid._core"}
    return {name: _imports(path, known) - {name} for name, path in modules.items()}


def _layer(module: str) -> tuple[str, int]:
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else "__init__"
    if key not in LAYERS:
        raise KeyError(f"{module} has no layer: add {key!r} to LAYERS in tests/test_layers.py and to "
                       f"docs/architecture.md")
    return key, LAYERS[key]


def test_every_module_has_a_layer() -> None:
    for module in _modules():
        _layer(module)


def test_imports_never_point_up_or_across() -> None:
    bad = []
    for module, targets in _graph().items():
        key, rank = _layer(module)
        for target in targets:
            tkey, trank = _layer(target)
            if tkey != key and trank >= rank:
                bad.append(f"{module} (layer {rank}) imports {target} (layer {trank})")
    assert not bad, "imports against the flow:\n" + "\n".join(sorted(bad))


def test_there_is_no_import_cycle() -> None:
    graph = _graph()
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


def test_the_checks_catch_a_bad_import(tmp_path: Path) -> None:
    """The parser sees lazy and TYPE_CHECKING imports (a check that cannot fail proves nothing)."""
    src = tmp_path / "mod.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ace_hybrid.training.run import Run\n"
                   "def f():\n    from ace_hybrid.llm import make_backend\n    import ace_hybrid.sac\n")
    known = set(_modules())
    assert _imports(src, known) == {"ace_hybrid.training.run", "ace_hybrid.llm", "ace_hybrid.sac"}


@pytest.mark.parametrize("module", ["ace_hybrid.config", "ace_hybrid.files", "ace_hybrid.processes",
                                    "ace_hybrid.known_warnings"])
def test_reading_the_configuration_imports_no_heavy_dependency(module: str) -> None:
    code = (f"import sys, {module}\n"
            "heavy = sorted(m for m in ('torch', 'grid2op', 'transformers', 'peft', 'lightsim2grid', 'ray') if m in sys.modules)\n"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import {module} loaded {out.stdout.strip()}"

