"""Mixed prioritised replay for ACE (arXiv 2506.02522, Eq. 8), backed by the C++ core.

Two partitions: the RL partition D_RL holds the agent's own transitions; the *validated partition* (the paper's
D_LLM) holds transitions whose action was checked in a simulator before it was stored -- the LLM actor's accepted
refinements, and the decisions of the simulating tutor (``train.tutor_steps``) -- each with its validation flag I_v
and its improvement r_hat - r.

A batch of size B takes ``n_val = min(B - floor((1 - beta) B + 0.5), K)`` rows from the validated partition, where
``K`` is its number of valid items (``I_v = 1``), with probability proportional to ``I_v * exp((r_hat - r) /
tau)``, and the other ``B - n_val`` rows from the RL partition by proportional prioritised replay (Schaul et
al., 2016: probability proportional to ``priority ** alpha``; new transitions get the current maximum
priority). So validated transitions are replayed from the first one on, never more rows than there are items;
a partition with nothing sampleable gives the whole batch to the other. Each batch carries
importance-sampling weights ``(N q_i) ** -w`` normalised by their maximum over the batch, where
``q_i = (n_part / B) * weight_i / total_part`` is the probability that one draw of this batch picks item ``i``
and ``N = len(buffer)``.

Items are named by int64 handles ``(write position << 1) | partition`` (0 RL, 1 validated). A handle whose slot has
been overwritten since it was issued is stale: :meth:`MixedReplayBuffer.update_priorities` and
:meth:`MixedReplayBuffer.update_rewards` skip it and return how many handles they applied. So that every handle is
>= 0, each partition writes at most ``2**62`` positions: an add that would pass that raises ``OverflowError`` and
stores nothing, and :meth:`MixedReplayBuffer.load` refuses a file whose counters exceed it.

The buffer is safe to use from one actor thread (adding) and one learner thread (sampling, updating) at
the same time; batched calls release the GIL. See ``cpp/include/ace_hybrid/replay.hpp`` for the storage
layout.

Names. The C++ core and the replay file keep the validated partition's first name, "llm": ``_core.MixedReplay``'s
C++ methods ``add_llm``/``llm_size``/``llm_valid_size``, ``ReplayConfig::llm_capacity``, and the file's header field
``llm_capacity``/``llm_written`` and its ``llm.*`` columns (they appear in :meth:`MixedReplayBuffer.load`'s error
messages). Python sees ``add_validated``, ``add_validated_batch``, ``validated_size``, ``validated_valid_size``,
``validated_capacity`` and ``ReplayBatch.from_validated``. Files saved before the rename load unchanged.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ace_hybrid import _core

__all__ = ["MixedReplayBuffer", "ReplayBatch"]


class ReplayBatch(NamedTuple):
    """A batch of B transitions (rows of the RL partition first, then validated rows).

    Attributes
    ----------
    obs, next_obs : (B, D) float32
    action : (B,) int64
    reward : (B,) float32
        Current reward (after any LLM-critic shaping).
    done, truncated : (B,) bool
    weight : (B,) float32
        Importance-sampling weight, normalised by the batch maximum (1 for :meth:`MixedReplayBuffer.get`).
    index : (B,) int64
        Handles, for :meth:`MixedReplayBuffer.update_priorities` / :meth:`MixedReplayBuffer.update_rewards`.
    from_validated : (B,) bool
        True for rows drawn from the validated partition.
    original_reward : (B,) float32
        Reward as first stored, before any shaping.
    episode : (B,) int64
    decision : (B,) int64
        Index of the agent's decision within its episode (one transition per decision).
    improvement : (B,) float32
        r_hat - r of validated rows (0 for RL rows).
    valid : (B,) bool
        Validation flag I_v of validated rows (False for RL rows).
    """

    obs: npt.NDArray[np.float32]
    action: npt.NDArray[np.int64]
    reward: npt.NDArray[np.float32]
    next_obs: npt.NDArray[np.float32]
    done: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    weight: npt.NDArray[np.float32]
    index: npt.NDArray[np.int64]
    from_validated: npt.NDArray[np.bool_]
    original_reward: npt.NDArray[np.float32]
    episode: npt.NDArray[np.int64]
    decision: npt.NDArray[np.int64]
    improvement: npt.NDArray[np.float32]
    valid: npt.NDArray[np.bool_]


class MixedReplayBuffer(_core.MixedReplay):
    """RL + validated replay with prioritised and Eq. 8 sampling.

    Parameters
    ----------
    obs_dim : int
        Observation dimension D (>= 1).
    rl_capacity : int
        Observation slots of the RL partition (>= 3). Each observation is stored once, so episodes of length L
        hold about ``rl_capacity * L / (L + 1)`` transitions.
    validated_capacity : int
        Transitions of the validated partition (>= 1); they store their own next observations.
    alpha : float
        Priority exponent in [0, 1]; 0 samples live RL transitions uniformly. Default 0.6 (Schaul et al.).
    beta : float
        Nominal fraction of each batch drawn from the validated partition, in [0, 1]. Default 0.25.
    tau : float
        Temperature of Eq. 8, in [1e-6, 1e6]; the exponent is clipped to [-60, 60]. Default 1.0.
    seed : int
        Seed of the buffer's own generator (xoshiro256**), in [0, 2**64).
    num_actions : int or None
        The size of the action set, in [1, 2**63 - 1]: every add, and every file :meth:`load` reads into this
        buffer, must hold actions in ``[0, num_actions)`` (ValueError otherwise). None (default): any action >= 0.

    Notes
    -----
    ``add_rl``, ``add_rl_batch``, ``add_validated``, ``add_validated_batch``, ``update_priorities`` and
    ``update_rewards`` are the compiled methods themselves (no Python layer: they are on the hot path); see
    their docstrings. ``add_rl(obs, action, reward, next_obs, done, truncated, episode, decision) -> int``
    continues the stored episode when ``obs`` equals its stored next observation and ``decision`` (the index of
    the agent's decision within its episode) follows; episode and decision are stored as int32.
    """

    def __init__(
        self,
        obs_dim: int,
        rl_capacity: int,
        validated_capacity: int,
        *,
        alpha: float = 0.6,
        beta: float = 0.25,
        tau: float = 1.0,
        seed: int = 0,
        num_actions: int | None = None,
    ) -> None:
        super().__init__(obs_dim, rl_capacity, validated_capacity, alpha=alpha, beta=beta, tau=tau, seed=seed,
                         num_actions=num_actions)

    def sample(self, batch_size: int, is_exponent: float = 0.4) -> ReplayBatch:
        """Draw a batch.

        Parameters
        ----------
        batch_size : int
            B, in [1, 2**20].
        is_exponent : float
            Importance-sampling exponent w in [0, 1] (0 gives weights of 1).

        Returns
        -------
        ReplayBatch
            ``weight = (N q_i) ** -w / max_j (N q_j) ** -w`` over this batch. The validated partition supplies
            ``min(B - floor((1 - beta) B + 0.5), K)`` rows (``K``: its valid items), RL the rest; a partition
            with nothing sampleable gives the whole batch to the other, and ``q_i`` uses the split actually
            drawn. RL rows come first.

        Raises
        ------
        ValueError
            If nothing is sampleable or an argument is out of range.
        """
        return ReplayBatch._make(self._sample(batch_size, is_exponent))

    def get(self, index: npt.NDArray[np.int64]) -> ReplayBatch:
        """Copy the items named by ``index`` ((n,) int64 handles), with weight 1.

        Raises
        ------
        IndexError
            Naming the first handle that is stale, never issued, or not a transition.
        """
        return ReplayBatch._make(self._get(index))

    def rl_columns(self) -> dict[str, np.ndarray]:
        """Live RL transitions, oldest first, for grouping trajectories (the LLM value critic).

        Returns
        -------
        dict
            ``index``, ``episode``, ``decision``, ``action``: (n,) int64; ``reward``, ``original_reward``: (n,)
            float32; ``done``, ``truncated``: (n,) bool.
        """
        return self._rl_columns()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the buffer to ``path`` atomically (see :meth:`load`).

        The file (format version 3) holds a magic string, the format version, a byte-order tag, the
        configuration, the write pointers and the generator state, then the slots each partition has used
        (never more than it has written: ``4 D + 37`` bytes per RL slot and ``8 D + 37`` per validated slot,
        whatever the capacities) with their priorities and tree leaves, and a checksum. Sampling after
        :meth:`load` is bit-identical to sampling from this buffer. Raises OSError if it cannot be written.
        """
        super().save(os.fspath(path))

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, obs_dim: int | None = None, num_actions: int | None = None
    ) -> MixedReplayBuffer:
        """Read a buffer written by :meth:`save` (format version 3, or version 2 from earlier releases).

        The file's size is checked against its header and its checksum is verified (streaming it through a 1 MiB
        buffer) before anything proportional to the capacities it declares is allocated, so a damaged header costs
        no memory; then the buffer is allocated at those capacities (``nbytes`` of the result) and the file is read
        a second time.

        Parameters
        ----------
        path : str or os.PathLike
        obs_dim : int or None
            The observation size the caller needs; a file holding another is refused. None: any.
        num_actions : int or None
            The size of the caller's action set: a file holding an action outside ``[0, num_actions)`` is refused,
            and the buffer returned refuses such adds (see the class). None: any action >= 0.

        Raises
        ------
        ValueError
            Naming the file and the problem, for a truncated or corrupted file, a wrong magic string or an
            unreadable version, a header out of range (write counters above ``2**62`` included), contents that
            an add would have refused or that contradict each other (a non-finite observation, reward or
            improvement, a negative action, an episode or decision id out of ``[0, 2**31 - 1]``, unknown flag
            bits, a negative or non-finite priority, a sampling weight that does not match its priority or
            ``I_v``: the message names the column, the slot and the value, e.g. ``rl.obs[slot 2, 1] = nan is not
            finite``), an allocation at the declared capacities that fails (naming the column, the header field
            and the bytes), or a file that does not fit ``obs_dim`` / ``num_actions`` (naming both values).
        OSError
            If the file cannot be opened or read.
        """
        buf = cls(1, 3, 1, num_actions=num_actions)
        buf._load(os.fspath(path))
        if obs_dim is not None and buf.obs_dim != obs_dim:
            raise ValueError(f"replay file '{os.fspath(path)}' holds observations of size {buf.obs_dim}, not the "
                             f"obs_dim = {obs_dim} asked for")
        return buf

    def __repr__(self) -> str:
        return (
            f"MixedReplayBuffer(obs_dim={self.obs_dim}, rl_capacity={self.rl_capacity}, "
            f"validated_capacity={self.validated_capacity}, alpha={self.alpha}, beta={self.beta}, tau={self.tau}, "
            f"num_actions={self.num_actions}; "
            f"rl_size={self.rl_size}, validated_size={self.validated_size})"
        )
