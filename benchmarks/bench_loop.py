"""Training throughput: environment steps/s, decisions/s and updates/s of SAC-only and ACE, and of 1 and 2 rollout
workers (local processes and Ray), in one run; then where a learner saturates as workers grow.

Rows (make run's configuration, ``experiments/make_run.toml``'s ``set`` and ``ace_set``, on
l2rpn_neurips_2020_track1):

* SAC-only and ACE (the embedded SmolLM2, its LLM on the worker thread) in the in-process loop (``train.workers = 0``),
  at make run's 4 updates per decision: the LLM's cost to the loop. ACE's rate is taken over the loop (its
  ``train_seconds`` less the final drain of the LLM queue, reported apart: a fixed cost at the end of a run, not a
  per-step one);
* SAC-only with 1 and 2 rollout workers, environment-bound (``train.updates_per_decision = 0``), with the local and the
  Ray executor: what parallel workers buy on this machine. Every worker count does the same work -- the same
  ``--steps`` over the same sequence of episodes (episode k is always the same scenario and seed) -- so two ratios
  compare them: **end to end**, the wall time of the whole ``train`` call (building the learner, starting the workers,
  stepping, the last evaluation and checkpoint), which is what a user waits for, and **steady state**, the
  environment steps per second while every worker runs;
* SAC-only with 2 local workers at 4 updates per decision: the learner's side.

The variants run interleaved ``--repeats`` times; every ratio is taken within a repeat (the machine is shared), and
the table gives each repeat's. From the measured costs -- seconds per environment step of one worker, decisions per
environment step, seconds per SAC update -- ``docs/learner_saturation.md`` computes (arithmetic, stated as such)
how many workers one learner process keeps up with.

    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=python python benchmarks/bench_loop.py --output benchmarks/RESULTS.md
    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=python python benchmarks/bench_loop.py --only scaling --repeats 1

(the second: only the env-bound worker rows, 1 and 2 local and Ray workers, and their ratios.) The default
``--steps`` (100,000, issue 24's goal: two workers >= 1.6x one end to end, Ray within 15% of local) is long enough
that start-up does not decide the end-to-end ratio: one env-bound worker steps about 1,000 steps/s, so at 24,000
steps the 2-7 s of starting workers (Ray's more) is a fifth of the run, and at a few hundred steps it is all of it. Each row records the machine's
load (1-minute average) when it started: on a shared machine the figures are the machine's, not the code's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_peers import markdown_table, update_markdown  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "l2rpn_neurips_2020_track1.toml"
SATURATION_PAGE = ROOT / "docs" / "learner_saturation.md"
WORKER_COUNTS = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_STEPS = 100_000
"""Environment steps per run: issue 24's budget for its worker goals (start-up must not decide the end-to-end ratio)."""
UPDATES_PER_DECISION = (4, 1)
"""make run's updates per decision, and the configurations' default."""

SAC = "SAC-only, in-process"
ACE = "ACE (smollm2), in-process"
LOCAL = "SAC-only, {n} local worker(s), env-bound"
RAY = "SAC-only, {n} Ray worker(s), env-bound"
LEARN = "SAC-only, 2 local workers, 4 updates/decision"


def make_run_overrides() -> tuple[list[str], list[str]]:
    """make run's ``set`` (every training row) and ``ace_set`` (the ACE row), read from the experiment file."""
    spec = tomllib.loads((ROOT / "experiments" / "make_run.toml").read_text())
    keep = [s for s in spec["set"] if not s.startswith(("train.total_env_steps", "train.eval_every",
                                                        "train.checkpoint_every", "env.eval_pairs"))]
    return keep, list(spec["ace_set"])


