"""The junior's accuracy against the number of training weeks it learnt from: on held-out episodes of those weeks
(how well it imitates) and on weeks it never saw (how well it generalises), beside two one-line rules measured on
the same unseen decisions (always do nothing; the legal action the tutor chose most often on those training weeks).
95% bootstrap intervals over the unseen collection's episodes.

    PYTHONPATH=python python tools/junior_weeks_curve.py runs/junior/tutor8-train runs/junior/tutor8-val \\
        --weeks 4,8,16

``DATA`` is a tutor collection on training weeks (`ace-hybrid junior collect`), ``UNSEEN`` one on other weeks over
the same action set (`junior collect --scenarios validation`). Each point fits a junior (`junior fit`'s defaults) on
the first n training weeks of ``DATA`` only (its held-out episodes choose the epoch, as `junior fit` does), and a
second on as many decisions as the first point's, so more weeks and more decisions are told apart. If the
unseen-week accuracy still rises at the last point, more training weeks are the lever.
"""

from __future__ import annotations

import argparse

import numpy as np

from ace_hybrid.experiment.statistics import cluster_draws, interval
from ace_hybrid.training.junior import HOLDOUT_EVERY, fit_junior, junior_hits
from ace_hybrid.training.tutor_decisions import config_of, load_decisions, read_meta


def _by_episode(hit: np.ndarray, episode: np.ndarray) -> str:
    """``mean [lo, hi]`` in percent of ``hit``, resampling whole episodes (decisions within one are not
    independent)."""
    lo, hi = interval(cluster_draws(hit, episode))
    return f"{100 * hit.mean():.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="a tutor collection on the training weeks (junior collect --out)")
    parser.add_argument("unseen", help="a tutor collection on other weeks (junior collect --scenarios validation)")
    parser.add_argument("--weeks", default="4,8,16", help="numbers of training weeks, comma-separated")
    parser.add_argument("--seed", type=int, default=0, help="the fits' seed")
    args = parser.parse_args()
    if read_meta(args.unseen)["action_set"] != read_meta(args.data)["action_set"]:
        parser.error(f"{args.unseen} was collected over another action set than {args.data}")
    weeks = config_of(args.data).env.train_scenarios
    try:
        sizes = [int(n) for n in args.weeks.split(",")]
    except ValueError:
        parser.error(f"--weeks {args.weeks!r}: expected comma-separated integers")
    if not all(1 <= n <= len(weeks) for n in sizes):
        parser.error(f"--weeks {args.weeks!r} out of range: {args.data} plays {len(weeks)} training weeks")
    unseen, data = load_decisions(args.unseen), load_decisions(args.data)
    nothing = _by_episode(unseen.action == 0, unseen.episode)
    print(f"{len(unseen)} decisions on {np.unique(unseen.episode).size} episodes of unseen weeks "
          f"{sorted(set(config_of(args.unseen).env.train_scenarios))}; always doing nothing matches the tutor at "
          f"{nothing}\n")
    fixed = None  # the decisions of the fewest weeks: the same data volume from more weeks
    scenario = np.asarray([weeks[int(k) % len(weeks)] for k in data.episode])  # episode k's week, as a run plays it
    print("| Training weeks | Decisions | Held-out episodes of those weeks | Unseen weeks | Unseen weeks, same "
          "decisions as the first row | Most frequent action, unseen weeks |\n|---:|---:|---:|---:|---:|---:|")
    for n in sorted(sizes):
        junior = fit_junior(args.data, scenarios=weeks[:n], seed=args.seed, progress=False)
        fixed = fixed or junior.fit["decisions"]
        same = fit_junior(args.data, fixed, scenarios=weeks[:n], seed=args.seed, progress=False)
        trained = np.isin(scenario, weeks[:n]) & (data.episode % HOLDOUT_EVERY != HOLDOUT_EVERY - 1)
        counts = np.bincount(data.action[trained], minlength=data.mask.shape[1])
        rule = np.where(unseen.mask, counts, -1).argmax(1) == unseen.action
        print(f"| {n} | {junior.fit['decisions']:,} | {100 * junior.fit['validation_accuracy']:.1f}% | "
              f"{_by_episode(junior_hits(junior, unseen), unseen.episode)} | "
              f"{_by_episode(junior_hits(same, unseen), unseen.episode)} | {_by_episode(rule, unseen.episode)} |",
              flush=True)


if __name__ == "__main__":
    main()
