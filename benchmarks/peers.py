"""Replay-buffer implementations behind one interface, for ``compare_peers.py`` and ``bench_replay.py``.

Every implementation is wrapped in a :class:`ReplayAdapter` subclass. An adapter

* says whether its library can be used here (:meth:`ReplayAdapter.unavailable_reason`),
* stores columnar :class:`Transitions` (``add_batch``) and sets priorities (``update``),
* hands the harness *prepared calls* ``(fn, [(args, kwargs), ...])``: everything a user of that
  library would already hold (arrays, ``Batch`` or ``TensorDict`` objects, index tensors) is built
  before the clock starts, so the timed region contains only calls into the library itself,
* reports how many bytes its storage holds and how that figure was obtained.

The harness (``compare_peers.py``) never touches a library directly, so adding a peer is a matter
of writing one adapter class and listing it in :data:`ADAPTERS`.

Data comes from :class:`EpisodeStream`: random float32 observations arranged in episodes of
about 200 steps whose ``next_obs`` at step t is ``obs`` at step t + 1 (what ace_hybrid exploits by
storing each observation once).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

#: One prepared call: positional arguments and keyword arguments.
Call = tuple[tuple[Any, ...], dict[str, Any]]
#: A callable and the prepared calls the harness cycles through.
Calls = tuple[Callable[..., Any], list[Call]]


# --------------------------------------------------------------------------------------------- data
@dataclasses.dataclass(frozen=True)
class Transitions:
    """``n`` transitions in columns.

    Attributes
    ----------
    obs, next_obs : ndarray, shape (n, D), float32
    action : ndarray, shape (n,), int64
    reward : ndarray, shape (n,), float32
    done : ndarray, shape (n,), bool
        The episode terminated at this step (no bootstrap).
    truncated : ndarray, shape (n,), bool
        The episode was cut at this step (time limit).
    episode, step : ndarray, shape (n,), int64
        Episode id and step within the episode.
    """

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_obs: np.ndarray
    done: np.ndarray
    truncated: np.ndarray
    episode: np.ndarray
    step: np.ndarray

    def __len__(self) -> int:
        return int(self.obs.shape[0])

    def slice(self, start: int, stop: int) -> Transitions:
        """Rows ``[start, stop)`` as views (C-contiguous, no copy)."""
        return Transitions(*(getattr(self, f.name)[start:stop] for f in dataclasses.fields(self)))

    def chunks(self, size: int) -> list[Transitions]:
        """Consecutive views of ``size`` rows (the last one may be shorter)."""
        return [self.slice(s, min(s + size, len(self))) for s in range(0, len(self), size)]


class EpisodeStream:
    """Seeded stream of transitions from episodes with consecutive observations.

    Episode lengths are drawn uniformly from [150, 250] (mean 200). Within an episode
    ``next_obs[t] == obs[t + 1]``; an episode ends terminated (``done``) with probability 0.8,
    truncated otherwise. Observations are uniform float32 in [0, 1).

    Parameters
    ----------
    obs_dim : int
        D, the observation width.
    seed : int
        Seed of the stream; two streams with the same arguments yield identical data.
    first_episode : int
        Id of the first episode (streams used side by side get disjoint ids).
    """

    def __init__(self, obs_dim: int, seed: int, first_episode: int = 0) -> None:
        self.obs_dim = int(obs_dim)
        self._rng = np.random.default_rng(seed)
        self._episode = int(first_episode) - 1
        self._step = 0
        self._left = 0
        self._cur = np.empty(self.obs_dim, np.float32)

    def _new_episode(self, max_len: int | None = None) -> None:
        self._episode += 1
        self._step = 0
        self._left = int(self._rng.integers(150, 251))
        if max_len is not None:
            self._left = min(self._left, max_len)
        self._cur = self._rng.random(self.obs_dim, dtype=np.float32)

    def take(self, n: int, *, whole_episodes: bool = False) -> Transitions:
        """The next ``n`` transitions of the stream.

        With ``whole_episodes`` the block starts a new episode and its last transition ends one
        (terminated or truncated), so the block can be replayed cyclically as a sequence of
        complete episodes.
        """
        d = self.obs_dim
        obs = np.empty((n, d), np.float32)
        nxt = np.empty((n, d), np.float32)
        action = self._rng.integers(0, 1000, n, dtype=np.int64)
        reward = self._rng.standard_normal(n, dtype=np.float32)
        done = np.zeros(n, bool)
        trunc = np.zeros(n, bool)
        episode = np.empty(n, np.int64)
        step = np.empty(n, np.int64)
        if whole_episodes:
            self._left = 0
        i = 0
        while i < n:
            if self._left == 0:
                self._new_episode(max_len=(n - i) if whole_episodes else None)
            seg = min(n - i, self._left)
            frames = self._rng.random((seg, d), dtype=np.float32)  # the next observations
            obs[i] = self._cur
            obs[i + 1 : i + seg] = frames[:-1]
            nxt[i : i + seg] = frames
            self._cur = frames[-1].copy()
            episode[i : i + seg] = self._episode
            step[i : i + seg] = np.arange(self._step, self._step + seg)
            self._step += seg
            self._left -= seg
            if self._left == 0:
                if self._rng.random() < 0.8:
                    done[i + seg - 1] = True
                else:
                    trunc[i + seg - 1] = True
            i += seg
        return Transitions(obs, action, reward, nxt, done, trunc, episode, step)


def row_calls(t: "Transitions", *, with_episode: bool) -> list:
    """One positional-argument call per transition: (obs, action, reward, next_obs, done, truncated[, episode, step])."""
    calls = []
    for i in range(len(t)):
        args = (t.obs[i], int(t.action[i]), float(t.reward[i]), t.next_obs[i], bool(t.done[i]), bool(t.truncated[i]))
        if with_episode:
            args += (int(t.episode[i]), int(t.step[i]))
        calls.append((args, {}))
    return calls


def priorities_for(n: int, rng: np.random.Generator) -> np.ndarray:
    """Positive float64 priorities, ``|N(0, 1)| + 0.01``, like absolute TD errors."""
    return np.abs(rng.standard_normal(n)) + 0.01


def rss_bytes() -> int:
    """Resident set size of this process, from /proc/self/statm (0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    return text if len(text) <= 160 else text[:157] + "..."


# ------------------------------------------------------------------------------------ interface
class ReplayAdapter:
    """One replay-buffer implementation behind the harness's interface.

    Parameters
    ----------
    obs_dim : int
        D.
    capacity : int
        Transitions the buffer holds.
    alpha : float
        Priority exponent (p ** alpha).
    is_exponent : float
        Importance-sampling exponent used when sampling.
    seed : int
        Seed for whatever randomness the library lets us seed.
    """

    #: Short name used in tables and on the command line.
    name: ClassVar[str] = ""
    #: Column title in tables.
    title: ClassVar[str] = ""
    #: False for uniform buffers: they have no priorities to update.
    prioritised: ClassVar[bool] = True
    #: Python modules the adapter needs; importing them is the availability probe.
    modules: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """None if the implementation can be used here, else a one-line reason."""
        for mod in cls.modules:
            try:
                importlib.import_module(mod)
            except Exception as exc:  # ImportError, or a broken binary raising something else
                return f"cannot import {mod}: {first_line(exc)}"
        return cls._probe()

    @classmethod
    def _probe(cls) -> str | None:
        """Extra check after the imports (e.g. build a tiny buffer)."""
        return None

    @classmethod
    def version(cls) -> str:
        """Version of the library, for the report."""
        if not cls.modules:
            return ""
        mod = importlib.import_module(cls.modules[0])
        return str(getattr(mod, "__version__", "") or _dist_version(cls.modules[0]))

    def __init__(self, obs_dim: int, capacity: int, *, alpha: float, is_exponent: float, seed: int) -> None:
        self.obs_dim = int(obs_dim)
        self.capacity = int(capacity)
        self.alpha = float(alpha)
        self.is_exponent = float(is_exponent)
        self.seed = int(seed)

    # -- filling (not timed)
    def add_batch(self, t: Transitions) -> Any:
        """Store ``t``; return the native indices of the stored rows (for :meth:`update`)."""
        raise NotImplementedError

    def update(self, index: Any, priority: np.ndarray) -> None:
        """Set the priorities of native ``index`` (from :meth:`add_batch` or a sample)."""
        raise NotImplementedError

    def native_priority(self, priority: np.ndarray) -> Any:
        """``priority`` (float64 numpy) in the form this library's users hold it."""
        return priority

    # -- prepared calls (timed)
    def single_add_calls(self, t: Transitions) -> Calls:
        """One call per transition of ``t``."""
        raise NotImplementedError

    def batch_add_calls(self, chunks: Sequence[Transitions]) -> Calls:
        """One call per chunk (each a batch of transitions)."""
        raise NotImplementedError

    def sample_calls(self, batch_size: int) -> Calls:
        """A call that draws one batch (observations, next observations, ... and IS weights)."""
        raise NotImplementedError

    def sampled_index(self, batch_size: int) -> Any:
        """Native indices of one fresh sample (valid arguments for :meth:`update`)."""
        raise NotImplementedError

    def update_calls(self, index: Any, priority: np.ndarray) -> Calls:
        """A call that sets the priorities of ``index`` (native) to ``priority``."""
        raise NotImplementedError

    def train_step_calls(self, batch_size: int, priority: np.ndarray) -> Calls:
        """A call that samples a batch and updates the priorities of the sampled rows."""
        raise NotImplementedError

    # -- memory
    def storage_bytes(self) -> tuple[float, str]:
        """Bytes of storage per stored transition, and how that was measured."""
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError


def _dist_version(module: str) -> str:
    from importlib import metadata

    for dist in (module, module.replace("_", "-")):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "?"


# ------------------------------------------------------------------------------------ ace_hybrid
class AceHybrid(ReplayAdapter):
    """``ace_hybrid.MixedReplayBuffer`` with beta = 0 (every sample from the prioritised RL partition)."""

    name = "ace"
    title = "ace_hybrid"
    modules = ("ace_hybrid",)

    @classmethod
    def _probe(cls) -> str | None:
        import ace_hybrid

        if not hasattr(ace_hybrid, "MixedReplayBuffer"):
            return "ace_hybrid has no MixedReplayBuffer (the replay module is not built in this tree)"
        return None

    @classmethod
    def version(cls) -> str:
        import ace_hybrid

        return str(getattr(ace_hybrid, "__version__", "?"))

    def __init__(self, obs_dim: int, capacity: int, *, alpha: float, is_exponent: float, seed: int) -> None:
        super().__init__(obs_dim, capacity, alpha=alpha, is_exponent=is_exponent, seed=seed)
        from ace_hybrid import MixedReplayBuffer

        # The LLM partition is unused (beta = 0); give it the smallest capacity the class accepts.
        self.buf = MixedReplayBuffer(obs_dim, capacity, 1, alpha=alpha, beta=0.0, tau=1.0, seed=seed)

    def _args(self, t: Transitions) -> tuple[Any, ...]:
        return (t.obs, t.action, t.reward, t.next_obs, t.done, t.truncated, t.episode, t.step)

    def add_batch(self, t: Transitions) -> Any:
        return np.asarray(self.buf.add_rl_batch(*self._args(t)), dtype=np.int64)

    def update(self, index: Any, priority: np.ndarray) -> None:
        self.buf.update_priorities(index, priority)

    def single_add_calls(self, t: Transitions) -> Calls:
        return self.buf.add_rl, row_calls(t, with_episode=True)

    def batch_add_calls(self, chunks: Sequence[Transitions]) -> Calls:
        return self.buf.add_rl_batch, [(self._args(c), {}) for c in chunks]

    def sample_calls(self, batch_size: int) -> Calls:
        return self.buf.sample, [((batch_size,), {"is_exponent": self.is_exponent})]

    def sampled_index(self, batch_size: int) -> Any:
        return np.asarray(self.buf.sample(batch_size, is_exponent=self.is_exponent).index)

    def update_calls(self, index: Any, priority: np.ndarray) -> Calls:
        return self.buf.update_priorities, [((index, priority), {})]

    def train_step_calls(self, batch_size: int, priority: np.ndarray) -> Calls:
        sample, update, exponent = self.buf.sample, self.buf.update_priorities, self.is_exponent

        def step() -> None:
            update(sample(batch_size, is_exponent=exponent).index, priority)

        return step, [((), {})]

    def storage_bytes(self) -> tuple[float, str]:
        # rl_capacity counts observation slots; a full buffer holds len(buf) ~ capacity * L / (L + 1)
        # transitions, so per stored transition is rl_nbytes / len(buf) (rl_nbytes / rl_capacity is
        # ~0.5% lower at L = 200; both are reported by compare_peers).
        nbytes = self.buf.rl_nbytes
        return nbytes / len(self.buf), (
            f"buf.rl_nbytes / len(buf) when full (buf.rl_nbytes / buf.rl_capacity = "
            f"{nbytes / self.buf.rl_capacity:,.1f} at D={self.obs_dim})"
        )

    def bytes_per_slot(self) -> float:
        """``buf.rl_nbytes / buf.rl_capacity`` (the issue's definition of bytes per RL transition)."""
        return self.buf.rl_nbytes / self.buf.rl_capacity

    def __len__(self) -> int:
        return len(self.buf)


# ------------------------------------------------------------------------------------------ cpprb
class Cpprb(ReplayAdapter):
    """``cpprb.PrioritizedReplayBuffer`` with obs and next_obs stored as separate fields (its default)."""

    name = "cpprb"
    title = "cpprb"
    modules = ("cpprb",)

    def __init__(self, obs_dim: int, capacity: int, *, alpha: float, is_exponent: float, seed: int) -> None:
        super().__init__(obs_dim, capacity, alpha=alpha, is_exponent=is_exponent, seed=seed)
        from cpprb import PrioritizedReplayBuffer

        # done: float32 as in cpprb's documentation; rew float32; act int64 like every other adapter.
        self.env_dict = {
            "obs": {"shape": (obs_dim,), "dtype": np.float32},
            "next_obs": {"shape": (obs_dim,), "dtype": np.float32},
            "act": {"dtype": np.int64},
            "rew": {"dtype": np.float32},
            "done": {"dtype": np.float32},
        }
        self.rb = PrioritizedReplayBuffer(capacity, self.env_dict, alpha=alpha)

    def _kw(self, t: Transitions) -> dict[str, Any]:
        return {"obs": t.obs, "act": t.action, "rew": t.reward, "next_obs": t.next_obs, "done": t.done}

    def add_batch(self, t: Transitions) -> Any:
        first = self.rb.add(**self._kw(t))
        return (first + np.arange(len(t))) % self.capacity

    def update(self, index: Any, priority: np.ndarray) -> None:
        self.rb.update_priorities(index, priority)

    def single_add_calls(self, t: Transitions) -> Calls:
        calls = [
            (
                (),
                {
                    "obs": t.obs[i],
                    "act": int(t.action[i]),
                    "rew": float(t.reward[i]),
                    "next_obs": t.next_obs[i],
                    "done": float(t.done[i]),
                },
            )
            for i in range(len(t))
        ]
        return self.rb.add, calls

    def batch_add_calls(self, chunks: Sequence[Transitions]) -> Calls:
        return self.rb.add, [((), self._kw(c)) for c in chunks]

    def sample_calls(self, batch_size: int) -> Calls:
        return self.rb.sample, [((batch_size,), {"beta": self.is_exponent})]

    def sampled_index(self, batch_size: int) -> Any:
        return self.rb.sample(batch_size, beta=self.is_exponent)["indexes"]

    def update_calls(self, index: Any, priority: np.ndarray) -> Calls:
        return self.rb.update_priorities, [((index, priority), {})]

    def train_step_calls(self, batch_size: int, priority: np.ndarray) -> Calls:
        sample, update, beta = self.rb.sample, self.rb.update_priorities, self.is_exponent

        def step() -> None:
            update(sample(batch_size, beta=beta)["indexes"], priority)

        return step, [((), {})]

    def storage_bytes(self) -> tuple[float, str]:
        per = 0
        for spec in self.env_dict.values():
            per += int(np.prod(spec.get("shape", (1,)))) * np.dtype(spec["dtype"]).itemsize
        return float(per), "one numpy array per env_dict key (size x shape x itemsize); sum/min trees not exposed"

    def __len__(self) -> int:
        return int(self.rb.get_stored_size())


# --------------------------------------------------------------------------------------- tianshou
class Tianshou(ReplayAdapter):
    """``tianshou.data.PrioritizedReplayBuffer`` (obs and obs_next stored; the default)."""

    name = "tianshou"
    title = "tianshou"
    modules = ("tianshou.data",)

    @classmethod
    def version(cls) -> str:
        return _dist_version("tianshou")

    def __init__(self, obs_dim: int, capacity: int, *, alpha: float, is_exponent: float, seed: int) -> None:
        super().__init__(obs_dim, capacity, alpha=alpha, is_exponent=is_exponent, seed=seed)
        from tianshou.data import Batch, PrioritizedReplayBuffer, ReplayBuffer

        self._Batch, self._ReplayBuffer = Batch, ReplayBuffer
        # tianshou's prioritised sampling draws from numpy's global generator: seed it.
        np.random.seed(seed)
        self.rb = PrioritizedReplayBuffer(capacity, alpha=alpha, beta=is_exponent, random_seed=seed)

    def _source(self, t: Transitions) -> Any:
        # tianshou's batched insertion: a small ReplayBuffer over the arrays, moved with update().
        return self._ReplayBuffer.from_data(
            t.obs, t.action, t.reward, t.done, t.truncated, t.done | t.truncated, t.next_obs
        )

    def add_batch(self, t: Transitions) -> Any:
        return self.rb.update(self._source(t))

    def update(self, index: Any, priority: np.ndarray) -> None:
        self.rb.update_weight(index, priority)

    def single_add_calls(self, t: Transitions) -> Calls:
        batch = self._Batch
        calls = [
            (
                (
                    batch(
                        obs=t.obs[i],
                        act=int(t.action[i]),
                        rew=float(t.reward[i]),
                        terminated=bool(t.done[i]),
                        truncated=bool(t.truncated[i]),
                        obs_next=t.next_obs[i],
                    ),
                ),
                {},
            )
            for i in range(len(t))
        ]
        return self.rb.add, calls

    def batch_add_calls(self, chunks: Sequence[Transitions]) -> Calls:
        # ReplayBuffer.add takes one transition; from_data + update is tianshou's vectorised path
        # (measured ~7x faster than 64 add() calls). Building the source buffer is timed.
        rb, source = self.rb, self._source

        def add(t: Transitions) -> None:
            rb.update(source(t))

        return add, [((c,), {}) for c in chunks]

    def sample_calls(self, batch_size: int) -> Calls:
        return self.rb.sample, [((batch_size,), {})]

    def sampled_index(self, batch_size: int) -> Any:
        return self.rb.sample(batch_size)[1]

    def update_calls(self, index: Any, priority: np.ndarray) -> Calls:
        return self.rb.update_weight, [((index, priority), {})]

    def train_step_calls(self, batch_size: int, priority: np.ndarray) -> Calls:
        sample, update = self.rb.sample, self.rb.update_weight

        def step() -> None:
            update(sample(batch_size)[1], priority)

        return step, [((), {})]

    def storage_bytes(self) -> tuple[float, str]:
        total = _nbytes_tree(self.rb._meta) + self.rb.weight._value.nbytes
        return total / self.capacity, "nbytes of the arrays in buffer._meta + the weight segment tree, / capacity"

    def __len__(self) -> int:
        return len(self.rb)


def _nbytes_tree(obj: Any) -> int:
    """Sum of ``nbytes`` of the numpy arrays inside a (nested) tianshou Batch."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    keys = getattr(obj, "get_keys", None)
    if keys is None:
        return 0
    return sum(_nbytes_tree(obj[k]) for k in keys())


# ---------------------------------------------------------------------------------------- torchrl
class TorchRL(ReplayAdapter):
    """``torchrl.data.PrioritizedReplayBuffer`` over a ``LazyTensorStorage`` (in-memory CPU tensors).

    LazyTensorStorage is torchrl's fastest CPU storage (LazyMemmapStorage adds file-backed
    memory maps); data is a TensorDict with obs/next_obs/action/reward/done/truncated.
    """

    name = "torchrl"
    title = "torchrl"
    modules = ("torch", "tensordict", "torchrl.data")

    @classmethod
    def _probe(cls) -> str | None:
        from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer

        try:
            PrioritizedReplayBuffer(alpha=0.6, beta=0.4, storage=LazyTensorStorage(4))
        except Exception as exc:
            try:  # the usual cause: the C++ extension was built against another torch
                importlib.import_module("torchrl._torchrl")
            except Exception as ext_exc:
                import torch

                msg = str(ext_exc)
                why = "undefined symbol" if "undefined symbol" in msg else first_line(ext_exc)[:80]
                return (
                    f"torchrl {_dist_version('torchrl')}'s C++ extension does not load with torch "
                    f"{torch.__version__} ({why}), so PrioritizedReplayBuffer raises {type(exc).__name__}"
                )
            return f"PrioritizedReplayBuffer cannot be built: {first_line(exc)}"
        return None

    def __init__(self, obs_dim: int, capacity: int, *, alpha: float, is_exponent: float, seed: int) -> None:
        super().__init__(obs_dim, capacity, alpha=alpha, is_exponent=is_exponent, seed=seed)
        import torch
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer

        self._torch, self._TensorDict = torch, TensorDict
        torch.manual_seed(seed)  # the prioritised sampler draws with torch's global generator
        self.rb = PrioritizedReplayBuffer(
            alpha=alpha, beta=is_exponent, storage=LazyTensorStorage(capacity), batch_size=None
        )

    def _td(self, t: Transitions) -> Any:
        torch = self._torch
        return self._TensorDict(
            {
                "obs": torch.from_numpy(t.obs),
                "next_obs": torch.from_numpy(t.next_obs),
                "action": torch.from_numpy(t.action),
                "reward": torch.from_numpy(t.reward),
                "done": torch.from_numpy(t.done),
                "truncated": torch.from_numpy(t.truncated),
            },
            batch_size=[len(t)],
        )

    def add_batch(self, t: Transitions) -> Any:
        return self.rb.extend(self._td(t))

    def native_priority(self, priority: np.ndarray) -> Any:
        return self._torch.from_numpy(np.ascontiguousarray(priority))

    def update(self, index: Any, priority: np.ndarray) -> None:
        self.rb.update_priority(index, self.native_priority(priority))

    def single_add_calls(self, t: Transitions) -> Calls:
        rows = self._td(t).unbind(0)
        return self.rb.add, [((row,), {}) for row in rows]

    def batch_add_calls(self, chunks: Sequence[Transitions]) -> Calls:
        return self.rb.extend, [((self._td(c),), {}) for c in chunks]

    def sample_calls(self, batch_size: int) -> Calls:
        return self.rb.sample, [((batch_size,), {"return_info": True})]

    def sampled_index(self, batch_size: int) -> Any:
        return self.rb.sample(batch_size, return_info=True)[1]["index"]

    def update_calls(self, index: Any, priority: np.ndarray) -> Calls:
        return self.rb.update_priority, [((index, self.native_priority(priority)), {})]

    def train_step_calls(self, batch_size: int, priority: np.ndarray) -> Calls:
        sample, update, prio = self.rb.sample, self.rb.update_priority, self.native_priority(priority)

        def step() -> None:
            update(sample(batch_size, return_info=True)[1]["index"], prio)

        return step, [((), {})]

    def storage_bytes(self) -> tuple[float, str]:
        store = self.rb._storage._storage
        total = sum(v.numel() * v.element_size() for v in store.values(include_nested=True, leaves_only=True))
        return total / self.capacity, "numel x element_size of the storage tensors / capacity; sum/min trees not exposed"

    def __len__(self) -> int:
        return len(self.rb)


# ------------------------------------------------------------------------------------- numpy ring
class NumpyRingBuffer:
    """The plain baseline: preallocated numpy columns written as a ring, sampled uniformly."""

    def __init__(self, obs_dim: int, capacity: int, seed: int) -> None:
        self.capacity = int(capacity)
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), np.float32)
        self.action = np.zeros(capacity, np.int64)
        self.reward = np.zeros(capacity, np.float32)
        self.done = np.zeros(capacity, bool)
        self.truncated = np.zeros(capacity, bool)
        self.pos = 0
        self.size = 0
        self.rng = np.random.default_rng(seed)

    def add(self, obs: Any, action: Any, reward: Any, next_obs: Any, done: Any, truncated: Any) -> int:
        i = self.pos
        self.obs[i] = obs
        self.next_obs[i] = next_obs
        self.action[i] = action
        self.reward[i] = reward
        self.done[i] = done
        self.truncated[i] = truncated
        self.pos = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)
        return i

    def add_batch(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, done: Any, truncated: Any
    ) -> np.ndarray:
        n = len(obs)
        idx = (self.pos + np.arange(n)) % self.capacity
        if self.pos + n <= self.capacity:  # contiguous: slice assignment
            s = slice(self.pos, self.pos + n)
            self.obs[s], self.next_obs[s], self.action[s] = obs, next_obs, action
            self.reward[s], self.done[s], self.truncated[s] = reward, done, truncated
        else:
            self.obs[idx], self.next_obs[idx], self.action[idx] = obs, next_obs, action
            self.reward[idx], self.done[idx], self.truncated[idx] = reward, done, truncated
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        return idx

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        idx = self.rng.integers(0, self.size, batch_size)
        return {
            "obs": self.obs[idx],
            "next_obs": self.next_obs[idx],
            "action": self.action[idx],
            "reward": self.reward[idx],
            "done": self.done[idx],
            "truncated": self.truncated[idx],
            "index": idx,
        }

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.obs, self.next_obs, self.action, self.reward, self.done, self.truncated))


class NumpyRing(ReplayAdapter):
    """:class:`NumpyRingBuffer`: uniform sampling, so no priority updates (a reference, not a PER peer)."""

    name = "numpy"
    title = "numpy ring (uniform)"
    prioritised = False
    modules = ("numpy",)

    def __init__(self, obs_dim: int, capacity: int, *, alpha: float, is_exponent: float, seed: int) -> None:
        super().__init__(obs_dim, capacity, alpha=alpha, is_exponent=is_exponent, seed=seed)
        self.rb = NumpyRingBuffer(obs_dim, capacity, seed)

    def _args(self, t: Transitions) -> tuple[Any, ...]:
        return (t.obs, t.action, t.reward, t.next_obs, t.done, t.truncated)

    def add_batch(self, t: Transitions) -> Any:
        return self.rb.add_batch(*self._args(t))

    def update(self, index: Any, priority: np.ndarray) -> None:
        """Uniform sampling: nothing to update."""

    def single_add_calls(self, t: Transitions) -> Calls:
        return self.rb.add, row_calls(t, with_episode=False)

    def batch_add_calls(self, chunks: Sequence[Transitions]) -> Calls:
        return self.rb.add_batch, [(self._args(c), {}) for c in chunks]

    def sample_calls(self, batch_size: int) -> Calls:
        return self.rb.sample, [((batch_size,), {})]

    def sampled_index(self, batch_size: int) -> Any:
        return self.rb.sample(batch_size)["index"]

    def update_calls(self, index: Any, priority: np.ndarray) -> Calls:
        raise NotImplementedError("uniform buffer: no priorities")

    def train_step_calls(self, batch_size: int, priority: np.ndarray) -> Calls:
        # A uniform learner's step only samples.
        return self.rb.sample, [((batch_size,), {})]

    def storage_bytes(self) -> tuple[float, str]:
        return self.rb.nbytes / self.capacity, "nbytes of the six column arrays / capacity"

    def __len__(self) -> int:
        return self.rb.size


#: Every implementation, ace_hybrid first; the order of the table's columns.
ADAPTERS: tuple[type[ReplayAdapter], ...] = (AceHybrid, Cpprb, TorchRL, Tianshou, NumpyRing)


def adapter_by_name(name: str) -> type[ReplayAdapter]:
    """The adapter class called ``name``."""
    for cls in ADAPTERS:
        if cls.name == name:
            return cls
    raise ValueError(f"unknown implementation {name!r}; known: {', '.join(c.name for c in ADAPTERS)}")