def variants(ray: bool, only: str | None = None) -> dict[str, list[str]]:
    common, ace = make_run_overrides()
    bound = [*common, "train.updates_per_decision=0", "llm.backend=none"]
    out = {} if only == "scaling" else {SAC: [*common, "llm.backend=none"]}
    if only is None or only == "llm":
        out[ACE] = [*common, *ace]
    if only == "llm":
        return out
    for n in (1, 2):
        out[LOCAL.format(n=n)] = [*bound, f"train.workers={n}", "train.executor=local"]
    if ray:
        for n in (1, 2):
            out[RAY.format(n=n)] = [*bound, f"train.workers={n}", "train.executor=ray"]
    if only != "scaling":
        out[LEARN] = [*common, "llm.backend=none", "train.workers=2", "train.executor=local"]
    return out


def run_once(overrides: list[str], steps: int, seed: int) -> dict:
    """One training run of ``steps`` environment steps; its rates and the costs the saturation page needs."""
    from ace_hybrid.config import load_config
    from ace_hybrid.training.loop import train

    base = [f"train.total_env_steps={steps}", "train.eval_every=0", f"train.checkpoint_every={10 * steps}",
            "log.tensorboard=false", "log.progress=false", f"train.seed={seed}", "env.eval_pairs=[[0, 10]]",
            "env.eval_max_steps=1", "train.torch_threads=1"]
    cfg = load_config(CONFIG, [*overrides, *base])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        s = train(cfg, Path(tmp) / "run")
        wall = time.perf_counter() - t0
    queue = s.get("llm", {}).get("queue", {})
    drain = float(queue.get("drain_seconds", 0.0))
    rates = s.get("rates", {})
    if rates.get("workers"):  # from the first batch on, while every worker runs (metrics.Throughput)
        steps_per_s, updates_per_s = rates["env_steps_per_s"], rates["learner_updates_per_s"]
    else:  # the in-process loop: its training time without the evaluations and ACE's final drain
        seconds = s["train_seconds"] - drain - s["time_split"]["eval"]
        steps_per_s, updates_per_s = s["env_steps"] / seconds, s["updates"] / seconds
    return {"env_steps": s["env_steps"], "decisions": s["decisions"], "episodes": s["episodes"],
            "updates": s["updates"], "wall": wall, "drain": drain, "update_seconds": s["time_split"]["update"],
            "steps_per_s": steps_per_s,
            "decisions_per_s": s["decisions"] / s["env_steps"] * steps_per_s, "updates_per_s": updates_per_s,
            "learner_busy": rates.get("learner_busy"), "startup": rates.get("startup_seconds", 0.0), "load": load,
            "llm_calls": s.get("llm", {}).get("calls"), "accepted": s.get("llm", {}).get("accepted")}


def measure(steps: int, repeats: int, seed: int, ray: bool, only: str | None) -> dict[str, list[dict]]:
    plan = variants(ray, only)
    results: dict[str, list[dict]] = {label: [] for label in plan}
    # Not measured: the first run of this process imports torch, grid2op and the rest, which no later row would pay.
    run_once([*make_run_overrides()[0], "llm.backend=none"], 50, seed)
    for r in range(repeats):
        for label, overrides in plan.items():
            res = run_once(overrides, steps, seed)  # the Ray executor starts (and stops) a local Ray itself
            results[label].append(res)
            print(f"[loop] repeat {r + 1} {label}: {res['steps_per_s']:.1f} env steps/s, "
                  f"{res['updates_per_s']:.1f} updates/s (wall {res['wall']:.0f} s, drain {res['drain']:.0f} s, "
                  f"load {res['load']:.1f} on {os.cpu_count()} cores)", flush=True)
    return results


