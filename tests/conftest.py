"""Shared fixtures. Grid2Op environments are expensive to make: one per module and name."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# pytest runs with --import-mode=importlib, which does not put tests/ on sys.path: do it here so the shared helper
# modules (llm_fixtures.py) import by name.
sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_configure(config: pytest.Config) -> None:
    """Allow-list the known third-party warnings (``filterwarnings = ["error"]`` in pyproject.toml makes every other
    one an error); the list is the package's, the one the command line ignores."""
    from ace_hybrid.known_warnings import KNOWN_WARNINGS

    for spec in KNOWN_WARNINGS:
        config.addinivalue_line("filterwarnings", spec)


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep the tests' writable copies (scores, catalogs) out of the user's cache."""
    os.environ.setdefault("ACE_HYBRID_CACHE", str(tmp_path_factory.mktemp("ace_cache")))


@pytest.fixture(scope="session")
def make_grid_env():
    """A factory of (cached) Grid2Op environments by name, seeded 0."""
    pytest.importorskip("grid2op")
    pytest.importorskip("lightsim2grid")
    from ace_hybrid.grid.env import make_env

    cache: dict[str, object] = {}

    def factory(name: str):
        if name not in cache:
            cache[name] = make_env(name, seed=0)
        return cache[name]

    yield factory
    for env in cache.values():
        env.close()


REPO = Path(__file__).resolve().parents[1]
