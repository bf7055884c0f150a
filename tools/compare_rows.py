"""Paired differences between any two rows of a finished experiment, beside the ones its tables make (exploratory:
each 95% interval is for its own comparison, not corrected).

    python tools/compare_rows.py runs/junior_idf_2023/results-validation.json tutor-8 tutor junior-9.6k-top7 tutor-8

Arguments after the results file are row ids, two at a time (A B: A − B); the bootstrap is the experiment's own
(the same draws, seed and pairs as its tables). ``--share A B BASE`` adds the share of B's survival gain over BASE
that A keeps, (A − BASE) / (B − BASE), with the interval of that ratio within each draw (e.g. a junior, its tutor,
doing nothing: issue 33's 80% goal). An id ``a+b+c`` pools rows without training seeds that replicate one recipe
(juniors of fit seeds 0, 1, 2) into one row whose replicates are resampled as training seeds are.

    python tools/compare_rows.py runs/weeks_idf_2023/results.json --share junior-a+junior-b tutor-8 donothing

``--by-week`` resamples whole scenarios (weeks) instead of test pairs: the interval to use when several seeds play
each week, since episodes of one week share its hours (the default for results of a file with ``cluster =
"scenario"``). ``--per-week`` adds each named row's survival on each week. ``--also`` pools the pairs of other
results files of the same rows and training seeds (the same checkpoints played on more weeks: a replication beside
the file it replicates), each week resampled whole:

    python tools/compare_rows.py runs/rise_more_weeks_idf_2023/results-validation.json \
      --also runs/more_updates_idf_2023/results-validation.json sac-only-weeksel-20k-alone sac-only-weeksel-5k-alone
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from ace_hybrid.experiment.statistics import (BOOTSTRAP_DRAWS, BOOTSTRAP_SEED, Resample, interval, paired_difference,
                                              points)
from ace_hybrid.experiment.tables import format_p


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="an experiment's results.json or results-validation.json")
    parser.add_argument("ids", nargs="*", help="row ids, two at a time: A B [A B ...]")
    parser.add_argument("--share", nargs=3, action="append", default=[], metavar=("A", "B", "BASE"),
                        help="the share of B's gain over BASE that A keeps (repeatable)")
    parser.add_argument("--by-week", action="store_true",
                        help="resample whole scenarios (weeks), not test pairs: pairs of one week are not independent")
    parser.add_argument("--per-week", action="store_true", help="also each named row's survival on each week")
    parser.add_argument("--also", type=Path, action="append", default=[], metavar="RESULTS",
                        help="pool the pairs of another results file of the same rows and seeds (repeatable)")
    args = parser.parse_intermixed_args()  # options may come between the row ids
    if len(args.ids) % 2 or not (args.ids or args.share):
        parser.error(f"row ids come two at a time (A B), or --share A B BASE; got {len(args.ids)} ids")
    results = json.loads(args.results.read_text())
    try:
        results = pooled_results([results, *(json.loads(path.read_text()) for path in args.also)],
                                 [args.results, *args.also])
    except ValueError as exc:
        parser.error(str(exc))
    rows = {r["id"]: r for r in results["rows"]}
    named = [*args.ids, *(i for t in args.share for i in t)]
    unknown = [i for spec in named for i in spec.split("+") if i not in rows]
    if unknown:
        parser.error(f"no row {', '.join(unknown)} in {args.results}; its rows: {', '.join(rows)}")
    for spec in (s for s in named if "+" in s):
        try:
            rows[spec] = _pooled([rows[i] for i in spec.split("+")], spec)
        except ValueError as exc:
            parser.error(str(exc))
    pooled = max([len(s.split("+")) for s in named if "+" in s], default=0)
    if pooled and any(rows[i]["seeds"] != [None] for i in named if "+" not in i):
        parser.error("a pooled row is compared with rows without training seeds only (its replicates are the seeds)")
    seeds = list(range(pooled)) if pooled else results["seeds"]  # the same pair draws either way (drawn first)
    by_week = args.by_week or bool(args.also) or results.get("bootstrap", {}).get("cluster") == "scenario"
    weeks = [scenario for scenario, _ in results["pairs"]] if by_week else None
    resample = Resample.draw(seeds, len(results["pairs"]), BOOTSTRAP_DRAWS, BOOTSTRAP_SEED, clusters=weeks)
    if by_week:
        print(f"Intervals resample the {len(set(weeks))} weeks (scenarios) whole, each with its pairs "
              f"({len(weeks)} pairs in all).")
    if args.ids:
        print("| A | B | survival A | survival B | A − B, points [95% CI] | p (uncorrected) |\n"
              "|:---|:---|---:|---:|---:|---:|")
    for a, b in zip(args.ids[::2], args.ids[1::2]):
        d = paired_difference(resample, rows[a], rows[b])
        print(f"| {rows[a]['name']} | {rows[b]['name']} | {d['a_value']:.1%} | {d['b_value']:.1%} | "
              f"{points(d['difference'])} [{points(d['lo'])}, {points(d['hi'])}] | {format_p(d['p'])} |")
    for a, b, base in args.share:
        (va, da), (vb, db), (v0, d0) = (resample.statistic(rows[i], "survival_rate") for i in (a, b, base))
        with np.errstate(invalid="ignore", divide="ignore"):
            lo, hi = interval(np.where(db > d0, (da - d0) / (db - d0), np.nan))  # draws where B gains
        share = (va - v0) / (vb - v0) if vb != v0 else float("nan")
        bounds = "[n/a]" if lo is None else f"[{lo:.0%}, {hi:.0%}]"
        print(f"{rows[a]['name']} keeps {share:.0%} {bounds} of {rows[b]['name']}'s gain over {rows[base]['name']} "
              f"({points(va - v0)} of {points(vb - v0)} points)")
    if args.per_week:
        print(_per_week([rows[i] for i in dict.fromkeys(named)], results["pairs"]))


def pooled_results(results: list[dict], paths: list[Path]) -> dict:
    """One results record of several: the first's rows that every file has, each with its episodes on every file's
    pairs, in order (the pairs' episodes sit on the last axis of a row's [seed][pair] arrays)."""
    if len(results) == 1:
        return results[0]
    by_id = [{r["id"]: r for r in one["rows"]} for one in results]
    shared = [r["id"] for r in results[0]["rows"] if all(r["id"] in rows for rows in by_id)]
    if not shared:
        raise ValueError(f"{', '.join(map(str, paths))}: no row id is in every file")
    for row_id in shared:
        seeds = [rows[row_id]["seeds"] for rows in by_id]
        if any(s != seeds[0] for s in seeds):
            raise ValueError(f"row {row_id} has training seeds {seeds[0]} in {paths[0]} but "
                             f"{next(s for s in seeds if s != seeds[0])} in another file: only the same seeds pool")
    seen = [tuple(pair) for one in results for pair in one["pairs"]]
    if len(set(seen)) < len(seen):
        raise ValueError("a (week, episode seed) pair is in two of the files: each pair counts once")
    rows = []
    for row_id in shared:
        fields = set.intersection(*(set(rows[row_id]["episodes"]) for rows in by_id))
        episodes = {f: np.concatenate([np.asarray(rows[row_id]["episodes"][f], float) for rows in by_id],
                                      axis=1).tolist() for f in fields}
        rows.append({**by_id[0][row_id], "episodes": episodes})
    return {**results[0], "rows": rows, "pairs": [list(pair) for pair in seen]}


def _per_week(rows: list[dict], pairs: list[list[int]]) -> str:
    """A markdown table: each row's survival (steps survived / playable, over its seeds or replicates) per week."""
    scenarios = np.array([scenario for scenario, _ in pairs])
    lines = ["| Week | " + " | ".join(r["id"] for r in rows) + " |", "|---:|" + "---:|" * len(rows)]
    for week in sorted(set(scenarios.tolist())):
        cells = []
        for r in rows:
            survived, playable = (np.asarray(r["episodes"][f], float)[:, scenarios == week].sum()
                                  for f in ("steps_survived", "max_steps"))
            cells.append(f"{survived / playable:.1%}")
        lines.append(f"| {week} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pooled(replicates: list[dict], spec: str) -> dict:
    """One row of several rows without training seeds: replicate k becomes seed k (shorter pools weigh their own)."""
    if any(r["seeds"] != [None] for r in replicates):
        raise ValueError(f"{spec}: only rows without training seeds pool (a junior, a baseline), not trained rows")
    fields = set.intersection(*(set(r["episodes"]) for r in replicates))
    return {"id": spec, "name": f"{replicates[0]['name']} ({len(replicates)} pooled)",
            "seeds": list(range(len(replicates))),
            "episodes": {f: [r["episodes"][f][0] for r in replicates] for f in fields}}


if __name__ == "__main__":
    main()
