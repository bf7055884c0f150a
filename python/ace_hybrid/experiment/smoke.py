"""A smoke version of an experiment file: every row and kind of the file, run end to end in minutes, not results.

``ace-hybrid experiment --config FILE --smoke`` (:func:`smoke_version`) keeps the file's rows, primary comparisons,
``reward_vs`` and ``score``, and shrinks what costs time: the first :data:`SMOKE_PAIRS` test and validation pairs,
the first seed (unless ``--seeds`` gives others), test episodes cut at :data:`SMOKE_TEST_STEPS` steps, and every
training at :data:`SMOKE_STEPS` environment steps (evaluations on ``env.eval_pairs`` cut at 50 steps, every 150
steps; the tutor's warm start 100 steps; ACE at most 2 LLM calls; a "tutor:N" action set selected from 20 danger
states). ACE loads its model but calls it only where the 300 steps reach a bad transition (the actor) or a finished
episode after ``ace.critic_start`` (the critic): on a quiet grid it may make none, so a smoke run shows that the row
runs, not that its LLM does. A file's ``budgets`` are scaled into those steps in proportion (20K, 40K, 100K -> 60,
120, 300) and keep their names ("ACE @ 20K" tests best-60.pt), so every name the file's ``primary`` and
``reward_vs`` use still resolves. Its results (``runs/<name>-smoke`` by default) say "smoke run" in their title.
"""

from __future__ import annotations

from dataclasses import replace

from ace_hybrid.experiment.spec import LLM_KINDS, ExperimentSpec, RowSpec

SMOKE_STEPS = 300
"""Environment steps of every training in a smoke run (the largest budget's, with ``budgets``)."""
SMOKE_PAIRS = 2
"""Test (and validation) pairs a smoke run plays: the file's first ones."""
SMOKE_TEST_STEPS = 50
"""Steps at which a smoke run cuts its test episodes."""
SMOKE_ENV = ["env.eval_max_steps=50", "env.action_set_states=20"]
"""Overrides of every row in a smoke run (baselines too: the tutor rows select their action set as the trainings
do)."""
SMOKE_TRAIN = ["train.eval_every=150", "train.checkpoint_every=150", "train.learning_starts=16"]
"""Overrides of every training row in a smoke run (besides its steps)."""


def smoke_budgets(budgets: tuple[int, ...]) -> dict[int, int]:
    """Each budget -> its smoke steps: in proportion to the largest, which becomes :data:`SMOKE_STEPS`; distinct
    and increasing, at least 1."""
    out: dict[int, int] = {}
    last = 0
    for budget in sorted(budgets):
        last = max(last + 1, round(budget * SMOKE_STEPS / max(budgets)))
        out[budget] = last
    return out


def _smoke_row(row: RowSpec) -> RowSpec:
    """One row with its smoke overrides after its own (so they win) and its budgets scaled (names kept)."""
    extra = list(SMOKE_ENV)
    if row.trains:
        extra += SMOKE_TRAIN + ([] if row.budgets else [f"train.total_env_steps={SMOKE_STEPS}"])
        if row.kind == "expert-guided":
            extra.append("train.tutor_steps=100")
    if row.kind in LLM_KINDS:
        extra.append("ace.max_llm_calls=2")
    scaled = smoke_budgets(row.budgets) if row.budgets else {}
    return replace(row, overrides=[*row.overrides, *extra], budget=scaled.get(row.budget) if row.budget else None,
                   budgets=tuple(scaled[b] for b in row.budgets))


def smoke_version(spec: ExperimentSpec) -> ExperimentSpec:
    """The smoke version of ``spec`` (see the module docstring), every cell's configuration built and validated."""
    small = replace(spec, rows=[_smoke_row(row) for row in spec.rows],
                    test_pairs=spec.test_pairs[:SMOKE_PAIRS], validation_pairs=spec.validation_pairs[:SMOKE_PAIRS],
                    seeds=spec.seeds if spec.seeds_replaced else spec.seeds[:1],
                    test_max_steps=min(spec.test_max_steps or SMOKE_TEST_STEPS, SMOKE_TEST_STEPS), smoke=True)
    for row, seed in small.cells():
        small.row_config(row, seed)
    return small
