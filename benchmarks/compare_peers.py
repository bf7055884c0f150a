#!/usr/bin/env python
"""Side-by-side comparison of ace_hybrid against peer libraries, interleaved in one process.

Usage::

    python benchmarks/compare_peers.py [--rounds N] [--sizes small|full] [--only SECTION]
                                       [--output FILE.md] [--json FILE.json]

Each *section* is one function that measures something and returns a :class:`SectionReport`
(a markdown table, goal lines and notes); it is registered with :func:`section`. The replay
section is here; more (masked sampling vs PyTorch, mask building vs numpy, enumeration vs
grid2op) are added by writing one such function and decorating it.

Timing protocol (replay section): all implementations of one size are built and filled first;
then, for each of ``--rounds`` rounds, every implementation runs every operation once (one timed
block of a fixed number of calls, calibrated beforehand to last about ``--block-seconds``), the
order of implementations rotating from round to round. Ratios are computed within a round
(same machine state) and summarised by their median and range over rounds. The garbage
collector is off inside timed blocks (as in ``timeit``).

With ``--output``, the section's text replaces what lies between
``<!-- compare_peers:<section>:begin -->`` and ``<!-- compare_peers:<section>:end -->`` in that
file (or is appended), so the rest of the file survives.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import itertools
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (a sibling module; the directory is not a package)

# ----------------------------------------------------------------------------- section machinery


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What the command line asked for (shared by every section)."""

    rounds: int
    """Timed rounds; every implementation runs every operation once per round."""
    sizes: str
    """'small' (seconds, for smoke tests) or 'full' (the sizes of the issue)."""
    seed: int
    """Seed of all generated data and of every seedable implementation."""
    disabled: frozenset[str]
    """Implementations to report as unavailable without trying them (testing the report)."""
    block_seconds: float | None
    """Target length of one timed block; None: 0.2 s (full) or 0.01 s (small)."""
    torch_threads: int
    """torch.set_num_threads for torch-based peers (ace_hybrid is single-threaded)."""
    pairwise: str
    """'auto', 'never' or 'always': keep only ace_hybrid + one peer in memory at a time."""


@dataclasses.dataclass
class Goal:
    """One PASS/FAIL line: ``status`` is PASS, FAIL or UNKNOWN; ``measured`` says why."""

    name: str
    status: str
    measured: str

    def line(self) -> str:
        return f"{self.status}: {self.name} -- {self.measured}"


@dataclasses.dataclass
class SectionReport:
    """What a section returns: a table, goals, notes and raw data for --json."""

    key: str
    title: str
    header: list[str]
    rows: list[list[str]]
    goals: list[Goal] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    data: dict[str, Any] = dataclasses.field(default_factory=dict)


SectionFn = Callable[[RunConfig], SectionReport]
#: Registered sections, in the order they run: key -> (title, function).
SECTIONS: dict[str, tuple[str, SectionFn]] = {}


def section(key: str, title: str) -> Callable[[SectionFn], SectionFn]:
    """Register ``fn(cfg) -> SectionReport`` as section ``key`` (selectable with ``--only key``)."""

    def register(fn: SectionFn) -> SectionFn:
        if key in SECTIONS:
            raise ValueError(f"section {key!r} registered twice")
        SECTIONS[key] = (title, fn)
        return fn

    return register


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def begin_marker(key: str) -> str:
    return f"<!-- compare_peers:{key}:begin -->"


def end_marker(key: str) -> str:
    return f"<!-- compare_peers:{key}:end -->"


def render(report: SectionReport, command: str) -> str:
    """The section as markdown, without the markers."""
    parts = [f"### {report.title}", "", f"Command: `{command}`", ""]
    parts += [markdown_table(report.header, report.rows), ""]
    if report.goals:
        parts += ["Goals:", ""] + [f"- {g.line()}" for g in report.goals] + [""]
    if report.notes:
        parts += ["Notes:", ""] + [f"- {n}" for n in report.notes] + [""]
    return "\n".join(parts).rstrip() + "\n"


def update_markdown(path: Path, key: str, body: str) -> None:
    """Replace section ``key`` of ``path`` (between its markers), or append it; keep the rest."""
    block = f"{begin_marker(key)}\n{body.rstrip()}\n{end_marker(key)}"
    text = path.read_text() if path.exists() else ""
    b, e = text.find(begin_marker(key)), text.find(end_marker(key))
    if b >= 0 and e > b:
        text = text[:b] + block + text[e + len(end_marker(key)) :]
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + block + "\n"
    path.write_text(text)


# ----------------------------------------------------------------------------- timing helpers


def time_block(fn: Callable[..., Any], calls: Sequence[peers.Call], n: int) -> float:
    """Seconds taken by ``n`` calls ``fn(*args, **kwargs)`` cycling through ``calls``."""
    it = itertools.islice(itertools.cycle(calls), n)
    enabled = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter()
        for args, kwargs in it:
            fn(*args, **kwargs)
        return time.perf_counter() - t0
    finally:
        if enabled:
            gc.enable()


def calibrate(fn: Callable[..., Any], calls: Sequence[peers.Call], target: float, max_calls: int) -> int:
    """Number of calls that takes about ``target`` seconds (also warms the code path up)."""
    n = 1
    while True:
        dt = time_block(fn, calls, n)
        if dt >= target / 4 or n >= max_calls:
            break
        n *= 4 if dt < target / 40 else 2
    return max(1, min(max_calls, int(n * target / max(dt, 1e-9))))


def fmt_rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:.0f}"


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x"


