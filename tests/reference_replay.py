"""A small, slow numpy reference of the mixed prioritised replay, written from the specification.

It keeps flat arrays instead of trees and finds sampled items with cumulative sums, so it shares no code with
the C++ core; the parity test feeds both the same stream and checks they return the same batches. It uses the
same generator (xoshiro256** seeded by splitmix64) so the uniforms agree draw for draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

MASK = (1 << 64) - 1


def splitmix64(x: int) -> tuple[int, int]:
    x = (x + 0x9E3779B97F4A7C15) & MASK
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return x, z ^ (z >> 31)


class Xoshiro:
    def __init__(self, seed: int) -> None:
        x = seed
        self.s = []
        for _ in range(4):
            x, z = splitmix64(x)
            self.s.append(z)

    @staticmethod
    def _rotl(x: int, k: int) -> int:
        return ((x << k) | (x >> (64 - k))) & MASK

    def next_u64(self) -> int:
        s = self.s
        result = (self._rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self._rotl(s[3], 45)
        return result

    def uniform(self) -> float:
        return (self.next_u64() >> 11) * 2.0**-53


@dataclass
class Item:
    obs: np.ndarray
    next_obs: np.ndarray
    action: int
    reward: float
    original_reward: float
    done: bool
    truncated: bool
    episode: int
    decision: int
    improvement: float = 0.0
    valid: bool = False


@dataclass
class ReferenceReplay:
    obs_dim: int
    rl_capacity: int
    validated_capacity: int
    alpha: float = 0.6
    beta: float = 0.25
    tau: float = 1.0
    seed: int = 0
    rl_slots: dict = field(default_factory=dict)  # slot -> (position, obs)
    rl_items: dict = field(default_factory=dict)  # head position -> [Item, priority(float32)]
    llm_items: dict = field(default_factory=dict)  # position -> Item
    rl_written: int = 0
    llm_written: int = 0
    prev: tuple | None = None  # (episode, decision, done, truncated)

    def __post_init__(self) -> None:
        self.rng = Xoshiro(self.seed)

    # ---- RL ------------------------------------------------------------------------------------------------
    def _live_rl(self) -> dict:
        first = self.rl_written - self.rl_capacity
        return {p: v for p, v in self.rl_items.items() if p >= first}

    def max_priority(self) -> float:
        live = [v[1] for v in self._live_rl().values()]
        m = max(live, default=0.0)
        return float(m) if m > 0 else 1.0

    def _write_obs(self, o: np.ndarray) -> None:
        pos = self.rl_written
        self.rl_items.pop(pos - self.rl_capacity, None)
        self.rl_slots[pos % self.rl_capacity] = (pos, o.copy())
        self.rl_written += 1

    def add_rl(self, obs, action, reward, next_obs, done, truncated, episode, decision) -> int:
        obs = np.asarray(obs, np.float32)
        next_obs = np.asarray(next_obs, np.float32)
        p = np.float32(self.max_priority())
        cont = False
        if self.prev is not None:
            pe, ps, pd, pt = self.prev
            pending = self.rl_slots[(self.rl_written - 1) % self.rl_capacity][1]
            same_obs = pending.tobytes() == obs.tobytes()
            cont = pe == episode and decision == ps + 1 and not pd and not pt and same_obs
        if not cont:
            self._write_obs(obs)
        head = self.rl_written - 1
        r = float(np.float32(reward))
        item = Item(obs, next_obs, action, r, r, bool(done), bool(truncated), episode, decision)
        self.rl_items[head] = [item, p]
        self._write_obs(next_obs)
        self.prev = (episode, decision, bool(done), bool(truncated))
        return head << 1

    def add_validated(
        self, obs, action, reward, next_obs, done, truncated, episode, decision, improvement, valid
    ) -> int:
        pos = self.llm_written
        self.llm_items.pop(pos - self.validated_capacity, None)
        r = float(np.float32(reward))
        self.llm_items[pos] = Item(
            np.asarray(obs, np.float32).copy(), np.asarray(next_obs, np.float32).copy(), action, r, r,
            bool(done), bool(truncated), episode, decision, float(np.float32(improvement)), bool(valid),
        )
        self.llm_written += 1
        return (pos << 1) | 1

    # ---- weights -------------------------------------------------------------------------------------------
    def rl_weights(self) -> tuple[np.ndarray, np.ndarray]:
        """(positions, leaf weights) of live RL transitions in slot order (the tree's leaf order)."""
        live = self._live_rl()
        pos = np.array(sorted(live, key=lambda p: p % self.rl_capacity), dtype=np.int64)
        if self.alpha == 0:
            w = np.ones(len(pos))
        else:
            w = np.array([float(live[p][1]) ** self.alpha for p in pos], dtype=np.float64)
        return pos, w

    def llm_weights(self) -> tuple[np.ndarray, np.ndarray]:
        first = self.llm_written - self.validated_capacity
        live = {p: it for p, it in self.llm_items.items() if p >= first}
        pos = np.array(sorted(live, key=lambda p: p % self.validated_capacity), dtype=np.int64)
        w = np.array(
            [
                math.exp(min(60.0, max(-60.0, live[p].improvement / self.tau))) if live[p].valid else 0.0
                for p in pos
            ],
            dtype=np.float64,
        )
        return pos, w

    def __len__(self) -> int:
        _, lw = self.llm_weights()
        return len(self._live_rl()) + int(np.count_nonzero(lw))

    # ---- updates -------------------------------------------------------------------------------------------
    def update_priorities(self, index, priority) -> int:
        applied = 0
        live = self._live_rl()
        for h, p in zip(index, priority):
            h = int(h)
            if h & 1 or (h >> 1) not in live:
                continue
            live[h >> 1][1] = np.float32(p)
            applied += 1
        return applied

    # ---- sampling ------------------------------------------------------------------------------------------
    def split(self, batch: int, rl_w: np.ndarray, llm_w: np.ndarray) -> int:
        """Rows drawn from RL: the LLM partition gets min(nominal share, its sampleable items), RL the rest."""
        rl_any, llm_any = rl_w.sum() > 0, llm_w.sum() > 0
        if not llm_any:
            return batch
        if not rl_any:
            return 0
        nominal_rl = min(batch, max(0, math.floor((1.0 - self.beta) * batch + 0.5)))
        n_llm = min(batch - nominal_rl, int(np.count_nonzero(llm_w)))
        return batch - n_llm

    def _draw(self, n: int, w: np.ndarray) -> np.ndarray:
        total = w.sum()
        cum = np.cumsum(w)
        out = np.empty(n, dtype=np.int64)
        for i in range(n):
            u = (i + self.rng.uniform()) * total / n
            j = int(np.searchsorted(cum, u, side="right"))
            out[i] = min(j, len(w) - 1)
        return out

    def sample(self, batch: int, is_exponent: float = 0.4) -> dict:
        rl_pos, rl_w = self.rl_weights()
        llm_pos, llm_w = self.llm_weights()
        n_rl = self.split(batch, rl_w, llm_w)
        n_llm = batch - n_rl
        handles, q, rows = [], [], []
        if n_rl:
            for j in self._draw(n_rl, rl_w):
                handles.append(int(rl_pos[j]) << 1)
                q.append(n_rl / batch * rl_w[j] / rl_w.sum())
                rows.append(self.rl_items[int(rl_pos[j])][0])
        if n_llm:
            for j in self._draw(n_llm, llm_w):
                handles.append((int(llm_pos[j]) << 1) | 1)
                q.append(n_llm / batch * llm_w[j] / llm_w.sum())
                rows.append(self.llm_items[int(llm_pos[j])])
        q = np.array(q)
        n_items = len(self)
        raw = (n_items * q) ** (-is_exponent)
        return {
            "index": np.array(handles, dtype=np.int64),
            "q": q,
            "weight": raw / raw.max(),
            "from_validated": np.array([h & 1 == 1 for h in handles]),
            "obs": np.stack([r.obs for r in rows]),
            "next_obs": np.stack([r.next_obs for r in rows]),
            "action": np.array([r.action for r in rows], dtype=np.int64),
            "reward": np.array([r.reward for r in rows], dtype=np.float32),
        }
