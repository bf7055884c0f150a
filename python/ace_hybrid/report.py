"""``report.md`` for a finished experiment directory: the table, what its intervals allow us to claim, figures, and
our figures beside the ACE paper's.

Claims. The primary comparisons the experiment file names come first: one of them states a difference only where
its Holm-adjusted paired bootstrap p-value is below 0.05 ("separated (Holm)"). Under "Exploratory (not corrected)"
the others (:func:`ace_hybrid.experiment.comparisons_to_make`) state one only where the 95% bootstrap interval of
their paired difference in survival (:func:`ace_hybrid.experiment.paired_difference`) excludes 0. Otherwise the
report says the two rows are not distinguishable at these sample sizes, with the figures.

Figures (PNG, matplotlib's Agg canvas, no display needed), written to ``DIR/figures/``:

- ``test_survival.png``: survival on the held-out test episodes per row, with 95% bootstrap intervals as error bars;
- ``differences.png``: the paired differences in survival, with their 95% intervals as error bars and 0 marked;
- ``per_episode.png``: survival on each held-out test episode per row (mean over seeds), the data behind both;
- ``budget_curve.png`` (experiments with ``budgets``): test survival with its 95% band against the environment steps
  each row was trained for (one training tested at several budgets), baselines as horizontal lines;
- ``learning_curves.png``: survival on the checkpoint-selection pairs (``env.eval_pairs``) against environment
  steps, per training row and seed (from each run's ``metrics.jsonl``);
- ``llm.png``: cumulative LLM calls and acceptance rate over training (``llm/*`` lines of ``metrics.jsonl``);
- ``time_split.png``: where training time went per training row (environment, updates, LLM, evaluation, other).

A directory without ``results.json`` is an error (there is nothing to report); anything else missing (an unreadable
results.json, a deleted run directory, no LLM lines, a results.json without intervals) becomes a sentence in the
report. Comparable figures from the paper (ACE, arXiv 2506.02522) are put beside ours with what differs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ace_hybrid.experiment import (
    DIFFERENCES_NOTE,
    LLM_KINDS,
    SIMULATIONS_NOTE,
    differences_markdown,
    format_p,
    points,
    stated,
    to_markdown,
    verdict,
)
from ace_hybrid.experiment.tables import b_longer, differences_heading, relative_markdown, secondary_note

# From the paper, as the project's issue quotes them.
PAPER_REFINEMENTS = (287, 682)
"""LLM refinements ACE needed in the paper's experiments (range over tasks)."""
PAPER_TEST_SECONDS = 38.7
"""ACE's test time per episode in the paper (RL policy only, no LLM calls at test time)."""

_TIME_PARTS = ("env", "update", "llm", "eval", "other")
_TIME_LABELS = {"env": "environment (steps, resets, safe-rule simulations)", "update": "SAC updates", "llm": "LLM",
                "eval": "evaluation (env.eval_pairs)", "other": "other"}


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a run's ``metrics.jsonl`` ([] when missing; unreadable lines are skipped)."""
    if not path.is_file():
        return []
    lines = []
    for text in path.read_text().splitlines():
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            continue  # a line cut by a killed run
    return lines


def _figure(width: float = 7.0, height: float = 4.0, ncols: int = 1) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(1, ncols)


def _colors(results: dict[str, Any]) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {row["id"]: cmap(i % 10) for i, row in enumerate(results.get("rows", []))}


