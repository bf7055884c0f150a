"""Does the LLM help the policy actor? Each ranker against the same fixed set of bad transitions, beside the controls
that read nothing but the candidates' positions.

Run:  PYTHONPATH=python python benchmarks/bench_actor.py [--rankers llm,sim,random] [--backend smollm2]
          [--orders 4] [--rounds 5] [--no-effects] [--adapter DIR] [--problems benchmarks/data/actor_problems.json]
          [--output benchmarks/RESULTS.md]

The problem set (:mod:`actor_problems`) is built once (``--build``, or when the file is missing) and reused; every
candidate of every problem is validated once, so the labels say which candidates the simulator would accept.

First choice, position-controlled. Each problem is asked ``--orders`` times, its candidates in a seeded shuffled
order each time (the same orders for every ranker); a ranker's score on a problem is the share of its choices the
simulator accepts. Beside it stand the controls that read only positions: the shortlist's first candidate (the
heuristic order the candidates used to reach the prompt in), the shortlist's best fixed position, and a fixed letter
under the shuffled orders (exactly random). A ranker is credited only with its paired difference to the best of
them, and the distribution of the positions it chose is reported (a model that answers by position puts them all on
one letter).

Refinement (``--rounds``, live in the simulator). Each ranker refines every problem as the actor does in training
(up to ``--rounds`` rounds, failed attempts fed back; the candidates shown in the problem's first shuffled order):
accept rate, rounds used, and its paired difference to a random order's exact expectation.

``--backend`` names the language model: ``smollm2`` (embedded), ``transformers:/path/to/model`` or
``openai:http://127.0.0.1:8000/v1#model-name`` (any OpenAI-compatible server).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import actor_problems as ap  # noqa: E402
from compare_peers import markdown_table, update_markdown  # noqa: E402

DEFAULT_PROBLEMS = ap.ROOT / "benchmarks" / "data" / "actor_problems.json"
ACE_MARGINS = ap.ACE_MARGINS
RANKERS = ("llm", "judge", "lac", "sim", "random")
LLM = ("llm", "judge", "lac")


def make_llm(spec: str) -> Any:
    """A backend from ``smollm2`` | ``transformers:PATH`` | ``openai:URL#MODEL``."""
    from ace_hybrid.config import LLMConfig
    from ace_hybrid.llm import make_backend

    if spec == "smollm2":
        return make_backend(LLMConfig(backend="smollm2"))
    kind, _, rest = spec.partition(":")
    if kind == "transformers" and rest:
        return make_backend(LLMConfig(backend="transformers", model_path=rest))
    if kind == "openai" and "#" in rest:
        url, model = rest.split("#", 1)
        return make_backend(LLMConfig(backend="openai", base_url=url, model=model))
    raise SystemExit(f"--backend {spec!r}: expected smollm2, transformers:PATH or openai:URL#MODEL")


# ----------------------------------------------------------------------------- first choice

def first_choice_table(problems: list[dict[str, Any]], results: dict[str, tuple[np.ndarray, np.ndarray]]) -> str:
    """Rankers' position-controlled first-choice rates beside the position-only controls, paired differences to the
    best control, and the positions chosen."""
    controls = ap.position_controls(problems)
    best_name = max(controls, key=lambda k: controls[k].mean())
    best = controls[best_name]
    n = max(len(p["good"]) for p in problems)
    rows = [[name, ap.ci(v), "control" if name != best_name else "best control", "", ""]
            for name, v in controls.items()]
    for ranker, (chosen, position) in results.items():
        rate = ap.good_rate(problems, chosen)
        top, dist = ap.spread(position, n)
        rows.append([ranker, ap.ci(rate), ap.diff_ci(rate - best), f"{100 * top:.0f}%", dist])
    return markdown_table(["first choice", "accepted by the simulator", "− best position-only control (paired)",
                           "most chosen position", "positions chosen"], rows)


# ----------------------------------------------------------------------------- refinement, live

