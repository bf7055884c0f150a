"""The experiment's outputs: ``results.json`` (rows with every per-episode value, the bootstrap's settings, the
comparisons, every cell and the command that made them), ``results.csv`` (one line per row) and ``results.md`` (the
table and the paired differences); ``report.md`` with figures is :mod:`ace_hybrid.report`'s. The one wording of a
paired comparison's verdict (:func:`verdict`) is here too, for the tables and the report alike."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from ace_hybrid.experiment.metrics import (
    COMPARED,
    METRICS,
    OPTIONAL_COLUMNS,
    SECONDARY,
    SIMULATIONS_NOTE,
    TEST_METRICS,
    TRAIN_METRICS,
)
from ace_hybrid.experiment.spec import ExperimentSpec
from ace_hybrid.experiment.statistics import ALPHA, LEVEL, points
from ace_hybrid.files import atomic_write_json

DIFFERENCES_NOTE = ("A − B is computed within each bootstrap draw on the same test pairs and training seeds, so what "
                    "the rows share cancels. The primary comparisons, named in the experiment file before it ran, are "
                    "one family: their paired bootstrap p-values (2 min(P*(A − B <= 0), P*(A − B >= 0)) over the "
                    "same draws) are adjusted by Holm's step-down procedure, and one is stated, \"separated "
                    "(Holm)\", only when its adjusted p < 0.05, which holds the chance of any false statement among "
                    "them at 5%. The "
                    "exploratory comparisons are not corrected: each 95% interval is for its own comparison, and were "
                    "no two rows different, about one in twenty would still separate by chance.")
"""How to read the paired differences (results.md and report.md)."""
BOOTSTRAP_METHOD = ("percentile; test pairs and training seeds resampled independently with replacement (crossed "
                    "design), the same draws for every row; numpy default_rng(seed).multinomial, pairs first, then "
                    "seeds")
"""How the intervals were drawn, as results.json records it."""


def stated(c: dict[str, Any]) -> bool:
    """Whether a comparison allows stating a difference: a primary one when its Holm-adjusted p < :data:`ALPHA`, an
    exploratory one when its own 95% interval excludes 0."""
    if c.get("difference") is None or c.get("lo") is None:
        return False
    if c.get("primary"):
        return c.get("p_holm") is not None and c["p_holm"] < ALPHA
    return bool(c["separated"])


def b_longer(c: dict[str, Any]) -> bool:
    """Whether B survives longer in a comparison that :func:`stated` allows (by its interval, else its estimate)."""
    return c["hi"] < 0 if c["lo"] > 0 or c["hi"] < 0 else c["difference"] < 0


def verdict(c: dict[str, Any], a: str = "A", b: str = "B") -> str:
    """What a paired comparison (:func:`~ace_hybrid.experiment.statistics.paired_difference`) allows us to say, in
    the one wording of the tables and the report: "``a`` survives longer" or "``b`` survives longer" only when
    :func:`stated`, else "not distinguishable"; a primary comparison says so with " (Holm)" ("``a`` survives
    longer, separated (Holm)"); "no data" when there is no difference."""
    if c.get("difference") is None or c.get("lo") is None:
        return "no data"
    holm = c.get("primary", False)
    if not stated(c):
        return "not distinguishable (Holm)" if holm else "not distinguishable"
    said = f"{b} survives longer" if b_longer(c) else f"{a} survives longer"
    return f"{said}, separated (Holm)" if holm else said


def _fmt(fmt: str, value: float | None) -> str:
    return "–" if value is None else fmt.format(value)


def format_value(stat: dict[str, Any], fmt: str, with_interval: bool = True) -> str:
    """``value [lo, hi]`` for a test metric (the value alone without ``with_interval``), ``mean`` over seeds for a
    training cost, an en dash when there is nothing."""
    if "value" in stat:
        text = _fmt(fmt, stat["value"])
        if with_interval and stat.get("lo") is not None and stat["value"] is not None:
            text += f" [{fmt.format(stat['lo'])}, {fmt.format(stat['hi'])}]"
        return text
    return _fmt(fmt, stat.get("mean"))


def _size(row: dict[str, Any]) -> str:
    pairs = len(row["episodes"]["max_steps"][0]) if row["n"] and row["episodes"]["max_steps"] else 0
    return f"{pairs}" if row["seeds"] == [None] else f"{row['n']} × {pairs}"


def shown_metrics(rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The table's columns (:data:`~ace_hybrid.experiment.metrics.METRICS`), without an optional one that no row has
    a value in (the L2RPN score of an experiment without ``score = true``)."""
    def has(key: str) -> bool:
        return any((r["metrics"].get(key) or {}).get("value") is not None for r in rows)

    return [(key, title, fmt) for key, title, fmt in METRICS if key not in OPTIONAL_COLUMNS or has(key)]


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The table: one line per row; outcomes with their 95% bootstrap interval, costs as points."""
    shown = {key: show for key, _, _, _, _, show in TEST_METRICS}
    metrics = shown_metrics(rows)
    head = "| Agent | seeds × test pairs | " + " | ".join(
        f"{title} [95% CI]" if shown.get(key) else title for key, title, _ in metrics) + " |"
    rule = "|:---|---:|" + "---:|" * len(metrics)
    lines = [head, rule]
    for r in rows:
        cells = [format_value(r["metrics"][key], fmt, shown.get(key, False)) if key in r["metrics"] else "–"
                 for key, _, fmt in metrics]
        lines.append(f"| {r['name']} | {_size(r)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_p(p: float | None) -> str:
    """A p-value for a table: three decimals, "< 0.001" below that, an en dash for none."""
    if p is None:
        return "–"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _difference_cells(c: dict[str, Any]) -> str:
    diff = ("–" if c["difference"] is None or c["lo"] is None
            else f"{points(c['difference'])} [{points(c['lo'])}, {points(c['hi'])}]")
    return f"{_fmt('{:.1%}', c['a_value'])} | {_fmt('{:.1%}', c['b_value'])} | {diff}"


_LABELS = {"survival_rate": "survival", "episode_reward": "episode reward", "l2rpn_score": "L2RPN score"}
"""How the text names the compared metrics (:data:`~ace_hybrid.experiment.metrics.COMPARED`)."""


def secondary_cell(figure: dict[str, Any], key: str) -> str:
    """A secondary difference (episode reward, L2RPN score) for a table: ``A − B [lo, hi]`` in the metric's units,
    with its Holm-adjusted p when the file's ``holm`` put it in the family; an en dash without data."""
    if figure.get("difference") is None or figure.get("lo") is None:
        return "–"
    fmt = "{:+,.1f}" if key == "episode_reward" else "{:+.1f}"
    text = f"{fmt.format(figure['difference'])} [{fmt.format(figure['lo'])}, {fmt.format(figure['hi'])}]"
    return text + (f", p (Holm) {format_p(figure['p_holm'])}" if figure.get("p_holm") is not None else "")


def _secondary_shown(comparisons: list[dict[str, Any]]) -> list[str]:
    """The secondary metrics with a difference in some comparison (the score only with ``score = true``)."""
    return [key for key in SECONDARY if any((c.get("secondary") or {}).get(key, {}).get("lo") is not None
                                            for c in comparisons)]


def differences_markdown(comparisons: list[dict[str, Any]]) -> str:
    """The paired differences in survival, each with its :func:`verdict`, and beside them the secondary ones
    (episode reward, L2RPN score): the primary comparisons first, with their Holm-adjusted p, then the exploratory
    ones under "Exploratory (not corrected)"."""
    primary = [c for c in comparisons if c.get("primary")]
    exploratory = [c for c in comparisons if not c.get("primary")]
    extra = _secondary_shown(comparisons)
    titles = "".join(f" {_LABELS[k]} A − B [95% CI] |" for k in extra)

    def more(c: dict[str, Any]) -> str:
        return "".join(f" {secondary_cell((c.get('secondary') or {}).get(k, {}), k)} |" for k in extra)

    parts = ["### Primary comparisons (Holm)", ""]
    if primary:
        parts += ["| A | B | survival A | survival B | A − B, points [95% CI] | p | p (Holm) | verdict |" + titles,
                  "|:---|:---|---:|---:|---:|---:|---:|:---|" + "---:|" * len(extra)]
        parts += [f"| {c['a_name']} | {c['b_name']} | {_difference_cells(c)} | {format_p(c.get('p'))} | "
                  f"{format_p(c.get('p_holm'))} | {verdict(c)} |" + more(c) for c in primary]
    else:
        parts.append("None: the experiment file names no primary comparison (its `primary` list), so every "
                     "comparison is exploratory.")
    parts += ["", "### Exploratory (not corrected)", ""]
    if exploratory:
        parts += ["| A | B | why | survival A | survival B | A − B, points [95% CI] | verdict |" + titles,
                  "|:---|:---|:---|---:|---:|---:|:---|" + "---:|" * len(extra)]
        parts += [f"| {c['a_name']} | {c['b_name']} | {c['why']} | {_difference_cells(c)} | {verdict(c)} |" + more(c)
                  for c in exploratory]
    else:
        parts.append("None: the table has no other pair of rows it declares comparable.")
    return "\n".join(parts)


def _listed(words: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(words) if len(words) < 3 else ", ".join(words[:-1]) + " and " + words[-1]


def differences_heading(comparisons: list[dict[str, Any]]) -> str:
    """The title of the paired differences: survival, and the secondary metrics shown beside it."""
    extra = [_LABELS[k] for k in _secondary_shown(comparisons)]
    return "Paired differences in survival" + (f" ({_listed(extra)} beside it)" if extra else "")


def secondary_note(holm_metrics: list[str] | tuple[str, ...] = ("survival",), score: bool = False) -> str:
    """Which differences are Holm-corrected (results.md and report.md, below :data:`DIFFERENCES_NOTE`); ``score``:
    whether the tables have the L2RPN score (the file's ``score = true``)."""
    corrected = [_LABELS[COMPARED[m]] for m in holm_metrics]
    shown = [k for k in SECONDARY if score or k != "l2rpn_score"]
    others = [_LABELS[k] for k in shown if k not in {COMPARED[m] for m in holm_metrics}]
    text = ("Holm-corrected: the primary comparisons in " + _listed(corrected)
            + (" (one family of every primary comparison in each: the file's `holm`)" if len(corrected) > 1 else "")
            + ". The verdicts are on survival.")
    if others:
        text += (f" The {_listed(others)} columns are secondary and not corrected, primary rows included: each "
                 f"95% interval is for its own comparison.")
    return text + " Episode reward is the environment's own reward summed over an episode" + (
        "; the L2RPN score is grid2op's competition score of the environment for the episode (higher is better)."
        if score else ".")


def relative_markdown(relative: list[dict[str, Any]], paper_note: str = "") -> str:
    """The file's ``reward_vs``: (A − B) / |B| in episode reward with its 95% interval, and the paper's figure the file
    quotes (``paper_note``)."""
    lines = ["| A | B | episode reward A | episode reward B | (A − B) / abs(B) [95% CI] |",
             "|:---|:---|---:|---:|---:|"]
    for r in relative:
        rel = "–" if r["relative"] is None or r["lo"] is None else (
            f"{r['relative']:+.1%} [{r['lo']:+.1%}, {r['hi']:+.1%}]")
        lines.append(f"| {r['a_name']} | {r['b_name']} | {_fmt('{:,.1f}', r['a_value'])} | "
                     f"{_fmt('{:,.1f}', r['b_value'])} | {rel} |")
    note = ("Exploratory (not in the Holm family): the interval is the ratio's within each bootstrap draw, on the same "
            "draws as the table.")
    return "\n".join(lines) + "\n\n" + note + (f" The paper: {paper_note}" if paper_note else "")


def to_csv(rows: list[dict[str, Any]]) -> str:
    """results.csv: one line per row, every test metric with its interval and every training cost's mean and std."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["id", "name", "kind", "train_id", "deploy_topk", "budget", "n"]
                    + [f"{k}{s}" for k, *_ in TEST_METRICS for s in ("", "_lo", "_hi")]
                    + [f"{k}_{s}" for k, _, _ in TRAIN_METRICS for s in ("mean", "std")])
    for r in rows:
        values = []
        for key, *_ in TEST_METRICS:
            stat = r["metrics"].get(key, {})
            values += ["" if stat.get(s) is None else repr(stat[s]) for s in ("value", "lo", "hi")]
        for key, _, _ in TRAIN_METRICS:
            stat = r["metrics"].get(key, {})
            values += ["" if stat.get(s) is None else repr(stat[s]) for s in ("mean", "std")]
        writer.writerow([r["id"], r["name"], r["kind"], r["train_id"],
                         "" if r["deploy_topk"] is None else r["deploy_topk"],
                         "" if r.get("budget") is None else r["budget"], r["n"], *values])
    return buf.getvalue()


def setup_text(spec: ExperimentSpec, cells: list[dict[str, Any]], draws: int, seed: int) -> str:
    """The paragraph above the table: environment, test (or validation) episodes, seeds, what each column counts, the
    bootstrap."""
    envs = sorted({c["env"] for c in cells})
    pairs = ", ".join(f"({s}, {k})" for s, k in spec.pairs)
    cut = f", cut at {spec.test_max_steps} steps" if spec.test_max_steps else ""
    deployed = sorted({c["config"]["env"]["deploy_topk"] for c in cells if c["run_dir"]})
    selection = (f" best.pt is chosen on env.eval_pairs with the run's own check (env.deploy_topk = "
                 f"{', '.join(map(str, deployed))}), also for the rows that test it alone." if deployed else "")
    if any(c.get("budget") for c in cells):
        selection += (" A row '@ N' tests best.pt as it was after N environment steps of the same training (an "
                      "evaluation exactly then, best-<N>.pt), as if training had stopped there; its training costs "
                      "are those spent by then.")
    episodes = (f"{len(spec.pairs)} held-out test episodes (scenario, seed)" if spec.on == "test" else
                f"{len(spec.pairs)} validation episodes (scenario, seed), where configurations are chosen; the "
                f"{len(spec.test_pairs)} test pairs are not played here")
    resampled = ("whole scenarios (every pair of a drawn scenario together: its seeds share its chronics)"
                 if spec.cluster == "scenario" else "test pairs")
    return (f"Environment: {', '.join(envs)}. {episodes}: "
            f"{pairs}{cut}. Seeds of the training rows: {', '.join(map(str, spec.seeds))}; baselines are "
            f"deterministic on fixed episodes and run once.{selection} Survival is total steps survived / total steps "
            f"playable over a row's episodes (grid2op's aggregate, not the mean of per-episode rates); episode reward "
            f"is the environment's reward summed over an episode, averaged over the episodes."
            f"{_score_text(spec, cells)} {SIMULATIONS_NOTE} "
            f"Training costs are means over seeds; times are wall-clock seconds. [95% CI]: percentile bootstrap, "
            f"{draws:,} draws (numpy default_rng({seed})), resampling {resampled} and training seeds (crossed), the "
            f"same draws for every row; with {len(spec.seeds)} seed(s) the seed level is coarse.")


def _score_text(spec: ExperimentSpec, cells: list[dict[str, Any]]) -> str:
    """What the L2RPN score column is, and whether its replays played the test episodes again ("" without a score)."""
    if not spec.score:
        return ""
    episodes = [e for c in cells for e in (c.get("test") or {}).get("episodes", []) if e.get("score") is not None]
    notes = sorted({(c.get("test") or {}).get("score_note", "") for c in cells} - {""})
    differ = sum(e.get("score_steps_survived") != e["steps_survived"] for e in episodes)
    return (f" L2RPN score: {'; '.join(notes) or 'grid2op score class'}, averaged over the episodes; grid2op's runner "
            f"replays each episode to score it, and {differ} of the {len(episodes)} replays survived another number "
            f"of steps than the test episode.")


def results_name(spec: ExperimentSpec, extension: str) -> str:
    """``results.EXT`` on the test pairs, ``results-validation.EXT`` on the validation pairs."""
    return f"results{spec.suffix}.{extension}"


def write_results(spec: ExperimentSpec, out: Path, tables: dict[str, Any], machine: dict[str, Any]) -> None:
    """Write results.json, results.csv and results.md into ``out`` (``results-validation.*`` on the validation
    pairs: the two never mix).

    ``tables`` holds ``rows`` (:func:`~ace_hybrid.experiment.statistics.aggregate`), ``comparisons``
    (:func:`~ace_hybrid.experiment.statistics.compare_rows`), ``relative``
    (:func:`~ace_hybrid.experiment.statistics.relative_differences`), ``cells``, ``markdown`` (:func:`to_markdown`),
    ``setup`` (:func:`setup_text`), ``command`` and the bootstrap's ``draws`` and ``seed``.
    """
    results = {"experiment": spec.name, "description": spec.description, "experiment_file": str(spec.path),
               "command": tables["command"], "on": spec.on, "smoke": spec.smoke, "seeds": spec.seeds,
               "test_pairs": [list(p) for p in spec.test_pairs],
               "validation_pairs": [list(p) for p in spec.validation_pairs], "pairs": [list(p) for p in spec.pairs],
               "test_max_steps": spec.test_max_steps, "score": spec.score, "setup": tables["setup"],
               "machine": machine,
               "bootstrap": {"draws": tables["draws"], "seed": tables["seed"], "level": LEVEL,
                             "method": BOOTSTRAP_METHOD, "cluster": spec.cluster,
                             "survival": "total steps survived / total steps playable over a row's episodes"},
               "holm": list(spec.holm), "rows": tables["rows"], "comparisons": tables["comparisons"],
               "reward_vs": tables.get("relative", []), "paper_note": spec.paper_note, "cells": tables["cells"]}
    atomic_write_json(out / results_name(spec, "json"), results)
    (out / results_name(spec, "csv")).write_text(to_csv(tables["rows"]))
    on = "" if spec.on == "test" else f" (on the {spec.on} pairs)"
    smoke = " (smoke run: a few hundred steps, 2 pairs, 1 seed; not results)" if spec.smoke else ""
    title = f"# {spec.name}{on}{smoke}\n\n" + (f"{spec.description}\n\n" if spec.description else "")
    relative = ("\n\n## Relative differences in episode reward\n\n"
                + relative_markdown(tables["relative"], spec.paper_note)) if tables.get("relative") else ""
    (out / results_name(spec, "md")).write_text(
        title + f"Made by `{tables['command']}`.\n\n" + tables["setup"] + "\n\n" + tables["markdown"]
        + f"\n\n## {differences_heading(tables['comparisons'])}\n\n" + differences_markdown(tables["comparisons"])
        + "\n\n"
        + DIFFERENCES_NOTE + " " + secondary_note(spec.holm, spec.score) + relative + "\n")
