"""What junior-started policies chose: on the states of a tutor's collection, how often each checkpoint's policy alone
picks what its junior picks and what the tutor picked, how often it acts, and how many distinct actions it plays.

    PYTHONPATH=python python tools/anchored_choices.py runs/junior_neurips/tutor8-train runs/junior_neurips/junior8.pt \\
        runs/junior_anchor_neurips/runs/ace-junior-anchor1-seed0/best-20000.pt ... [--every 3]

Every ``--every``-th decision of the collection is read (default 3); the checkpoints must act over the collection's
action set (their runs' grid and ``env.action_set``).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from ace_hybrid.agents import make_agent
from ace_hybrid.grid.env import make_env
from ace_hybrid.training.junior import junior_policies, load_junior
from ace_hybrid.training.tutor_decisions import load_decisions, read_meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("collection", help="a tutor's collection (ace-hybrid junior collect)")
    parser.add_argument("junior", help="the junior file the checkpoints started from")
    parser.add_argument("checkpoints", nargs="+", help="best-<steps>.pt / best.pt of junior-started runs")
    parser.add_argument("--every", type=int, default=3, help="read every this many decisions (default 3)")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every = {args.every} out of range [1, inf)")
    torch.set_num_threads(1)
    d = load_decisions(args.collection)
    (junior,), normalizer = junior_policies(load_junior(args.junior), d.obs.shape[1])
    rows = np.arange(0, len(d), args.every)
    x = normalizer(d.obs)
    mine = np.array([junior.act(x[i], d.mask[i], deterministic=True) for i in rows])
    tutor = d.action[rows]
    print(f"{len(rows)} decisions of {args.collection}; the tutor acts at {np.mean(tutor != 0):.1%}")
    print("| policy | = junior | = tutor | acts | distinct actions |\n|:---|---:|---:|---:|---:|")
    print(f"| junior | | {np.mean(mine == tutor):.1%} | {np.mean(mine != 0):.1%} | {len(set(mine.tolist()))} |")
    env = make_env(read_meta(args.collection)["config"]["env"]["name"], seed=0)
    try:
        for path in args.checkpoints:
            agent = make_agent(f"checkpoint:{path}", env, topk=0)
            chosen = np.array([agent.most_likely(agent.normalizer(d.obs[i]), d.mask[i]) for i in rows])
            print(f"| {path} | {np.mean(chosen == mine):.1%} | {np.mean(chosen == tutor):.1%} | "
                  f"{np.mean(chosen != 0):.1%} | {len(set(chosen.tolist()))} |")
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
