"""Does co-evolution help? The LLM's first choice on held-out bad transitions before and after one LoRA round.

Run:  PYTHONPATH=python python benchmarks/bench_coevolution.py [--backend smollm2] [--epochs 2] [--rank 8]
          [--output benchmarks/RESULTS.md]

ACE fine-tunes the LLM on its own accepted refinements (prompt -> the letter of the accepted candidate). Here, on a
fixed problem set (built like benchmarks/bench_actor.py's, saved in benchmarks/data/coevolution_problems.json), the
problems of a third of the episodes are the *training* problems: the LLM ranker refines them (up to 5 rounds,
validated in the simulator) and its accepted refinements become the LoRA pairs. The problems of the other episodes are
*held out* (never refined, never trained on): the LLM's first choice on each is validated before and after the
round. Reported: first-choice accept rate before, after, and the paired difference, with 95% bootstrap intervals
over the held-out problems; the random ranker's exact expectation on the same problems for scale.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_actor as ba  # noqa: E402
from compare_peers import markdown_table, update_markdown  # noqa: E402

DEFAULT_PROBLEMS = ba.ROOT / "benchmarks" / "data" / "coevolution_problems.json"


def split(problems: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(training, held-out) by episode seed: seeds divisible by 3 train, the others are held out (no episode in
    both; 91 / 179 of the saved 270 problems: the held-out side needs >= 130 to see a ~10-point change)."""
    train = [p for p in problems if p["seed"] % 3 == 0]
    held = [p for p in problems if p["seed"] % 3]
    return train, held


def refine_all(problems: list[dict[str, Any]], backend: Any, rounds: int) -> list[Any]:
    """The LLM ranker's refinement of every problem (the Refinement objects, for their prompts and answers)."""
    from tqdm.auto import tqdm

    from ace_hybrid.grid.catalog import ActionCatalog
    from ace_hybrid.grid.env import make_env

    out, envs = [], {}
    for problem in tqdm(problems, desc=f"refine ({rounds} round(s))", unit="problem"):
        if problem["env"] not in envs:
            env = make_env(problem["env"], seed=0)
            catalog = ActionCatalog.for_env(env)
            envs[problem["env"]] = (env, catalog, ba._actor(env, catalog, "llm", backend))
        env, catalog, actor = envs[problem["env"]]
        snapshot, obs = ba.reproduce(env, catalog, problem)
        try:
            out.append(actor.refine(snapshot, obs, problem["rl_action"], shortlist=problem["candidates"],
                                    max_rounds=rounds))
        finally:
            snapshot.close()
    for env, _, _ in envs.values():
        env.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="smollm2", help="smollm2 | transformers:PATH (a server cannot be tuned)")
    p.add_argument("--problems", type=Path, default=DEFAULT_PROBLEMS)
    p.add_argument("--per-env", type=int, default=140, help="problems per grid when building (default 140)")
    p.add_argument("--build", action="store_true")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--limit", type=int, default=0, help="use only the first N problems of each split (0: all)")
    p.add_argument("--train", type=int, default=0, help="refine only the first N training problems (0: all)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--output", type=Path)
    args = p.parse_args(argv)
    if args.backend.startswith("openai"):
        p.error("--backend openai: a server cannot be fine-tuned here")
    import torch

    torch.set_num_threads(1)
    problems = ba.load_problems(args.problems, args.per_env, args.seed, args.build)
    train, held = split(problems)
    if args.limit:
        train, held = train[: args.limit], held[: args.limit]
    if args.train:
        train = train[: args.train]
    backend = ba.make_llm(args.backend)
    started = time.perf_counter()
    refinements = refine_all(train, backend, 5)
    pairs = [(r.prompt, r.answer) for r in refinements if r.accepted]
    before = refine_all(held, backend, 1)
    stats = backend.finetune(pairs, rank=args.rank, lr=args.lr, epochs=args.epochs)
    after = refine_all(held, backend, 1)
    b = np.array([r.accepted for r in before], dtype=np.float64)
    a = np.array([r.accepted for r in after], dtype=np.float64)
    exp = np.array([ba.expected_random(q, 1)[0] for q in held])
    rows = [["random (exact expectation)", ba._ci(exp)], ["LLM before the LoRA round", ba._ci(b)],
            ["LLM after the LoRA round", ba._ci(a)], ["after - before (paired)", ba._ci(a - b)]]
    cmd = "PYTHONPATH=python python benchmarks/bench_coevolution.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    text = "\n".join([
        "### Co-evolution: one LoRA round on the LLM's own accepted refinements", "",
        f"Command: `{cmd.strip()}` (torch threads 1)", "",
        f"{len(train)} training problems refined by the LLM ranker ({len(pairs)} accepted -> {len(pairs)} LoRA pairs, "
        f"rank {args.rank}, {args.epochs} epoch(s), lr {args.lr:g}; loss {stats.losses[0]:.3f} -> "
        f"{stats.losses[-1]:.3f}); first-choice accept rate on {len(held)} held-out problems (other episodes), "
        f"95% bootstrap intervals; {time.perf_counter() - started:.0f} s in all.", "",
        markdown_table(["first choice on held-out problems", "accept rate"], rows), ""])
    print(text)
    if args.output:
        update_markdown(args.output, "coevolution", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
