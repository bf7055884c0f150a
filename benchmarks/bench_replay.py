"""pytest-benchmark suite for ace_hybrid's MixedReplayBuffer alone, parametrised by size.

Run (the file is named on the command line, so pytest collects it although it is not ``test_*``)::

    PYTHONPATH=python python -m pytest benchmarks/bench_replay.py -q                 # all four sizes
    PYTHONPATH=python python -m pytest benchmarks/bench_replay.py -q -m "not slow"   # the two small ones

Every buffer is full of the seeded episode stream of ``peers.EpisodeStream`` (episodes of ~200 steps,
``next_obs[t] == obs[t + 1]``) with |N(0,1)|+0.01 priorities before anything is timed; the operations
are the ones ``compare_peers.py`` compares with other libraries: single add, batched add of 64,
prioritised sample of 256, update of 256 priorities, training step (sample + update). Speed goals
against peers are ratios measured in the same run: see ``compare_peers.py``, not here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pytest_benchmark")
ace_hybrid = pytest.importorskip("ace_hybrid")
if not hasattr(ace_hybrid, "MixedReplayBuffer"):
    pytest.skip("ace_hybrid.MixedReplayBuffer is not built in this tree", allow_module_level=True)

from peers import AceHybrid, EpisodeStream, Transitions, priorities_for  # noqa: E402  (after the skips)

BATCH = 256
ADD_CHUNK = 64
SEED = 0

SIZES = [
    pytest.param((100, 100_000), id="D100-cap100k"),
    pytest.param((1300, 20_000), id="D1300-cap20k"),
    pytest.param((100, 1_000_000), id="D100-cap1M", marks=pytest.mark.slow),
    pytest.param((1300, 200_000), id="D1300-cap200k", marks=pytest.mark.slow),
]


class Filled:
    """A full buffer plus a pool of whole episodes to add while timing."""

    def __init__(self, obs_dim: int, capacity: int) -> None:
        self.obs_dim, self.capacity = obs_dim, capacity
        self.ace = AceHybrid(obs_dim, capacity, alpha=0.6, is_exponent=0.4, seed=SEED)
        stream = EpisodeStream(obs_dim, seed=SEED)
        rng = np.random.default_rng(SEED + 1)
        chunk = max(1, min(8192, capacity // 4))
        for start in range(0, capacity, chunk):
            t = stream.take(min(chunk, capacity - start))
            self.ace.update(self.ace.add_batch(t), priorities_for(len(t), rng))
        self.pool: Transitions = EpisodeStream(obs_dim, seed=SEED + 2, first_episode=10**9).take(
            4096, whole_episodes=True
        )
        self.priority = priorities_for(BATCH, np.random.default_rng(SEED + 3))


@pytest.fixture(scope="module", params=SIZES)
def filled(request: pytest.FixtureRequest) -> Filled:
    obs_dim, capacity = request.param
    return Filled(obs_dim, capacity)


def _cycling(fn: Callable[..., Any], calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> Callable[[], Any]:
    """A zero-argument callable making the next prepared call each time."""
    it: Iterator[tuple[tuple[Any, ...], dict[str, Any]]] = itertools.cycle(calls)

    def one() -> Any:
        args, kwargs = next(it)
        return fn(*args, **kwargs)

    return one


def _info(benchmark: Any, f: Filled, items_per_call: int) -> None:
    benchmark.extra_info.update(obs_dim=f.obs_dim, capacity=f.capacity, items_per_call=items_per_call)


def test_single_add(benchmark: Any, filled: Filled) -> None:
    fn, calls = filled.ace.single_add_calls(filled.pool)
    _info(benchmark, filled, 1)
    handle = benchmark(_cycling(fn, calls))
    assert int(handle) >= 0
    assert len(filled.ace) >= 0.95 * filled.capacity


def test_batched_add_64(benchmark: Any, filled: Filled) -> None:
    fn, calls = filled.ace.batch_add_calls(filled.pool.chunks(ADD_CHUNK))
    _info(benchmark, filled, ADD_CHUNK)
    handles = benchmark(_cycling(fn, calls))
    assert np.asarray(handles).shape == (ADD_CHUNK,)


def test_prioritised_sample_256(benchmark: Any, filled: Filled) -> None:
    fn, calls = filled.ace.sample_calls(BATCH)
    _info(benchmark, filled, BATCH)
    batch = benchmark(_cycling(fn, calls))
    assert batch.obs.shape == (BATCH, filled.obs_dim)
    assert batch.next_obs.shape == (BATCH, filled.obs_dim)
    assert np.all((batch.weight > 0) & (batch.weight <= 1))


def test_update_256_priorities(benchmark: Any, filled: Filled) -> None:
    index = filled.ace.sampled_index(BATCH)
    fn, calls = filled.ace.update_calls(index, filled.priority)
    _info(benchmark, filled, BATCH)
    benchmark(_cycling(fn, calls))


def test_training_step(benchmark: Any, filled: Filled) -> None:
    fn, calls = filled.ace.train_step_calls(BATCH, filled.priority)
    _info(benchmark, filled, BATCH)
    benchmark(_cycling(fn, calls))


def test_bytes_per_transition(filled: Filled) -> None:
    """Not a timing: the storage figure compare_peers reports, within the issue's 1.1 x D x 4 bound."""
    per_slot = filled.ace.bytes_per_slot()
    assert per_slot <= 1.1 * filled.obs_dim * 4, per_slot
