"""Legality masks over a whole action catalog, from Grid2Op's rules, in C++.

Grid2Op (``DefaultRules`` = ``LookParam`` + ``PreventDiscoStorageModif`` + ``PreventReconnection``, and
``RulesByArea``) judges an action from its *topological impact* (``BaseAction.get_topological_impact``):

- impacted lines: every line whose status the action sets (+1 on an already connected line counts), plus every
  *disconnected* line one of whose ends gets a bus (that reconnects it);
- impacted substations: those where the action sets a load, generator or storage unit, or an end of a
  *connected* line;
- legal iff at most ``MAX_LINE_STATUS_CHANGED`` impacted lines and ``MAX_SUB_CHANGED`` impacted substations
  (per area under ``RulesByArea``), and ``time_before_cooldown_line`` / ``_sub`` is 0 on each of them (these
  cooldowns also hold maintenance and opponent attacks).

:class:`LegalityMasker` applies these rules to every action of an :class:`ActionFootprint` at once (well under
0.1 ms per observation for the 66,810 bus assignments of l2rpn_wcci_2020). The tests hold a plain numpy version,
action by action, as its reference (``tests/reference_masking.py``).

Not covered: Grid2Op's step also rejects a ``set_line_status=+1`` whose previous buses are unknown
(``check_reconnection_valid``, outside the rules), and its ``RulesChecker`` calls every action legal while
``env.nb_time_step <= 0`` (never the case inside ``env.step``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from ace_hybrid import _core

__all__ = [
    "ActionFootprint",
    "LegalityMasker",
    "ObservationState",
    "RuleParameters",
    "observation_state",
    "rule_parameters",
]

ActionFootprint = _core.ActionFootprint


class ObservationState(NamedTuple):
    """The part of an observation legality depends on (one observation: 1-D arrays; a batch: 2-D)."""

    line_status: npt.NDArray[np.bool_]
    """(n_line,) bool, True = connected (``obs.line_status``)."""
    cooldown_line: npt.NDArray[np.int32]
    """(n_line,) int32 steps before a line's status may change (``obs.time_before_cooldown_line``)."""
    cooldown_sub: npt.NDArray[np.int32]
    """(n_sub,) int32 steps before a substation may change (``obs.time_before_cooldown_sub``)."""


class RuleParameters(NamedTuple):
    """The limits of Grid2Op's legality rules, as :class:`LegalityMasker` takes them."""

    max_sub_changed: int
    """``Parameters.MAX_SUB_CHANGED`` (per area under RulesByArea)."""
    max_line_status_changed: int
    """``Parameters.MAX_LINE_STATUS_CHANGED`` (per area under RulesByArea)."""
    sub_area: npt.NDArray[np.int32] | None
    """(n_sub,) area of each substation, or None for a single area."""
    line_area: npt.NDArray[np.int32] | None
    """(n_line,) area of each line (its origin's), or None for a single area."""
    check_limits: bool
    """Whether the counting rule applies (LookParam / RulesByArea)."""
    check_cooldowns: bool
    """Whether the cooldown rule applies (PreventReconnection)."""


def observation_state(obs: Any) -> ObservationState:
    """Read :class:`ObservationState` from a Grid2Op observation."""
    return ObservationState(
        np.asarray(obs.line_status, dtype=bool),
        np.asarray(obs.time_before_cooldown_line, dtype=np.int32),
        np.asarray(obs.time_before_cooldown_sub, dtype=np.int32),
    )


