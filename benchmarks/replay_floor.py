#!/usr/bin/env python
"""What bounds the replay buffer's training step: a plain gather of the same rows, next to ace_hybrid.

Usage::

    python benchmarks/replay_floor.py [--sizes full|small] [--rounds N] [--no-peer]

For each size of the issue (D = 100 with capacity 1,000,000; D = 1300 with capacity 200,000; batch 256) it
times, interleaved over ``--rounds`` rounds and reported as medians:

* ``ace step``: ``MixedReplayBuffer`` sample(256) + update_priorities(256), the training step of
  ``compare_peers.py`` (buffer full, filled with the same seeded episode stream);
* ``ace sample``: sample(256) alone;
* ``floor``: the copy every sampler must make, and nothing else: 256 random rows ``s`` and their successors
  ``s + 1`` (ace_hybrid stores a transition's next observation in the next row) gathered from a float32 array
  of the same shape as ace_hybrid's observation storage into two reused (256, D) buffers with
  ``numpy.take(..., out=, mode="clip")`` (a C loop of one ``memcpy`` per row, unbuffered). No tree, no
  priorities, no other column;
* ``sequential copy``: one contiguous copy of the same number of bytes (the machine's copy bandwidth when
  nothing misses the TLB or waits on a random access);
* ``tianshou step`` (unless ``--no-peer`` or tianshou is missing): the best prioritised peer's training
  step, and the 2x target derived from it;
* with ``--cpp`` (needs a C++ compiler, ``$CXX`` or ``c++``): the best gather we know how to write, compiled
  here: rows on transparent huge pages, the next rows prefetched, on one thread and split over two (a
  persistent second thread woken through a condition variable), as median and mean over 2,000 batches. The
  mean shows what a second thread costs when the other core is busy.

The floor is a lower bound on any sampler that returns copies: at D = 1300 it moves 2 x 256 x 1300 x 4 bytes
= 2.66 MB of randomly placed rows per batch, so the step cannot run faster than this gather on one core.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (sibling module)

BATCH = 256
ALPHA, IS_EXPONENT = 0.6, 0.4
SIZES = {"full": [(100, 1_000_000), (1300, 200_000)], "small": [(100, 20_000), (1300, 4_000)]}


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second of ``fn`` over a block of about ``seconds`` (garbage collector off)."""
    n, t0 = 0, time.perf_counter()
    gc.disable()
    try:
        while True:
            for _ in range(8):
                fn()
            n += 8
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds:
                return n / elapsed
    finally:
        gc.enable()


