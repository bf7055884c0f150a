"""How long an experiment has left: each cell's expected cost, calibrated on the cells that have finished.

Cells differ by orders of magnitude -- a do-nothing baseline plays its test episodes in seconds, an ACE training asks
a language model for most of an hour -- so a mean over the finished cells (a progress bar's own estimate) is off by as
much after the first one: a ``make run`` read 9 h 13 min left after its first cell and ended 4 minutes later.

Here each cell has a prior cost in seconds of one core,

    prior = train_steps * TRAIN_SECONDS[class] + test_steps * TEST_SECONDS[class]

where ``train_steps`` is ``train.total_env_steps`` for the cell that trains its run (the first of its group, unless
an earlier cell already trained it) and 0 for one that reuses it, and ``test_steps`` is the test pairs times
``test_max_steps`` (or :data:`FULL_EPISODE_STEPS` when episodes run to their end). The cost classes
(:func:`cost_class`) are calibrated online: a finished cell's measured seconds (``finished - started`` in its record)
over its prior scale every prior of its class and kind of work (training or testing only); a class not seen yet
takes the ratio over all the finished cells. The work left is divided among the workers (``--jobs``), but never
estimated below the longest group left (a group runs in one worker). Before any cell has finished there is no
estimate.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ace_hybrid.config import Config
from ace_hybrid.experiment.cells import cell_id, run_dir_of, training_fingerprint
from ace_hybrid.experiment.spec import LLM_KINDS, ExperimentSpec, RowSpec

__all__ = ["BAR_FORMAT", "FULL_EPISODE_STEPS", "TEST_SECONDS", "TRAIN_SECONDS", "RemainingTime", "cost_class", "format_duration"]

FULL_EPISODE_STEPS = 8064
"""Test steps assumed for an episode that runs to its end (``test_max_steps = 0``): an L2RPN scenario, four weeks of
five-minute steps (episodes that end early are what the calibration absorbs)."""

TRAIN_SECONDS = {"training": 0.01, "llm-training": 0.03}
"""Prior seconds per training step: SAC (and MaskablePPO) about 30 s per 3,000 steps of make run's configuration;
ACE with the embedded model about three times that, its LLM calls included."""

TEST_SECONDS = {"baseline": 0.002, "simulating": 0.01, "llm-agent": 0.1, "training": 0.003, "llm-training": 0.003}
"""Prior seconds per test step: a fixed rule; an agent that simulates candidates at each decision (greedy, tutor); the
LLM-only agent, which asks the model at every decision; a trained policy (with or without its top-k check)."""

BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"
"""The experiment's tqdm bar without tqdm's own remaining time and rate (means over cells): the postfix holds
:meth:`RemainingTime.describe`'s."""

Cell = tuple[RowSpec, int | None, Config]
"""(row, seed, configuration), as in :mod:`~ace_hybrid.experiment.schedule`."""


def cost_class(row: RowSpec, cfg: Config) -> str:
    """The class a cell's cost is calibrated within: "llm-training" (ACE with a model), "training" (the other training
    rows), "llm-agent" (the LLM-only agent), "simulating" (greedy, tutor) or "baseline"."""
    uses_llm = row.kind in LLM_KINDS and cfg.llm.backend != "none"
    if row.trains:
        return "llm-training" if uses_llm else "training"
    if uses_llm:
        return "llm-agent"
    return "simulating" if row.kind in ("greedy", "tutor") else "baseline"


class RemainingTime:
    """The remaining time of the cells left, updated as they finish.

    Parameters
    ----------
    spec : ExperimentSpec
    groups : sequence of sequences of (row, seed, configuration)
        The cells left, in the groups they run in (:func:`~ace_hybrid.experiment.schedule.cell_groups`).
    jobs : int
        Groups run at once.
    trained : dict
        (run directory, training fingerprint) -> a finished cell that trained that run: its group trains nothing.
    """

    def __init__(self, spec: ExperimentSpec, groups: Sequence[Sequence[Cell]], jobs: int,
                 trained: dict[tuple[str, str], Any]) -> None:
        self.jobs = max(1, jobs)
        test_steps = len(spec.pairs) * (spec.test_max_steps or FULL_EPISODE_STEPS)
        self._left: dict[str, tuple[str, float, int]] = {}
        """Cell id -> (calibration key, prior seconds, group index), for the cells not finished yet."""
        for g, group in enumerate(groups):
            for k, (row, seed, cfg) in enumerate(group):
                cls = cost_class(row, cfg)
                trains = row.trains and k == 0 and (run_dir_of(row, seed), training_fingerprint(cfg, row.ppo)) \
                    not in trained
                prior = test_steps * TEST_SECONDS[cls]
                if trains:
                    prior += cfg.train.total_env_steps * TRAIN_SECONDS[cls]
                self._left[cell_id(row, seed)] = (f"{cls}:{'train' if trains else 'test'}", prior, g)
        self._seen: dict[str, list[float]] = {}
        """Calibration key -> [measured seconds, prior seconds] over the finished cells."""

    def finished(self, cell: dict[str, Any]) -> None:
        """Calibrate on a finished cell's record (its ``started`` and ``finished`` times)."""
        left = self._left.pop(cell["cell"], None)
        if left is None:
            return
        key, prior, _ = left
        seen = self._seen.setdefault(key, [0.0, 0.0])
        seen[0] += max(0.0, float(cell["finished"]) - float(cell["started"]))
        seen[1] += prior

    def seconds(self) -> float | None:
        """Expected seconds until the last cell finishes; None before any cell has finished (or when none is left:
        0.0)."""
        if not self._left:
            return 0.0
        if not self._seen:
            return None
        overall = sum(m for m, _ in self._seen.values()) / max(1e-9, sum(p for _, p in self._seen.values()))
        per_group: dict[int, float] = {}
        for key, prior, group in self._left.values():
            measured, priors = self._seen.get(key, (0.0, 0.0))
            scale = measured / priors if priors > 0 else overall
            per_group[group] = per_group.get(group, 0.0) + prior * scale
        return max(sum(per_group.values()) / self.jobs, max(per_group.values()))

    def describe(self, running: str = "") -> str:
        """The bar's postfix: ``running`` (the cell that runs now, if known) and "~1 h 05 min left, ends ~14:32" (once
        a cell has finished)."""
        left = self.seconds()
        if left is None:
            return running
        ends = time.strftime("%H:%M", time.localtime(time.time() + left))
        return ", ".join(part for part in (running, f"~{format_duration(left)} left, ends ~{ends}") if part)


def format_duration(seconds: float) -> str:
    """"45 s", "12 min", "1 h 05 min", "2 d 3 h"."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"
