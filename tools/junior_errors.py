"""Where a junior departs from its tutor, on the held-out episodes of the collection it was fitted on (or, with
``--on``, on another collection: the tutor on weeks the junior never saw): its accuracy, how often each acts, how
often it acts where the tutor did nothing (and the reverse), and the one-line control (the most frequent legal
action of the training episodes).

    PYTHONPATH=python python tools/junior_errors.py runs/junior/tutor-train runs/junior/junior-9.6k.pt
    PYTHONPATH=python python tools/junior_errors.py runs/junior/tutor8-train runs/junior/junior8.pt \
        --on runs/junior/tutor8-val
"""

from __future__ import annotations

import argparse

import numpy as np

from ace_hybrid.experiment.statistics import cluster_draws, interval
from ace_hybrid.training.junior import HOLDOUT_EVERY, junior_choices, junior_policies, load_junior
from ace_hybrid.training.tutor_decisions import load_decisions, read_meta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="the collection the junior was fitted on (ace-hybrid junior collect --out)")
    parser.add_argument("juniors", nargs="+", help="junior files (ace-hybrid junior fit --out, or ensemble --out)")
    parser.add_argument("--on", default=None, metavar="DIR",
                        help="measure on this collection (e.g. junior collect --scenarios validation) instead of the "
                        "held-out episodes of DATA; the rule then counts all of DATA")
    args = parser.parse_args()
    d = load_decisions(args.data)
    held = d.episode % HOLDOUT_EVERY == HOLDOUT_EVERY - 1
    if args.on is None and not held.any():
        parser.error(f"{args.data} has no held-out episode (every {HOLDOUT_EVERY}th): collect more")
    counts = np.bincount(d.action[~held] if args.on is None else d.action, minlength=d.mask.shape[1])
    if args.on is not None:
        if read_meta(args.on)["action_set"] != read_meta(args.data)["action_set"]:
            parser.error(f"{args.on} was collected over another action set than {args.data}")
        d = load_decisions(args.on)
        held = np.ones(len(d), bool)
    tutor, masks = d.action[held], d.mask[held]
    rule = np.where(masks, counts, -1).argmax(1)
    print(f"{int(held.sum())} held-out decisions; the tutor does nothing at {np.mean(tutor == 0):.1%}; the most "
          f"frequent legal action of the training episodes matches it at {np.mean(rule == tutor):.1%}\n")
    hits: list[np.ndarray] = []
    print("| Junior | accuracy [95% CI over episodes] | does nothing | acts where the tutor did nothing | "
          "does nothing where it acted |\n|:---|---:|---:|---:|---:|")
    for path in args.juniors:
        policies, normalizer = junior_policies(load_junior(path), d.obs.shape[1])
        chosen = junior_choices(policies, normalizer, d)[held]
        nothing = tutor == 0
        hits.append(chosen == tutor)
        lo, hi = interval(cluster_draws(hits[-1], d.episode[held]))
        print(f"| {path} | {np.mean(chosen == tutor):.1%} [{lo:.1%}, {hi:.1%}] | {np.mean(chosen == 0):.1%} | "
              f"{np.mean(chosen[nothing] != 0) if nothing.any() else float('nan'):.1%} | "
              f"{np.mean(chosen[~nothing] == 0) if (~nothing).any() else float('nan'):.1%} |")

    for path, hit in zip(args.juniors[1:], hits[1:]):  # paired: the same decisions, the same episode draws
        diff = cluster_draws(np.stack([hit, hits[0]], 1), d.episode[held]) @ np.array([100.0, -100.0])
        lo, hi = interval(diff)
        gain = 100 * (hit.mean() - hits[0].mean())
        print(f"\n{path} − {args.juniors[0]}: {gain:+.1f} points [{lo:+.1f}, {hi:+.1f}]", end="")
    print()


if __name__ == "__main__":
    main()
