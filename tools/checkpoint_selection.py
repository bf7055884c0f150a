"""Does choosing checkpoints on the selection episodes choose what survives on validation pairs?

A training keeps, at each budget, the checkpoint with the highest survival on its selection episodes
(``env.eval_pairs``) among the evaluations up to that budget (``train.keep_best_at``: the first of equals, as the loop
keeps it). An experiment then plays that checkpoint on its validation pairs. This tool puts the two side by side for
every kept checkpoint of one or more experiment folders:

- the kept checkpoint's selection survival against its validation survival, and their rank correlation over the
  kept checkpoints, with a 95% interval that resamples trainings (a training's checkpoints are not independent);
- the selection survival's excess over the validation survival, the winner's curse of keeping the maximum;
- within a training, where two budgets kept different checkpoints: how often the one with the higher selection
  survival also survives longer on the validation pairs (chance: one half);
- between consecutive evaluations of one training, on the same selection episodes, how far survival moves: any move
  there is the policy's, not the episodes'.

Run:  PYTHONPATH=python python tools/checkpoint_selection.py runs/masked_curves_idf_2023 runs/masked_long_idf_2023 \
          [--rows sac-only-noops,egrl-noops] [--out docs/figures/checkpoint_selection_idf_2023.png]
"""

from __future__ import annotations

import argparse
import json
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from ace_hybrid.experiment.statistics import BOOTSTRAP_DRAWS, BOOTSTRAP_SEED


def selection_curve(run_dir: Path) -> dict[int, float]:
    """{environment steps: survival on the selection episodes} of one training's evaluations."""
    curve = {}
    for folder in sorted((run_dir / "eval").glob("step-*")):
        curve[int(folder.name.split("-")[1])] = float(
            json.loads((folder / "evaluation.json").read_text())["totals"]["survival_rate"])
    return curve


def kept_step(curve: dict[int, float], budget: int) -> int:
    """The evaluation a training keeps at ``budget``: the highest selection survival up to it, the first of equals."""
    steps = [s for s in sorted(curve) if s <= budget]
    if not steps:
        raise ValueError(f"no evaluation at or before budget {budget:,} (evaluations at {sorted(curve)})")
    return max(steps, key=lambda s: (curve[s], -s))


def kept_checkpoints(folder: Path) -> list[dict[str, Any]]:
    """One record per validation cell of a training's policy alone at a budget: which checkpoint it played and how
    it did."""
    cells = sorted((folder / "cells-validation").glob("*.json"))
    if not cells:
        raise SystemExit(f"{folder / 'cells-validation'} holds no cell: run the experiment with --on validation")
    out, curves = [], {}
    for path in cells:
        cell = json.loads(path.read_text())
        if cell.get("budget") is None or not cell.get("run_dir") or any(
                cell.get(k) for k in ("deploy_topk", "deploy_shortlist", "deploy_among", "deploy_sure")):
            continue  # the policy alone only: what the selection episodes evaluated
        run_dir = folder / cell["run_dir"]
        if run_dir not in curves:
            curves[run_dir] = selection_curve(run_dir)
        step = kept_step(curves[run_dir], int(cell["budget"]))
        out.append({"training": f"{folder.name}/{run_dir.name}", "row": cell["train_id"], "seed": cell["seed"],
                    "budget": int(cell["budget"]), "kept": step, "selection": curves[run_dir][step],
                    "validation": float(cell["test"]["totals"]["survival_rate"]), "curve": curves[run_dir]})
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    return float(np.corrcoef(rx, ry)[0, 1]) if rx.std() > 0 and ry.std() > 0 else float("nan")


