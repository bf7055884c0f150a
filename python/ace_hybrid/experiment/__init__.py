"""Experiments: agents x seeds, trained and tested on held-out episodes, tabulated with 95% bootstrap intervals.

One module per concern:

- :mod:`~ace_hybrid.experiment.spec`: the experiment file (TOML): its keys, its row kinds, ``deploy_topk``, and the
  validated configuration of every cell (:func:`load_experiment`);
- :mod:`~ace_hybrid.experiment.cells`: one cell, trained and tested, with the fingerprint that lets it be reused;
- :mod:`~ace_hybrid.experiment.schedule`: the cells left to run, ``--jobs`` worker processes and resuming
  (:func:`run_experiment`);
- :mod:`~ace_hybrid.experiment.metrics`: what is measured, per episode and per training;
- :mod:`~ace_hybrid.experiment.statistics`: bootstrap intervals over the crossed design, the declared paired
  differences and Holm's correction of the primary ones;
- :mod:`~ace_hybrid.experiment.tables`: results.json, results.csv and results.md, and the one wording of a verdict;
- :mod:`~ace_hybrid.experiment.smoke`: the smoke version of an experiment file (``--smoke``).

Outputs: ``results.json`` (rows with every per-episode value, the bootstrap's settings, the comparisons, every cell
and the command that made them), ``results.csv`` (one line per row), ``results.md`` (the table and the paired
differences) and ``report.md`` with figures (:mod:`ace_hybrid.report`).
"""

from __future__ import annotations

from ace_hybrid.experiment.cells import baseline_agent, cell_id, run_cell, train_cell, training_fingerprint
from ace_hybrid.experiment.metrics import SIMULATIONS_NOTE, TEST_METRICS, TRAIN_METRICS, episode_metrics
from ace_hybrid.experiment.schedule import cell_groups, longest_first, run_experiment
from ace_hybrid.experiment.spec import (
    BASELINE_KINDS,
    EACH_TRAINED,
    EACH_TRAINED_ALONE,
    LLM_KINDS,
    ROW_KINDS,
    TRAINING_KINDS,
    ExperimentSpec,
    Primary,
    RowSpec,
    load_experiment,
)
from ace_hybrid.experiment.statistics import (
    ALPHA,
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_SEED,
    LEVEL,
    Resample,
    aggregate,
    compare_rows,
    comparisons_to_make,
    holm,
    interval,
    p_value,
    paired_difference,
    points,
    relative_difference,
    relative_differences,
)
from ace_hybrid.experiment.smoke import smoke_version
from ace_hybrid.experiment.tables import (
    DIFFERENCES_NOTE,
    differences_markdown,
    format_p,
    stated,
    to_csv,
    to_markdown,
    verdict,
)

__all__ = [
    "ALPHA",
    "BASELINE_KINDS",
    "BOOTSTRAP_DRAWS",
    "BOOTSTRAP_SEED",
    "DIFFERENCES_NOTE",
    "EACH_TRAINED",
    "EACH_TRAINED_ALONE",
    "ExperimentSpec",
    "LEVEL",
    "LLM_KINDS",
    "Primary",
    "ROW_KINDS",
    "Resample",
    "RowSpec",
    "SIMULATIONS_NOTE",
    "TEST_METRICS",
    "TRAINING_KINDS",
    "TRAIN_METRICS",
    "aggregate",
    "baseline_agent",
    "cell_groups",
    "cell_id",
    "compare_rows",
    "comparisons_to_make",
    "differences_markdown",
    "episode_metrics",
    "format_p",
    "holm",
    "interval",
    "load_experiment",
    "longest_first",
    "p_value",
    "paired_difference",
    "points",
    "relative_difference",
    "relative_differences",
    "run_cell",
    "run_experiment",
    "smoke_version",
    "stated",
    "to_csv",
    "to_markdown",
    "train_cell",
    "training_fingerprint",
    "verdict",
]