def rule_parameters(env: Any) -> RuleParameters:
    """The :class:`RuleParameters` of a Grid2Op environment: its parameters and its rules class.

    Supports ``DefaultRules``, ``LookParam``, ``PreventReconnection``, ``AlwaysLegal`` and ``RulesByArea``
    (``PreventDiscoStorageModif`` never rejects a topology or line-status action).

    Raises
    ------
    ValueError
        For any other rules class, or areas that do not partition the substations.
    """
    from grid2op.Rules import AlwaysLegal, DefaultRules, LookParam, PreventReconnection, RulesByArea

    params = env.parameters
    max_sub = int(params.MAX_SUB_CHANGED)
    max_line = int(params.MAX_LINE_STATUS_CHANGED)
    rule = env._game_rules.legal_action
    kind = type(rule)
    if kind is DefaultRules:
        return RuleParameters(max_sub, max_line, None, None, True, True)
    if kind is LookParam:
        return RuleParameters(max_sub, max_line, None, None, True, False)
    if kind is PreventReconnection:
        return RuleParameters(max_sub, max_line, None, None, False, True)
    if kind is AlwaysLegal:
        return RuleParameters(max_sub, max_line, None, None, False, False)
    if kind is RulesByArea:
        n_sub, n_line = int(type(env).n_sub), int(type(env).n_line)
        sub_area = np.full(n_sub, -1, dtype=np.int32)
        line_area = np.full(n_line, -1, dtype=np.int32)
        for k, key in enumerate(rule.substations_id_by_area):
            subs = np.asarray(rule.substations_id_by_area[key], dtype=np.int64)
            if (sub_area[subs] >= 0).any():
                raise ValueError(f"RulesByArea area {key!r} shares substations with another area")
            sub_area[subs] = k
            line_area[np.asarray(rule.lines_id_by_area[key], dtype=np.int64)] = k
        if (sub_area < 0).any() or (line_area < 0).any():
            raise ValueError("RulesByArea areas leave some substation or line outside every area")
        return RuleParameters(max_sub, max_line, sub_area, line_area, True, True)
    raise ValueError(f"unsupported Grid2Op rules class {kind.__name__}; supported: DefaultRules, LookParam, "
                     "PreventReconnection, AlwaysLegal, RulesByArea")


def _as_footprint(footprint: Any) -> _core.ActionFootprint:
    if isinstance(footprint, _core.ActionFootprint):
        return footprint
    if hasattr(footprint, "footprint"):  # BusAssignmentSpace and catalogs
        return footprint.footprint()
    raise TypeError(f"expected an ActionFootprint or an object with .footprint(), got {type(footprint).__name__}")


class LegalityMasker:
    """Grid2Op's legality verdict for every action of a catalog, per observation.

    Parameters
    ----------
    footprint
        An :class:`ActionFootprint` (or a :class:`~ace_hybrid.topology.BusAssignmentSpace`).
    max_sub_changed, max_line_status_changed
        Grid2Op's ``MAX_SUB_CHANGED`` / ``MAX_LINE_STATUS_CHANGED`` (>= 0).
    sub_area, line_area
        Area ids for ``RulesByArea`` (both or neither); limits then apply per area.
    check_limits, check_cooldowns
        Switch the counting / cooldown rule off (``PreventReconnection`` / ``LookParam`` alone).
    """

    def __init__(
        self,
        footprint: Any,
        *,
        max_sub_changed: int = 1,
        max_line_status_changed: int = 1,
        sub_area: npt.ArrayLike | None = None,
        line_area: npt.ArrayLike | None = None,
        check_limits: bool = True,
        check_cooldowns: bool = True,
    ) -> None:
        self._core = _core.LegalityMasker(
            _as_footprint(footprint), max_sub_changed=max_sub_changed, max_line_status_changed=max_line_status_changed,
            sub_area=sub_area, line_area=line_area, check_limits=check_limits, check_cooldowns=check_cooldowns)

    @classmethod
    def for_env(cls, env: Any, footprint: Any) -> LegalityMasker:
        """A masker with the rules of a Grid2Op environment (see :func:`rule_parameters`)."""
        return cls(footprint, **rule_parameters(env)._asdict())

    @property
    def core(self) -> _core.LegalityMasker:
        """The compiled masker."""
        return self._core

    @property
    def n_actions(self) -> int:
        """Number of actions masked."""
        return int(self._core.n_actions)

    def mask(
        self, line_status: npt.ArrayLike, cooldown_line: npt.ArrayLike, cooldown_sub: npt.ArrayLike
    ) -> npt.NDArray[np.bool_]:
        """Legal mask for one observation.

        Parameters
        ----------
        line_status
            (n_line,) bool (or 0/1 integers), True = connected.
        cooldown_line, cooldown_sub
            (n_line,) and (n_sub,) non-negative integers.

        Returns
        -------
        (n_actions,) bool, True = legal.
        """
        return self._core.mask(line_status, cooldown_line, cooldown_sub)

    def mask_batch(
        self, line_status: npt.ArrayLike, cooldown_line: npt.ArrayLike, cooldown_sub: npt.ArrayLike
    ) -> npt.NDArray[np.bool_]:
        """Legal masks for B observations: (B, n_line), (B, n_line), (B, n_sub) -> (B, n_actions) bool."""
        return self._core.mask_batch(line_status, cooldown_line, cooldown_sub)

    def from_observation(self, obs: Any) -> npt.NDArray[np.bool_]:
        """Legal mask (n_actions,) bool for the action to play after the Grid2Op observation ``obs``."""
        return self._core.mask(*observation_state(obs))

    def __repr__(self) -> str:
        return repr(self._core)

