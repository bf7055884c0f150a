"""``refinements.jsonl``: one line per bad transition the LLM actor looked at in an ACE run.

A line is written when the refinement is committed by the loop's thread (:mod:`ace_hybrid.training.ace`), never by
the LLM worker, so the lines a checkpoint counts (``log_lines``) are exactly those of the refinements whose results
it holds. On resume the lines written after that checkpoint are dropped (:meth:`RefinementLog.keep`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ace_hybrid.llm.actor import Refinement

__all__ = ["REFINEMENTS_LOG", "RefinementLog", "refinement_line"]

REFINEMENTS_LOG = "refinements.jsonl"
"""One line per transition the LLM actor looked at (ACE runs)."""


def refinement_line(env_steps: int, item: Any, ref: Refinement, ranker: str,
                    describe: Callable[[int], str]) -> dict[str, Any]:
    """The log line of one refinement: the bad transition (``item``: episode, decision, reward, max_rho, blackout,
    action), what the actor did (rounds, calls, candidate positions, error) and, when accepted, its action, r_hat and
    improvement r_hat - r."""
    line = {"env_steps": env_steps, "episode": item.episode, "decision": item.decision,
            "reward": item.reward, "max_rho": item.max_rho, "blackout": item.blackout, "ranker": ranker,
            "rl_action": describe(item.action), "rounds": ref.rounds, "calls": ref.calls, "positions": ref.positions,
            "accepted": ref.accepted, "error": ref.error,
            "baseline_reward": ref.baseline.reward if ref.baseline is not None else None}
    if ref.accepted:
        line.update(action=describe(ref.action), r_hat=ref.rollout.reward, improvement=ref.improvement)
    return line


class RefinementLog:
    """Appends lines to ``run_dir/refinements.jsonl`` and counts them (:attr:`lines`, saved with checkpoints)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / REFINEMENTS_LOG
        self.lines = 0
        """Lines this run has committed to the log."""

    def write(self, line: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")
        self.lines += 1

    def keep(self, n: int) -> None:
        """Keep the first ``n`` lines (the ones a checkpoint counted); the rest were written after it."""
        self.lines = n
        if not self.path.exists():
            return
        lines = self.path.read_text().splitlines(keepends=True)
        if len(lines) > n:
            self.path.write_text("".join(lines[:n]))
