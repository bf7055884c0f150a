"""Which weeks a generated set holds: week k's start date, name and seeds, each a function of (set seed, k) alone.

A set of N weeks is weeks 0..N-1; asking for more weeks later adds weeks N.. and never changes the first N, so a set
grows without regenerating anything. The start dates come from the environment's ``scenario_params.json`` (52
Mondays for l2rpn_idf_2023) in a low-discrepancy order (the golden-ratio sequence over the year): the first N weeks
of any N are spread over the seasons, and so is each split taken by week number (:mod:`ace_hybrid.data.splits`).
Past the dates of one year, week k reuses date k mod 52 with chronix2grid's scenario id k // 52 (new seeds, another
week of the same season).

Seeds are SHA-256 of ``"<seed>:<k>:<part>"``, not a numpy generator: the same on every machine and numpy version.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

__all__ = ["MAX_WEEKS", "WeekPlan", "date_order", "plan_weeks", "week_seeds"]

#: Weeks a set may hold: week names carry three digits.
MAX_WEEKS = 999
_SEED_PARTS = ("load", "renewables", "forecasts")


@dataclass(frozen=True)
class WeekPlan:
    """One week of a generated set, before or after it exists."""

    index: int
    """Week number k in the set: the scenario id experiments and ``ace-hybrid evaluate --episodes`` use."""
    start_date: str
    """Its first day (``YYYY-MM-DD``), one of the environment's ``scenario_params.json`` dates."""
    scen_id: int
    """chronix2grid's scenario id: k // (dates per year)."""
    seeds: tuple[int, int, int]
    """chronix2grid's load, renewable and forecast seeds."""

    @property
    def name(self) -> str:
        """The week's folder under ``chronics/``: ``<k:03d>_<start date>``, so folders sort by week number."""
        return f"{self.index:03d}_{self.start_date}"


def week_seeds(seed: int, index: int) -> tuple[int, int, int]:
    """chronix2grid's three seeds of week ``index`` in a set of seed ``seed``, each in [0, 2^32 - 1)."""
    out = []
    for part in _SEED_PARTS:
        digest = hashlib.sha256(f"{seed}:{index}:{part}".encode()).digest()
        out.append(int.from_bytes(digest[:8], "little") % (2**32 - 1))
    return out[0], out[1], out[2]


def date_order(dates: list[str]) -> list[int]:
    """Indices of ``dates`` in the order weeks take them: floor(frac(k / phi) * n), duplicates skipped, so every
    prefix is spread over the year (for 52 dates the first 4 fall in 4 different seasons)."""
    n = len(dates)
    if n == 0:
        raise ValueError("scenario_params.json lists no dates (all_dates is empty)")
    golden = (math.sqrt(5) - 1) / 2
    order: list[int] = []
    seen: set[int] = set()
    k = 0
    while len(order) < n:
        i = int(((k * golden) % 1.0) * n)
        if i not in seen:
            seen.add(i)
            order.append(i)
        k += 1
        if k > 100 * n:  # cannot happen for n >= 1 (the sequence is dense); a guard, not a path
            order.extend(j for j in range(n) if j not in seen)
            break
    return order


def plan_weeks(dates: list[str], seed: int, count: int) -> list[WeekPlan]:
    """Weeks 0..count-1 of the set of seed ``seed`` over the environment's start ``dates``.

    Raises ``ValueError`` naming the value and the range for a bad ``count`` or ``seed``.
    """
    if not 1 <= count <= MAX_WEEKS:
        raise ValueError(f"weeks = {count} out of range [1, {MAX_WEEKS}]")
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed = {seed} out of range [0, 2^32)")
    order = date_order(dates)
    per_year = len(dates)
    return [WeekPlan(k, dates[order[k % per_year]], k // per_year, week_seeds(seed, k)) for k in range(count)]
