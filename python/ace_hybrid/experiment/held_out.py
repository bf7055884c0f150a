"""The held-out checks of an experiment file: test and validation pairs apart from each other, from the pairs that
choose best.pt, from training episodes, and (on a generated set) each on weeks of its own split."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ace_hybrid.config import Config

__all__ = ["check_disjoint", "check_held_out", "pair_list"]


def pair_list(pairs: Sequence[tuple[int, int]]) -> str:
    return ", ".join(f"[{s}, {k}]" for s, k in pairs)


def check_disjoint(noun: str, pairs: Sequence[tuple[int, int]], other_name: str,
                    other: Sequence[tuple[int, int]], why: str) -> None:
    """ValueError naming every pair of ``pairs`` that is also in ``other``."""
    shared = [p for p in pairs if p in set(other)]
    if shared:
        verb = "is" if len(shared) == 1 else "are"
        raise ValueError(f"{noun}{'s' if len(shared) > 1 else ''} {pair_list(shared)} {verb} also in {other_name} "
                         f"({why}): the sets must be disjoint")


def check_held_out(test_pairs: Sequence[tuple[int, int]], validation_pairs: Sequence[tuple[int, int]], name: str,
                   trains: bool, cfg: Config, on: str = "test") -> None:
    """Test and validation pairs must be neither checkpoint-selection pairs nor (possibly) training episodes of row
    ``name`` (configured ``cfg``; ``trains``: a training row); on a generated set, each takes weeks of its own split
    (test pairs test weeks; validation and checkpoint-selection pairs validation weeks; training episodes training
    weeks). Played ``on`` its validation pairs, an experiment's test weeks need not be generated yet."""
    selection = [(int(s), int(k)) for s, k in cfg.env.eval_pairs]
    if cfg.env.data:
        from ace_hybrid.data.splits import check_split_use

        check_split_use(cfg.env.data, [
            ("test_pairs", "test", [s for s, _ in test_pairs]),
            ("validation_pairs", "validation", [s for s, _ in validation_pairs]),
            (f"env.eval_pairs of row {name!r}", "validation", [s for s, _ in selection]),
            *([(f"env.train_scenarios of row {name!r}", "train", list(cfg.env.train_scenarios))] if trains else []),
            *_junior_weeks(name, cfg)], unplayed=("test_pairs",) if on == "validation" else ())
    for noun, pairs in (("test pair", test_pairs), ("validation pair", validation_pairs)):
        check_disjoint(noun, pairs, "env.eval_pairs", selection, f"row {name!r}: they choose best.pt")
        if trains:
            _check_not_trained_on(noun, pairs, name, cfg)


def _junior_weeks(name: str, cfg: Config) -> list[tuple[str, str, list[int]]]:
    """The split use of the weeks a row's junior (``train.init_policy``) was fitted on, when the file is there yet
    (a missing one fails the row's cells by name)."""
    path = Path(cfg.train.init_policy) if cfg.train.init_policy else None
    if path is None or not path.is_file():
        return []
    from ace_hybrid.training.checkpoint import read_torch_file
    from ace_hybrid.training.junior_file import checked_junior, is_junior, learnt_from

    state = read_torch_file(path)
    if not is_junior(state):  # a training checkpoint: its run's weeks are checked where it trains
        return []
    return [(f"the weeks train.init_policy = {path} of row {name!r} learnt from", "train",
             learnt_from(checked_junior(state, path)))]


def _check_not_trained_on(noun: str, pairs: Sequence[tuple[int, int]], name: str, cfg: Config) -> None:
    """Training episode k plays (train_scenarios[k % n], train_seed_start + k), at most total_env_steps of them."""
    scenarios = cfg.env.train_scenarios
    for scenario, seed in pairs:
        k = seed - cfg.env.train_seed_start
        if 0 <= k < cfg.train.total_env_steps and scenarios[k % len(scenarios)] == scenario:
            raise ValueError(f"{noun} [{scenario}, {seed}] may be training episode {k} of row {name!r} "
                             f"(env.train_seed_start = {cfg.env.train_seed_start}): pick other seeds")