def mem_available() -> int:
    """MemAvailable from /proc/meminfo in bytes (a large number where unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 50


# ----------------------------------------------------------------------------- replay section

FULL_SIZES: tuple[tuple[int, int], ...] = ((100, 1_000_000), (1300, 200_000))
SMALL_SIZES: tuple[tuple[int, int], ...] = ((100, 10_000), (1300, 2_000))
BATCH = 256
ADD_CHUNK = 64
UPDATE_INDEX_SETS = 32
ALPHA = 0.6
IS_EXPONENT = 0.4

#: (key, row label, items per call). Rates are calls/s x items per call.
OPS: tuple[tuple[str, str, int], ...] = (
    ("add", "single add (transitions/s)", 1),
    ("add64", f"batched add of {ADD_CHUNK} (transitions/s)", ADD_CHUNK),
    ("sample", f"prioritised sample of {BATCH} (batches/s)", 1),
    ("update", f"update {BATCH} priorities (calls/s)", 1),
    ("train", f"training step: sample {BATCH} + update {BATCH} (steps/s)", 1),
)
BYTES_ROWS: tuple[tuple[str, str], ...] = (
    ("bytes", "bytes per stored transition (storage)"),
    ("rss", "bytes per stored transition (RSS growth)"),
)


@dataclasses.dataclass
class _Impl:
    cls: type[peers.ReplayAdapter]
    adapter: peers.ReplayAdapter | None = None
    reason: str | None = None  # why unavailable, if it is
    storage: tuple[float, str] | None = None
    rss_per_transition: float | None = None
    slot_bytes: float | None = None  # ace_hybrid only: rl_nbytes / rl_capacity
    fill_seconds: float = 0.0


def _estimate_bytes(cls: type[peers.ReplayAdapter], obs_dim: int, capacity: int) -> int:
    """Rough storage estimate, to decide whether everything fits in memory at once."""
    copies = 1 if cls is peers.AceHybrid else 2  # ace stores each observation once
    return int(capacity * (copies * obs_dim * 4 + 64) * 1.1)


def _fill(impl: _Impl, obs_dim: int, capacity: int, cfg: RunConfig) -> None:
    """Build and fill one implementation with the seeded episode stream; record its memory."""
    gc.collect()
    rss0 = rss_now = peers.rss_bytes()
    t0 = time.perf_counter()
    try:
        a = impl.cls(obs_dim, capacity, alpha=ALPHA, is_exponent=IS_EXPONENT, seed=cfg.seed)
        stream = peers.EpisodeStream(obs_dim, seed=cfg.seed * 7919 + obs_dim)
        prio_rng = np.random.default_rng(cfg.seed * 7919 + obs_dim + 1)
        chunk = max(1, min(8192, capacity // 4))  # handles stay valid until their update
        for start in range(0, capacity, chunk):
            t = stream.take(min(chunk, capacity - start))
            a.update(a.add_batch(t), peers.priorities_for(len(t), prio_rng))
            del t
        # ace_hybrid counts observation slots, so it holds ~capacity * L / (L + 1) transitions.
        if not 0.95 * capacity <= len(a) <= capacity:
            raise RuntimeError(f"holds {len(a)} transitions after adding {capacity}")
        gc.collect()
        rss_now = peers.rss_bytes()
        impl.storage = a.storage_bytes()
        if isinstance(a, peers.AceHybrid):
            impl.slot_bytes = a.bytes_per_slot()
        impl.adapter = a
    except Exception as exc:  # report, never drop
        impl.reason = f"setup failed: {peers.first_line(exc)}"
        impl.adapter = None
    impl.fill_seconds = time.perf_counter() - t0
    if impl.adapter is not None and rss0 and rss_now:
        impl.rss_per_transition = (rss_now - rss0) / capacity


def _measure_group(
    impls: list[_Impl], obs_dim: int, cfg: RunConfig, target: float, pool_size: int
) -> dict[str, dict[str, list[float]]]:
    """Interleaved rounds over ``impls`` (all built and filled); rates[name][op] per round."""
    pool = peers.EpisodeStream(obs_dim, seed=cfg.seed * 7919 + obs_dim + 2, first_episode=10**9).take(
        pool_size, whole_episodes=True
    )
    chunks = pool.chunks(ADD_CHUNK)
    prio = peers.priorities_for(BATCH, np.random.default_rng(cfg.seed + 3))
    prepared: dict[tuple[str, str], peers.Calls] = {}
    rates: dict[str, dict[str, list[float]]] = {}
    for im in impls:
        a = im.adapter
        assert a is not None
        name = a.name
        rates[name] = {op: [] for op, _, _ in OPS}
        try:
            prepared[name, "add"] = a.single_add_calls(pool)
            prepared[name, "add64"] = a.batch_add_calls(chunks)
            prepared[name, "sample"] = a.sample_calls(BATCH)
            prepared[name, "train"] = a.train_step_calls(BATCH, prio)
        except Exception as exc:
            im.reason = f"preparing calls failed: {peers.first_line(exc)}"
    live = [im for im in impls if im.reason is None]

    def calls_for(a: peers.ReplayAdapter, op: str) -> peers.Calls | None:
        if op == "update":
            if not a.prioritised:
                return None
            # Fresh, valid indices (drawn after this round's adds, outside the clock); cycling through
            # UPDATE_INDEX_SETS different sets keeps the block from re-touching the same cached leaves.
            fn, calls = a.update_calls(a.sampled_index(BATCH), prio)
            for _ in range(UPDATE_INDEX_SETS - 1):
                calls += a.update_calls(a.sampled_index(BATCH), prio)[1]
            return fn, calls
        return prepared[a.name, op]

    counts: dict[tuple[str, str], int] = {}
    for im in live:
        a = im.adapter
        assert a is not None
        for op, _, _ in OPS:
            try:
                c = calls_for(a, op)
                if c is not None:
                    counts[a.name, op] = calibrate(c[0], c[1], target, max_calls=2_000_000)
            except Exception as exc:  # an implementation that breaks is reported, not dropped
                im.reason = f"{op} failed: {peers.first_line(exc)}"
                break
    live = [im for im in live if im.reason is None]
    for r in range(cfg.rounds):
        order = live[r % len(live) :] + live[: r % len(live)] if live else []
        for op, _, per_call in OPS:
            for im in order:
                a = im.adapter
                assert a is not None
                if im.reason is not None:
                    continue
                try:
                    c = calls_for(a, op)
                    if c is None:
                        continue
                    n = counts[a.name, op]
                    rates[a.name][op].append(n * per_call / time_block(c[0], c[1], n))
                except Exception as exc:
                    im.reason = f"{op} failed: {peers.first_line(exc)}"
    ok = {im.cls.name for im in impls if im.reason is None}
    return {name: ops for name, ops in rates.items() if name in ok}


def _measure_size(obs_dim: int, capacity: int, cfg: RunConfig, reasons: dict[str, str | None]) -> dict[str, Any]:
    small = cfg.sizes == "small"
    target = cfg.block_seconds or (0.01 if small else 0.2)
    pool_size = 1024 if small else 4096
    impls = [_Impl(cls, reason=reasons[cls.name]) for cls in peers.ADAPTERS]
    avail = [im for im in impls if im.reason is None]
    need = sum(_estimate_bytes(im.cls, obs_dim, capacity) for im in avail)
    pairwise = cfg.pairwise == "always" or (cfg.pairwise == "auto" and need > 0.6 * mem_available())
    ace = next((im for im in avail if im.cls is peers.AceHybrid), None)
    others = [im for im in avail if im is not ace]
    groups = [[im] if ace is None else [ace, im] for im in others] if pairwise else [avail]
    if pairwise and ace is not None and not others:
        groups = [[ace]]
    rates: dict[str, dict[str, list[float]]] = {}  # name -> op -> rates over rounds (ace: all groups)
    paired: dict[str, dict[str, list[float]]] = {}  # peer -> op -> per-round ace/peer ratio
    for group in groups:
        for im in group:
            if im.adapter is None and im.reason is None:
                if mem_available() < _estimate_bytes(im.cls, obs_dim, capacity) + (512 << 20):
                    im.reason = (
                        f"skipped: not enough memory (needs ~{_estimate_bytes(im.cls, obs_dim, capacity) >> 20} MiB)"
                    )
                    continue
                _fill(im, obs_dim, capacity, cfg)
        live = [im for im in group if im.adapter is not None and im.reason is None]
        if live:
            got = _measure_group(live, obs_dim, cfg, target, pool_size)
            for name, ops in got.items():
                for op, vals in ops.items():
                    rates.setdefault(name, {}).setdefault(op, []).extend(vals)
            if "ace" in got:
                for name, ops in got.items():
                    if name == "ace":
                        continue
                    for op, vals in ops.items():
                        ace_vals = got["ace"][op]
                        if vals and len(ace_vals) == len(vals):
                            paired.setdefault(name, {})[op] = [x / y for x, y in zip(ace_vals, vals)]
        if pairwise:  # free the peer before building the next one (ace stays)
            for im in group:
                if im is not ace:
                    im.adapter = None
            gc.collect()
    result = {
        "obs_dim": obs_dim,
        "capacity": capacity,
        "pairwise": pairwise,
        "block_seconds": target,
        "impls": {
            im.cls.name: {
                "title": im.cls.title,
                "available": im.reason is None,
                "reason": im.reason,
                "prioritised": im.cls.prioritised,
                "rates": rates.get(im.cls.name, {}),
                "storage_bytes_per_transition": None if im.storage is None else im.storage[0],
                "storage_how": None if im.storage is None else im.storage[1],
                "rss_bytes_per_transition": im.rss_per_transition,
                "rl_nbytes_per_rl_capacity": im.slot_bytes,
                "fill_seconds": im.fill_seconds,
            }
            for im in impls
        },
        "ace_over_peer": paired,
    }
    for im in impls:
        im.adapter = None
    gc.collect()
    return result


def _hows(results: Sequence[dict[str, Any]], name: str) -> list[str]:
    """Distinct 'how measured' texts of one implementation over sizes."""
    hows: list[str] = []
    for r in results:
        how = r["impls"][name]["storage_how"]
        if how and how not in hows:
            hows.append(how)
    return hows


def _short(reason: str, width: int = 48) -> str:
    """A table-cell form of an unavailability reason (the notes give it whole)."""
    return reason if len(reason) <= width else reason[: width - 3].rstrip() + "..."


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def _replay_rows(res: dict[str, Any]) -> tuple[list[list[str]], dict[str, Any]]:
    """Table rows of one size, and the summary figures the goals need."""
    d, cap = res["obs_dim"], res["capacity"]
    impls = res["impls"]
    per_prio_peers = [n for n, v in impls.items() if n != "ace" and v["prioritised"] and v["available"]]
    summary: dict[str, Any] = {}
    rows = []
    for op, label, _ in OPS:
        row = [label, str(d)]
        for cls in peers.ADAPTERS:
            v = impls[cls.name]
            if not v["available"]:
                row.append(f"unavailable ({_short(v['reason'])})")
            elif op == "update" and not v["prioritised"]:
                row.append("n/a (uniform)")
            elif v["rates"].get(op):
                row.append(fmt_rate(_median(v["rates"][op])))
            else:
                row.append("-")
        # ace / best prioritised peer, per round, then median [min-max]
        ratios = res["ace_over_peer"]
        per_round = [ratios[p][op] for p in per_prio_peers if op in ratios.get(p, {})]
        if per_round and impls["ace"]["available"]:
            best = [min(vals) for vals in zip(*per_round)]
            best_peer = min(per_prio_peers, key=lambda p: _median(ratios[p][op]) if op in ratios.get(p, {}) else 1e300)
            row.append(f"{fmt_ratio(_median(best))} [{fmt_ratio(min(best))}-{fmt_ratio(max(best))}] vs {best_peer}")
            summary[op, "best"] = (_median(best), min(best), max(best), best_peer)
        else:
            row.append("-")
        num = ratios.get("numpy", {}).get(op)
        row.append(fmt_ratio(_median(num)) if num and op != "update" else "-")
        for p in per_prio_peers:
            if op in ratios.get(p, {}):
                summary[op, p] = _median(ratios[p][op])
        rows.append(row)
    for key, label in BYTES_ROWS:
        field = "storage_bytes_per_transition" if key == "bytes" else "rss_bytes_per_transition"
        row = [label, str(d)]
        for cls in peers.ADAPTERS:
            v = impls[cls.name]
            if not v["available"]:
                row.append(f"unavailable ({_short(v['reason'])})")
            else:
                row.append("-" if v[field] is None else f"{v[field]:,.0f}")
        ace_b = impls["ace"][field] if impls["ace"]["available"] else None
        peer_b = {p: impls[p][field] for p in per_prio_peers if impls[p][field]}
        if ace_b is not None and peer_b:
            best_peer = min(peer_b, key=lambda p: peer_b[p])
            row.append(f"{ace_b / peer_b[best_peer]:.2f}x vs {best_peer} (lower is better)")
        else:
            row.append("-")
        nb = impls["numpy"][field] if impls["numpy"]["available"] else None
        row.append(f"{ace_b / nb:.2f}x" if ace_b is not None and nb else "-")
        summary[key, "ace"] = ace_b
        summary["slot", "ace"] = impls["ace"].get("rl_nbytes_per_rl_capacity")
        rows.append(row)
    summary["capacity"] = cap
    return rows, summary


def _replay_goals(summaries: dict[int, dict[str, Any]], ace_ok: bool) -> list[Goal]:
    goals = []
    for d, s in summaries.items():
        name = f"training step >= 2x the best prioritised peer at D={d}"
        if not ace_ok:
            goals.append(Goal(name, "UNKNOWN", "ace_hybrid unavailable"))
        elif ("train", "best") not in s:
            goals.append(Goal(name, "UNKNOWN", "no prioritised peer available"))
        else:
            med, lo, hi, peer = s["train", "best"]
            goals.append(Goal(name, "PASS" if med >= 2 else "FAIL", f"{med:.2f}x vs {peer} (rounds {lo:.2f}-{hi:.2f})"))
    for d, s in summaries.items():
        name = f"single add >= 5x cpprb at D={d}"
        if not ace_ok:
            goals.append(Goal(name, "UNKNOWN", "ace_hybrid unavailable"))
        elif ("add", "cpprb") not in s:
            goals.append(Goal(name, "UNKNOWN", "cpprb unavailable"))
        else:
            r = s["add", "cpprb"]
            goals.append(Goal(name, "PASS" if r >= 5 else "FAIL", f"{r:.2f}x"))
    for d, s in summaries.items():
        limit = 1.1 * d * 4
        name = f"ace bytes per RL transition <= 1.1 x D x 4 = {limit:,.0f} at D={d}"
        slot, per = s.get(("slot", "ace")), s.get(("bytes", "ace"))
        if slot is None or per is None:
            goals.append(Goal(name, "UNKNOWN", "ace_hybrid unavailable"))
        else:
            goals.append(
                Goal(
                    name,
                    "PASS" if slot <= limit else "FAIL",
                    f"rl_nbytes / rl_capacity = {slot:,.2f} B ({slot / (d * 4):.4f} x D x 4); "
                    f"per stored transition (rl_nbytes / len) = {per:,.2f} B ({per / (d * 4):.4f} x D x 4)",
                )
            )
    return goals


@section("replay", "Replay buffer: ace_hybrid vs cpprb, torchrl, tianshou and a numpy ring")
def replay_section(cfg: RunConfig) -> SectionReport:
    """Prioritised replay: adds, sampling, priority updates, training steps and bytes per transition."""
    reasons: dict[str, str | None] = {}
    versions: dict[str, str] = {}
    for cls in peers.ADAPTERS:
        if cls.name in cfg.disabled:
            reasons[cls.name] = "disabled on the command line"
            continue
        reasons[cls.name] = cls.unavailable_reason()
        if reasons[cls.name] is None:
            try:
                versions[cls.name] = cls.version()
            except Exception as exc:
                versions[cls.name] = f"? ({peers.first_line(exc)})"
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(cfg.torch_threads)
    sizes = SMALL_SIZES if cfg.sizes == "small" else FULL_SIZES
    results = [_measure_size(d, cap, cfg, reasons) for d, cap in sizes]
    rows: list[list[str]] = []
    summaries: dict[int, dict[str, Any]] = {}
    for res in results:
        r, s = _replay_rows(res)
        rows += r
        summaries[res["obs_dim"]] = s
    ace_ok = all(res["impls"]["ace"]["available"] for res in results)
    header = ["operation", "D"] + [c.title for c in peers.ADAPTERS]
    header += ["ace / best prioritised peer: median [min-max over rounds]", "ace / numpy ring"]
    notes = [
        "Sizes: " + ", ".join(f"D={d}: capacity {cap:,}" for d, cap in sizes) + f"; batch {BATCH}; "
        f"alpha {ALPHA}, importance-sampling exponent {IS_EXPONENT}; {cfg.rounds} rounds; seed {cfg.seed}.",
        "Implementations: "
        + "; ".join(
            f"{c.title} {versions[c.name]}" if reasons[c.name] is None else f"{c.title}: unavailable ({reasons[c.name]})"
            for c in peers.ADAPTERS
        )
        + ".",
        "Rates are medians over rounds; ratios are computed per round (ace and the peer timed in the same "
        "round) and summarised by their median and range. 'Best prioritised peer' excludes the uniform "
        "numpy ring, shown as a reference.",
        "Buffers are full (filled with the seeded episode stream, episodes of 150-250 steps with "
        "next_obs[t] == obs[t+1], priorities |N(0,1)|+0.01) before anything is timed; timed adds overwrite "
        "the oldest transitions. Arguments (numpy rows, tianshou Batch objects, TensorDicts, index "
        "tensors) are built before the clock starts for every implementation.",
        "ace_hybrid: MixedReplayBuffer with beta = 0 (all samples from the prioritised RL partition), "
        "sample(256, is_exponent=0.4). numpy ring: uniform sampling, no priorities, its training step "
        "is a sample. tianshou: no batched add, so batched add = ReplayBuffer.from_data + update() "
        "(timed); its prioritised sampling uses numpy's global generator (seeded). cpprb: obs and "
        "next_obs stored as separate fields (default); its sampling RNG is internal and not seedable "
        "from Python.",
        f"Update: each block cycles through {UPDATE_INDEX_SETS} index sets drawn by sampling just before "
        "it. cpprb's update_priorities defers part of its tree work to the next sample (measured here at "
        "D=4, capacity 1M: update 7 us, sample 300 us, update then sample 440 us), so its update row "
        "flatters it: the training step is the fair comparison of priority maintenance.",
        "Bytes (storage): "
        + "; ".join(
            f"{c.title}: " + (" / ".join(hows) if (hows := _hows(results, c.name)) else "n/a")
            for c in peers.ADAPTERS
        )
        + ". Bytes (RSS growth): resident-memory growth of the process while the buffer was built "
        "and filled, / capacity; includes priority trees and allocator slack; a cross-check that is only "
        "meaningful at full sizes (at small sizes freed memory is reused and the figure can even be 0).",
        f"torch threads: {cfg.torch_threads}. Pairwise mode (only ace + one peer in memory at a time): "
        + ", ".join(f"D={r['obs_dim']}: {'yes' if r['pairwise'] else 'no'}" for r in results)
        + f". Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"numpy {np.__version__}.",
    ]
    return SectionReport(
        key="replay",
        title=SECTIONS["replay"][0],
        header=header,
        rows=rows,
        goals=_replay_goals(summaries, ace_ok),
        notes=notes,
        data={"sizes": results, "reasons": reasons, "versions": versions},
    )

# ----------------------------------------------------------------------------- kernels: sampling, masks, enumeration


def interleaved_times(fns: dict[str, Callable[[], Any]], rounds: int, block_seconds: float) -> dict[str, list[float]]:
    """Seconds per call of every function, one calibrated block each per round, the order rotating by round."""
    names = list(fns)
    calls = {name: calibrate(lambda f=fns[name]: f(), [((), {})], block_seconds, 10_000) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            n = calls[name]
            times[name].append(time_block(lambda f=fns[name]: f(), [((), {})], n) / n)
    return times


def ratio_summary(slow: Sequence[float], fast: Sequence[float]) -> tuple[float, float, float]:
    """Median, min and max over rounds of slow[r] / fast[r] (how many times faster ``fast`` is)."""
    ratios = [a / b for a, b in zip(slow, fast)]
    return _median(ratios), min(ratios), max(ratios)


def fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def _grid2op_env(name: str) -> tuple[Any, str | None]:
    """(env, None), or (None, why) when grid2op or the environment cannot be had here."""
    try:
        from ace_hybrid.grid.env import make_env

        return make_env(name, seed=0), None
    except Exception as exc:  # noqa: BLE001 - any failure makes the section report "unavailable"
        return None, f"{type(exc).__name__}: {exc}"


def _unavailable(key: str, title: str, header: list[str], goal: str, reason: str | None) -> SectionReport:
    """A section that could not run: one row and its goal marked UNKNOWN, with the reason."""
    row = [f"unavailable ({reason})"] + ["-"] * (len(header) - 1)
    return SectionReport(key, title, header, [row], goals=[Goal(goal, "UNKNOWN", str(reason))])


N_ACTIONS_BENCH = 67_105


@section("sampling", "Masked sampling and argmax over 67,105 actions: ace_hybrid vs PyTorch and numpy")
def sampling_section(cfg: RunConfig) -> SectionReport:
    from ace_hybrid import SamplingGenerator, masked_argmax, masked_sample

    batch, n = (256, N_ACTIONS_BENCH) if cfg.sizes == "full" else (8, 4_099)
    rng = np.random.default_rng(cfg.seed)
    logits = rng.standard_normal((batch, n), dtype=np.float32)
    mask = rng.random((batch, n)) < 0.5
    gen = SamplingGenerator(cfg.seed)
    fns: dict[str, Callable[[], Any]] = {
        "ace sample": lambda: masked_sample(logits, mask, generator=gen),
        "ace argmax": lambda: masked_argmax(logits, mask),
    }

    def numpy_sample() -> Any:
        z = np.where(mask, logits, -np.inf)
        p = np.exp(z - z.max(axis=1, keepdims=True))
        c = np.cumsum(p, axis=1)
        u = rng.random((batch, 1)) * c[:, -1:]
        return (c < u).sum(axis=1)

    fns["numpy sample"] = numpy_sample
    fns["numpy argmax"] = lambda: np.where(mask, logits, -np.inf).argmax(axis=1)
    torch_reason = None
    try:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        torch.manual_seed(cfg.seed)
        tl, tm = torch.from_numpy(logits), torch.from_numpy(mask)
        low = torch.finfo(torch.float32).min
        fns["torch sample"] = lambda: torch.multinomial(torch.softmax(tl.masked_fill(~tm, low), dim=1), 1)
        fns["torch argmax"] = lambda: tl.masked_fill(~tm, low).argmax(dim=1)
    except ImportError as exc:
        torch_reason = f"unavailable ({exc})"
    block = cfg.block_seconds or (0.3 if cfg.sizes == "full" else 0.01)
    times = interleaved_times(fns, cfg.rounds, block)
    rows, goals, data = [], [], {}
    for op in ("sample", "argmax"):
        ace = times[f"ace {op}"]
        row = [op, fmt_time(_median(ace))]
        for ref in ("torch", "numpy"):
            key = f"{ref} {op}"
            if key not in times:
                row += [torch_reason or "unavailable", "-"]
                continue
            med, lo, hi = ratio_summary(times[key], ace)
            row += [fmt_time(_median(times[key])), f"{fmt_ratio(med)} [{fmt_ratio(lo)}-{fmt_ratio(hi)}]"]
            data[f"{op}_vs_{ref}"] = med
        rows.append(row)
    if "sample_vs_torch" in data:
        r = data["sample_vs_torch"]
        goals.append(Goal("masked sampling >= 5x PyTorch", "PASS" if r >= 5 else "FAIL", f"{fmt_ratio(r)}"))
    else:
        goals.append(Goal("masked sampling >= 5x PyTorch", "UNKNOWN", torch_reason or "torch missing"))
    return SectionReport(
        key="sampling",
        title=f"Masked sampling over {n:,} actions, batch {batch}",
        header=["operation", "ace_hybrid", "PyTorch", "ace speed-up vs PyTorch", "numpy",
                "ace speed-up vs numpy"],
        rows=rows,
        goals=goals,
        notes=[
            f"float32 logits ({batch}, {n}), a random per-row mask with half the actions legal; times are medians "
            f"over {cfg.rounds} rounds, speed-ups per round (median [min-max]).",
            "PyTorch: logits.masked_fill(~mask, finfo.min) + softmax + multinomial (argmax: masked_fill + argmax), "
            f"torch.set_num_threads({os.cpu_count()}); ace_hybrid picks its own thread count (<= cores).",
            "numpy: where + exp + cumsum + one uniform per row (argmax: where + argmax).",
        ],
        data=data,
    )


@section("mask", "Legality masks over the 36-substation grid: ace_hybrid (C++) vs vectorised numpy")
def mask_section(cfg: RunConfig) -> SectionReport:
    from ace_hybrid.masking import LegalityMasker
    from ace_hybrid.topology import bus_assignments

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' numpy reference
    from reference_masking import NumpyLegalityMasker

    name = "l2rpn_neurips_2020_track1" if cfg.sizes == "full" else "l2rpn_case14_sandbox"
    env, reason = _grid2op_env(name)
    title = f"Legality mask per observation on {name}"
    header = ["operation", "ace_hybrid", "numpy", "ace speed-up"]
    if env is None:
        return _unavailable("mask", title, header, "mask < 0.1 ms per observation", reason)
    space = bus_assignments(env)
    ace = LegalityMasker.for_env(env, space)
    ref = NumpyLegalityMasker(space, max_sub_changed=env.parameters.MAX_SUB_CHANGED,
                              max_line_status_changed=env.parameters.MAX_LINE_STATUS_CHANGED)
    rng = np.random.default_rng(cfg.seed)
    status = rng.random(env.n_line) > 0.1
    cdl = np.where(rng.random(env.n_line) < 0.1, 3, 0).astype(np.int64)
    cds = np.where(rng.random(env.n_sub) < 0.1, 3, 0).astype(np.int64)
    assert np.array_equal(ace.mask(status, cdl, cds), ref.mask(status, cdl, cds))
    batch = 256
    bs = np.tile(status, (batch, 1))
    bl, bsub = np.tile(cdl, (batch, 1)), np.tile(cds, (batch, 1))
    fns = {
        "ace one": lambda: ace.mask(status, cdl, cds),
        "numpy one": lambda: ref.mask(status, cdl, cds),
        "ace batch": lambda: ace.mask_batch(bs, bl, bsub),
    }
    times = interleaved_times(fns, cfg.rounds, cfg.block_seconds or (0.2 if cfg.sizes == "full" else 0.01))
    med, lo, hi = ratio_summary(times["numpy one"], times["ace one"])
    one = _median(times["ace one"])
    rows = [
        ["mask, one observation", fmt_time(one), fmt_time(_median(times["numpy one"])),
         f"{fmt_ratio(med)} [{fmt_ratio(lo)}-{fmt_ratio(hi)}]"],
        [f"mask_batch of {batch}, per observation", fmt_time(_median(times["ace batch"]) / batch), "-", "-"],
    ]
    env.close()
    return SectionReport(
        "mask", title, header, rows,
        goals=[Goal("mask < 0.1 ms per observation", "PASS" if one < 1e-4 else "FAIL", fmt_time(one))],
        notes=[f"{len(space):,} bus-assignment actions; random line status / cooldowns; both agree on the mask "
               "(checked before timing). The numpy version evaluates the rules action by action "
               "(ace_hybrid groups actions sharing a footprint)."],
        data={"ace_one_s": one, "speedup": med},
    )


@section("enumeration", "Enumeration of bus-assignment actions: ace_hybrid (C++) vs grid2op")
def enumeration_section(cfg: RunConfig) -> SectionReport:
    from ace_hybrid.topology import bus_assignments

    name = "l2rpn_wcci_2020" if cfg.sizes == "full" else "l2rpn_case14_sandbox"
    env, reason = _grid2op_env(name)
    title = f"Enumeration of every single-substation bus assignment on {name}"
    header = ["implementation", "actions", "time (median)", "ace speed-up"]
    if env is None:
        return _unavailable("enumeration", title, header, "enumeration < 0.5 s", reason)
    space = env.action_space
    fns = {
        "ace": lambda: bus_assignments(env),
        "grid2op": lambda: type(space).get_all_unitary_topologies_set(space),
    }
    rounds = max(1, min(cfg.rounds, 3))  # grid2op takes seconds per call
    times = interleaved_times(fns, rounds, 0.0)
    n_ace, n_g2op = len(bus_assignments(env)), len(fns["grid2op"]())
    med, lo, hi = ratio_summary(times["grid2op"], times["ace"])
    ace_t = _median(times["ace"])
    env.close()
    return SectionReport(
        "enumeration", title, header,
        [["ace_hybrid", f"{n_ace:,}", fmt_time(ace_t), f"{fmt_ratio(med)} [{fmt_ratio(lo)}-{fmt_ratio(hi)}]"],
         ["grid2op get_all_unitary_topologies_set", f"{n_g2op:,}", fmt_time(_median(times["grid2op"])), "1x"]],
        goals=[Goal("enumeration < 0.5 s", "PASS" if ace_t < 0.5 else "FAIL", fmt_time(ace_t)),
               Goal("same number of actions as grid2op", "PASS" if n_ace == n_g2op else "FAIL",
                    f"{n_ace:,} vs {n_g2op:,}")],
        notes=[f"{rounds} interleaved rounds; the content and order equal grid2op's (tests/test_topology.py)."],
        data={"ace_s": ace_t, "speedup": med},
    )




@section("catalog", "Action catalog of the 36-substation grid: ace_hybrid vs grid2op's gym_compat DiscreteActSpace")
def catalog_section(cfg: RunConfig) -> SectionReport:
    name = "l2rpn_wcci_2020" if cfg.sizes == "full" else "l2rpn_case14_sandbox"
    env, reason = _grid2op_env(name)
    title = f"Action catalog (do nothing + line status + bus assignments) of {name}"
    header = ["implementation", "actions", "build time (median)", "ace speed-up"]
    try:
        from ace_hybrid.grid.catalog import ActionCatalog
        from ace_hybrid.grid.env import reset_episode
        from ace_hybrid.grid.features import ObservationFeatures
        from grid2op.gym_compat import DiscreteActSpace
    except ImportError as exc:
        env, reason = None, str(exc)
    if env is None:
        return _unavailable("catalog", title, header, "catalog built in < 1 s", reason)
    keep = ["set_line_status_simple", "set_bus"]
    fns = {
        "ace": lambda: ActionCatalog(env, cache_dir=None),
        "grid2op": lambda: DiscreteActSpace(env.action_space, attr_to_keep=keep),
    }
    times = interleaved_times(fns, max(1, min(cfg.rounds, 2)), 0.0)  # grid2op takes seconds per build
    catalog, das = fns["ace"](), fns["grid2op"]()
    med, lo, hi = ratio_summary(times["grid2op"], times["ace"])
    obs = reset_episode(env, 0, 0)
    features = ObservationFeatures(env)
    per_obs = interleaved_times({"mask": lambda: catalog.legal_mask(obs), "features": lambda: features(obs)},
                                cfg.rounds, cfg.block_seconds or (0.2 if cfg.sizes == "full" else 0.01))
    build, mask_t = _median(times["ace"]), _median(per_obs["mask"])
    rows = [
        ["ace_hybrid ActionCatalog (no disk cache)", f"{len(catalog):,}", fmt_time(build),
         f"{fmt_ratio(med)} [{fmt_ratio(lo)}-{fmt_ratio(hi)}]"],
        ["grid2op DiscreteActSpace(set_line_status_simple, set_bus)", f"{das.n:,}",
         fmt_time(_median(times["grid2op"])), "1x"],
        ["ace legal_mask(obs), per observation", "", fmt_time(mask_t), ""],
        [f"ObservationFeatures(obs) ({features.dim} features), per observation", "",
         fmt_time(_median(per_obs["features"])), ""],
    ]
    env.close()
    return SectionReport(
        "catalog", title, header, rows,
        goals=[Goal("catalog built in < 1 s", "PASS" if build < 1 else "FAIL", fmt_time(build)),
               Goal("legal mask < 0.1 ms per observation", "PASS" if mask_t < 1e-4 else "FAIL", fmt_time(mask_t))],
        notes=["grid2op's DiscreteActSpace enumerates the same actions (it calls get_all_unitary_topologies_set) "
               "and builds one action object per index; ace_hybrid enumerates in C++ and builds grid2op actions "
               "lazily, on first use."],
        data={"ace_build_s": build, "speedup": med, "mask_s": mask_t},
    )


@section("training", "Training throughput: environment steps/s in the training loop vs raw stepping")
def training_section(cfg: RunConfig) -> SectionReport:
    import tempfile

    name = "l2rpn_neurips_2020_track1" if cfg.sizes == "full" else "l2rpn_case14_sandbox"
    steps = 3_000 if cfg.sizes == "full" else 200
    title = f"Training loop overhead on {name} ({steps:,} environment steps)"
    header = ["loop", "env steps/s", "environment time (steps, resets, simulations)", "network updates", "everything else",
              "everything else / environment"]
    env, reason = _grid2op_env(name)
    try:
        from ace_hybrid.config import load_config
        from ace_hybrid.grid.agents import DoNothingAgent
        from ace_hybrid.grid.env import reset_episode
        from ace_hybrid.training.loop import train
    except ImportError as exc:
        env, reason = None, str(exc)
    if env is None:
        return _unavailable("training", title, header,
                            "training overhead outside the update < 20% of environment time", reason)
    # Raw stepping: the do-nothing agent under the same activation rule, episodes as in training.
    agent = DoNothingAgent(env.action_space)
    env_time, reset_time, total_time, done_steps, episode = 0.0, 0.0, 0.0, 0, 0
    t_start = time.perf_counter()
    while done_steps < steps:
        t0 = time.perf_counter()
        obs, done = reset_episode(env, episode % 2, 1000 + episode), False
        reset_time += time.perf_counter() - t0
        episode += 1
        while not done and done_steps < steps:
            action = agent.act(obs, 0.0)
            t0 = time.perf_counter()
            obs, _, done, _ = env.step(action)
            env_time += time.perf_counter() - t0
            done_steps += 1
    total_time = time.perf_counter() - t_start
    env_time += agent.safe_rule.simulate_seconds  # power flows of the safe rule's checks count as environment time
    env.close()
    overrides = [f"env.name={name}", "env.train_scenarios=[0, 1]", "env.eval_pairs=[[0, 0]]",
                 f"train.total_env_steps={steps}", "train.eval_every=0", f"train.checkpoint_every={10 * steps}",
                 "log.tensorboard=false", "log.progress=false", f"train.seed={cfg.seed}"]
    if cfg.sizes != "full":
        overrides += ["sac.hidden=[32]", "sac.embed_dim=8", "sac.batch_size=16", "train.learning_starts=8"]
    with tempfile.TemporaryDirectory() as tmp:
        summary = train(load_config(None, overrides), Path(tmp) / "run")
    split = summary["time_split"]
    loop = summary["train_seconds"]
    split["env"] += split["safe_rule_simulate"]  # as in the raw loop: the safe rule's power flows are environment time
    # Episode resets (~35 ms each on NeurIPS) are environment work, and an agent that fails more often resets more:
    # both loops count them as environment time.
    split["env"] += split["reset"]
    env_time += reset_time
    # The evaluation on env.eval_pairs at the end of training is not loop overhead.
    other = loop - split["env"] - split["update"] - split["eval"]
    raw_other = total_time - env_time
    # The training loop's own overhead: what it spends beyond what the raw loop (same activation rule) spends.
    ratio = other / split["env"] - raw_other / env_time
    rows = [
        ["raw: do-nothing agent + safe rule", f"{steps / total_time:,.0f}", fmt_time(env_time), "-",
         fmt_time(raw_other), f"{raw_other / env_time:.0%}"],
        [f"training loop ({summary['decisions']} decisions, {summary['updates']} updates)", f"{steps / loop:,.0f}",
         fmt_time(split["env"]), fmt_time(split["update"]), fmt_time(other), f"{other / split['env']:.0%}"],
    ]
    return SectionReport(
        "training", title, header, rows,
        goals=[Goal("training overhead outside the update < 20% of environment time", "PASS" if ratio < 0.2 else
                    "FAIL", f"{ratio:.0%} of environment time beyond the raw loop's own {raw_other / env_time:.0%}")],
        notes=["Environment time is env.step plus the safe rule's obs.simulate power flows (the SAC agent splits "
               "substations, so its episodes need more revert checks than doing nothing) plus the episode resets "
               f"({episode} raw episodes at {reset_time / max(episode, 1) * 1e3:.0f} ms per reset; the training loop "
               f"ran {summary['episodes']}: an agent that loses the grid sooner resets more often). 'everything else' "
               "is the rest of the loop outside the SAC updates and the final evaluation: features, legal masks, the "
               f"policy's forward pass and sampling at decisions ({fmt_time(split['act'])} for "
               f"{summary['decisions']} decisions), replay adds, building grid2op actions, the safe rule's own "
               "Python, logging. Network updates include the stepped actor's pass over every action's features, "
               "which the next decision or update reuses. The raw loop's "
               "'everything else' is the activation rule's Python alone; the goal counts the difference of the two "
               "ratios."],
        data={"overhead_ratio": ratio, "raw_steps_per_s": steps / total_time, "train_steps_per_s": steps / loop,
              "raw_episodes": episode, "raw_reset_s": reset_time,
              "train_episodes": summary["episodes"]},
    )


# ----------------------------------------------------------------------------- command line


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7, help="timed rounds (default 7)")
    p.add_argument("--sizes", choices=("small", "full"), default="full", help="problem sizes (default full)")
    p.add_argument(
        "--only", action="append", choices=sorted(SECTIONS), help="run only this section (repeatable; default all)"
    )
    p.add_argument("--output", type=Path, help="markdown file whose section(s) to write/update between markers")
    p.add_argument("--json", type=Path, help="write raw figures as JSON")
    p.add_argument("--seed", type=int, default=0, help="seed of all data and seedable implementations (default 0)")
    p.add_argument(
        "--disable-peer",
        action="append",
        default=[],
        metavar="NAME",
        help="report implementation NAME as unavailable without trying it "
        f"(one of {', '.join(c.name for c in peers.ADAPTERS)}; repeatable)",
    )
    p.add_argument("--block-seconds", type=float, help="length of one timed block (default 0.2 full, 0.01 small)")
    p.add_argument("--torch-threads", type=int, default=1, help="torch.set_num_threads for torch-based peers")
    p.add_argument(
        "--pairwise",
        choices=("auto", "never", "always"),
        default="auto",
        help="hold only ace_hybrid + one peer in memory at a time (auto: when all would not fit)",
    )
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be >= 1, got {args.rounds}")
    for name in args.disable_peer:
        try:
            peers.adapter_by_name(name)
        except ValueError as exc:
            p.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(["python", *(sys.argv if argv is None else [sys.argv[0], *argv])])
    cfg = RunConfig(
        rounds=args.rounds,
        sizes=args.sizes,
        seed=args.seed,
        disabled=frozenset(args.disable_peer),
        block_seconds=args.block_seconds,
        torch_threads=args.torch_threads,
        pairwise=args.pairwise,
    )
    keys = args.only or list(SECTIONS)
    out_json: dict[str, Any] = {"command": command, "config": dataclasses.asdict(cfg) | {"disabled": sorted(cfg.disabled)}}
    for key in keys:
        t0 = time.perf_counter()
        report = SECTIONS[key][1](cfg)
        body = render(report, command)
        print(body, flush=True)
        print(f"(section {key} took {time.perf_counter() - t0:.1f} s)\n", flush=True)
        if args.output:
            update_markdown(args.output, key, body)
        out_json[key] = {
            "title": report.title,
            "header": report.header,
            "rows": report.rows,
            "goals": [dataclasses.asdict(g) for g in report.goals],
            "notes": report.notes,
            "data": report.data,
        }
    print(f"Command: {command}")
    if args.json:
        args.json.write_text(json.dumps(out_json, indent=1, default=str))
    # Goals are reported, not enforced: the exit status is 0 whether they pass or fail.
    return 0


if __name__ == "__main__":
    sys.exit(main())