def ratios(results: dict[str, list[dict]]) -> list[tuple[str, list[float]]]:
    """Per-repeat ratios of the issue's goals: speed-ups as a ratio of rates (steady state) or of wall times for the
    same work (end to end: ``wall(b) / wall(a)`` is how much faster ``a`` finished)."""

    def rate(a: str, b: str) -> list[float]:
        return [x["steps_per_s"] / y["steps_per_s"] for x, y in zip(results[a], results[b])]

    def end_to_end(a: str, b: str) -> list[float]:
        return [y["wall"] / x["wall"] for x, y in zip(results[a], results[b])]

    out = []
    if ACE in results:
        out.append(("ACE / SAC-only, env steps/s (goal >= 0.8)", rate(ACE, SAC)))
    one, two = LOCAL.format(n=1), LOCAL.format(n=2)
    if two in results:
        out += [("2 / 1 local workers, env-bound, end to end (goal >= 1.6)", end_to_end(two, one)),
                ("2 / 1 local workers, env-bound, steady state", rate(two, one))]
    if RAY.format(n=2) in results:
        ray_one, ray_two = RAY.format(n=1), RAY.format(n=2)
        out += [("Ray / local, 2 workers, end to end (goal >= 0.85)", end_to_end(ray_two, two)),
                ("Ray / local, 2 workers, steady state", rate(ray_two, two)),
                ("Ray / local, 1 worker, end to end", end_to_end(ray_one, one)),
                ("2 / 1 Ray workers, end to end", end_to_end(ray_two, ray_one))]
    return out


def saturation(results: dict[str, list[dict]]) -> tuple[str, dict[str, float]]:
    """Arithmetic from measured costs: the learner needs ``updates_per_decision x decisions per step x seconds per
    update`` seconds for each environment step; N workers deliver ``N x steps/s of one worker`` (the 1-worker
    env-bound rate, assuming one core per worker). The learner saturates when that demand reaches one second per
    second (one core)."""
    one = results[LOCAL.format(n=1)]
    per_worker = float(np.median([r["steps_per_s"] for r in one]))
    sac = results[SAC]
    dec_per_step = float(np.median([r["decisions"] / r["env_steps"] for r in sac]))
    sec_per_update = float(np.median([r["update_seconds"] / max(r["updates"], 1) for r in sac]))
    per_update = dec_per_step * sec_per_update  # learner seconds per environment step and update per decision
    n_star = {u: 1.0 / (per_worker * u * per_update) for u in UPDATES_PER_DECISION}
    rows = []
    for n in WORKER_COUNTS:
        offered = n * per_worker
        row = [str(n), f"{offered:,.0f}"]
        for u in UPDATES_PER_DECISION:
            load = offered * u * per_update
            row += [f"{100 * load:,.0f}%", f"{min(offered, 1.0 / (u * per_update)):,.0f}"]
        rows.append(row)
    costs = {"per_worker": per_worker, "dec_per_step": dec_per_step, "sec_per_update": sec_per_update,
             "n_star": n_star}
    header = ["workers", "steps/s offered"]
    for u in UPDATES_PER_DECISION:
        header += [f"learner load, {u} update(s)/decision", f"steps/s trained, {u} update(s)/decision"]
    table = markdown_table(header, rows)
    return table, costs


