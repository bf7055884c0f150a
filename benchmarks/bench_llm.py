"""The LLM in the loop on CPU: the policy actor's latency per refinement, and training throughput with the LLM on/off.

Run:  PYTHONPATH=python python benchmarks/bench_llm.py [--states 6] [--steps 3000] [--calls 40] [--repeats 1]
      [--torch-threads 2] [--ace KEY=VALUE ...] --output benchmarks/RESULTS.md

Actor: the embedded SmolLM2-135M-Instruct refines N danger states of l2rpn_neurips_2020_track1 (do-nothing episodes,
scenario 0, seeds 100, 101, ...) where the "RL action" is a deliberately bad one: disconnecting the most loaded line.
Each refinement shows the LLM 8 candidates (the heuristic's shortlist and do nothing: no SAC critic here), validates
each proposal by a simulated segment on an environment copy, and runs up to 5 rounds. Reported: wall time per
refinement and per LLM call, the LLM / validation split, rounds, acceptance.

Throughput: the same training configuration (the neurips config, ``--steps`` environment steps, no evaluation) with
``llm.backend=none`` (SAC only) and with ``smollm2`` (ACE: actor, critic and co-evolution, ``--calls`` LLM calls at
most), the LLM on its worker thread (``ace.async_llm = true``) and in the loop (false), interleaved in one process
``--repeats`` times; reported as environment steps/s (over the run's train_seconds, which include the drain of the LLM
queue at the end, and before the drain), their ratios to SAC only within a repeat, and the time split. The figure
depends on how many bad transitions the run meets, so read it with the LLM-call count beside it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_peers import markdown_table, update_markdown  # noqa: E402

ENV = "l2rpn_neurips_2020_track1"


def danger_states(env, n: int, threshold: float = 0.9):
    """(snapshot, obs) at the first danger state of n do-nothing episodes (each its own seed)."""
    from ace_hybrid.grid.env import reset_episode
    from ace_hybrid.grid.rules import SafeRule, in_danger

    rule, out, seed = SafeRule(env.action_space, threshold=threshold), [], 100
    while len(out) < n and seed < 100 + 10 * n:
        obs, done = reset_episode(env, 0, seed), False
        seed += 1
        while not done:
            if in_danger(obs, threshold):
                out.append((env.copy(), obs))
                break
            obs, _, done, _ = env.step(rule(obs))
    return out


def actor_latency(n_states: int) -> tuple[str, dict]:
    from ace_hybrid.config import load_config
    from ace_hybrid.grid.catalog import ActionCatalog
    from ace_hybrid.grid.env import make_env
    from ace_hybrid.grid.text import LineEndpoints
    from ace_hybrid.llm import LLMConfig, make_backend
    from ace_hybrid.llm.actor import PolicyActor
    from ace_hybrid.grid.reward import step_reward

    cfg = load_config(None, [f"env.name={ENV}"])
    env = make_env(ENV, seed=0)
    catalog = ActionCatalog.for_env(env)
    t0 = time.perf_counter()
    backend = make_backend(LLMConfig(backend="smollm2"))
    load_s = time.perf_counter() - t0
    actor = PolicyActor(backend, catalog, LineEndpoints.from_env(env), reward_fn=lambda o, b: step_reward(cfg.reward, o, b),
                        threshold=0.9, candidates=8, max_rounds=5, validation_steps=48)
    rows, per_ref = [], []
    for snapshot, obs in danger_states(env, n_states):
        bad = 2 + 2 * int(np.argmax(obs.rho))  # disconnect the most loaded line
        llm0, val0 = actor.stats.llm_seconds, actor.stats.validate_seconds
        t0 = time.perf_counter()
        ref = actor.refine(snapshot, obs, bad)
        wall = time.perf_counter() - t0
        snapshot.close()
        per_ref.append((wall, ref.calls, actor.stats.llm_seconds - llm0, actor.stats.validate_seconds - val0,
                        ref.accepted, ref.rounds))
        rows.append([str(len(rows)), f"{100 * float(np.max(obs.rho)):.0f}%", str(ref.rounds),
                     "yes" if ref.accepted else "no", catalog.describe(ref.action) if ref.accepted else "-",
                     f"{wall:.2f} s"])
    env.close()
    walls, calls, llm_s, val_s, acc, rounds = (np.array(c, dtype=float) for c in zip(*per_ref))
    summary = [
        ["refinements", f"{len(walls)}"],
        ["wall time per refinement (median / mean)", f"{np.median(walls):.2f} s / {walls.mean():.2f} s"],
        ["LLM time per call (mean)", f"{llm_s.sum() / calls.sum():.2f} s"],
        ["validation time per round (mean: two simulated segments in round 1, one after)",
         f"{1e3 * val_s.sum() / rounds.sum():.0f} ms"],
        ["rounds per refinement (mean)", f"{rounds.mean():.2f}"],
        ["accepted", f"{int(acc.sum())} / {len(acc)}"],
        ["model load (converted once, then cached)", f"{load_s:.1f} s"],
    ]
    body = (markdown_table(["measure", "value"], summary) + "\n\nPer state:\n\n"
            + markdown_table(["state", "max rho", "rounds", "accepted", "accepted action", "wall"], rows))
    return body, {"median_refinement_s": float(np.median(walls)), "per_call_s": float(llm_s.sum() / calls.sum())}


def throughput(steps: int, calls: int, seed: int, repeats: int, torch_threads: int,
               ace_extra: list[str]) -> tuple[str, dict, str]:
    """SAC only, ACE with the LLM on its worker thread (``ace.async_llm = true``) and ACE in the loop (false), at one
    configuration, interleaved ``repeats`` times; ratios are taken within a repeat (same machine state)."""
    from ace_hybrid.config import load_config
    from ace_hybrid.training.loop import train

    base = [f"train.total_env_steps={steps}", "train.eval_every=0", f"train.checkpoint_every={10 * steps}",
            "log.tensorboard=false", "log.progress=false", f"train.seed={seed}", "env.eval_pairs=[[0, 10]]",
            "env.eval_max_steps=1", f"train.torch_threads={torch_threads}"]
    ace = ["llm.backend=smollm2", f"ace.max_llm_calls={calls}", "ace.critic_start=0", "ace.finetune_every=4",
           "ace.finetune_pairs=8", "ace.probe_size=0", *ace_extra]
    variants = {"SAC only": ["llm.backend=none"],
                "ACE, LLM on its worker (async_llm = true)": [*ace, "ace.async_llm=true"],
                "ACE, LLM in the loop (async_llm = false)": [*ace, "ace.async_llm=false"]}
    rows, rates = [], {label: [] for label in variants}
    config = Path(__file__).resolve().parents[1] / "configs" / f"{ENV}.toml"
    a = load_config(config, base + variants["ACE, LLM on its worker (async_llm = true)"]).ace
    settings = (f"queue_size = {a.queue_size}, queue_overflow = {a.queue_overflow!r}, worker_torch_threads = "
                f"{a.worker_torch_threads}, worker_nice = {a.worker_nice}")
    for r in range(repeats):
        for label, extra in variants.items():
            cfg = load_config(config, base + extra)
            with tempfile.TemporaryDirectory() as tmp:
                s = train(cfg, Path(tmp) / "run")
            split, seconds = s["time_split"], s["train_seconds"]
            llm = s.get("llm", {})
            queue = llm.get("queue", {})
            drain = float(queue.get("drain_seconds", 0.0))
            rates[label].append((steps / seconds, steps / (seconds - drain)))
            rows.append([str(r + 1), label, f"{steps / seconds:,.1f}", f"{steps / (seconds - drain):,.1f}",
                         f"{seconds:.0f} s", f"{drain:.1f} s", f"{split['update']:.1f} s", f"{split['llm']:.1f} s",
                         str(llm.get("calls", "-")), f"{llm.get('accepted', 0)} / {llm.get('bad_transitions', 0)}",
                         f"{queue.get('dropped', 0)} / {queue.get('submitted', 0)}" if queue.get("async") else "-"])
    header = ["repeat", "loop", "env steps/s", "env steps/s before the drain", "wall (train_seconds)", "drain",
              "SAC updates", "LLM in the loop's thread", "LLM calls", "accepted / refined",
              "dropped / queued"]
    ratios = {}
    sac = rates["SAC only"]
    for label in list(variants)[1:]:
        whole = [a[0] / b[0] for a, b in zip(rates[label], sac)]
        loop = [a[1] / b[0] for a, b in zip(rates[label], sac)]
        ratios[label] = (float(np.median(whole)), float(np.median(loop)))
    return markdown_table(header, rows), ratios, settings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--states", type=int, default=6, help="danger states the actor refines (default 6)")
    p.add_argument("--steps", type=int, default=3000,
                   help="environment steps per training run (default 3000: SAC starts updating after 64 decisions)")
    p.add_argument("--calls", type=int, default=40, help="LLM call budget of the ACE run (default 40)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=1, help="interleaved repeats of the three loops (default 1)")
    p.add_argument("--torch-threads", type=int, default=2, help="torch threads of the loop (train.torch_threads)")
    p.add_argument("--ace", nargs="*", default=[], metavar="KEY=VALUE",
                   help="more overrides of the ACE runs, e.g. ace.worker_nice=0 ace.queue_size=4")
    p.add_argument("--only", choices=("actor", "throughput"), help="run one part")
    p.add_argument("--output", type=Path, help="markdown file whose llm section to write between markers")
    args = p.parse_args(argv)
    for name in ("states", "steps", "calls", "repeats", "torch_threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} = {getattr(args, name)} must be >= 1")
    import torch

    torch.set_num_threads(args.torch_threads)
    cmd = "PYTHONPATH=python python benchmarks/bench_llm.py " + " ".join(argv if argv is not None else sys.argv[1:])
    parts = ["### The LLM in the loop on CPU (SmolLM2-135M-Instruct, 2 cores)", "", f"Command: `{cmd.strip()}`", ""]
    if args.only in (None, "actor"):
        body, _ = actor_latency(args.states)
        parts += [f"Policy actor: one refinement of a bad action (disconnect the most loaded line) in {args.states} "
                  f"danger states of {ENV}, 8 candidates, up to 5 rounds.", "", body, ""]
    if args.only in (None, "throughput"):
        body, ratios, settings = throughput(args.steps, args.calls, args.seed, args.repeats, args.torch_threads,
                                            args.ace)
        parts += [f"Training throughput with the LLM off and on ({args.steps:,} environment steps of the neurips "
                  f"configuration, same seed; {args.torch_threads} torch threads for the loop; ACE at most "
                  f"{args.calls} LLM calls, its worker with {settings}; the three loops interleaved, "
                  f"{args.repeats} repeat(s)). A run's time includes the drain of the LLM queue at its end:", "",
                  body, ""]
        for label, (whole, loop) in ratios.items():
            parts.append(f"* {label}: {whole:.2f}x the SAC-only step rate ({loop:.2f}x before the drain).")
        parts += ["", "Goal: ACE (async) >= 0.8x SAC only. The loop still pays an environment copy per decision "
                  "(for the actor's validation) and shares the CPU with the LLM; the LLM work that does not keep up "
                  "is dropped by the queue (counted above).", ""]
    text = "\n".join(parts)
    print(text)
    if args.output:
        update_markdown(args.output, "llm", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