def run_ranker(ranker: str, problems: list[dict[str, Any]], backend: Any, rounds: int, show_effects: bool,
               seed: int) -> list[dict[str, Any]]:
    """Refine every problem with ``ranker``; one record per problem (accepted, first choice, rounds, seconds)."""
    from tqdm.auto import tqdm

    from ace_hybrid.grid.catalog import ActionCatalog
    from ace_hybrid.grid.env import make_env
    from ace_hybrid.llm.actor import max_rho

    out, envs = [], {}
    for i, problem in enumerate(tqdm(problems, desc=f"refine ({ranker})", unit="problem")):
        if problem["env"] not in envs:
            env = make_env(problem["env"], seed=0)
            catalog = ActionCatalog.for_env(env)
            envs[problem["env"]] = (env, catalog, ap.make_actor(env, catalog, ranker, backend, show_effects=show_effects))
        env, catalog, actor = envs[problem["env"]]
        snapshot, obs = ap.reproduce(env, catalog, problem)
        try:
            started = time.perf_counter()
            ref = actor.refine(snapshot, obs, problem["rl_action"], shortlist=problem["candidates"],
                               max_rounds=rounds, order_seed=seed * 100_003 + i)
            record = {"accepted": ref.accepted, "first": ref.first_choice_accepted, "rounds": ref.rounds,
                      "calls": ref.calls, "error": ref.error, "positions": ref.positions,
                      "seconds": time.perf_counter() - started}
            if ref.accepted:
                record["gain"] = ref.improvement
                record["rho_drop"] = (max_rho(ref.baseline.obs) - max_rho(ref.rollout.obs)
                                      if not (ref.baseline.blackout or ref.rollout.blackout) else None)
                record["margin_met"] = (ref.improvement >= actor.min_improvement
                                        or (record["rho_drop"] is not None and ref.improvement >= 0
                                            and record["rho_drop"] >= actor.min_rho_drop))
            out.append(record)
        finally:
            snapshot.close()
    for env, _, _ in envs.values():
        env.close()
    return out


