"""Draw the documentation's figures into docs/figures/ (PNG, matplotlib's Agg canvas): rerun after the data change.

    PYTHONPATH=python python tools/docs_figures.py                                   # all three, from the repo's data
    PYTHONPATH=python python tools/docs_figures.py --results runs/make_run/results.json   # + a run's comparisons

- ``ace_loop.png``: the ACE loop, boxes and arrows (no data).
- ``differences.png``: the forest plot of make run's paired differences in survival, drawn by
  :func:`ace_hybrid.report.plot_differences` (the figure ``report.md`` has) from the comparisons of a results.json;
  by default from ``docs/figures/make_run_comparisons.json``, which ``--results`` rewrites from a run's results.json.
- ``learner_saturation.png``: environment steps per second against rollout workers, offered and trained, with the
  learner's saturation, read from the table ``benchmarks/bench_loop.py`` writes into ``docs/learner_saturation.md``,
  and the measured runs of the "Training throughput" table in ``benchmarks/RESULTS.md``.

Needs matplotlib (the ``report`` extra) and, for ``differences.png``, ace_hybrid importable (``PYTHONPATH=python``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"
COMPARISONS = FIGURES / "make_run_comparisons.json"
SATURATION_PAGE = ROOT / "docs" / "learner_saturation.md"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
DPI = 110


def _figure(width: float, height: float) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


# ----------------------------------------------------------------------------- the ACE loop

#: name -> (x, y, width, height, label, colour); the axes span x 0-100, y -8-62. Blue: RL, grey: the replay,
#: orange: the LLM's part.
BOXES: dict[str, tuple[float, float, float, float, str, str]] = {
    "env": (1, 44, 18, 12, "Environment\nGrid2Op + lightsim2grid\n(a safe rule below\nmax rho 0.9)", "#dbe9f6"),
    "actor": (29, 44, 18, 12, "SAC actor\ndiscrete SAC over the\nmasked action catalog", "#dbe9f6"),
    "update": (81, 44, 18, 12, "SAC update\ntwin Q, temperature,\nimportance weights", "#dbe9f6"),
    "critic": (1, 22, 18, 12, "LLM critic g_LLM\nreads key trajectories,\nrewards +-K or +-2K", "#fde7c8"),
    "rl": (29, 23, 18, 10, "RL partition\nD_RL", "#e8e8e8"),
    "valid": (55, 23, 18, 10, "validated partition\n(the paper's D_LLM)", "#e8e8e8"),
    "llm_actor": (1, 1, 18, 12, "LLM actor f_LLM\nre-ranks legal candidates\nof a bad transition", "#fde7c8"),
    "sim": (29, 1, 18, 12, "simulator check\non an env copy:\nbetter than a?", "#fde7c8"),
    "lora": (81, 1, 18, 12, "LoRA co-evolution\nfine-tune (peft) on the\nbest refinements", "#fde7c8"),
}

#: (start, end, label, label position, horizontal alignment, connection style)
ARROWS: list[tuple[tuple[float, float], tuple[float, float], str, tuple[float, float], str, str]] = [
    ((19, 52), (29, 52), "danger state s", (24, 54), "center", "arc3"),
    ((29, 47), (19, 47), "action a", (24, 45), "center", "arc3"),
    ((38, 44), (38, 33), "(s, a, r, s\')", (39, 38.5), "left", "arc3"),
    ((81, 50), (47, 50), "weights", (64, 51.5), "center", "arc3"),
    ((75, 30), (88, 44), "Eq. 8 batch:\n(1 - beta) B from D_RL\nbeta B by I_v exp((r_hat - r) / tau)", (80, 40.5),
     "right", "arc3"),
    ((29, 31), (19, 31), "trajectories", (24, 32.5), "center", "arc3"),
    ((19, 25), (29, 25), "r + adjustment", (24, 23.5), "center", "arc3"),
    ((31, 23), (15, 13), "bad: r < r_bar,\noverload or blackout", (22, 18), "right", "arc3"),
    ((19, 9), (29, 9), "a_hat", (24, 10.5), "center", "arc3"),
    ((29, 4), (19, 4), "retry, <= 5", (24, 2.5), "center", "arc3"),
    ((47, 9), (60, 23), "accepted:\nI_v = 1, r_hat - r", (55, 13), "left", "arc3"),
    ((70, 23), (84, 13), "best pairs", (79, 19.5), "left", "arc3"),
]


def draw_ace_loop(out: Path) -> Path:
    """Boxes and arrows of one ACE training run."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

    fig, ax = _figure(11.0, 7.0)
    ax.set(xlim=(0, 100), ylim=(-8, 62))
    ax.axis("off")
    ax.add_patch(Rectangle((27, 21), 48, 15, facecolor="none", edgecolor="0.5", linestyle="--", linewidth=1.0))
    ax.text(51, 35, "mixed prioritised replay (C++)", ha="center", va="center", fontsize=8, color="0.3",
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
    for x, y, w, h, label, colour in BOXES.values():
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.3,rounding_size=1.2", facecolor=colour,
                                    edgecolor="0.3", linewidth=1.0))
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=8.5)
    style = {"arrowstyle": "-|>", "mutation_scale": 13, "linewidth": 1.2, "color": "0.25"}
    for start, end, label, where, align, connection in ARROWS:
        ax.add_patch(FancyArrowPatch(start, end, connectionstyle=connection, **style))
        ax.text(*where, label, ha=align, va="center", fontsize=7.5, color="0.1")
    # the adapter goes back to the LLM the actor (and the critic) use, under the bottom row
    ax.plot([90, 90, 10], [1, -4, -4], color="0.25", linewidth=1.2)
    ax.add_patch(FancyArrowPatch((10, -4), (10, 1), **style))
    ax.text(50, -5.8, "adapter, hot-swapped: the LLM both roles use", ha="center", va="center", fontsize=7.5)
    ax.text(50, 60, "ACE: SAC acts and learns; the LLM refines bad transitions, reshapes rewards, and co-evolves",
            ha="center", va="center", fontsize=10, weight="bold")
    path = out / "ace_loop.png"
    fig.savefig(path, dpi=DPI)
    return path


