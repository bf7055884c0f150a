"""Text encoders: what the LLM reads about states (T_s), actions (T_a) and trajectories (T_tau).

Every encoder is deterministic (same input, same text) and bounded in length, so prompts stay within a known
token budget: roughly four characters a token for this kind of English-and-numbers text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

#: Rough characters per token for budgets (English with numbers, BPE tokenisers).
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class LineEndpoints:
    """The static facts about a grid the text encoders need: where each line starts and ends, and how long an
    overload may last. (Not :class:`ace_hybrid._core.GridLayout`, the element positions the enumeration reads.)"""

    n_sub: int
    line_or_sub: np.ndarray
    line_ex_sub: np.ndarray
    overflow_allowed: int

    @classmethod
    def from_env(cls, env: Any) -> "LineEndpoints":
        return cls(
            n_sub=int(env.n_sub),
            line_or_sub=np.asarray(env.line_or_to_subid, dtype=np.int64),
            line_ex_sub=np.asarray(env.line_ex_to_subid, dtype=np.int64),
            overflow_allowed=int(env.parameters.NB_TIMESTEP_OVERFLOW_ALLOWED),
        )

    def line_name(self, line: int) -> str:
        return f"line {line} (sub {self.line_or_sub[line]}-sub {self.line_ex_sub[line]})"


def describe_state(obs: Any, layout: LineEndpoints, *, max_lines: int = 5, max_chars: int = 700) -> str:
    """T_s: a short description of the grid's state.

    Lists the most loaded lines with rho in %, overloads and how long they have lasted, disconnected lines with
    cooldowns and maintenance, the substations at the ends of the troubled lines, and the time of day.
    The result is at most ``max_chars`` characters.
    """
    rho = np.asarray(obs.rho, dtype=np.float64)
    status = np.asarray(obs.line_status, dtype=bool)
    overflow = np.asarray(obs.timestep_overflow)
    cooldown = np.asarray(obs.time_before_cooldown_line)
    maintenance = np.asarray(obs.time_next_maintenance)
    # Most loaded first; ties broken by line id so the text is deterministic.
    order = np.lexsort((np.arange(rho.size), -rho))[:max_lines]
    parts = [f"Time {int(obs.hour_of_day):02d}:{int(obs.minute_of_hour):02d}."]
    loaded = []
    for line in order:
        if not status[line]:
            continue
        text = f"{layout.line_name(int(line))} at {100 * rho[line]:.0f}%"
        if overflow[line] > 0:
            text += f" (overloaded {int(overflow[line])}/{layout.overflow_allowed} steps)"
        loaded.append(text)
    parts.append("Most loaded: " + "; ".join(loaded) + "." if loaded else "No line is loaded.")
    down = np.flatnonzero(~status)
    if down.size:
        items = []
        for line in down:
            why = "in maintenance" if maintenance[line] == 0 else ""
            wait = f"cooldown {int(cooldown[line])} steps" if cooldown[line] > 0 else "can be reconnected"
            items.append(f"{layout.line_name(int(line))} {why + ', ' if why else ''}{wait}")
        parts.append("Disconnected: " + "; ".join(items) + ".")
    trouble = [int(x) for x in order if status[x] and rho[x] >= 0.9]
    if trouble:
        subs = sorted({int(layout.line_or_sub[x]) for x in trouble} | {int(layout.line_ex_sub[x]) for x in trouble})
        parts.append("Substations near the trouble: " + ", ".join(map(str, subs)) + ".")
    return _clip(" ".join(parts), max_chars)


@dataclass(frozen=True)
class TrajectoryStep:
    """One decision of a trajectory as T_tau reports it."""

    step: int
    action_text: str
    reward: float
    max_rho: float


def describe_trajectory(steps: Sequence[TrajectoryStep], *, max_tokens: int = 400, survived: bool | None = None) -> str:
    """T_tau: a summary of a trajectory that keeps its key steps within a token budget.

    Steps are ranked by how much they matter — large ``|reward|`` and large changes of max rho from the previous
    step — and the most important are kept (then shown in time order) until the budget is used.
    """
    if max_tokens < 16:
        raise ValueError(f"max_tokens = {max_tokens} out of range [16, inf)")
    if not steps:
        return "Empty trajectory."
    rewards = np.array([s.reward for s in steps], dtype=np.float64)
    rhos = np.array([s.max_rho for s in steps], dtype=np.float64)
    change = np.abs(np.diff(rhos, prepend=rhos[0]))
    score = np.abs(rewards) / (np.abs(rewards).max() + 1e-9) + change / (change.max() + 1e-9)
    ranked = np.lexsort((np.arange(len(steps)), -score))
    header = f"{len(steps)} decisions, total reward {rewards.sum():.2f}"
    if survived is not None:
        header += ", the grid survived" if survived else ", the grid collapsed at the end"
    header += ". Key steps (index: action -> reward, max rho):"
    budget = max_tokens * CHARS_PER_TOKEN - len(header) - 48  # room for the 'omitted' line
    lines: dict[int, str] = {}
    for i in ranked:
        s = steps[int(i)]
        line = f"\n[{int(i)}] step {s.step}: {s.action_text} -> {s.reward:+.2f}, {100 * s.max_rho:.0f}%"
        if len(line) > budget:
            break
        budget -= len(line)
        lines[int(i)] = line
    omitted = len(steps) - len(lines)
    tail = f"\n({omitted} less important steps omitted)" if omitted else ""
    return header + "".join(lines[i] for i in sorted(lines)) + tail


def _clip(text: str, max_chars: int) -> str:
    if max_chars < 16:
        raise ValueError(f"max_chars = {max_chars} out of range [16, inf)")
    return text if len(text) <= max_chars else text[: max_chars - 3].rstrip() + "..."
