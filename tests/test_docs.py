"""The documentation against the code: the module map of docs/architecture.md lists exactly the package's modules,
and the generated parts of the site (tools/docs_hooks.py) are built from what the code says."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "tools" / "docs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _hooks()


def test_module_map_lists_every_module_and_nothing_else() -> None:
    problems = hooks.module_map_problems(hooks.ARCHITECTURE.read_text())
    assert not problems, "docs/architecture.md's module map is out of date:\n" + "\n".join(problems)


def test_module_map_check_names_the_row_to_add_and_the_row_to_remove(tmp_path: Path) -> None:
    package = tmp_path / "ace_hybrid"
    (package / "training").mkdir(parents=True)
    for name in ("__init__.py", "config.py", "training/__init__.py", "training/new_part.py"):
        (package / name).write_text('"""x"""\n')
    (package / "_core.pyi").write_text("")
    page = "\n".join(["<!-- module-map:begin -->", "| module | what it holds |", "|---|---|",
                      "| `__init__.py` | x |", "| `_core` | x |", "| `config.py` | x |", "| `training/` | x |",
                      "| `training/gone.py` | x |", "| `config.py` | again |", "<!-- module-map:end -->"])
    problems = hooks.module_map_problems(page, package)
    assert len(problems) == 3
    assert "add the row | `training/new_part.py` | <what it holds> |" in problems[0]
    assert "no python/ace_hybrid/training/gone.py: remove its row" in problems[1]
    assert "`config.py` is listed 2 times" in problems[2]


def test_a_page_without_a_module_map_is_an_error() -> None:
    with pytest.raises(ValueError, match="no module map"):
        hooks.map_modules("# Architecture\n")


def test_package_modules_name_subpackages_modules_and_the_extension() -> None:
    modules = hooks.package_modules()
    assert {"__init__.py", "_core", "config/", "config/ace.py", "training/", "training/loop.py",
            "grid/catalog.py"} <= modules
    assert not any("__pycache__" in m for m in modules)


def test_configuration_reference_has_one_table_per_section_and_escapes_pipes() -> None:
    text = "[env]\n  env.name = 'x'  # The grid.\n  env.action_set = 'full'  # \"full\" | \"tutor:N\".\n[log]\n" \
           "  log.progress = True\n"
    md = hooks.config_reference_markdown(text)
    assert md.count("| key | default | meaning |") == 2
    assert "| `env.action_set` | `'full'` | \"full\" \\| \"tutor:N\". |" in md
    assert "| `log.progress` | `True` |  |" in md


def test_configuration_reference_lists_every_field_of_the_config() -> None:
    from ace_hybrid.config import Config, describe_fields  # what `ace-hybrid train --help-config` prints

    lines = describe_fields(Config())
    md = hooks.config_reference_markdown("\n".join(lines))
    fields = [line.split(" = ", 1)[0].strip() for line in lines if " = " in line]
    assert len(fields) > 50
    for key in fields:
        assert f"| `{key}` |" in md


def test_includes_take_a_marked_section_and_fail_on_a_missing_marker() -> None:
    section = hooks.include("benchmarks/RESULTS.md", "compare_peers:make_run")
    assert section.startswith("### `make run`")
    with pytest.raises(ValueError, match="no <!-- nothing:begin -->"):
        hooks.include("benchmarks/RESULTS.md", "nothing")


def test_every_figure_a_page_shows_exists() -> None:
    import re

    docs = ROOT / "docs"
    for page in docs.rglob("*.md"):
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", page.read_text()):
            assert (page.parent / target).resolve().is_file(), f"{page.relative_to(ROOT)} shows missing {target}"
