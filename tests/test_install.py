"""What an installation gives a user: the license, the shipped configurations, the commands without their extras.

The last test builds the wheel and installs it alone (with numpy, its one dependency) in a fresh virtual environment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ace_hybrid.config import read_toml

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = read_toml(REPO / "pyproject.toml", "pyproject")


def test_license_file_is_mit_and_in_the_metadata() -> None:
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Copyright (c) 2026 ace_hybrid developers" in text
    assert PYPROJECT["project"]["license"] == "MIT"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]


