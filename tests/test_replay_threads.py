"""One actor thread adding while one learner thread samples and updates, as in training."""

from __future__ import annotations

import threading
import time

import numpy as np

from ace_hybrid import MixedReplayBuffer

D = 64


def test_one_writer_and_one_sampler_keep_the_buffer_consistent():
    buf = MixedReplayBuffer(D, 2_003, 101, alpha=0.6, beta=0.25, seed=1)
    errors: list[str] = []
    stop = threading.Event()
    counts = {"adds": 0, "batches": 0}

    def obs(ep: int, t: int) -> np.ndarray:
        o = np.full(D, 0.5, np.float32)
        o[0], o[1] = ep, t
        return o

    def writer() -> None:
        try:
            ep = 0
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                length = 5 + ep % 40
                for t in range(length):
                    buf.add_rl(obs(ep, t), t, 1.0, obs(ep, t + 1), t == length - 1, False, ep, t)
                    counts["adds"] += 1
                if ep % 3 == 0:
                    n = 4
                    o = np.stack([obs(ep, t) for t in range(n)])
                    buf.add_validated_batch(o, np.zeros(n, np.int64), np.zeros(n, np.float32), o + 1,
                                      np.zeros(n, bool), np.zeros(n, bool), np.full(n, ep), np.arange(n),
                                      np.linspace(-1, 1, n).astype(np.float32), np.ones(n, bool))
                ep += 1
        except Exception as e:  # pragma: no cover - reported below
            errors.append(f"writer: {e!r}")
        finally:
            stop.set()

    def sampler() -> None:
        rng = np.random.default_rng(0)
        try:
            while not stop.is_set():
                if len(buf) == 0:
                    continue
                b = buf.sample(128)
                rl = ~b.from_validated
                if not np.array_equal(b.next_obs[rl, 1], b.obs[rl, 1] + 1):
                    errors.append("an RL transition was paired with a wrong next observation")
                if not np.array_equal(b.next_obs[rl, 0], b.obs[rl, 0]):
                    errors.append("an RL transition was paired with another episode's observation")
                if not np.array_equal(b.decision[rl], b.obs[rl, 1].astype(np.int64)):
                    errors.append("row fields do not belong to the row's observation")
                buf.update_priorities(b.index, rng.uniform(0.1, 2.0, size=128))
                buf.update_rewards(b.index[:8], np.zeros(8))
                counts["batches"] += 1
        except Exception as e:  # pragma: no cover - reported below
            errors.append(f"sampler: {e!r}")

    threads = [threading.Thread(target=writer), threading.Thread(target=sampler)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors[:3]
    assert counts["adds"] > 1_000 and counts["batches"] > 50, counts
    assert buf.check_invariants() == ""
    assert len(buf) == buf.rl_size + buf.validated_valid_size
