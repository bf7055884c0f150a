"""Discrete SAC update time over the l2rpn_neurips_2020_track1-sized catalog (67,105 actions).

Run:  OMP_WAIT_POLICY=PASSIVE PYTHONPATH=python python -m pytest benchmarks/bench_sac.py -s -o "python_files=bench_*.py"
(-s shows the printed figures; with --benchmark-only and --benchmark-json they are also stored as extra_info).
``BENCH_SAC_THREADS=2`` times at two torch threads instead of one (the threads are printed with every figure).

One ``DiscreteSAC.update`` at batch 256 over 67,105 actions (~90% legal per row, per-row masks), obs_dim 300,
hidden (256, 256), embed_dim 64, on ``THREADS`` torch threads (default 1, the training loop's default), for:

* ``linear``: hidden -> n_actions output layer in each of the actor, Q1 and Q2 (~17M parameters each);
* ``lowrank``: h(s) . e(a) + b(a) with e(a) from the catalog-like sparse int8 action features (F = 276);
* ``lowrank_free``: the same head with a free (n, 64) embedding table instead of features.

Action features are synthetic with the catalog's layout (kind one-hot, substation one-hot, line one-hot, the
elements of one substation put on bus 2), so no Grid2Op environment is needed.

Speed goals are ratios between variants timed in the same run, interleaved round by round so that load from
other processes hits all alike, never wall-clock limits:

* ``test_update_is_faster_than_the_reference_update``: the update, with the exact policy gradient
  (``policy_samples = 0``, the default) and with the sampled one (``policy_samples = 64``), against the package's
  dense reference update (:func:`ace_hybrid.sac.reference.reference_update`: full (rows, n) blocks over a few
  states at a time, the textbook formulas, autograd through the action factors), all on agents built alike from the
  same seed. The exact update also agrees with the reference on the first update's losses and TD errors (checked,
  to float32 rounding; ``tests/test_sac.py`` checks it on small problems);
* ``test_lowrank_head_is_faster_than_linear``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ace_hybrid.sac import DiscreteSAC, SACConfig, UpdateBatch  # noqa: E402
from ace_hybrid.sac.reference import reference_update  # noqa: E402

BATCH, N_ACTIONS, OBS_DIM = 256, 67_105, 300
N_SUB, N_LINE, DIM_TOPO = 36, 59, 177
THREADS = int(os.environ.get("BENCH_SAC_THREADS", "1"))
MIN_LOWRANK_SPEEDUP_VS_LINEAR = 1.5
MIN_SAMPLED_SPEEDUP_VS_REFERENCE = 3.0
"""The "Throughput" issue's goal, asserted for the sampled policy gradient (measured 4.1x against the dense
reference; 3.8-4.2x against the update it replaced, four runs)."""
MIN_EXACT_SPEEDUP_VS_REFERENCE = 2.3
"""A regression floor for the exact (default) update: measured 2.8x against the dense reference on the shared 2-core
machine (2.6-3.1x against the update it replaced, four runs), so the floor sits below it."""
SAMPLES = 64
ROUNDS = 5
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
    batch = UpdateBatch(
        obs=rng.standard_normal((BATCH, OBS_DIM), dtype=np.float32),
        action=np.array([rng.choice(np.flatnonzero(m[:1000])) for m in mask], np.int64),
        reward=rng.standard_normal(BATCH).astype(np.float32),
        next_obs=rng.standard_normal((BATCH, OBS_DIM), dtype=np.float32),
        done=rng.random(BATCH) < 0.05, weight=rng.uniform(0.3, 1.0, BATCH).astype(np.float32),
        legal_mask=mask, next_legal_mask=next_mask, steps=rng.integers(1, 5, BATCH),
    )
    return {"batch": batch, "features": catalog_like_features(rng)}


try:
    import pytest_benchmark  # noqa: F401  (provides the ``benchmark`` fixture)
except ImportError:  # a minimal stand-in, so that the figures print without the plugin too

    class _Stats:
        def __init__(self, times: list[float]) -> None:
            self.median = float(np.median(times))

    class _StandIn:
        def __init__(self) -> None:
            self.extra_info: dict[str, Any] = {}
            self.stats: Any = None

        def pedantic(self, fn: Any, rounds: int = 1, iterations: int = 1, warmup_rounds: int = 0) -> Any:
            for _ in range(warmup_rounds):
                fn()
            times, result = [], None
            for _ in range(rounds):
                t0 = time.perf_counter()
                for _ in range(iterations):
                    result = fn()
                times.append((time.perf_counter() - t0) / iterations)
            self.stats = type("S", (), {"stats": _Stats(times)})()
            return result

    @pytest.fixture
    def benchmark() -> _StandIn:
        return _StandIn()


@pytest.fixture(scope="module", autouse=True)
def threads():
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(before)


def make_agent(head: str, features: np.ndarray) -> DiscreteSAC:
    cfg = SACConfig(head="linear" if head == "linear" else "lowrank")
    return DiscreteSAC(OBS_DIM, N_ACTIONS, cfg, action_features=features if head == "lowrank" else None, seed=0)


def _env(batch: int = BATCH, n: str = f"{N_ACTIONS}") -> str:
    return (f"B={batch}, n={n}, torch threads {torch.get_num_threads()}, "
            f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}")


@pytest.mark.parametrize("head", HEADS)
def test_update_time_per_head(benchmark, problem, head: str) -> None:
    agent = make_agent(head, problem["features"])
    result = benchmark.pedantic(lambda: agent.update(problem["batch"]), rounds=3, iterations=1,
                                warmup_rounds=1)
    assert np.isfinite(result.td_error).all()
    obs, mask = problem["batch"].obs[0], problem["batch"].legal_mask[0]
    t0 = time.perf_counter()
    for _ in range(20):
        assert mask[agent.act(obs, mask)]
    act_ms = (time.perf_counter() - t0) / 20 * 1e3
    n_params = sum(p.numel() for net in (agent.actor, agent.q1, agent.q2) for p in net.parameters())
    benchmark.extra_info.update(head=head, act_ms=act_ms, online_parameters=n_params, threads=THREADS)
    print(f"\n[sac] head={head:13s} update median {benchmark.stats.stats.median:.3f} s  act {act_ms:.2f} ms  "
          f"online parameters {n_params / 1e6:.1f}M  ({_env()})")


def _interleaved(fns: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each function, called in turn each round; the first round warms up."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for round_ in range(rounds + 1):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if round_:
                times[name].append(time.perf_counter() - t0)
    return times


def test_update_is_faster_than_the_reference_update(benchmark, problem) -> None:
    """The update against the dense reference update, same batch, interleaved rounds."""
    batch, feats = problem["batch"], problem["features"]
    agents = {"reference": make_agent("lowrank", feats), "exact": make_agent("lowrank", feats),
              "sampled": DiscreteSAC(OBS_DIM, N_ACTIONS, SACConfig(policy_samples=SAMPLES), action_features=feats,
                                     seed=0)}
    first_ref, first_new = reference_update(agents["reference"], batch), agents["exact"].update(batch)
    for key in ("critic_loss", "actor_loss", "alpha_loss", "entropy", "q_mean", "target_mean"):
        assert first_new.metrics[key] == pytest.approx(first_ref.metrics[key], rel=1e-3, abs=1e-5), key
    np.testing.assert_allclose(first_new.td_error, first_ref.td_error, rtol=1e-3, atol=1e-4)
    agents["sampled"].update(batch)
    obs, mask = batch.obs[0], batch.legal_mask[0]
    fns = {}
    for name, agent in agents.items():
        fns[name] = (lambda a=agent: reference_update(a, batch)) if name == "reference" else (
            lambda a=agent: a.update(batch))
        # An update leaves the acting cache (the actor's action embeddings) to the first act() after it, so
        # "update + act" is also timed: the training loop acts between updates.
        fns[f"{name} act"] = lambda a=agent: a.act(obs, mask)
    times = _interleaved(fns, rounds=ROUNDS)
    ms = {name: float(np.median(t)) * 1e3 for name, t in times.items()}
    cycle = {name: float(np.median(np.add(times[name], times[f"{name} act"]))) * 1e3 for name in agents}
    speedup = {name: ms["reference"] / ms[name] for name in ("exact", "sampled")}
    cycle_speedup = {name: cycle["reference"] / cycle[name] for name in ("exact", "sampled")}
    benchmark.extra_info.update(threads=torch.get_num_threads(), rounds=ROUNDS, policy_samples=SAMPLES,
                                median_ms=ms, speedup=speedup, update_and_act_ms=cycle,
                                update_and_act_speedup=cycle_speedup,
                                all_ms={name: [x * 1e3 for x in t] for name, t in times.items()})
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)  # the figures live in extra_info
    rows = [("dense reference update", "reference"), ("exact (policy_samples=0)", "exact"),
            (f"sampled (policy_samples={SAMPLES})", "sampled")]
    lines = [f"  {label:30s} {ms[name]:6.0f} ms" + ("" if name == "reference" else f"  {speedup[name]:.2f}x")
             + f"   update + act {cycle[name]:6.0f} ms"
             + ("" if name == "reference" else f"  {cycle_speedup[name]:.2f}x") for label, name in rows]
    print(f"\n[sac] one update, median of {ROUNDS} interleaved rounds ({_env()}):\n" + "\n".join(lines))
    assert speedup["sampled"] >= MIN_SAMPLED_SPEEDUP_VS_REFERENCE
    assert speedup["exact"] >= MIN_EXACT_SPEEDUP_VS_REFERENCE


def test_lowrank_head_is_faster_than_linear(problem) -> None:
    """Speed goal as a ratio, the two heads interleaved round by round so that load hits both alike."""
    agents = {h: make_agent(h, problem["features"]) for h in ("lowrank", "linear")}
    times = _interleaved({h: (lambda a=a: a.update(**problem["batch"])) for h, a in agents.items()}, rounds=2)
    lin, low = min(times["linear"]), min(times["lowrank"])
    print(f"\n[sac] interleaved best of 2: linear {lin:.3f} s, lowrank {low:.3f} s, speed-up {lin / low:.2f}x "
          f"({_env()})")
    assert lin / low >= MIN_LOWRANK_SPEEDUP_VS_LINEAR


TUTOR_SET = 110
"""Size of make run's "tutor:50" set on l2rpn_neurips_2020_track1: do nothing, 59 reconnections, 50 bus actions."""


