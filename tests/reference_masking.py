"""A plain vectorised numpy version of Grid2Op's legality rules, action by action: the reference the C++ masker
(:class:`ace_hybrid.masking.LegalityMasker`) is tested against, and the numpy baseline of the peer benchmark.

It shares no code with the C++ core beyond reading the same :class:`~ace_hybrid.masking.ActionFootprint`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ace_hybrid.masking import ActionFootprint, RuleParameters

#: The rules when none are given (those of :class:`~ace_hybrid.masking.LegalityMasker`'s keyword defaults).
DEFAULT_RULES = RuleParameters(max_sub_changed=1, max_line_status_changed=1, sub_area=None, line_area=None,
                               check_limits=True, check_cooldowns=True)


class NumpyLegalityMasker:
    """The rules of :class:`~ace_hybrid.masking.LegalityMasker`, in numpy (no grouping of actions).

    Parameters
    ----------
    footprint
        An :class:`ActionFootprint`, or an object with ``.footprint()`` (a bus-assignment space, a catalog).
    **rules
        Fields of :class:`~ace_hybrid.masking.RuleParameters` (keywords of ``LegalityMasker``); the rest default
        to :data:`DEFAULT_RULES`.
    """

    def __init__(self, footprint: Any, **rules: Any) -> None:
        fp = footprint if isinstance(footprint, ActionFootprint) else footprint.footprint()
        rule = DEFAULT_RULES._replace(**rules)
        n, n_sub, n_line = int(fp.n_actions), int(fp.n_sub), int(fp.n_line)
        self.n_actions, self.n_sub, self.n_line = n, n_sub, n_line
        self.max_sub, self.max_line = int(rule.max_sub_changed), int(rule.max_line_status_changed)
        self.check_limits, self.check_cooldowns = bool(rule.check_limits), bool(rule.check_cooldowns)
        self.sub_area = np.zeros(n_sub, np.int64) if rule.sub_area is None else np.asarray(rule.sub_area, np.int64)
        self.line_area = np.zeros(n_line, np.int64) if rule.line_area is None else np.asarray(rule.line_area, np.int64)
        self.n_area = int(max(self.sub_area.max(initial=0), self.line_area.max(initial=0))) + 1
        # substation entries and the line ends they set
        self.entry_action = np.repeat(np.arange(n), np.diff(fp.sub_ptr))
        self.entry_sub = fp.sub_idx.astype(np.int64)
        self.entry_other = fp.sub_sets_other.astype(bool)
        self.end_entry = np.repeat(np.arange(len(self.entry_sub)), np.diff(fp.sub_line_ptr))
        end_line = fp.sub_line_idx.astype(np.int64)
        self.end_line = end_line
        # distinct (action, line) pairs that may be impacted; "always" = the status is set
        status_action = np.repeat(np.arange(n), np.diff(fp.status_ptr))
        keys = np.concatenate([self.entry_action[self.end_entry] * n_line + end_line,
                               status_action * n_line + fp.status_idx.astype(np.int64)])
        always = np.concatenate([np.zeros(len(end_line), bool), np.ones(len(status_action), bool)])
        uniq, inverse = np.unique(keys, return_inverse=True)
        pair_always = np.zeros(len(uniq), bool)
        np.logical_or.at(pair_always, inverse, always)
        self.pair_action = uniq // max(n_line, 1)
        self.pair_line = uniq % max(n_line, 1)
        self.pair_always = pair_always

    def mask(
        self, line_status: npt.ArrayLike, cooldown_line: npt.ArrayLike, cooldown_sub: npt.ArrayLike
    ) -> npt.NDArray[np.bool_]:
        """Legal mask (n_actions,) bool for one observation (same inputs as ``LegalityMasker.mask``)."""
        status = np.asarray(line_status).astype(bool)
        cdl = np.asarray(cooldown_line)
        cds = np.asarray(cooldown_sub)
        n, na = self.n_actions, self.n_area
        legal = np.ones(n, bool)
        line_hit = self.pair_always | ~status[self.pair_line]
        sub_hit = self.entry_other | (
            np.bincount(self.end_entry, weights=status[self.end_line], minlength=len(self.entry_sub)) > 0
        )
        if self.check_cooldowns:
            legal &= np.bincount(self.pair_action[line_hit & (cdl[self.pair_line] > 0)], minlength=n) == 0
            legal &= np.bincount(self.entry_action[sub_hit & (cds[self.entry_sub] > 0)], minlength=n) == 0
        if self.check_limits:
            lines = np.bincount(self.pair_action[line_hit] * na + self.line_area[self.pair_line[line_hit]],
                                minlength=n * na).reshape(n, na)
            subs = np.bincount(self.entry_action[sub_hit] * na + self.sub_area[self.entry_sub[sub_hit]],
                               minlength=n * na).reshape(n, na)
            legal &= (lines <= self.max_line).all(axis=1) & (subs <= self.max_sub).all(axis=1)
        return legal

    def mask_batch(
        self, line_status: npt.ArrayLike, cooldown_line: npt.ArrayLike, cooldown_sub: npt.ArrayLike
    ) -> npt.NDArray[np.bool_]:
        """Legal masks (B, n_actions) bool for B observations, one :meth:`mask` per row."""
        ls, cl, cs = np.asarray(line_status), np.asarray(cooldown_line), np.asarray(cooldown_sub)
        return np.stack([self.mask(ls[b], cl[b], cs[b]) for b in range(ls.shape[0])]).reshape(
            ls.shape[0], self.n_actions)