def fill(adapter: peers.ReplayAdapter, obs_dim: int, capacity: int, seed: int) -> None:
    """Fill as compare_peers.py does: the seeded episode stream, priorities |N(0, 1)| + 0.01."""
    stream = peers.EpisodeStream(obs_dim, seed=seed * 7919 + obs_dim)
    prio_rng = np.random.default_rng(seed * 7919 + obs_dim + 1)
    chunk = max(1, min(8192, capacity // 4))
    for start in range(0, capacity, chunk):
        t = stream.take(min(chunk, capacity - start))
        adapter.update(adapter.add_batch(t), peers.priorities_for(len(t), prio_rng))


def measure(
    obs_dim: int, capacity: int, rounds: int, block: float, peer: bool, seed: int
) -> dict[str, float]:
    ace = peers.AceHybrid(obs_dim, capacity, alpha=ALPHA, is_exponent=IS_EXPONENT, seed=seed)
    fill(ace, obs_dim, capacity, seed)
    buf = ace.buf
    prio = peers.priorities_for(BATCH, np.random.default_rng(seed + 3))

    # The floor: an array shaped like ace_hybrid's observation storage (one row per slot), random contents.
    rows = np.random.default_rng(seed).random((capacity, obs_dim), dtype=np.float32)
    out_obs = np.empty((BATCH, obs_dim), np.float32)
    out_next = np.empty((BATCH, obs_dim), np.float32)
    idx_rng = np.random.default_rng(seed + 5)
    index_sets = [np.sort(idx_rng.integers(0, capacity - 1, BATCH)) for _ in range(64)]
    flat = rows.reshape(-1)
    seq_src = flat[: 2 * BATCH * obs_dim]
    seq_dst = np.empty_like(seq_src)
    state = {"k": 0}

    def floor() -> None:
        idx = index_sets[state["k"] % len(index_sets)]
        state["k"] += 1
        # mode="clip": under the default mode="raise" numpy buffers `out` (an extra copy); indices are valid.
        np.take(rows, idx, axis=0, out=out_obs, mode="clip")
        np.take(rows, idx + 1, axis=0, out=out_next, mode="clip")

    def sequential() -> None:
        np.copyto(seq_dst, seq_src)

    def ace_step() -> None:
        buf.update_priorities(buf.sample(BATCH, is_exponent=IS_EXPONENT).index, prio)

    def ace_sample() -> None:
        buf.sample(BATCH, is_exponent=IS_EXPONENT)

    ops: dict[str, Callable[[], object]] = {
        "ace step": ace_step, "ace sample": ace_sample, "floor": floor, "sequential copy": sequential,
    }
    if peer and peers.Tianshou.unavailable_reason() is None:
        ts = peers.Tianshou(obs_dim, capacity, alpha=ALPHA, is_exponent=IS_EXPONENT, seed=seed)
        fill(ts, obs_dim, capacity, seed)
        ts_step, ts_calls = ts.train_step_calls(BATCH, prio)
        ops["tianshou step"] = lambda: ts_step(*ts_calls[0][0], **ts_calls[0][1])
    rates: dict[str, list[float]] = {name: [] for name in ops}
    for r in range(rounds):
        names = list(ops)
        names = names[r % len(names):] + names[: r % len(names)]
        for name in names:
            rates[name].append(rate(ops[name], block))
    return {name: statistics.median(v) for name, v in rates.items()}


CPP_GATHER = r"""
#include <sys/mman.h>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>
static std::size_t D, C, B = 256;
static float* rows;
static std::vector<float> out;
static std::vector<std::size_t> idx;
static void gather(std::size_t lo, std::size_t hi) {  // rows s and s + 1 of each index, next ones prefetched
    for (std::size_t i = lo; i < hi; ++i) {
        if (i + 4 < hi) {
            const char* q = reinterpret_cast<const char*>(rows + idx[i + 4] * D);
            for (std::size_t o = 0; o < 2 * D * 4; o += 64) __builtin_prefetch(q + o);
        }
        std::memcpy(&out[i * D], rows + idx[i] * D, D * 4);
        std::memcpy(&out[(B + i) * D], rows + (idx[i] + 1) * D, D * 4);
    }
}
int main(int argc, char** argv) {
    D = std::strtoul(argv[1], nullptr, 10);
    C = std::strtoul(argv[2], nullptr, 10);
    const int threads = std::atoi(argv[3]);
    const std::size_t huge = std::size_t(2) << 20, bytes = (C * D * 4 + huge - 1) / huge * huge;
    rows = static_cast<float*>(std::aligned_alloc(huge, bytes));
    madvise(rows, bytes, MADV_HUGEPAGE);
    for (std::size_t i = 0; i < C * D; ++i) rows[i] = static_cast<float>(i % 1000);
    out.resize(2 * B * D);
    idx.resize(B);
    std::mutex m;
    std::condition_variable wake, done;
    int posted = 0, finished = 0;
    bool stop = false;
    std::thread helper;
    if (threads == 2)
        helper = std::thread([&] {
            std::unique_lock<std::mutex> lk(m);
            for (int seen = 0;;) {
                wake.wait(lk, [&] { return posted != seen || stop; });
                if (stop) return;
                seen = posted;
                lk.unlock();
                gather(0, B / 2);
                lk.lock();
                finished = seen;
                done.notify_one();
            }
        });
    std::mt19937_64 g(1);
    std::vector<double> us;
    for (int r = 0; r < 2000; ++r) {
        for (auto& x : idx) x = g() % (C - 1);
        std::sort(idx.begin(), idx.end());
        const auto t0 = std::chrono::steady_clock::now();
        if (threads == 2) {
            { std::lock_guard<std::mutex> lk(m); ++posted; }
            wake.notify_one();
            gather(B / 2, B);
            std::unique_lock<std::mutex> lk(m);
            done.wait(lk, [&] { return finished == posted; });
        } else {
            gather(0, B);
        }
        const auto t1 = std::chrono::steady_clock::now();
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    if (threads == 2) {
        { std::lock_guard<std::mutex> lk(m); stop = true; }
        wake.notify_one();
        helper.join();
    }
    double mean = 0;
    for (double x : us) mean += x / us.size();
    std::sort(us.begin(), us.end());
    std::printf("%.1f %.1f\n", us[us.size() / 2], mean);
}
"""


def cpp_gather(obs_dim: int, capacity: int) -> dict[int, tuple[float, float]] | str:
    """{threads: (median us, mean us)} of the compiled gather, or why it could not run."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        return "no C++ compiler found (set CXX)"
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "gather.cpp", Path(tmp) / "gather"
        src.write_text(CPP_GATHER)
        build = subprocess.run([cxx, "-O2", "-std=c++17", "-pthread", str(src), "-o", str(exe)],
                               capture_output=True, text=True)
        if build.returncode != 0:
            return f"compile failed: {build.stderr.strip().splitlines()[-1] if build.stderr else '?'}"
        res = {}
        for threads in (1, 2):
            run = subprocess.run([str(exe), str(obs_dim), str(capacity), str(threads)], capture_output=True,
                                 text=True, check=True)
            median, mean = map(float, run.stdout.split())
            res[threads] = (median, mean)
        return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", choices=sorted(SIZES), default="full")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--block-seconds", type=float, default=0.2)
    ap.add_argument("--no-peer", action="store_true", help="do not time tianshou")
    ap.add_argument("--cpp", action="store_true",
                    help="also compile and time the best C++ gather (1 and 2 threads)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for obs_dim, capacity in SIZES[args.sizes]:
        res = measure(obs_dim, capacity, args.rounds, args.block_seconds, not args.no_peer, args.seed)
        mb = 2 * BATCH * obs_dim * 4 / 1e6
        print(f"D={obs_dim}, capacity {capacity:,}, batch {BATCH}: "
              f"a batch copies 2 x {BATCH} rows = {mb:.2f} MB")
        for name, per_s in res.items():
            print(f"  {name:16s} {per_s:10,.0f} /s  {1e6 / per_s:8.1f} us")
        floor, step = res["floor"], res["ace step"]
        print(f"  ace step / floor = {step / floor:.2f} "
              f"(the floor allows at most {floor:,.0f} steps/s on one core)")
        if args.cpp:
            cpp = cpp_gather(obs_dim, capacity)
            if isinstance(cpp, str):
                print(f"  C++ gather: not measured ({cpp})")
            for threads, (median, mean) in ({} if isinstance(cpp, str) else cpp).items():
                print(f"  C++ gather, prefetch, huge pages, {threads} thread(s): median {median:.1f} us "
                      f"({1e6 / median:,.0f} /s), mean {mean:.1f} us")
        if "tianshou step" in res:
            target = 2 * res["tianshou step"]
            verdict = "within" if floor >= target else "BEYOND"
            print(f"  2x tianshou = {target:,.0f} steps/s ({1e6 / target:.1f} us per step): "
                  f"the target is {verdict} "
                  f"the floor; ace reaches {step / res['tianshou step']:.2f}x tianshou")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