def by_training(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(r["training"], []).append(r)
    return list(groups.values())


def bootstrap(groups: list[list[dict[str, Any]]], statistic: Any) -> tuple[float, float, float]:
    """``statistic`` of the records and its 95% interval, trainings resampled with their checkpoints."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    value = statistic([r for g in groups for r in g])
    draws = []
    for _ in range(BOOTSTRAP_DRAWS):
        picked = rng.integers(0, len(groups), len(groups))
        draws.append(statistic([r for k in picked for r in groups[k]]))
    lo, hi = np.nanpercentile(np.array(draws, dtype=float), [2.5, 97.5])
    return value, float(lo), float(hi)


def rank_correlation(records: list[dict[str, Any]]) -> float:
    return spearman(np.array([r["selection"] for r in records]), np.array([r["validation"] for r in records]))


def excess(records: list[dict[str, Any]]) -> float:
    return float(np.mean([r["selection"] - r["validation"] for r in records]))


def ordered_pairs(groups: list[list[dict[str, Any]]]) -> list[bool]:
    """Within each training, every two budgets that kept different checkpoints with different selection survival
    and different validation survival: does the higher on selection also survive longer on validation?"""
    agree = []
    for group in groups:
        for a, b in combinations(group, 2):
            if a["kept"] == b["kept"] or a["selection"] == b["selection"] or a["validation"] == b["validation"]:
                continue
            agree.append((a["selection"] > b["selection"]) == (a["validation"] > b["validation"]))
    return agree


def swings(records: list[dict[str, Any]]) -> np.ndarray:
    """|change| of selection survival between consecutive evaluations, over every training once."""
    seen, moves = set(), []
    for r in records:
        if r["training"] in seen:
            continue
        seen.add(r["training"])
        values = [r["curve"][s] for s in sorted(r["curve"])]
        moves += [abs(b - a) for a, b in zip(values, values[1:])]
    return np.array(moves)


def report(records: list[dict[str, Any]]) -> str:
    lines = ["| training | budget | kept at | selection survival | validation survival |",
             "|:---|---:|---:|---:|---:|"]
    for r in sorted(records, key=lambda r: (r["training"], r["budget"])):
        lines.append(f"| {r['training']} | {r['budget']:,} | {r['kept']:,} | {r['selection']:.1%} | "
                     f"{r['validation']:.1%} |")
    groups = by_training(records)
    rho, lo, hi = bootstrap(groups, rank_correlation)
    ex, elo, ehi = bootstrap(groups, excess)
    agree = ordered_pairs(groups)
    moves = swings(records)
    lines += ["", f"{len(records)} kept checkpoints of {len(groups)} trainings.",
              f"- rank correlation, selection against validation survival: {rho:+.2f} [{lo:+.2f}, {hi:+.2f}]",
              f"- selection survival minus validation survival: {100 * ex:+.1f} points [{100 * elo:+.1f}, "
              f"{100 * ehi:+.1f}]"]
    if agree:
        lines.append(f"- within a training, the checkpoint higher on selection also higher on validation: "
                     f"{sum(agree)} of {len(agree)} pairs ({np.mean(agree):.0%}; chance 50%)")
    if len(moves):
        lines.append(f"- selection survival between consecutive evaluations moves by {100 * np.median(moves):.1f} "
                     f"points (median; 90th percentile {100 * np.percentile(moves, 90):.1f}) over {len(moves)} moves")
    return "\n".join(lines)


def plot(records: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 5))
    rows = sorted({r["row"] for r in records})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, row in enumerate(rows):
        mine = [r for r in records if r["row"] == row]
        ax.scatter([100 * r["selection"] for r in mine], [100 * r["validation"] for r in mine], s=22,
                   color=colors[k % len(colors)], label=row)
    ax.plot([0, 100], [0, 100], color="grey", lw=0.8, ls="--")
    ax.set(xlabel="kept checkpoint's survival on the selection episodes (%)",
           ylabel="its survival on the validation pairs (%)", xlim=(-2, 102), ylim=(-2, 102))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("Checkpoints kept on the selection episodes, played on validation pairs", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", type=Path, nargs="+", help="experiment output folders played --on validation")
    parser.add_argument("--rows", default=None, help="only these training rows' ids, comma-separated")
    parser.add_argument("--out", type=Path, default=None, help="also draw selection against validation survival here")
    args = parser.parse_args(argv)
    records = []
    for folder in args.folders:
        if not folder.is_dir():
            print(f"{folder} not found: give an experiment's output folder", file=sys.stderr)
            return 2
        records += kept_checkpoints(folder)
    if args.rows is not None:
        wanted = set(args.rows.split(","))
        found = {r["row"] for r in records}
        if wanted - found:
            raise SystemExit(f"--rows {args.rows}: no kept checkpoint of {', '.join(sorted(wanted - found))}; "
                             f"the rows here are {', '.join(sorted(found))}")
        records = [r for r in records if r["row"] in wanted]
    if not records:
        raise SystemExit("no kept checkpoint of a training row in " + ", ".join(map(str, args.folders)))
    print(report(records))
    if args.out is not None:
        plot(records, args.out)
        print(f"figure: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