def _trainings(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per training: the rows a ``deploy_topk`` makes from one training share its runs, shown once under
    the training's name (``train_name``)."""
    seen: set[str] = set()
    out = []
    for row in results.get("rows", []):
        key = row.get("train_id", row["id"])
        if key not in seen:
            seen.add(key)
            out.append({**row, "name": row.get("train_name", row["name"])})
    return out


def _cells_of(results: dict[str, Any], row_id: str) -> list[dict[str, Any]]:
    return [c for c in results.get("cells", []) if c.get("row") == row_id]


def _first_row(results: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((r for r in results.get("rows", []) if r.get("kind") == kind), None)


def _mean(row: dict[str, Any] | None, key: str) -> float | None:
    """A row's value of ``key``: pooled over its episodes for a test metric, the mean over seeds otherwise."""
    if row is None:
        return None
    stat = row.get("metrics", {}).get(key, {})
    return stat["value"] if "value" in stat else stat.get("mean")


def _has_intervals(results: dict[str, Any]) -> bool:
    return "comparisons" in results and all("episodes" in r for r in results.get("rows", []))


# ----------------------------------------------------------------------------- figures


def plot_learning_curves(results: dict[str, Any], out: Path, fig_dir: Path) -> str:
    """Validation survival against environment steps for every training cell; a sentence when there is none."""
    colors = _colors(results)
    fig, ax = _figure()
    drawn = 0
    for row in _trainings(results):
        labelled = False
        for cell in _cells_of(results, row["id"]):
            if not cell.get("run_dir"):
                continue
            points = [(m["env_steps"], m["eval/survival_rate"]) for m in read_metrics(out / cell["run_dir"] /
                                                                                        "metrics.jsonl")
                      if "eval/survival_rate" in m]
            if not points:
                continue
            xs, ys = zip(*sorted(points))
            ax.plot(xs, ys, marker="o", color=colors[row["id"]], alpha=0.8,
                    label=None if labelled else row["name"])
            labelled, drawn = True, drawn + 1
    if not drawn:
        return "No learning curves: no training row has evaluation lines in its run's metrics.jsonl."
    ax.set(xlabel="environment steps", ylabel="survival on env.eval_pairs", ylim=(-0.02, 1.02),
           title="Learning curves (checkpoint-selection episodes)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(fig_dir / "learning_curves.png", dpi=110)
    return (f"![learning curves](figures/learning_curves.png)\n\nSurvival on the checkpoint-selection episodes "
            f"(env.eval_pairs) at each evaluation during training; one line per seed ({drawn} runs). best.pt is the "
            f"checkpoint at the highest point; the table reports it on the separate held-out test episodes.")


def plot_test_survival(results: dict[str, Any], fig_dir: Path) -> str:
    """Survival per row on the held-out test episodes, with its 95% bootstrap interval as an error bar."""
    colors = _colors(results)
    rows = [r for r in results.get("rows", []) if r.get("metrics", {}).get("survival_rate", {}).get("lo") is not None]
    if not rows:
        return "No survival intervals in results.json (rerun the experiment command: finished cells are reused)."
    fig, ax = _figure(8.0, 1.2 + 0.35 * len(rows))
    for y, row in enumerate(rows):
        stat = row["metrics"]["survival_rate"]
        ax.errorbar(stat["value"], y, xerr=[[stat["value"] - stat["lo"]], [stat["hi"] - stat["value"]]], fmt="o",
                    color=colors[row["id"]], capsize=4)
    ax.set_yticks(range(len(rows)), [r["name"] for r in rows])
    ax.invert_yaxis()
    ax.set(xlabel="survival (total steps survived / total playable)", xlim=(-0.02, 1.02),
           title="Held-out test episodes: survival with 95% bootstrap intervals")
    ax.grid(axis="x", alpha=0.3)
    fig.savefig(fig_dir / "test_survival.png", dpi=110)
    return ("![test survival](figures/test_survival.png)\n\nSurvival of every row on the held-out test episodes; "
            "the bars are 95% bootstrap intervals over test pairs and training seeds. Overlapping bars do not by "
            "themselves mean two rows are alike, nor separate bars that they differ: the paired differences below "
            "decide.")


def plot_differences(results: dict[str, Any], fig_dir: Path) -> str:
    """The declared paired differences in survival, with their 95% intervals as error bars and 0 marked."""
    shown = [c for c in results.get("comparisons", []) if c.get("lo") is not None and c.get("difference") is not None]
    if not shown:
        return "No paired differences to plot."
    fig, ax = _figure(8.0, 1.2 + 0.35 * len(shown))
    for y, c in enumerate(shown):
        d, lo, hi = (100 * c[k] for k in ("difference", "lo", "hi"))
        color = "tab:red" if stated(c) else "0.4"
        ax.errorbar(d, y, xerr=[[d - lo], [hi - d]], fmt="o", capsize=4, color=color,
                    markerfacecolor=color if stated(c) else "white")
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(shown)), [("primary: " if c.get("primary") else "") + f"{c['a_name']} − {c['b_name']}"
                                      for c in shown], fontsize="small")
    ax.invert_yaxis()
    ax.set(xlabel="difference in survival, percentage points")
    # Over the figure, not the axes: long row names leave the axes too narrow to hold the title.
    fig.suptitle("Paired differences (95% bootstrap intervals)")
    ax.grid(axis="x", alpha=0.3)
    fig.savefig(fig_dir / "differences.png", dpi=110)
    return ("![paired differences](figures/differences.png)\n\nA − B in survival on the same test pairs and seeds, "
            "the primary comparisons first; filled red: a difference the report states (a primary one's Holm-adjusted "
            "p < 0.05, an exploratory one's interval excluding 0), hollow grey: none.")


def plot_per_episode(results: dict[str, Any], fig_dir: Path) -> str:
    """Survival per row and held-out test episode (mean over seeds), as a heat map."""
    import numpy as np

    rows = [r for r in results.get("rows", []) if r.get("n") and "episodes" in r]
    pairs = results.get("test_pairs", [])
    if not rows or not pairs:
        return "No per-episode test results in results.json."
    table = np.array([np.mean(np.asarray(r["episodes"]["steps_survived"], dtype=float)
                              / np.asarray(r["episodes"]["max_steps"], dtype=float), axis=0) for r in rows])
    fig, ax = _figure(max(6.0, 0.45 * len(pairs) + 3.0), 1.5 + 0.35 * len(rows))
    image = ax.imshow(table, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    ax.set_yticks(range(len(rows)), [r["name"] for r in rows], fontsize="small")
    ax.set_xticks(range(len(pairs)), [f"{s}/{k}" for s, k in pairs], rotation=90, fontsize="small")
    ax.set(xlabel="test episode (scenario/seed)", title="Survival per held-out test episode (mean over seeds)")
    fig.colorbar(image, ax=ax, label="survival")
    fig.savefig(fig_dir / "per_episode.png", dpi=110)
    return ("![survival per episode](figures/per_episode.png)\n\nThe per-episode values behind the intervals "
            "(results.json keeps each one per seed).")


_BASELINE_STYLES = {"greedy": ("black", "--"), "tutor": ("tab:brown", "-."), "do-nothing": ("0.5", ":")}


def plot_budget_curve(results: dict[str, Any], fig_dir: Path) -> str | None:
    """Test survival (pooled value and 95% bootstrap band, as the table) against each row's training budget: one
    line per training and deployment (solid: the policy alone, dashed: with the top-k check), the baselines as
    horizontal lines; None when no row has a budget."""
    rows = [r for r in results.get("rows", []) if r.get("budget") and r["metrics"]["survival_rate"].get("lo")
            is not None]
    if not rows:
        return None
    colors = _colors(results)
    fig, ax = _figure(8.0, 4.5)
    lines: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for r in rows:
        lines.setdefault((r["train_id"], r.get("deploy_topk"), r.get("deploy_shortlist"), r.get("deploy_among"),
                          r.get("deploy_sure"), r.get("deploy_threshold")), []).append(r)
    for (train_id, topk, shortlist, among, sure, threshold), group in lines.items():
        group.sort(key=lambda r: r["budget"])
        xs = [r["budget"] for r in group]
        stats = [r["metrics"]["survival_rate"] for r in group]
        color = colors[next(r["id"] for r in results["rows"] if r.get("train_id") == train_id)]  # one per training
        check = f" + top-{topk} check" if topk else (" (policy alone)" if topk == 0 else "")
        check += f", {shortlist} from the shortlist" if shortlist else ""
        check = f"{check[:-1]}, among {among})" if among else check
        check = f"{check[:-1]}, sure {sure:g})" if sure else check
        check = f"{check[:-1]}, from rho {threshold:g})" if threshold else check
        ax.plot(xs, [st["value"] for st in stats], marker="o", color=color, linestyle="--" if topk else "-",
                label=f"{group[0].get('train_name', train_id)}{check}")
        ax.fill_between(xs, [st["lo"] for st in stats], [st["hi"] for st in stats], color=color, alpha=0.15)
    for r in results.get("rows", []):
        if r.get("kind") in _BASELINE_STYLES and _mean(r, "survival_rate") is not None:
            color, style = _BASELINE_STYLES[r["kind"]]
            ax.axhline(_mean(r, "survival_rate"), color=color, linestyle=style, linewidth=1.0, label=r["name"])
    ax.set(xlabel="environment steps of training", ylabel="survival on the held-out test episodes",
           ylim=(-0.02, 1.02), title="Survival against the training budget")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.savefig(fig_dir / "budget_curve.png", dpi=110)
    return ("![budget curve](figures/budget_curve.png)\n\nEach training row trained once, to its largest budget, and "
            "tested at each budget from best.pt as it was then (chosen on env.eval_pairs from the evaluations up to "
            "that step: best-<steps>.pt). Lines: survival pooled over test pairs and seeds; bands: the 95% bootstrap "
            "intervals of the table (test pairs x seeds); solid: the policy alone, dashed: with the top-k check; "
            "horizontal lines: the baselines, which do not train.")


_SEED_STYLES = ("-", "--", ":", "-.")


def plot_llm(results: dict[str, Any], out: Path, fig_dir: Path) -> str:
    """Cumulative LLM calls and acceptance rate against environment steps, from the runs' ``llm/*`` lines."""
    colors = _colors(results)
    fig, (ax_calls, ax_rate) = _figure(10.0, 4.0, ncols=2)
    drawn = 0
    for row in _trainings(results):
        for k, cell in enumerate(_cells_of(results, row["id"])):
            if not cell.get("run_dir"):
                continue
            lines = [m for m in read_metrics(out / cell["run_dir"] / "metrics.jsonl") if "llm/calls" in m]
            if not lines:
                continue
            lines.sort(key=lambda m: m["env_steps"])
            steps = [m["env_steps"] for m in lines]
            style = {"marker": ".", "color": colors[row["id"]], "linestyle": _SEED_STYLES[k % len(_SEED_STYLES)],
                     "label": f"{row['name']} (seed {cell.get('seed')})"}
            ax_calls.plot(steps, [m["llm/calls"] for m in lines], **style)
            if any("llm/acceptance_rate" in m for m in lines):
                rates = [(m["env_steps"], m["llm/acceptance_rate"]) for m in lines if "llm/acceptance_rate" in m]
                ax_rate.plot(*zip(*rates), **style)
            drawn += 1
    if not drawn:
        return ("No LLM metrics: no run wrote llm/calls lines to its metrics.jsonl (no row trained with an LLM, or "
                "its run directories are gone).")
    ax_calls.set(xlabel="environment steps", ylabel="LLM calls (cumulative)", title="LLM calls")
    ax_rate.set(xlabel="environment steps", ylabel="accepted / refinements", ylim=(-0.02, 1.02),
                title="Acceptance rate of refinements")
    for ax in (ax_calls, ax_rate):
        ax.grid(alpha=0.3)
    ax_calls.legend(fontsize="small")
    fig.savefig(fig_dir / "llm.png", dpi=110)
    return ("![LLM calls and acceptance](figures/llm.png)\n\nLLM calls (actor and critic; co-evolution's probe calls "
            "are counted apart) and the share of proposed refinements the simulator accepted, over training.")


def _time_split(cell: dict[str, Any]) -> dict[str, float] | None:
    train = cell.get("train") or {}
    split = train.get("time_split")
    if not split:
        return None
    parts = {"env": sum(float(split.get(k, 0.0)) for k in ("env", "reset", "safe_rule_simulate")),
             "update": float(split.get("update", 0.0)), "llm": float(split.get("llm", 0.0)),
             "eval": float(split.get("eval", 0.0))}
    total = float(train.get("train_seconds") or 0.0)
    parts["other"] = max(0.0, total - sum(parts.values()))
    return parts


def plot_time_split(results: dict[str, Any], fig_dir: Path) -> str:
    """Stacked horizontal bars of training time per training row (mean over seeds)."""
    import numpy as np

    rows = []
    for row in _trainings(results):
        splits = [s for s in (_time_split(c) for c in _cells_of(results, row["id"])) if s]
        if splits:
            rows.append((row["name"], {k: float(np.mean([s[k] for s in splits])) for k in _TIME_PARTS}))
    if not rows:
        return "No time split: no training row recorded one."
    from matplotlib import colormaps

    cmap = colormaps["Set2"]
    fig, ax = _figure(8.0, 2.0 + 0.5 * len(rows))
    y = np.arange(len(rows))
    left = np.zeros(len(rows))
    for i, part in enumerate(_TIME_PARTS):
        values = np.array([r[1][part] for r in rows])
        ax.barh(y, values, left=left, color=cmap(i), label=_TIME_LABELS[part])
        left += values
    ax.set_yticks(y, [r[0] for r in rows])
    ax.invert_yaxis()
    ax.set(xlabel="seconds (mean over seeds)", title="Where training time went")
    fig.legend(fontsize="small", loc="outside lower center", ncols=3)
    fig.savefig(fig_dir / "time_split.png", dpi=110)
    table = ["| row | " + " | ".join(_TIME_LABELS[p] for p in _TIME_PARTS) + " |",
             "|:---|" + "---:|" * len(_TIME_PARTS)]
    table += [f"| {name} | " + " | ".join(f"{parts[p]:.1f} s" for p in _TIME_PARTS) + " |" for name, parts in rows]
    return "![time split](figures/time_split.png)\n\n" + "\n".join(table)


# ----------------------------------------------------------------------------- beside the paper


def _pct(x: float | None) -> str:
    return "–" if x is None or math.isnan(x) else f"{x:.1%}"


def _over(c: dict[str, Any]) -> str:
    seeds = f" × {c['seeds']} training seed{'s' if c['seeds'] != 1 else ''}" if c.get("seeds") else ""
    return f"{c['pairs']} test pairs{seeds}"


def _ci(c: dict[str, Any]) -> str:
    return f"{points(c['difference'])} points [95% CI {points(c['lo'])}, {points(c['hi'])}]"


def claim(c: dict[str, Any]) -> str:
    """The sentence a paired comparison (:func:`ace_hybrid.experiment.paired_difference`) allows, in the tables'
    wording (:func:`ace_hybrid.experiment.verdict`): which row survives longer only when
    :func:`~ace_hybrid.experiment.stated` (a primary comparison's Holm-adjusted p < 0.05, an exploratory one's
    interval excluding 0), else that the rows are not distinguishable at these sample sizes."""
    if stated(c) and b_longer(c):  # B survives longer: said with B first, B − A
        c = {**c, "a_name": c["b_name"], "b_name": c["a_name"], "a_value": c["b_value"], "b_value": c["a_value"],
             "difference": -c["difference"], "lo": -c["hi"], "hi": -c["lo"]}
    a, b = f"**{c['a_name']}**", f"**{c['b_name']}**"
    said = verdict(c, a, b)
    if said == "no data":
        return f"{a} vs {b} ({c['why']}): no data, no test episodes to compare (its rows did not run)."
    values = f"{_pct(c['a_value'])} vs {_pct(c['b_value'])}"
    holm = f", Holm-adjusted p {format_p(c.get('p_holm'))}" if c.get("primary") else ""
    if stated(c):
        longer, _, separated = said.partition(", ")
        tail = f" ({separated})" if separated else ""
        return f"{longer} than {b}{tail} ({c['why']}): {values}, {_ci(c)}{holm} over {_over(c)}."
    if c.get("primary"):
        return (f"{a} and {b} are not distinguishable at these sample sizes after Holm's correction ({c['why']}): "
                f"{values}, {_ci(c)}{holm} ({_over(c)}).")
    return (f"{a} and {b} are {said} at these sample sizes ({c['why']}): {values}, {_ci(c)}, an interval that "
            f"includes 0 ({_over(c)}).")


def short_claim(c: dict[str, Any]) -> str:
    """The verdict of :func:`claim` in a few words, for a table cell."""
    a, b = c["a_name"], c["b_name"]
    said = verdict(c, a, b)
    if said == "no data":
        return f"{a} vs {b}: {said}"
    return (f"{a} vs {b}: {said}, {_pct(c['a_value'])} vs {_pct(c['b_value'])}, "
            f"{points(c['difference'])} points [{points(c['lo'])}, {points(c['hi'])}]")


def claims(results: dict[str, Any]) -> str:
    """The report's statements about the rows: the primary comparisons (Holm), then the exploratory ones, one
    :func:`claim` each."""
    if not _has_intervals(results):
        return ("This results.json has no paired intervals (it predates them): no difference between rows is stated. "
                "Rerun the experiment command (finished cells are reused) to compute them.")
    comparisons = results.get("comparisons") or []
    if not comparisons:
        return "No comparisons: the table has no pair of rows it declares comparable (for example no greedy row)."
    primary = [c for c in comparisons if c.get("primary")]
    exploratory = [c for c in comparisons if not c.get("primary")]
    lines = ["### Primary comparisons (Holm)", ""]
    if primary:
        lines += [f"{sum(map(stated, primary))} of {len(primary)} primary comparisons separate (Holm-adjusted p < "
                  f"0.05, the family-wise error rate held at 5%); only those state a difference.", ""]
        lines += [f"- {claim(c)}" for c in primary]
    else:
        lines.append("None: the experiment file names no primary comparison, so nothing below is corrected for the "
                     "number of comparisons.")
    lines += ["", "### Exploratory (not corrected)", ""]
    if exploratory:
        lines += [f"{sum(map(stated, exploratory))} of {len(exploratory)} exploratory comparisons separate (the 95% "
                  f"interval of the paired difference in survival excludes 0); only those state a difference.", ""]
        lines += [f"- {claim(c)}" for c in exploratory]
    else:
        lines.append("None.")
    note = secondary_note(results.get("holm") or ["survival"], bool(results.get("score")))
    return "\n".join(lines) + "\n\n" + DIFFERENCES_NOTE + " " + note


def deployment_costs(results: dict[str, Any]) -> str:
    """Simulations per decision of each row beside the greedy expert's, and the check's share of the test time."""
    rows = [r for r in results.get("rows", []) if _mean(r, "all_simulations_per_decision") is not None]
    if not rows:
        return "No simulation counts in results.json."
    greedy = next((r for r in rows if r.get("kind") == "greedy"), None)
    head = ["| row | simulations / decision | share of the greedy expert's | with the safe rule's | share | "
            "test time / episode |", "|:---|---:|---:|---:|---:|---:|"]
    lines = []
    for r in rows:
        cells = []
        for key in ("simulations_per_decision", "all_simulations_per_decision"):
            x, g = _mean(r, key), _mean(greedy, key)
            cells += ["–" if x is None else f"{x:.1f}", f"{x / g:.2f}" if x is not None and g else "–"]
        lines.append(f"| {r['name']} | {' | '.join(cells)} | {_mean(r, 'test_seconds_per_episode') or 0:.2f} s |")
    note = f"{SIMULATIONS_NOTE} A share of at most 0.33 is at most a third of the greedy expert's."
    if greedy is None:
        note += " No greedy row: no share."
    return "\n".join(head + lines) + "\n\n" + note


VERDICT_NOTE = ("A verdict above names a row only when the claims above state a difference (a primary comparison's "
                "Holm-adjusted p < 0.05, an exploratory one's 95% interval excluding 0); otherwise it says not "
                "distinguishable.")


def paper_comparison(results: dict[str, Any]) -> str:
    """Our figures beside the paper's where they are comparable, and what differs."""
    rows = results.get("rows", [])
    ace = _first_row(results, "ace")
    lines = ["| | paper (ACE, arXiv 2506.02522) | ours |", "|:---|:---|:---|"]
    lo, hi = PAPER_REFINEMENTS
    if ace is not None and _mean(ace, "llm_calls") is not None:
        ours = (f"{ace['name']}: {_mean(ace, 'llm_calls'):,.0f} LLM calls, {_mean(ace, 'llm_accepted'):,.0f} "
                f"accepted refinements (mean over {ace['n']} seed{'s' if ace['n'] != 1 else ''})")
    else:
        ours = "no ACE row with LLM counts"
    lines.append(f"| LLM refinements needed | {lo}-{hi} | {ours} |")
    variants = [r for r in rows if ace is not None and r.get("train_id", r["id"]) == ace.get("train_id", ace["id"])
                and _mean(r, "test_seconds_per_episode") is not None]
    steps = _episode_steps(results, ace["id"]) if ace else None
    ours = "no ACE row" if not variants else "; ".join(
        f"{r['name']}: {_mean(r, 'test_seconds_per_episode'):.2f} s" for r in variants) + " per episode" + (
        f" (episodes of at most {steps} steps)" if steps else "")
    lines.append(f"| ACE test time per episode | {PAPER_TEST_SECONDS} s | {ours} |")
    against = [c for c in results.get("comparisons", []) if ace is not None
               and any(c["a"] == r["id"] for r in variants)]
    guided = [c for c in against if c["why"] == "against expert-guided RL"]
    greedy = [c for c in against if c["why"] == "against the greedy expert"]
    if guided:
        what, ours = "expert-guided RL", "; ".join(short_claim(c) for c in guided)
    elif greedy:
        what, ours = "the greedy expert (no expert-guided RL row)", "; ".join(short_claim(c) for c in greedy)
    else:
        what, ours = "no baseline", "not measured (needs an ACE row and an expert-guided RL or greedy row)"
    lines.append(f"| ACE vs the expert(-guided) baseline (ours: {what}) | ACE improves on it | {ours} |")
    for r in results.get("reward_vs") or []:
        ours = "no data" if r["relative"] is None or r["lo"] is None else (
            f"{r['relative']:+.1%} [{r['lo']:+.1%}, {r['hi']:+.1%}]")
        lines.append(f"| {r['a_name']} vs {r['b_name']}, episode reward (A − B) / abs(B) | "
                     f"{results.get('paper_note') or 'not quoted'} | {ours} |")
    notes = [VERDICT_NOTE]
    names = {r.get("train_id", r["id"]): r["name"] for r in _trainings(results)}
    untrained = sorted({names.get(c.get("train_id") or c.get("row"), c["name"]) for c in results.get("cells", [])
                        if (c.get("train") or {}).get("updates") == 0})
    if untrained:
        notes.append(f"**No SAC updates** in {', '.join(untrained)}: fewer decisions than train.learning_starts, so "
                     f"the tested policy is the initial one; raise train.total_env_steps before comparing rows.")
    notes.append("What differs from the paper:\n\n" + "\n".join(f"- {d}" for d in _differences(results)))
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes)


def _episode_steps(results: dict[str, Any], row_id: str) -> int | None:
    lengths = [e["max_steps"] for c in _cells_of(results, row_id) for e in (c.get("test") or {}).get("episodes", [])]
    return max(lengths) if lengths else None


def _differences(results: dict[str, Any]) -> list[str]:
    cells = results.get("cells", [])
    datasets = sorted({c["dataset"] for c in cells if c.get("dataset")})
    offline = any("offline" in d for d in datasets)
    out = []
    paper = "Test scenarios: the paper tests on held-out scenarios of the full L2RPN datasets. "
    if offline:
        out.append(paper + f"Here the environment is grid2op's offline copy ({'; '.join(datasets)}), which holds only "
                   "1-3 scenarios, so held-out means unseen (scenario, seed) pairs: the same time series with other "
                   "random draws (opponent attacks and maintenance where the environment has them).")
    elif not datasets:
        out.append(paper + "Which dataset was used is not recorded in these cells.")
    else:
        out.append(f"Test scenarios: full datasets ({'; '.join(datasets)}).")
    machine = results.get("machine") or {}
    cores = f"{machine['cpus']} CPU cores" if machine.get("cpus") else "CPU"
    where = {True: f"{cores} and a CUDA device", False: f"{cores} only, no GPU"}.get(machine.get("cuda"), cores)
    out.append(f"Hardware: {where}; times are not comparable with the paper's setup, and test time depends on the "
               f"episode length and on the top-k simulation check at deployment (the rows named '+ top-k check'; a row "
               f"without that suffix or '(policy alone)' deploys its run's env.deploy_topk).")
    backends = sorted({c.get("llm_backend") for c in cells if c.get("llm_backend") not in (None, "none")
                       and c.get("kind") in LLM_KINDS})
    if backends:
        names = ", ".join("SmolLM2-135M-Instruct (135M parameters)" if b == "smollm2" else b for b in backends)
        out.append(f"Language model: {names}, far smaller than the paper's LLM, so its unaided proposals are near "
                   f"chance; the simulator's validation decides which refinements count.")
    steps = [c["metrics"]["env_steps"] for c in cells if c.get("metrics", {}).get("env_steps")]
    if steps:
        out.append(f"Budget: {max(steps):,} environment steps per training run, a small fraction of the paper's "
                   f"training; refinement counts scale with the number of bad transitions seen.")
    out.append("Reward: our per-decision reward and r_bar scale (see ace-hybrid train --help-config, reward.* and "
               "ace.r_bar) differ from the paper's, so r_bar values are not interchangeable.")
    return out


# ----------------------------------------------------------------------------- the report


def write_report(out_dir: str | Path) -> Path:
    """Write ``out_dir/report.md`` and its figures from ``out_dir/results.json``; returns the report's path.

    Raises ``FileNotFoundError`` when ``out_dir`` or its ``results.json`` does not exist (nothing is written then);
    an unreadable results.json or missing metrics become sentences in the report.
    """
    out = Path(out_dir)
    if not out.is_dir():
        raise FileNotFoundError(f"no experiment directory at {out}")
    results_path = out / "results.json"
    if not results_path.is_file():
        raise FileNotFoundError(f"no results.json in {out}: nothing to report (run `ace-hybrid experiment --config "
                                f"FILE.toml --out {out}` first)")
    fig_dir = out / "figures"
    fig_dir.mkdir(exist_ok=True)
    for old in fig_dir.glob("*.png"):
        old.unlink()  # a figure whose data has gone must not linger beside the new report
    path = out / "report.md"
    try:
        results = json.loads(results_path.read_text())
    except json.JSONDecodeError as exc:
        path.write_text(f"# Report\n\n{results_path} is not readable JSON ({exc}); rerun the experiment.\n")
        return path
    parts = [f"# Report: {results.get('experiment', out.name)}", ""]
    if results.get("description"):
        parts += [results["description"], ""]
    made_by = f"`{results['command']}`" if results.get("command") else "an `ace-hybrid experiment` command not recorded"
    parts += [f"Made by {made_by}, then `ace-hybrid report {out}`.", ""]
    rows = results.get("rows") or []
    parts += ["## Results", ""]
    if rows:
        parts += ([results["setup"], ""] if results.get("setup") else []) + [to_markdown(rows), "",
                                                                              plot_test_survival(results, fig_dir), ""]
    else:
        parts += ["No rows in results.json.", ""]
    parts += ["## What the numbers say", "", claims(results), ""]
    if _has_intervals(results):
        parts += [f"## {differences_heading(results.get('comparisons') or [])}", "",
                  differences_markdown(results.get("comparisons") or []), "",
                  plot_differences(results, fig_dir), ""]
    if results.get("reward_vs"):
        parts += ["## Relative differences in episode reward", "",
                  relative_markdown(results["reward_vs"], results.get("paper_note", "")), ""]
    budget_curve = plot_budget_curve(results, fig_dir)
    if budget_curve is not None:
        parts += ["## Survival against the training budget", "", budget_curve, ""]
    parts += ["## Simulations at deployment", "", deployment_costs(results), "",
              "## Survival per held-out episode", "", plot_per_episode(results, fig_dir), "",
              "## Learning curves", "", plot_learning_curves(results, out, fig_dir), "",
              "## LLM calls and acceptance over training", "", plot_llm(results, out, fig_dir), "",
              _llm_totals(results), "",
              "## Time split of training", "", plot_time_split(results, fig_dir), "",
              "## Beside the paper", "", paper_comparison(results), ""]
    path.write_text("\n".join(p for p in parts if p is not None).rstrip() + "\n")
    return path


def _llm_totals(results: dict[str, Any]) -> str:
    """The LLM counters of each LLM training row (mean over seeds)."""
    keys = ("calls", "actor_calls", "critic_calls", "bad_transitions", "accepted", "rounds", "errors", "finetunes",
            "seconds")
    lines = []
    for row in _trainings(results):
        counts = [(c.get("train") or {}).get("llm") for c in _cells_of(results, row["id"])]
        counts = [c for c in counts if c]
        if not counts:
            continue
        means = [sum(float(c.get(k, 0)) for c in counts) / len(counts) for k in keys]
        lines.append(f"| {row['name']} | " + " | ".join(f"{m:,.0f}" for m in means) + " |")
    text = ("\n".join(["| row | " + " | ".join(keys) + " |", "|:---|" + "---:|" * len(keys), *lines]) if lines
            else "No LLM counters in the training summaries.")
    for row in results.get("rows", []):
        asked = [c["test_llm"] for c in _cells_of(results, row["id"]) if c.get("test_llm")]
        if asked:  # the LLM-only agent asks the model at test time instead
            calls = sum(a["calls"] for a in asked) / len(asked)
            seconds = sum(a["seconds"] for a in asked) / len(asked)
            text += (f"\n\n{row['name']} asks the model at test time: {calls:,.0f} LAC rankings over the test "
                     f"episodes ({seconds:,.1f} s in the model).")
    return text + _coevolution_table(results)


def _coevolution_table(results: dict[str, Any]) -> str:
    """Co-evolution rounds: pairs, loss, and the LLM's first-choice acceptance on the probe before and after."""
    lines = []
    for row in _trainings(results):
        for cell in _cells_of(results, row["id"]):
            for e in ((cell.get("train") or {}).get("llm") or {}).get("coevolution", []):
                before, after = e.get("probe_before", {}), e.get("probe_after", {})
                lines.append(f"| {row['name']} | {cell.get('seed')} | {e['round']} | {e['env_steps']:,} | {e['pairs']} | "
                             f"{e.get('loss_first', math.nan):.3f} -> {e.get('loss_last', math.nan):.3f} | "
                             f"{_pct(before.get('acceptance'))} -> {_pct(after.get('acceptance'))} "
                             f"(of {before.get('asked', 0)}) | {e['seconds']:.0f} s |")
    if not lines:
        return "\n\nNo co-evolution round ran (too few accepted refinements, or a backend that cannot fine-tune)."
    return ("\n\nCo-evolution rounds (LoRA on the best accepted refinements). The probe is a fixed set of bad "
            "transitions never trained on; its column is the share of the LLM's first choices the simulator accepted "
            "before -> after the round (the paper reports its LLM improving by about 11%):\n\n"
            "| row | seed | round | env steps | pairs | loss (first -> last step) | probe acceptance | time |\n"
            "|:---|---:|---:|---:|---:|:---|:---|---:|\n" + "\n".join(lines))
