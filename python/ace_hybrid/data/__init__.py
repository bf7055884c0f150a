"""Generated weeks: more data for the grids whose offline copies hold a few days.

``ace-hybrid data generate`` makes weeks of an environment with chronix2grid (RTE's generator, with which the L2RPN
2022-2023 data were made) into a writable set folder (:mod:`~ace_hybrid.data.sets`), reproducibly by seed
(:mod:`~ace_hybrid.data.weeks`), in parallel and resumably (:mod:`~ace_hybrid.data.generate`); ``ace-hybrid data
check`` checks each week against the offline copy (:mod:`~ace_hybrid.data.checks`) and splits the sound ones into
training, validation and test weeks (:mod:`~ace_hybrid.data.splits`). The environment layer opens a set by name or
path (:func:`ace_hybrid.grid.env.make_env`). Knows ``grid/``, never ``training/``.
"""

from __future__ import annotations

from ace_hybrid.data.sets import GeneratedSet, create_set, find_set
from ace_hybrid.data.splits import split_of
from ace_hybrid.data.weeks import WeekPlan, plan_weeks

__all__ = ["GeneratedSet", "WeekPlan", "create_set", "find_set", "plan_weeks", "split_of"]
