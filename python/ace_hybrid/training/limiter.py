"""The learner's rate limiter with rollout workers: a fixed number of sampled transitions per inserted transition.

After Reverb's ``SampleToInsertRatio``: the learner samples ``train.samples_per_insert`` transitions (``sac.batch_size``
per update) per transition it stores, whatever the number of workers. When it falls behind by more than the
tolerance, it updates before it takes another batch, so the workers' batches wait (a full queue, or no new call on
Ray: the time each worker waits is reported as ``rate/blocked_s``); when it is ahead, it waits for batches instead of
sampling more. Between the two it takes a batch when one is ready and updates otherwise. Only the transitions stored
once the replay holds ``train.learning_starts`` count (no update is owed before).

Off (``train.samples_per_insert = 0``) and with ``train.workers = 0``, the learner makes ``updates_per_decision``
updates per stored decision, one batch after the other: the ratio is ``updates_per_decision x batch_size`` exactly.
"""

from __future__ import annotations

from ace_hybrid.config import Config

__all__ = ["SampleToInsertRatio"]


class SampleToInsertRatio:
    """Counts inserts and samples and says whether the learner owes samples or is behind (see the module docstring).

    ``tolerance``: how far behind the learner may be, as a fraction of the samples due so far (at least one update's
    worth), before the workers wait. The learner never samples ahead of the ratio.
    """

    def __init__(self, samples_per_insert: float, batch_size: int, tolerance: float) -> None:
        if samples_per_insert <= 0 or batch_size < 1 or not 0 <= tolerance <= 1:
            raise ValueError(f"samples_per_insert = {samples_per_insert} (> 0), batch_size = {batch_size} (>= 1), "
                             f"tolerance = {tolerance} (in [0, 1]): out of range")
        self.samples_per_insert, self.batch_size, self.tolerance = float(samples_per_insert), int(batch_size), tolerance
        self.inserts = 0
        """Transitions stored since updates could start."""
        self.samples = 0
        """Transitions sampled (``batch_size`` per update)."""

    @classmethod
    def of(cls, cfg: Config) -> SampleToInsertRatio | None:
        """The limiter of a run's configuration; None when it is off or without workers."""
        t = cfg.train
        if not t.workers or t.samples_per_insert <= 0:
            return None
        return cls(t.samples_per_insert, cfg.sac.batch_size, t.samples_per_insert_tolerance)

    def insert(self, n: int) -> None:
        """``n`` transitions were stored (count only those stored once updates can start)."""
        self.inserts += int(n)

    def sample(self, updates: int = 1) -> None:
        """``updates`` updates were made (``batch_size`` samples each)."""
        self.samples += int(updates) * self.batch_size

    def debt(self) -> float:
        """Samples due and not yet taken (negative: ahead)."""
        return self.inserts * self.samples_per_insert - self.samples

    def owed(self) -> bool:
        """One more update keeps the samples within the ratio."""
        return self.debt() >= self.batch_size

    def behind(self) -> bool:
        """The learner owes more than the tolerance: it updates before it takes another batch."""
        return self.debt() > max(self.batch_size, self.tolerance * self.inserts * self.samples_per_insert)

    def ratio(self) -> float | None:
        """Samples per insert so far (None before the first insert)."""
        return self.samples / self.inserts if self.inserts else None
