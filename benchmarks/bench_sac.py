"""Discrete SAC update time over the l2rpn_wcci_2020-sized catalog: which output head scales to 67k actions.

Run:  PYTHONPATH=python python -m pytest benchmarks/bench_sac.py --benchmark-only -s
(-s shows the printed figures; they are also stored in the JSON report as extra_info). About a minute.

One ``DiscreteSAC.update`` at batch 256 over 67,105 actions (~90% legal per row, per-row masks), obs_dim 300,
hidden (256, 256), embed_dim 64, on one torch thread (the training loop's default on a shared 2-core box), for:

* ``linear``: hidden -> n_actions output layer in each of the actor, Q1 and Q2 (~17M parameters each);
* ``lowrank``: h(s) . e(a) + b(a) with e(a) from the catalog-like sparse int8 action features (F = 276);
* ``lowrank_free``: the same head with a free (n, 64) embedding table instead of features.

Action features are synthetic with the catalog's layout (kind one-hot, substation one-hot, line one-hot, the
elements of one substation put on bus 2), so no Grid2Op environment is needed. The speed goal is a ratio
between heads timed in the same run, interleaved round by round, never a wall-clock limit.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ace_hybrid.sac import DiscreteSAC, SACConfig  # noqa: E402

BATCH, N_ACTIONS, OBS_DIM = 256, 67_105, 300
N_SUB, N_LINE, DIM_TOPO = 36, 59, 177
MIN_LOWRANK_SPEEDUP_VS_LINEAR = 1.5
HEADS = ("lowrank", "lowrank_free", "linear")


def catalog_like_features(rng: np.random.Generator) -> np.ndarray:
    """(N_ACTIONS, 4 + N_SUB + N_LINE + DIM_TOPO) int8 with the layout of ``ActionCatalog.features()``."""
    n = N_ACTIONS
    feats = np.zeros((n, 4 + N_SUB + N_LINE + DIM_TOPO), np.int8)
    kind = np.full(n, 3)
    kind[0] = 0
    kind[1 : 1 + 2 * N_LINE] = np.tile([1, 2], N_LINE)
    feats[np.arange(n), kind] = 1
    lines = np.flatnonzero((kind == 1) | (kind == 2))
    feats[lines, 4 + N_SUB + (lines - 1) // 2] = 1
    bus = np.flatnonzero(kind == 3)
    sub_start = np.linspace(0, DIM_TOPO, N_SUB + 1).astype(int)
    sub = rng.integers(0, N_SUB, len(bus))
    feats[bus, 4 + sub] = 1
    for row, s in zip(bus, sub):
        size = sub_start[s + 1] - sub_start[s]
        moved = rng.choice(size, rng.integers(1, max(2, size // 2 + 1)), replace=False)
        feats[row, 4 + N_SUB + N_LINE + sub_start[s] + moved] = 1
    return feats


@pytest.fixture(scope="module")
def problem() -> dict:
    rng = np.random.default_rng(0)
    mask = rng.random((BATCH, N_ACTIONS)) < 0.9
    mask[:, 0] = True
    next_mask = rng.random((BATCH, N_ACTIONS)) < 0.9
    next_mask[:, 0] = True
    batch = dict(
        obs=rng.standard_normal((BATCH, OBS_DIM), dtype=np.float32),
        action=np.array([rng.choice(np.flatnonzero(m[:1000])) for m in mask], np.int64),
        reward=rng.standard_normal(BATCH).astype(np.float32),
        next_obs=rng.standard_normal((BATCH, OBS_DIM), dtype=np.float32),
        done=rng.random(BATCH) < 0.05, weight=rng.uniform(0.3, 1.0, BATCH).astype(np.float32),
        mask=mask, next_mask=next_mask, steps=rng.integers(1, 5, BATCH),
    )
    return {"batch": batch, "features": catalog_like_features(rng)}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_agent(head: str, features: np.ndarray) -> DiscreteSAC:
    cfg = SACConfig(head="linear" if head == "linear" else "lowrank")
    return DiscreteSAC(OBS_DIM, N_ACTIONS, cfg, action_features=features if head == "lowrank" else None, seed=0)


@pytest.mark.parametrize("head", HEADS)
def test_update_time_per_head(benchmark, problem, head: str) -> None:
    agent = make_agent(head, problem["features"])
    result = benchmark.pedantic(lambda: agent.update(**problem["batch"]), rounds=3, iterations=1,
                                warmup_rounds=1)
    assert np.isfinite(result.td_error).all()
    obs, mask = problem["batch"]["obs"][0], problem["batch"]["mask"][0]
    t0 = time.perf_counter()
    for _ in range(20):
        assert mask[agent.act(obs, mask)]
    act_ms = (time.perf_counter() - t0) / 20 * 1e3
    n_params = sum(p.numel() for net in (agent.actor, agent.q1, agent.q2) for p in net.parameters())
    benchmark.extra_info.update(head=head, act_ms=act_ms, online_parameters=n_params)
    print(f"\n[sac] head={head:13s} update median {benchmark.stats.stats.median:.3f} s  act {act_ms:.2f} ms  "
          f"online parameters {n_params / 1e6:.1f}M  (B={BATCH}, n={N_ACTIONS}, 1 thread)")


def test_lowrank_head_is_faster_than_linear(problem) -> None:
    """Speed goal as a ratio, the two heads interleaved round by round so that load hits both alike."""
    agents = {h: make_agent(h, problem["features"]) for h in ("lowrank", "linear")}
    times: dict[str, list[float]] = {h: [] for h in agents}
    for round_ in range(3):
        for head, agent in agents.items():
            t0 = time.perf_counter()
            agent.update(**problem["batch"])
            if round_:  # the first round warms up
                times[head].append(time.perf_counter() - t0)
    lin, low = min(times["linear"]), min(times["lowrank"])
    print(f"\n[sac] interleaved best of 2: linear {lin:.3f} s, lowrank {low:.3f} s, speed-up {lin / low:.2f}x")
    assert lin / low >= MIN_LOWRANK_SPEEDUP_VS_LINEAR