# ----------------------------------------------------------------------------- the forest plot


def refresh_comparisons(results_json: Path) -> None:
    """Copy the comparisons of a run's results.json into ``docs/figures/make_run_comparisons.json``."""
    results = json.loads(results_json.read_text())
    keep = ("a_name", "b_name", "difference", "lo", "hi", "separated", "primary", "p", "p_holm")
    comparisons = [{k: c[k] for k in keep if k in c} for c in results.get("comparisons", [])]
    if not comparisons:
        sys.exit(f"{results_json} has no comparisons")
    data = {"experiment": results.get("experiment", results_json.parent.name),
            "source": f"The comparisons of {results_json.parent.name}/results.json, made by "
                      f"`{results.get('command', 'ace-hybrid experiment')}`, copied by `python tools/docs_figures.py "
                      f"--results {results_json}`.",
            "comparisons": comparisons}
    COMPARISONS.write_text(json.dumps(data, indent=2) + "\n")


def draw_differences(out: Path) -> Path:
    """The forest plot of :func:`ace_hybrid.report.plot_differences` from the committed comparisons."""
    from ace_hybrid.report import plot_differences

    plot_differences(json.loads(COMPARISONS.read_text()), out)
    return out / "differences.png"


# ----------------------------------------------------------------------------- the learner's saturation


