"""Do the learners keep learning? Survival on the checkpoint-selection episodes against environment steps and
against wall-clock hours, a band per seed, and the rise from the first evaluation to the last with its interval.

Run:  python tools/learning_curves.py runs/weeks_idf_2023 [--rows ace,sac-only,expert-guided-rl]
          [--out docs/figures/weeks_idf_2023_learning_curves.png]

The experiment folder's trainings are ``runs/<row id>-seed<k>``; each evaluated its policy alone on the same
selection episodes (``env.eval_pairs``) every ``train.eval_every`` steps (``eval/step-*/evaluation.json``). The rise
of a row is its survival at its last evaluation minus its survival at its first, paired over (seed, episode) with
the experiments' own bootstrap (seeds and episodes resampled as a crossed design): "rises" only where the interval
is above 0. Survival is grid2op's (steps survived over steps playable, summed over episodes). The band of one seed
is the 95% bootstrap interval over its episodes. Wall-clock hours are the run's own (from its first metrics line),
and depend on what else the machine ran.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from ace_hybrid.experiment.statistics import BOOTSTRAP_DRAWS, BOOTSTRAP_SEED, Resample, interval, paired_difference

RUN_NAME = re.compile(r"^(?P<row>.+)-seed(?P<seed>\d+)$")


def read_run(run_dir: Path) -> dict[int, dict[str, Any]]:
    """{step: {"survived": (episodes,), "playable": (episodes,), "hours": float}} of one training's evaluations."""
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    start = metrics[0]["time"] if metrics else 0.0
    hours = {int(m["env_steps"]): (m["time"] - start) / 3600 for m in metrics if "eval/survival_rate" in m}
    out = {}
    for folder in sorted((run_dir / "eval").glob("step-*")):
        step = int(folder.name.split("-")[1])
        episodes = json.loads((folder / "evaluation.json").read_text())["episodes"]
        out[step] = {"survived": np.array([e["steps_survived"] for e in episodes], dtype=np.float64),
                     "playable": np.array([e["max_steps"] for e in episodes], dtype=np.float64),
                     "hours": hours.get(step, float("nan"))}
    return out


def collect(folder: Path, rows: list[str] | None) -> dict[str, dict[int, dict[int, dict[str, Any]]]]:
    """{row id: {seed: read_run}} of the experiment's trainings that evaluated at least twice."""
    runs: dict[str, dict[int, Any]] = defaultdict(dict)
    for run_dir in sorted((folder / "runs").iterdir()):
        match = RUN_NAME.match(run_dir.name)
        if not match or (rows and match["row"] not in rows) or not (run_dir / "eval").is_dir():
            continue
        curve = read_run(run_dir)
        if len(curve) >= 2:
            runs[match["row"]][int(match["seed"])] = curve
    missing = [r for r in rows or [] if r not in runs]
    if missing:
        raise SystemExit(f"no training with two evaluations or more for row(s) {', '.join(missing)} in "
                         f"{folder / 'runs'}")
    return dict(runs)


def as_row(name: str, seeds: dict[int, Any], step: int) -> dict[str, Any]:
    """A results.json-like row of one evaluation step (seeds x episodes), for the experiments' bootstrap."""
    order = sorted(seeds)
    return {"id": name, "seeds": order,
            "episodes": {"steps_survived": [seeds[s][step]["survived"].tolist() for s in order],
                         "max_steps": [seeds[s][step]["playable"].tolist() for s in order]}}


def rise_table(runs: dict[str, dict[int, Any]]) -> str:
    lines = ["| training | seeds × episodes | first evaluation | survival there [95% CI] | last evaluation | "
             "survival there [95% CI] | last − first, points [95% CI] | rises |",
             "|:---|---:|---:|---:|---:|---:|---:|:---|"]
    for name, seeds in runs.items():
        steps = sorted(set.intersection(*(set(c) for c in seeds.values())))
        first, last = steps[0], steps[-1]
        n_episodes = len(next(iter(seeds.values()))[first]["survived"])
        resample = Resample.draw(sorted(seeds), n_episodes, BOOTSTRAP_DRAWS, BOOTSTRAP_SEED)
        a, b = as_row("last", seeds, last), as_row("first", seeds, first)
        d = paired_difference(resample, a, b)
        cells = []
        for row in (b, a):
            value, draws = resample.statistic(row, "survival_rate")
            lo, hi = interval(draws)
            cells.append(f"{value:.1%} [{lo:.1%}, {hi:.1%}]")
        verdict = "yes" if d["lo"] > 0 else "falls" if d["hi"] < 0 else "not separated"
        lines.append(f"| {name} | {len(seeds)} × {n_episodes} | {first:,} | {cells[0]} | {last:,} | {cells[1]} | "
                     f"{100 * d['difference']:+.1f} [{100 * d['lo']:+.1f}, {100 * d['hi']:+.1f}] | {verdict} |")
    return "\n".join(lines)


def band(point: dict[str, Any], draws: int = 2000) -> tuple[float, float, float]:
    """One seed's survival at one evaluation and its 95% bootstrap interval over the episodes."""
    survived, playable = point["survived"], point["playable"]
    idx = np.random.default_rng(BOOTSTRAP_SEED).integers(0, len(survived), size=(draws, len(survived)))
    resampled = survived[idx].sum(1) / playable[idx].sum(1)
    lo, hi = np.percentile(resampled, [2.5, 97.5])
    return float(survived.sum() / playable.sum()), float(lo), float(hi)


def plot(runs: dict[str, dict[int, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (name, seeds) in enumerate(runs.items()):
        for j, (seed, curve) in enumerate(sorted(seeds.items())):
            steps = sorted(curve)
            stats = np.array([band(curve[s]) for s in steps])
            for ax, xs in ((axes[0], steps), (axes[1], [curve[s]["hours"] for s in steps])):
                ax.plot(xs, 100 * stats[:, 0], marker="o", ms=3, color=colors[k % len(colors)],
                        ls="-" if j == 0 else "--", label=f"{name}, seed {seed}" if ax is axes[0] else None)
                ax.fill_between(xs, 100 * stats[:, 1], 100 * stats[:, 2], color=colors[k % len(colors)], alpha=0.08)
    axes[0].set(xlabel="environment steps", ylabel="survival on the selection episodes (%)", ylim=(-2, 102))
    axes[1].set(xlabel="wall-clock hours of the run")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("Learning curves: survival on the checkpoint-selection episodes (bands: 95% CI over episodes, per seed)",
                 fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="an experiment's output folder (holding runs/)")
    parser.add_argument("--rows", default="", help="training row ids, comma-separated (default: every training)")
    parser.add_argument("--out", type=Path, default=None, help="figure path (default: FOLDER/learning_curves.png)")
    args = parser.parse_args(argv)
    if not (args.folder / "runs").is_dir():
        print(f"{args.folder / 'runs'} not found: give an experiment's output folder", file=sys.stderr)
        return 1
    runs = collect(args.folder, [r for r in args.rows.split(",") if r] or None)
    if not runs:
        print(f"no training in {args.folder / 'runs'} evaluated twice or more", file=sys.stderr)
        return 1
    print(rise_table(runs))
    out = args.out or args.folder / "learning_curves.png"
    plot(runs, out)
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
