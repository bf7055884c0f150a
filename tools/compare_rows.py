"""Paired differences between any two rows of a finished experiment, beside the ones its tables make (exploratory:
each 95% interval is for its own comparison, not corrected).

    python tools/compare_rows.py runs/junior_idf_2023/results-validation.json tutor-8 tutor junior-9.6k-top7 tutor-8

Arguments after the results file are row ids, two at a time (A B: A − B); the bootstrap is the experiment's own
(the same draws, seed and pairs as its tables).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ace_hybrid.experiment.statistics import BOOTSTRAP_DRAWS, BOOTSTRAP_SEED, Resample, paired_difference, points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="an experiment's results.json or results-validation.json")
    parser.add_argument("ids", nargs="+", help="row ids, two at a time: A B [A B ...]")
    args = parser.parse_args()
    if len(args.ids) % 2:
        parser.error(f"row ids come two at a time (A B); got {len(args.ids)}")
    results = json.loads(args.results.read_text())
    rows = {r["id"]: r for r in results["rows"]}
    unknown = [i for i in args.ids if i not in rows]
    if unknown:
        parser.error(f"no row {', '.join(unknown)} in {args.results}; its rows: {', '.join(rows)}")
    resample = Resample.draw(results["seeds"], len(results["pairs"]), BOOTSTRAP_DRAWS, BOOTSTRAP_SEED)
    print("| A | B | survival A | survival B | A − B, points [95% CI] |\n|:---|:---|---:|---:|---:|")
    for a, b in zip(args.ids[::2], args.ids[1::2]):
        d = paired_difference(resample, rows[a], rows[b])
        print(f"| {rows[a]['name']} | {rows[b]['name']} | {d['a_value']:.1%} | {d['b_value']:.1%} | "
              f"{points(d['difference'])} [{points(d['lo'])}, {points(d['hi'])}] |")


if __name__ == "__main__":
    main()
