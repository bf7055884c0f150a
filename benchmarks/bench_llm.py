"""The LLM in the loop on CPU: the policy actor's latency per refinement, and training throughput with the LLM on/off.

Run:  PYTHONPATH=python python benchmarks/bench_llm.py [--states 6] [--steps 1000] [--calls 40] --output benchmarks/RESULTS.md

Actor: the embedded SmolLM2-135M-Instruct refines N danger states of l2rpn_neurips_2020_track1 (do-nothing episodes,
scenario 0, seeds 100, 101, ...) where the "RL action" is a deliberately bad one: disconnecting the most loaded line.
Each refinement shows the LLM 8 candidates (the heuristic's shortlist and do nothing: no SAC critic here), validates
each proposal by a simulated segment on an environment copy, and runs up to 5 rounds. Reported: wall time per
refinement and per LLM call, the LLM / validation split, rounds, acceptance.

Throughput: the same training configuration (the neurips config, ``--steps`` environment steps, no evaluation) with
``llm.backend=none`` (SAC only) and with ``smollm2`` (ACE: actor, critic and co-evolution, ``--calls`` LLM calls at
most), interleaved in one process; reported as environment steps/s and the time split. The figure depends on how many
bad transitions the run meets, so read it with the LLM-call count beside it.
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


def throughput(steps: int, calls: int, seed: int) -> tuple[str, dict]:
    from ace_hybrid.config import load_config
    from ace_hybrid.training.loop import train

    base = [f"train.total_env_steps={steps}", "train.eval_every=0", f"train.checkpoint_every={10 * steps}",
            "log.tensorboard=false", "log.progress=false", f"train.seed={seed}", "env.eval_pairs=[[0, 10]]",
            "env.eval_max_steps=1"]
    variants = {"SAC only (llm.backend=none)": ["llm.backend=none"],
                f"ACE (smollm2, at most {calls} LLM calls)": ["llm.backend=smollm2", f"ace.max_llm_calls={calls}",
                                                              "ace.critic_start=0", "ace.finetune_every=4",
                                                              "ace.finetune_pairs=8", "ace.probe_size=0"]}
    rows, data = [], {}
    for label, extra in variants.items():
        cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / f"{ENV}.toml", base + extra)
        with tempfile.TemporaryDirectory() as tmp:
            s = train(cfg, Path(tmp) / "run")
        split, loop = s["time_split"], s["train_seconds"]
        llm = s.get("llm", {})
        rows.append([label, f"{steps / loop:,.1f}", f"{loop:.0f} s", f"{split['env'] + split['safe_rule_simulate']:.1f} s",
                     f"{split['update']:.1f} s", f"{split['llm']:.1f} s", str(llm.get("calls", 0)),
                     f"{llm.get('accepted', 0)} / {llm.get('bad_transitions', 0)}"])
        data[label] = steps / loop
    header = ["loop", "env steps/s", "wall", "environment", "SAC updates", "LLM (+ validation)", "LLM calls",
              "accepted / bad transitions"]
    return markdown_table(header, rows), data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--states", type=int, default=6, help="danger states the actor refines (default 6)")
    p.add_argument("--steps", type=int, default=1000, help="environment steps per training run (default 1000)")
    p.add_argument("--calls", type=int, default=40, help="LLM call budget of the ACE run (default 40)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=("actor", "throughput"), help="run one part")
    p.add_argument("--output", type=Path, help="markdown file whose llm section to write between markers")
    args = p.parse_args(argv)
    for name in ("states", "steps", "calls"):
        if getattr(args, name) < 1:
            p.error(f"--{name} = {getattr(args, name)} must be >= 1")
    import torch

    torch.set_num_threads(2)
    cmd = "PYTHONPATH=python python benchmarks/bench_llm.py " + " ".join(argv if argv is not None else sys.argv[1:])
    parts = ["### The LLM in the loop on CPU (SmolLM2-135M-Instruct, 2 cores)", "", f"Command: `{cmd.strip()}`", ""]
    if args.only in (None, "actor"):
        body, _ = actor_latency(args.states)
        parts += [f"Policy actor: one refinement of a bad action (disconnect the most loaded line) in {args.states} "
                  f"danger states of {ENV}, 8 candidates, up to 5 rounds.", "", body, ""]
    if args.only in (None, "throughput"):
        body, data = throughput(args.steps, args.calls, args.seed)
        ratio = list(data.values())
        parts += [f"Training throughput with the LLM off and on ({args.steps:,} environment steps of the neurips "
                  "configuration, same seed):", "", body, "",
                  f"ACE runs at {ratio[1] / ratio[0]:.2f}x the SAC-only step rate. The difference is the LLM's calls "
                  "(their number is set by the call budget and the bad transitions met) and the validation "
                  "rollouts; the loop itself adds an environment copy per decision (about 10 ms).", ""]
    text = "\n".join(parts)
    print(text)
    if args.output:
        update_markdown(args.output, "llm", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
