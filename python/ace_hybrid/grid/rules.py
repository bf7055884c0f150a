"""The activation rule every agent runs under: the learned or baseline policy decides only in danger.

When max rho >= ``threshold`` (0.9 by default) the agent's policy chooses. Otherwise a fixed rule acts
(the "revert bus" heuristic of RL2Grid and many L2RPN agents):

1. reconnect a disconnected line that is out of cooldown, if simulating it keeps the grid safe;
2. else revert a substation that is not in its reference topology (every element on bus 1), if legal and safe;
3. else do nothing.

Baselines run under the same rule, so comparisons are fair.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np


def in_danger(obs: Any, threshold: float) -> bool:
    """True when some line's loading is at or above ``threshold``."""
    return bool(np.max(obs.rho) >= threshold)


@dataclass
class SafeRule:
    """The fixed rule for safe states.

    Parameters
    ----------
    action_space
        The environment's action space (builds grid2op actions).
    threshold
        Danger threshold on max rho; also the level a simulated candidate must stay below to be applied.
    revert_topology
        Whether step 2 (revert a changed substation) is on.
    """

    action_space: Any
    threshold: float = 0.9
    revert_topology: bool = True
    simulations: int = 0
    """Number of obs.simulate calls made so far (the evaluation reports it)."""
    simulate_seconds: float = 0.0
    """Time spent in those obs.simulate calls (power flows: environment time, for the throughput benchmark)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 5.0:
            raise ValueError(f"threshold = {self.threshold} out of range [0, 5]")
        cls = type(self.action_space)
        self._sub_start = np.concatenate(([0], np.cumsum(cls.sub_info)))
        self._do_nothing = self.action_space({})  # built once: this rule runs at every safe step

    def __call__(self, obs: Any) -> Any:
        """The rule's action for ``obs`` (do nothing when no candidate is legal and safe)."""
        for candidate in self._candidates(obs):
            if self._is_safe(obs, candidate):
                return candidate
        return self._do_nothing

    def _candidates(self, obs: Any) -> Any:
        status = np.asarray(obs.line_status, dtype=bool)
        cooldown = np.asarray(obs.time_before_cooldown_line)
        for line in np.flatnonzero(~status & (cooldown == 0)):
            yield self.action_space({"set_line_status": [(int(line), 1)]})
        if not self.revert_topology:
            return
        topo = np.asarray(obs.topo_vect)
        changed = np.maximum.reduceat(topo, self._sub_start[:-1]) >= 2
        for sub in np.flatnonzero(changed & (np.asarray(obs.time_before_cooldown_sub) == 0)):
            block = topo[self._sub_start[sub] : self._sub_start[sub + 1]]
            # Only connected elements are set: setting a bus on a disconnected line would reconnect it.
            target = np.where(block > 0, 1, 0).astype(np.int64)
            yield self.action_space({"set_bus": {"substations_id": [(int(sub), target)]}})

    def _is_safe(self, obs: Any, action: Any) -> bool:
        self.simulations += 1
        started = time.perf_counter()
        sim_obs, _, done, info = obs.simulate(action)
        self.simulate_seconds += time.perf_counter() - started
        if done or info.get("is_illegal", False) or info.get("exception"):
            return False
        return bool(np.max(sim_obs.rho) < self.threshold)
