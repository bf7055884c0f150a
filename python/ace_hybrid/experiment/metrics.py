"""What an experiment measures: the per-episode values every cell records, the test metrics pooled from them and
the training costs, with the titles and formats of the table's columns."""

from __future__ import annotations

from typing import Any, Sequence

EPISODE_FIELDS: tuple[str, ...] = ("steps_survived", "max_steps", "cumulative_reward", "decisions", "simulations",
                                   "decision_simulations", "wall_time_s", "score", "score_steps_survived", "acted")
"""Per-episode values kept in every row of results.json (one seeds x test pairs matrix each; NaN where a cell made
by an older version lacks one, and for the L2RPN score and its replay's steps where the file has no ``score =
true``)."""

TEST_METRICS: tuple[tuple[str, str, str, str, str | None, bool], ...] = (
    ("survival_rate", "Survival rate", "{:.1%}", "steps_survived", "max_steps", True),
    ("episode_reward", "Episode reward", "{:.1f}", "cumulative_reward", None, True),
    ("l2rpn_score", "L2RPN score", "{:.1f}", "score", None, True),
    ("acting_share", "Decisions that act", "{:.0%}", "acted", "decisions", False),
    ("simulations_per_decision", "Simulations / decision", "{:.1f}", "decision_simulations", "decisions", False),
    ("all_simulations_per_decision", "With the safe rule's", "{:.1f}", "simulations", "decisions", False),
    ("test_seconds_per_episode", "Test time / episode (s)", "{:.2f}", "wall_time_s", None, False),
)
"""(key, column title, format, numerator, denominator, interval shown in the table) of the metrics measured on the
test episodes: the sum of the numerator over a row's episodes divided by the sum of the denominator (by the number
of episodes when None); "Decisions that act" is the share of danger states where the agent played something other
than do-nothing (what it chose, beside how well it did); the simulation columns are as :data:`SIMULATIONS_NOTE`
says. Episode reward is the environment's own reward (grid2op's, not the agents' training reward) summed over an
episode; the L2RPN score is grid2op's score class of the environment (:mod:`ace_hybrid.grid.scores`), per episode,
in experiments with ``score = true``. Every one has its interval in results.json; the table prints those of the
outcomes (the costs, simulations and seconds, vary little and print as points)."""
TEST_METRIC = {m[0]: m for m in TEST_METRICS}
""":data:`TEST_METRICS` by key."""
SIMULATIONS_NOTE = ("Simulations / decision counts the agent's own obs.simulate calls per danger state (the greedy "
                    "expert's budget, the top-k check's k + 1); 'with the safe rule's' adds those of the safe rule "
                    "every agent runs outside danger (reconnecting lines, reverting substations).")
"""What the two simulation columns count (results.md's setup and report.md's deployment costs)."""
TRAIN_METRICS: tuple[tuple[str, str, str], ...] = (
    ("env_steps", "RL env steps", "{:,.0f}"),
    ("llm_calls", "LLM calls", "{:,.0f}"),
    ("llm_accepted", "LLM accepted", "{:,.0f}"),
    ("train_seconds", "Training time (s)", "{:,.0f}"),
)
"""(key, column title, format) of the training costs: mean over seeds."""
COMPARED: dict[str, str] = {"survival": "survival_rate", "reward": "episode_reward", "score": "l2rpn_score"}
"""The metrics of the paired differences, by the names experiment files give them (``holm``): survival (the verdicts),
then episode reward and the L2RPN score, the secondary columns."""
SECONDARY: tuple[str, ...] = ("episode_reward", "l2rpn_score")
"""The secondary metrics of the paired differences (:data:`COMPARED` but survival)."""
OPTIONAL_COLUMNS: tuple[str, ...] = ("l2rpn_score", "acting_share")
"""Columns a table leaves out when no row has a value in them (the score, without ``score = true``; the acting share
of cells made before it was counted)."""
COLUMNS: tuple[str, ...] = ("survival_rate", "episode_reward", "l2rpn_score", "acting_share",
                            "simulations_per_decision", "all_simulations_per_decision", "env_steps", "llm_calls", "llm_accepted", "train_seconds",
                            "test_seconds_per_episode")
"""The table's metric columns, in order."""
METRICS: tuple[tuple[str, str, str], ...] = tuple(
    next((k, t, f) for k, t, f, *_ in (*TEST_METRICS, *TRAIN_METRICS) if k == key) for key in COLUMNS)
"""(key, column title, format) of the table's columns, in order."""


def episode_metrics(episodes: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """The test metrics (:data:`TEST_METRICS`) of a list of per-episode records, pooled as in the table."""
    out: dict[str, float | None] = {}
    for key, _, _, num, den, _ in TEST_METRICS:
        if any(e.get(num) is None for e in episodes):  # an agent that does not count it
            out[key] = None
            continue
        top = sum(float(e[num]) for e in episodes)
        bottom = sum(float(e[den]) for e in episodes) if den else float(len(episodes))
        out[key] = top / bottom if bottom else None
    return out