def markdown_table(text: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the first markdown table in ``text`` whose first header cell is ``first_header``."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and cells[0] == first_header:
            rows = []
            for row in lines[i + 2:]:
                if not row.lstrip().startswith("|"):
                    break
                rows.append(dict(zip(cells, (c.strip() for c in row.strip().strip("|").split("|")), strict=True)))
            return rows
    raise ValueError(f"no table with first column {first_header!r}")


def _number(text: str) -> float:
    return float(text.replace(",", "").rstrip("%"))


def saturation_data() -> dict[str, Any]:
    """Offered and trained steps/s per worker count (docs/learner_saturation.md) and the measured runs (RESULTS.md)."""
    page = markdown_table(SATURATION_PAGE.read_text(), "workers")
    trained = {}
    for key in page[0]:
        m = re.fullmatch(r"steps/s trained, (\d+) update\(s\)/decision", key)
        if m:
            trained[int(m[1])] = [_number(r[key]) for r in page]
    if not trained:
        raise ValueError(f"{SATURATION_PAGE}: no 'steps/s trained, N update(s)/decision' column")
    results = RESULTS.read_text()
    section = results.split("### Training throughput", 1)
    if len(section) != 2:
        raise ValueError(f"{RESULTS}: no 'Training throughput' section")
    measured: dict[str, dict[int, list[float]]] = {}
    for row in markdown_table(section[1], "repeat"):
        m = re.fullmatch(r"SAC-only, (\d+) (local|Ray) worker\(s\), env-bound", row["loop"])
        if m:
            label = f"measured, {m[2]} workers, no updates (env-bound)"
        elif re.fullmatch(r"SAC-only, (\d+) local workers, (\d+) updates/decision", row["loop"]):
            m = re.fullmatch(r"SAC-only, (\d+) local workers, (\d+) updates/decision", row["loop"])
            label = f"measured, local workers, {m[2]} updates/decision"
        else:
            continue
        measured.setdefault(label, {}).setdefault(int(m[1]), []).append(_number(row["env steps/s"]))
    return {"workers": [int(r["workers"]) for r in page], "offered": [_number(r["steps/s offered"]) for r in page],
            "trained": trained, "measured": measured}


def draw_saturation(out: Path) -> Path:
    """Steps/s against workers (log-log): what N workers offer, what one learner can train on, measured points."""
    data = saturation_data()
    fig, ax = _figure(7.5, 4.6)
    ax.plot(data["workers"], data["offered"], "-o", color="tab:blue",
            label="offered: N x one worker's steps/s (arithmetic)")
    for (u, values), colour in zip(sorted(data["trained"].items()), ("tab:red", "tab:orange", "tab:purple"),
                                   strict=False):
        ax.plot(data["workers"], values, "--", color=colour,
                label=f"trained at {u} update(s)/decision: one learner's ceiling (arithmetic)")
    for label, points in sorted(data["measured"].items()):
        xs = [n for n, vals in points.items() for _ in vals]
        ys = [v for vals in points.values() for v in vals]
        # env-bound runs measure what workers offer (blue); runs with updates what the learner trains on (orange)
        marker, colour = ("^", "tab:orange") if "no updates" not in label else \
            (("s", "tab:cyan") if "Ray" in label else ("D", "tab:blue"))
        ax.plot(xs, ys, marker, color=colour, linestyle="none", markersize=7, markerfacecolor="none", label=label)
    ax.set(xscale="log", yscale="log", xlabel="rollout workers", ylabel="environment steps / s",
           title="Rollout workers and one learner (make run's configuration, 2-core machine)")
    ax.set_xticks(data["workers"], [str(n) for n in data["workers"]])
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small", loc="upper left")
    path = out / "learner_saturation.png"
    fig.savefig(path, dpi=DPI)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, help="a results.json whose comparisons replace the committed ones")
    parser.add_argument("--out", type=Path, default=FIGURES, help="output folder (default docs/figures)")
    args = parser.parse_args(argv)
    if args.results is not None:
        refresh_comparisons(args.results)
    args.out.mkdir(parents=True, exist_ok=True)
    for path in (draw_ace_loop(args.out), draw_differences(args.out), draw_saturation(args.out)):
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
