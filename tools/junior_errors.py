"""Where a junior departs from its tutor, on the held-out episodes of the collection it was fitted on (or, with
``--on``, on another collection: the tutor on weeks the junior never saw): its accuracy, how often each acts, how
often it acts where the tutor did nothing (and the reverse), and the one-line control (the most frequent legal
action of the training episodes).

With ``--among K`` (a collection that keeps the tutor's candidates), each junior also chooses only among do nothing
and the first K - 1 of the tutor's heuristic shortlist, as ``env.deploy_among = K`` deploys it (no simulation), beside
the shortlist's own first action and a uniform draw among the same candidates; and, from the tutor's simulations,
how often the choice is worse than doing nothing or ends the game where the tutor's did not, how often it is
near-best (within ``--tolerance``, 0.01, of the best simulated max rho: the tutor's choice among near-ties is a
coin), and its regret (its simulated max rho above the best's); juniors after the first are paired with it.

    PYTHONPATH=python python tools/junior_errors.py runs/junior/tutor-train runs/junior/junior-9.6k.pt
    PYTHONPATH=python python tools/junior_errors.py runs/junior/tutor8-train runs/junior/junior8.pt \
        --on runs/junior/tutor8-val
    PYTHONPATH=python python tools/junior_errors.py runs/junior/tutor8-train runs/junior/junior8.pt \
        --on runs/junior/tutor8-val7c --among 8

With ``--sure P,...`` each junior's choice among the candidates is also gated as ``env.deploy_sure = P`` gates it
(do nothing where its most likely candidate's probability is below P), a row per P.
"""

from __future__ import annotations

import argparse

import numpy as np

from ace_hybrid.experiment.statistics import cluster_draws, interval
from ace_hybrid.training.junior import HOLDOUT_EVERY, junior_choices, junior_policies, load_junior
from ace_hybrid.training.tutor_decisions import Decisions, load_decisions, read_meta

REGRET_CAP = 0.5
"""A regret (max rho above the best candidate's) counted at most this: a game over is not an infinite mistake."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="the collection the junior was fitted on (ace-hybrid junior collect --out)")
    parser.add_argument("juniors", nargs="+", help="junior files (ace-hybrid junior fit --out, or ensemble --out)")
    parser.add_argument("--on", default=None, metavar="DIR",
                        help="measure on this collection (e.g. junior collect --scenarios validation) instead of the "
                        "held-out episodes of DATA; the rule then counts all of DATA")
    parser.add_argument("--among", type=int, default=0, metavar="K",
                        help="also choose among do nothing and the first K - 1 of the tutor's shortlist (>= 2; the "
                        "collection must keep the tutor's candidates)")
    parser.add_argument("--tolerance", type=float, default=0.01, metavar="RHO",
                        help="with --among: a choice within RHO of the best candidate's simulated max rho is near-best "
                        "(default 0.01)")
    parser.add_argument("--sure", default="", metavar="P,...",
                        help="with --among: also each junior gated at each probability P in (0, 1), as "
                        "env.deploy_sure gates it")
    args = parser.parse_args()
    try:
        sures = [float(p) for p in args.sure.split(",") if p.strip()]
    except ValueError:
        parser.error(f"--sure {args.sure!r}: expected probabilities in (0, 1), comma-separated, e.g. 0.5,0.6")
    if any(not 0 < p < 1 for p in sures) or (sures and not args.among):
        parser.error(f"--sure {args.sure!r}: expected probabilities in (0, 1) and --among K")
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
    if args.among:
        if args.among < 2 or d.candidates is None:
            parser.error(f"--among {args.among}: expected K >= 2 and a collection that keeps the tutor's candidates "
                         "(collected by this version)")
        d = d.rows(held)
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
    if args.among:
        among_table(d, args.juniors, args.among, args.tolerance, tuple(sures))


def among_table(d: Decisions, juniors: list[str], k: int, tolerance: float, sures: tuple[float, ...] = ()) -> None:
    """Accuracy and simulated outcome of choices among do nothing and the first k - 1 of the tutor's shortlist,
    ungated and gated at each of ``sures``."""
    cands = d.candidates[:, :k]
    rho = np.where(cands >= 0, d.candidate_rho[:, :k], np.inf)
    restricted = d.among(k)
    rng = np.random.default_rng(0)
    drawn = np.array([rng.choice(c[c >= 0]) for c in cands])
    rows = {"do nothing": np.zeros(len(d), np.int64),
            "the shortlist's first (do nothing if none)": np.where(cands[:, 1] >= 0, cands[:, 1], 0),
            f"uniform among the {k} candidates": drawn, "the tutor": d.action}
    names = []  # the juniors' rows, ungated and gated
    for path in juniors:
        policies, normalizer = junior_policies(load_junior(path), d.obs.shape[1])
        for p in (0.0, *sures):
            names.append(f"{path}, among {k}" + (f", sure {p:g}" if p else ""))
            rows[names[-1]] = junior_choices(policies, normalizer, restricted, sure=p)
    best = rho.min(1)
    near = d.near_best(tolerance)
    print(f"\nAmong do nothing and the first {k - 1} of the tutor's shortlist ({len(d)} decisions; the tutor's "
          f"choice is among them at {np.mean((cands == d.action[:, None]).any(1)):.1%}; on average "
          f"{near.sum(1).mean():.1f} actions are near-best, do nothing at {near[:, 0].mean():.1%}). Regret: the "
          f"choice's simulated max rho above the best candidate's, capped at {REGRET_CAP} (a game over counts the "
          "cap):\n")
    print("| Choice | accuracy [95% CI over episodes] | acts | worse than doing nothing | game over where the tutor's "
          f"was not | near-best (within {tolerance}) [95% CI] | mean regret [95% CI] | regret > 0.05 |\n"
          "|:---|---:|---:|---:|---:|---:|---:|---:|")
    scores: dict[str, np.ndarray] = {}
    for name, chosen in rows.items():
        got = rho[np.arange(len(d)), np.argmax(cands == chosen[:, None], 1)]
        regret = np.where(np.isfinite(best), np.minimum(got - np.where(np.isfinite(best), best, 0), REGRET_CAP), 0)
        hit, good = chosen == d.action, near[np.arange(len(d)), chosen]
        scores[name] = np.stack([good, regret], 1)
        (lo, hi), (glo, ghi), (rlo, rhi) = (interval(cluster_draws(v, d.episode)) for v in (hit, good, regret))
        print(f"| {name} | {hit.mean():.1%} [{lo:.1%}, {hi:.1%}] | {np.mean(chosen != 0):.1%} | "
              f"{np.mean(got > rho[:, 0]):.1%} | {np.mean(np.isinf(got) & np.isfinite(best)):.1%} | "
              f"{good.mean():.1%} [{glo:.1%}, {ghi:.1%}] | {regret.mean():.4f} [{rlo:.4f}, {rhi:.4f}] | "
              f"{np.mean(regret > 0.05):.1%} |")
    for name in names[1:]:  # paired, as above: the same decisions, the same episode draws
        draws = cluster_draws(np.concatenate([scores[name], scores[names[0]]], 1), d.episode)
        (glo, ghi), (rlo, rhi) = interval(100 * (draws[:, 0] - draws[:, 2])), interval(draws[:, 1] - draws[:, 3])
        gain, less = scores[name].mean(0) - scores[names[0]].mean(0)
        print(f"\n{name} − {names[0]}: near-best {100 * gain:+.1f} points [{glo:+.1f}, {ghi:+.1f}], mean regret "
              f"{less:+.4f} [{rlo:+.4f}, {rhi:+.4f}]", end="")
    print()

if __name__ == "__main__":
    main()
