"""Make the benchmark helpers (``peers.py``) importable from the benchmark suites in this folder, and allow-list the
known third-party warnings (as tests/conftest.py does)."""

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


def pytest_configure(config: pytest.Config) -> None:
    from ace_hybrid.known_warnings import KNOWN_WARNINGS

    for spec in KNOWN_WARNINGS:
        config.addinivalue_line("filterwarnings", spec)
