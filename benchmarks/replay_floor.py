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
  step, and the 2x target derived from it.

The floor is a lower bound on any sampler that returns copies: at D = 1300 it moves 2 x 256 x 1300 x 4 bytes
= 2.66 MB of randomly placed rows per batch, so the step cannot run faster than this gather on one core.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
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


def measure(obs_dim: int, capacity: int, rounds: int, block: float, peer: bool, seed: int) -> dict[str, float]:
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
        # mode="clip": with the default mode="raise" numpy buffers `out` (an extra copy); the indices are valid.
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", choices=sorted(SIZES), default="full")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--block-seconds", type=float, default=0.2)
    ap.add_argument("--no-peer", action="store_true", help="do not time tianshou")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for obs_dim, capacity in SIZES[args.sizes]:
        res = measure(obs_dim, capacity, args.rounds, args.block_seconds, not args.no_peer, args.seed)
        mb = 2 * BATCH * obs_dim * 4 / 1e6
        print(f"D={obs_dim}, capacity {capacity:,}, batch {BATCH}: a batch copies 2 x {BATCH} rows = {mb:.2f} MB")
        for name, per_s in res.items():
            print(f"  {name:16s} {per_s:10,.0f} /s  {1e6 / per_s:8.1f} us")
        floor, step = res["floor"], res["ace step"]
        print(f"  ace step / floor = {step / floor:.2f} (the floor allows at most {floor:,.0f} steps/s on one core)")
        if "tianshou step" in res:
            target = 2 * res["tianshou step"]
            verdict = "within" if floor >= target else "BEYOND"
            print(f"  2x tianshou = {target:,.0f} steps/s ({1e6 / target:.1f} us per step): the target is {verdict} "
                  f"the floor; ace reaches {step / res['tianshou step']:.2f}x tianshou")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
