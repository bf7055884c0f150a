"""The package surface: build information and the shipped type stub."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ace_hybrid
from ace_hybrid import _core

STUB = Path(ace_hybrid.__file__).with_name("_core.pyi")


def test_build_info_describes_the_compilation() -> None:
    info = ace_hybrid.build_info()
    assert info["version"] == ace_hybrid.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", info["version"])
    assert info["compiler"] and info["build_type"]
    assert info["cxx_standard"] >= 201703
    assert "-march=native" not in info["flags"]
    assert isinstance(info["sanitizers"], bool)


def test_typed_package_markers_ship() -> None:
    assert STUB.is_file(), "the _core.pyi stub must ship with the package"
    assert STUB.with_name("py.typed").is_file()


def test_every_public_name_is_exported() -> None:
    for name in ace_hybrid.__all__:
        assert hasattr(ace_hybrid, name), name


def _stub_pybind11_version(text: str) -> str | None:
    match = re.search(r"# generated with pybind11 (\S+)", text)
    return match.group(1) if match else None


def test_stub_matches_the_compiled_module(tmp_path: Path) -> None:
    """A stub that lies is worse than none: regenerate it and compare (``make stubs`` refreshes it)."""
    pytest.importorskip("pybind11_stubgen")
    shipped = STUB.read_text()
    recorded = _stub_pybind11_version(shipped)
    if recorded != _core.build_info()["pybind11"]:
        pytest.skip(f"stub generated with pybind11 {recorded}, module built with {_core.build_info()['pybind11']}")
    subprocess.run(
        [sys.executable, "-m", "pybind11_stubgen", "ace_hybrid._core", "-o", str(tmp_path),
         "--numpy-array-use-type-var"],
        check=True, capture_output=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(STUB.parents[1])},  # the ace_hybrid under test, wherever it is
    )
    generated = (tmp_path / "ace_hybrid" / "_core.pyi").read_text()
    body = "\n".join(line for line in shipped.splitlines() if not line.startswith("# generated with pybind11"))
    assert generated.strip() == body.strip(), "python/ace_hybrid/_core.pyi is stale: run `make stubs`"