def test_update_time_per_action_set(problem) -> None:
    """One update over the full catalog against one over make run's tutor:50 set, at the neurips config's batch
    (128), interleaved; the ratio is what ``env.action_set`` buys per update."""
    rows = {f.name: None if getattr(problem["batch"], f.name) is None else getattr(problem["batch"], f.name)[:128]
            for f in dataclasses.fields(UpdateBatch)}
    batch = UpdateBatch(**rows)
    rng = np.random.default_rng(1)
    keep = np.sort(np.concatenate(([0], rng.choice(np.arange(1, N_ACTIONS), TUTOR_SET - 1, replace=False))))
    small = UpdateBatch(**{**rows, "legal_mask": batch.legal_mask[:, keep], "next_legal_mask":
                           batch.next_legal_mask[:, keep], "action": np.zeros(128, np.int64)})
    full_agent = make_agent("lowrank", problem["features"])
    set_agent = DiscreteSAC(OBS_DIM, TUTOR_SET, SACConfig(), action_features=problem["features"][keep], seed=0)
    times = _interleaved({"full": lambda: full_agent.update(batch), "set": lambda: set_agent.update(small)},
                         rounds=ROUNDS)
    full_ms, set_ms = (float(np.median(times[k])) * 1e3 for k in ("full", "set"))
    print(f"\n[sac] one update at batch 128, median of {ROUNDS} interleaved rounds: full catalog ({N_ACTIONS:,} "
          f"actions) {full_ms:.0f} ms, tutor set ({TUTOR_SET} actions) {set_ms:.1f} ms, {full_ms / set_ms:.0f}x "
          f"({_env(128, f'{N_ACTIONS} / {TUTOR_SET}')})")
    assert full_ms > set_ms
