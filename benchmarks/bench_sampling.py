"""Masked sampling / argmax / top-k over a huge action set: ace_hybrid (C++) vs PyTorch vs numpy, on CPU.

Run:  PYTHONPATH=python python -m pytest benchmarks/bench_sampling.py --benchmark-only
(add -s to see the speed-up lines; they are also stored in the JSON report as extra_info).

The shape is the l2rpn_wcci_2020 action space rounded up (67,105 actions) with a batch of 256 rows and a
per-row legality mask with half the actions legal. The PyTorch reference is the usual
``masked_fill(~mask, -inf) -> softmax -> multinomial``; the numpy reference is ``where -> exp -> cumsum ->
searchsorted``. Speed goals are checked as ratios against a reference timed in the same test, interleaved
round by round so that load on a shared machine hits both alike; never as wall-clock limits.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from ace_hybrid.sampling import SamplingGenerator, masked_argmax, masked_sample, masked_topk

BATCH, N_ACTIONS, K = 256, 67_105, 16
MIN_SAMPLE_SPEEDUP_VS_TORCH = 5.0


@pytest.fixture(scope="module")
def problem() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((BATCH, N_ACTIONS), dtype=np.float32) * 3.0
    mask = rng.random((BATCH, N_ACTIONS)) < 0.5
    mask[:, 0] = True  # do-nothing is always legal
    return logits, mask


@pytest.fixture(scope="module")
def torch_problem(problem):
    torch = pytest.importorskip("torch")
    logits, mask = problem
    return torch, torch.from_numpy(logits), torch.from_numpy(mask), torch.Generator().manual_seed(0)


# --- the implementations compared -------------------------------------------------------------------------


def numpy_sample(logits: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    z = np.where(mask, logits, -np.inf)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    c = np.cumsum(p, axis=1)
    u = rng.random(c.shape[0]) * c[:, -1]
    return np.minimum((c <= u[:, None]).sum(axis=1), c.shape[1] - 1)


def numpy_argmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.where(mask, logits, -np.inf).argmax(axis=1)


def torch_sample(torch, logits, mask, gen):
    probs = torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=1)
    return torch.multinomial(probs, 1, generator=gen)


def torch_argmax(torch, logits, mask):
    return logits.masked_fill(~mask, float("-inf")).argmax(dim=1)


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _report(benchmark, capsys, label: str, ratio: float, reference: str) -> None:
    benchmark.extra_info[f"speedup_vs_{reference}"] = round(ratio, 2)
    with capsys.disabled():
        print(f"\n[bench_sampling] {label}: ace_hybrid is {ratio:.1f}x faster than {reference}")


# --- sampling ---------------------------------------------------------------------------------------------


@pytest.mark.benchmark(group="masked sample 256x67105")
def test_sample_ace_hybrid(benchmark, problem) -> None:
    logits, mask = problem
    gen = SamplingGenerator(0)
    out = benchmark(lambda: masked_sample(logits, mask, generator=gen))
    assert mask[np.arange(BATCH), out.actions].all()


@pytest.mark.benchmark(group="masked sample 256x67105")
def test_sample_ace_hybrid_one_thread(benchmark, problem) -> None:
    logits, mask = problem
    gen = SamplingGenerator(0)
    out = benchmark(lambda: masked_sample(logits, mask, generator=gen, num_threads=1))
    assert mask[np.arange(BATCH), out.actions].all()


@pytest.mark.benchmark(group="masked sample 256x67105")
def test_sample_torch(benchmark, torch_problem) -> None:
    torch, logits, mask, gen = torch_problem
    out = benchmark(lambda: torch_sample(torch, logits, mask, gen))
    assert mask[torch.arange(BATCH), out[:, 0]].all()


@pytest.mark.benchmark(group="masked sample 256x67105")
def test_sample_numpy(benchmark, problem) -> None:
    logits, mask = problem
    rng = np.random.default_rng(0)
    out = benchmark(lambda: numpy_sample(logits, mask, rng))
    assert mask[np.arange(BATCH), out].all()


@pytest.mark.benchmark(group="speed-up: masked sample")
def test_sample_speedup_vs_torch(benchmark, problem, torch_problem, capsys) -> None:
    torch, t_logits, t_mask, t_gen = torch_problem
    logits, mask = problem
    gen = SamplingGenerator(0)
    torch_times: list[float] = []
    benchmark.pedantic(
        lambda: masked_sample(logits, mask, generator=gen),
        setup=lambda: torch_times.append(_timed(lambda: torch_sample(torch, t_logits, t_mask, t_gen))),
        rounds=10,
        warmup_rounds=1,
    )
    ratio = min(torch_times) / benchmark.stats.stats.min
    _report(benchmark, capsys, "masked sample (256, 67105)", ratio, "torch")
    assert ratio >= MIN_SAMPLE_SPEEDUP_VS_TORCH


@pytest.mark.benchmark(group="speed-up: masked sample")
def test_sample_speedup_vs_numpy(benchmark, problem, capsys) -> None:
    logits, mask = problem
    gen, rng = SamplingGenerator(0), np.random.default_rng(0)
    numpy_times: list[float] = []
    benchmark.pedantic(
        lambda: masked_sample(logits, mask, generator=gen),
        setup=lambda: numpy_times.append(_timed(lambda: numpy_sample(logits, mask, rng))),
        rounds=5,
        warmup_rounds=1,
    )
    ratio = min(numpy_times) / benchmark.stats.stats.min
    _report(benchmark, capsys, "masked sample (256, 67105)", ratio, "numpy")
    assert ratio > 1.0


# --- argmax / top-k ---------------------------------------------------------------------------------------


@pytest.mark.benchmark(group="masked argmax 256x67105")
def test_argmax_ace_hybrid(benchmark, problem) -> None:
    logits, mask = problem
    out = benchmark(lambda: masked_argmax(logits, mask))
    np.testing.assert_array_equal(out, numpy_argmax(logits, mask))


@pytest.mark.benchmark(group="masked argmax 256x67105")
def test_argmax_torch(benchmark, torch_problem) -> None:
    torch, logits, mask, _ = torch_problem
    benchmark(lambda: torch_argmax(torch, logits, mask))


@pytest.mark.benchmark(group="masked argmax 256x67105")
def test_argmax_numpy(benchmark, problem) -> None:
    logits, mask = problem
    benchmark(lambda: numpy_argmax(logits, mask))


@pytest.mark.benchmark(group="speed-up: masked argmax")
def test_argmax_speedup_vs_torch(benchmark, problem, torch_problem, capsys) -> None:
    torch, t_logits, t_mask, _ = torch_problem
    logits, mask = problem
    torch_times: list[float] = []
    benchmark.pedantic(
        lambda: masked_argmax(logits, mask),
        setup=lambda: torch_times.append(_timed(lambda: torch_argmax(torch, t_logits, t_mask))),
        rounds=10,
        warmup_rounds=1,
    )
    ratio = min(torch_times) / benchmark.stats.stats.min
    _report(benchmark, capsys, "masked argmax (256, 67105)", ratio, "torch")
    assert ratio > 1.0


@pytest.mark.benchmark(group="masked top-16 256x67105")
def test_topk_ace_hybrid(benchmark, problem) -> None:
    logits, mask = problem
    out = benchmark(lambda: masked_topk(logits, K, mask))
    assert mask[np.arange(BATCH)[:, None], out.indices].all()


@pytest.mark.benchmark(group="masked top-16 256x67105")
def test_topk_torch(benchmark, torch_problem) -> None:
    torch, logits, mask, _ = torch_problem
    benchmark(lambda: torch.topk(logits.masked_fill(~mask, float("-inf")), K, dim=1))