def refinement_table(problems: list[dict[str, Any]], results: dict[str, list[dict[str, Any]]], rounds: int) -> str:
    exp = np.array([ap.expected_random(p, rounds) for p in problems])
    oracle = np.array([any(p["good"]) for p in problems], dtype=np.float64)
    rows = [["oracle (any candidate good)", ap.ci(oracle), "", "", ""],
            ["random order (exact expectation)", ap.ci(exp[:, 0]), "", "", ""]]
    for ranker, recs in results.items():
        acc = np.array([r["accepted"] for r in recs], dtype=np.float64)
        rows.append([ranker, ap.ci(acc), ap.ci([r["rounds"] for r in recs], pct=False), ap.diff_ci(acc - exp[:, 0]),
                     f"{np.mean([r['seconds'] for r in recs]):.2f}"])
    accepted = [r for recs in results.values() for r in recs if r["accepted"]]
    below = sum(not r["margin_met"] for r in accepted)
    return "\n".join([
        markdown_table(["refinement", f"accepted within {rounds} round(s)", "rounds", "− random order (paired)",
                        "s / problem"], rows), "",
        f"Accepted refinements below the acceptance margin (reward + {ACE_MARGINS[0]}, or max loading - "
        f"{ACE_MARGINS[1]:.0%} at no lower reward): {below} of {len(accepted)}."])


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rankers", default="llm,sim,random", help=f"comma-separated: {', '.join(RANKERS)}")
    p.add_argument("--backend", default="smollm2", help="smollm2 | transformers:PATH | openai:URL#MODEL")
    p.add_argument("--problems", type=Path, default=DEFAULT_PROBLEMS, help="the problem set (built if missing)")
    p.add_argument("--per-env", type=int, default=60, help="problems per grid when building (default 60)")
    p.add_argument("--build", action="store_true", help="rebuild the problem set")
    p.add_argument("--envs", default=",".join(ap.ENVS), help="grids of a new problem set (comma-separated)")
    p.add_argument("--limit", type=int, default=0, help="use only the first N problems (0: all)")
    p.add_argument("--orders", type=int, default=4, help="shuffled orders per problem for the first choice")
    p.add_argument("--rounds", type=int, default=5, help="rounds of the live refinement (0: skip it)")
    p.add_argument("--no-effects", action="store_true", help="prompts without the simulated effects")
    p.add_argument("--adapter", type=Path, help="a LoRA adapter folder to load into the LLM first (e.g. one "
                   "bench_coevolution.py trained: runs/coevolution/<curve>/adapter-<n>)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", type=Path, help="markdown file whose 'actor' section to write between markers")
    args = p.parse_args(argv)
    rankers = [r.strip() for r in args.rankers.split(",") if r.strip()]
    if not rankers or any(r not in RANKERS for r in rankers):
        p.error(f"--rankers {args.rankers!r}: choose among {', '.join(RANKERS)} (q needs a trained critic: not here)")
    if args.per_env < 1 or args.rounds < 0 or args.limit < 0 or args.orders < 1:
        p.error("--per-env and --orders must be >= 1, --rounds and --limit >= 0")
    if args.adapter is not None and not (set(rankers) & set(LLM) and (args.adapter / "adapter_config.json").is_file()):
        p.error(f"--adapter {args.adapter}: needs an LLM ranker ({', '.join(LLM)}) and a folder holding "
                "adapter_config.json")
    import torch

    from ace_hybrid.llm.rankers import Ranker

    torch.set_num_threads(1)
    problems = ap.load_problems(args.problems, args.per_env, args.seed, args.build,
                                tuple(e.strip() for e in args.envs.split(",") if e.strip()))
    if args.limit:
        problems = problems[: args.limit]
    show = not args.no_effects
    backend = make_llm(args.backend) if any(r in LLM for r in rankers) else None
    if args.adapter is not None:
        backend.load_adapter(args.adapter)
    firsts = {r: ap.first_choices(Ranker(r, backend if r in LLM else None, seed=args.seed), problems,
                                  args.orders, show_effects=show, seed=args.seed, desc=f"first choice ({r})")
              for r in rankers}
    refined = {r: run_ranker(r, problems, backend if r in LLM else None, args.rounds, show, args.seed)
               for r in rankers} if args.rounds else {}
    per_env = ", ".join(f"{sum(q['env'] == e for q in problems)} on {e}" for e in sorted({q["env"] for q in problems}))
    cmd = "PYTHONPATH=python python benchmarks/bench_actor.py " + " ".join(argv if argv is not None else sys.argv[1:])
    parts = ["### The policy actor's rankers on a fixed set of bad transitions", "",
             f"Command: `{cmd.strip()}` (torch threads 1)", "",
             f"{len(problems)} bad transitions ({per_env}), {ap.CANDIDATES} candidates each, prompts "
             f"{'with' if show else 'without'} the simulated effects; LLM: "
             f"{args.backend if backend is not None else 'none'}"
             f"{f' + the LoRA adapter {args.adapter}' if args.adapter is not None else ''}. "
             f"First choice: each problem under {args.orders} "
             "seeded shuffled orders. Intervals: 95% bootstrap over problems.", "",
             first_choice_table(problems, firsts), ""]
    if refined:
        parts += [refinement_table(problems, refined, args.rounds), ""]
    text = "\n".join(parts)
    print(text)
    if args.output:
        update_markdown(args.output, "actor", text)
    raw = args.problems.with_name(args.problems.name.split(".")[0] + "-results.json")
    raw.write_text(json.dumps({"rounds": args.rounds, "orders": args.orders, "backend": args.backend,
                               "first_choice": {r: {"chosen": c.tolist(), "position": q.tolist()}
                                                for r, (c, q) in firsts.items()},
                               "refinement": refined}, indent=None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
