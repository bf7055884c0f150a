"""The co-evolving LLM's exam round by round: first-choice accuracy on held-out labelled problems against LoRA
rounds, one line per run, beside the controls that explain a score without the model.

Run:  python tools/exam_curve.py RUN_DIR [RUN_DIR ...] --out docs/figures/coevolution_rounds.png

Each RUN_DIR is a training run of an ACE configuration with ``ace.exam`` set (its ``metrics.jsonl`` holds the
``coevo/exam_*`` metrics). Round 0 is the untrained model; each point after it is the exam after that round, with
its 95% bootstrap interval over problems as a band. The dashed lines are the best position-only control and the
simulation ranker on the same problems, the dotted one the one-line rule (a candidate simulated below what was
played). A table of the same figures is printed, and one per grid (from each run's
last checkpoint, which keeps every round's answers).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def exam_rounds(run_dir: Path) -> list[dict[str, Any]]:
    """The ``coevo/*`` lines of a run's metrics that carry an exam, in round order (the last of each round: a
    resumed run may have written a round twice)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path} not found: give the folder of a training run")
    rounds: dict[int, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if "coevo/exam_accuracy" in row:
            rounds[int(row["coevo/round"])] = row
    return [rounds[k] for k in sorted(rounds)]


def table(runs: dict[str, list[dict[str, Any]]]) -> str:
    lines = ["| run | round | env steps | accuracy [95% CI] | − untrained | − best position control | − simulation ranker |",
             "|---|---:|---:|---:|---:|---:|---:|"]

    def diff(row: dict[str, Any], name: str) -> str:
        key = f"coevo/exam_{name}"
        if key not in row:
            return ""
        return f"{100 * row[key]:+.1f} [{100 * row[key + '_low']:+.1f}, {100 * row[key + '_high']:+.1f}]"

    for name, rows in runs.items():
        if rows and "coevo/exam_untrained_accuracy" in rows[0]:
            lines.append(f"| {name} | 0 | | {100 * rows[0]['coevo/exam_untrained_accuracy']:.1f}% | | | |")
        for row in rows:
            lines.append(f"| {name} | {int(row['coevo/round'])} | {int(row['env_steps'])} | "
                         f"{100 * row['coevo/exam_accuracy']:.1f}% [{100 * row['coevo/exam_low']:.1f}, "
                         f"{100 * row['coevo/exam_high']:.1f}] | {diff(row, 'minus_untrained')} | "
                         f"{diff(row, 'minus_best_control')} | {diff(row, 'minus_simulation')} |")
    return "\n".join(lines)


def run_exam(run_dir: Path) -> Any:
    """The exam a run sat (its configuration says which problems and how they were shown), or None."""
    from ace_hybrid.llm.exam import Exam

    ace = json.loads((run_dir / "config.json").read_text())["ace"]
    if not ace.get("exam"):
        return None
    return Exam.load(ace["exam"], size=ace.get("exam_size", 160), show_effects=ace.get("show_effects", True),
                     vs_played=ace.get("effects_vs_played", False))


def control_rates(exam: Any) -> dict[str, Any]:
    """Per-problem rates of every control on the exam: the position-only ones, the simulation ranker and the
    one-line rule (recomputed here, so runs made before a control existed are shown beside it too)."""
    from ace_hybrid.llm.exam import BELOW_PLAYED, below_played_choice, position_controls, simulation_choice

    return {**position_controls(exam.problems), "simulation ranker": simulation_choice(exam.problems),
            BELOW_PLAYED: below_played_choice(exam.problems)}


def per_grid_table(run_dirs: list[Path]) -> str:
    """Each round's exam accuracy on each grid, beside the controls', and its paired difference from the one-line
    rule, from the runs' last checkpoints (their rounds' per-problem answers) and configurations (which problems the
    exam held)."""
    from ace_hybrid.llm.exam import BELOW_PLAYED, paired
    from ace_hybrid.training.checkpoint import load_checkpoint_file

    lines: list[str] = []
    for run_dir in run_dirs:
        exam, checkpoint = run_exam(run_dir), run_dir / "checkpoint.pt"
        if exam is None or not checkpoint.is_file():
            continue
        history = load_checkpoint_file(checkpoint)["llm"]["coevo"]["history"]
        controls = control_rates(exam)
        if not lines:
            lines = [f"| run | round | {' | '.join(exam.grids)} | − {BELOW_PLAYED} |",
                     "|---|---|" + "---:|" * (len(exam.grids) + 1)]
            for name, rates in controls.items():
                by_grid = exam.per_grid(rates)
                lines.append(f"| control | {name} | {' | '.join(f'{100 * by_grid[g]:.1f}%' for g in exam.grids)} | |")
        answers = [(0, history[0].get("exam_before"))] + [(e["round"], e.get("exam_after")) for e in history]
        for k, result in answers:
            if result is not None:
                by_grid = exam.per_grid(result["per_problem"])
                d = paired(result["per_problem"], controls[BELOW_PLAYED])
                lines.append(f"| {run_dir} | {k} | {' | '.join(f'{100 * by_grid[g]:.1f}%' for g in exam.grids)} | "
                             f"{100 * d['mean']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] |")
    return "\n".join(lines)


def plot(runs: dict[str, list[dict[str, Any]]], controls: dict[str, Any], out: Path) -> None:
    """One line per run, round by round, its band the 95% interval; dashed: the controls' accuracies."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ace_hybrid.llm.exam import BELOW_PLAYED

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, rows in runs.items():
        xs = [int(r["coevo/round"]) for r in rows]
        ys = [100 * r["coevo/exam_accuracy"] for r in rows]
        lo = [100 * r["coevo/exam_low"] for r in rows]
        hi = [100 * r["coevo/exam_high"] for r in rows]
        if rows and "coevo/exam_untrained_accuracy" in rows[0]:
            xs, ys = [0, *xs], [100 * rows[0]["coevo/exam_untrained_accuracy"], *ys]
            lo, hi = [ys[0], *lo], [ys[0], *hi]
        line, = ax.plot(xs, ys, marker="o", label=Path(name).name)
        ax.fill_between(xs, lo, hi, alpha=0.2, color=line.get_color())
    means = {name: 100 * float(rates.mean()) for name, rates in controls.items()}
    positions = [v for k, v in means.items() if k not in ("simulation ranker", BELOW_PLAYED)]
    if positions:
        ax.axhline(max(positions), ls="--", color="grey", label="best position-only control")
    if BELOW_PLAYED in means:
        ax.axhline(means[BELOW_PLAYED], ls=":", color="black", label="one-line rule: simulated below what was played")
    if "simulation ranker" in means:
        ax.axhline(means["simulation ranker"], ls="--", color="black", label="simulation ranker")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("LoRA rounds (0: untrained)")
    ax.set_ylabel("first choice accepted by the simulator (%)")
    ax.set_title("The co-evolving judge on held-out problems (bands: 95% CI)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="training run folders (ace.exam set)")
    parser.add_argument("--out", type=Path, default=Path("docs/figures/coevolution_rounds.png"))
    args = parser.parse_args(argv)
    runs = {str(d): exam_rounds(d) for d in args.runs}
    empty = [name for name, rows in runs.items() if not rows]
    if empty:
        print(f"no exam in {', '.join(empty)}: set ace.exam and let a LoRA round finish", file=sys.stderr)
        return 1
    print(table(runs))
    grids = per_grid_table(args.runs)
    if grids:
        print("\nPer grid (each grid's share of the exam's problems):\n" + grids)
    exam = run_exam(args.runs[0])
    plot(runs, control_rates(exam) if exam is not None else {}, args.out)
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
