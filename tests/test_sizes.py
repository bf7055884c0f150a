"""Files that hold too much: no module of the package over 700 lines, no function over 80.

A module that grows past the limit is split by concern (as ``config/`` and ``training/ace.py``'s collaborators were);
a function, into named steps. Run this file to list the largest ones::

    python tests/test_sizes.py          # modules over 500 lines and functions over 60, largest first
    python tests/test_sizes.py 700 80   # only those over the limits
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "ace_hybrid"
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80


def module_sizes() -> dict[str, int]:
    """Package-relative path -> lines, for every module of the package."""
    return {str(p.relative_to(PACKAGE.parent)): len(p.read_text().splitlines()) for p in sorted(PACKAGE.rglob("*.py"))}


def function_sizes() -> dict[str, int]:
    """``path:line name`` -> lines spanned (``end_lineno - lineno + 1``, docstring included), for every function and
    method of the package (nested ones too)."""
    out: dict[str, int] = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[f"{p.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}"] = node.end_lineno - node.lineno + 1
    return out


def _over(sizes: dict[str, int], limit: int) -> list[str]:
    return [f"{name}: {n} lines" for name, n in sorted(sizes.items(), key=lambda kv: -kv[1]) if n > limit]


def test_no_module_is_over_700_lines() -> None:
    over = _over(module_sizes(), MAX_MODULE_LINES)
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by concern):\n" + "\n".join(over)


def test_no_function_is_over_80_lines() -> None:
    over = _over(function_sizes(), MAX_FUNCTION_LINES)
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps):\n" + "\n".join(over)


def test_the_sizes_see_every_module_and_nested_functions() -> None:
    """A check that cannot fail proves nothing: it reads the whole package, methods and nested functions included."""
    modules, functions = module_sizes(), function_sizes()
    assert "ace_hybrid/config/__init__.py" in modules and "ace_hybrid/training/ace.py" in modules
    assert any(name.endswith(" validate") and "config/llm.py" in name for name in functions)  # a method
    assert any(name.endswith(" check_range") for name in functions)  # nested in LLMConfig.validate


if __name__ == "__main__":
    module_limit, function_limit = [int(a) for a in sys.argv[1:3]] or [500, 60]
    print("\n".join(_over(module_sizes(), module_limit) + _over(function_sizes(), function_limit)))