def report(results: dict[str, list[dict]], steps: int, repeats: int) -> tuple[str, str]:
    rows = []
    for label, runs in results.items():
        for r, res in enumerate(runs):
            rows.append([str(r + 1), label, f"{res['env_steps']:,} / {res['decisions']:,} / {res['episodes']:,}",
                         f"{res['steps_per_s']:,.1f}", f"{res['decisions_per_s']:,.2f}",
                         f"{res['updates_per_s']:,.1f}", f"{res['wall']:.1f} s",
                         f"{res['drain']:.0f} s" if res["drain"] else "-", f"{res['startup']:.1f} s",
                         "-" if res["learner_busy"] is None else f"{100 * res['learner_busy']:.0f}%",
                         "-" if res["llm_calls"] is None else f"{res['llm_calls']} / {res['accepted']}",
                         f"{res.get('load', float('nan')):.1f}"])
    table = markdown_table(["repeat", "loop", "steps / decisions / episodes", "env steps/s", "decisions/s",
                            "updates/s", "wall (end to end)", "LLM drain", "worker start-up", "learner busy",
                            "LLM calls / accepted", "load"], rows)
    ratio_rows = [[name, ", ".join(f"{v:.2f}" for v in vals), f"{np.median(vals):.2f}"]
                  for name, vals in ratios(results)]
    body = (f"{steps:,} environment steps per run, make run's configuration (`experiments/make_run.toml`), 1 torch "
            f"thread, {repeats} interleaved repeat(s); rates over the loop (rollout workers: from their first "
            "batch; ACE: without the final drain of its LLM queue); wall: the whole `train` call, start-up included. "
            f"Every row steps the same sequence of episodes. load: the machine's 1-minute load average when the row "
            f"started ({os.cpu_count()} cores).\n\n" + table + "\n\nRatios, taken within "
            "each repeat (end to end: the ratio of wall times for the same work):\n\n"
            + markdown_table(["ratio", "per repeat", "median"], ratio_rows))
    if LOCAL.format(n=1) not in results or SAC not in results or not all(r["updates"] for r in results[SAC]):
        return body, ""  # the saturation page needs a 1-worker rate and measured updates (a run past learning_starts)
    sat_table, c = saturation(results)
    stars = ", ".join(f"**{c['n_star'][u]:.2f} workers** at {u} update(s) per decision" for u in UPDATES_PER_DECISION)
    page = (f"Measured by `benchmarks/bench_loop.py` ({steps:,} steps per run): one worker steps "
            f"{c['per_worker']:,.0f} environment steps/s; the agent decides at {c['dec_per_step']:.3f} of the steps "
            f"(danger states); one SAC update over make run's action set costs {1e3 * c['sec_per_update']:.1f} ms "
            f"(in the in-process loop). One learner core keeps up with {stars} (N* = 1 / (steps/s per worker x "
            "updates per decision x decisions per step x seconds per update)). Past N* the extra steps still fill "
            "the replay, but each transition is replayed less. This is arithmetic from the measured costs, not a "
            "measurement at 64 workers: it assumes one core per worker and a learner that does nothing but update."
            "\n\n" + sat_table)
    return body, page


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help=f"environment steps per run (default {DEFAULT_STEPS})")
    p.add_argument("--repeats", type=int, default=2, help="interleaved repeats (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-ray", action="store_true", help="skip the Ray rows")
    p.add_argument("--only", choices=("llm", "workers", "scaling"), help="only SAC-only and ACE in-process (llm), "
                   "only the SAC-only rows (workers), or only the env-bound 1 and 2 worker rows (scaling)")
    p.add_argument("--output", type=Path, help="markdown file whose bench_loop section to write between markers")
    args = p.parse_args(argv)
    for name in ("steps", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name} = {getattr(args, name)} must be >= 1")
    results = measure(args.steps, args.repeats, args.seed, ray=not args.no_ray, only=args.only)
    body, page = report(results, args.steps, args.repeats)
    command = ("Command: `OMP_WAIT_POLICY=PASSIVE PYTHONPATH=python python benchmarks/bench_loop.py "
               f"--steps {args.steps} --repeats {args.repeats}{' --no-ray' if args.no_ray else ''}"
               f"{f' --only {args.only}' if args.only else ''} "
               "--output benchmarks/RESULTS.md`")
    # The worker rows alone (--only scaling) have a section of their own: they do not replace the full table.
    key, title = (("bench_loop_scaling", "Rollout workers: the same work, 1 and 2 workers, local and Ray")
                  if args.only == "scaling" else ("bench_loop", "Training throughput: the LLM, rollout workers, Ray"))
    section = f"### {title}\n\n{command}\n\n{body}\n"
    print(section)
    print(page)
    for name, values in ratios(results):
        print(f"[loop] {name}: median {np.median(values):.2f} (per repeat: {', '.join(f'{v:.2f}' for v in values)})")
    if args.output:
        update_markdown(args.output, key, section)
        if page:
            update_markdown(SATURATION_PAGE, "bench_loop", f"{command}\n\n{page}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
