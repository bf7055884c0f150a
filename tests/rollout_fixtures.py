"""Stand-in rollout workers for the executor tests: no environment, so a worker starts in the time its imports take.

Imported by name inside the workers: spawned processes get the test process's sys.path (tests/ included, see
conftest.py), Ray actors the PYTHONPATH the tests' ``ray.init`` gives them.
"""

from __future__ import annotations

import time

import numpy as np

from ace_hybrid.config import Config
from ace_hybrid.training.rollout import TIMERS, PolicyWeights, TransitionBatch, WorkerSpec


def spec(index: int, workers: int = 2) -> WorkerSpec:
    return WorkerSpec(index=index, workers=workers, config=Config(), action_indices=None, first_episode=0,
                      env_steps=10**9, tutor_steps=0, seed=0, env_seed=0)


def policy(version: int) -> PolicyWeights:
    return PolicyWeights(version, {}, {})


class StampWorker:
    """One one-row batch every 20 ms, stamped with the version of the last policy it was given."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec, self.version = spec, -1

    def set_policy(self, policy: PolicyWeights) -> None:
        self.version = policy.version

    def collect(self) -> TransitionBatch:
        time.sleep(0.02)
        one = np.zeros((1, 1), np.float32)
        return TransitionBatch(
            worker=self.spec.index, obs=one, action=np.zeros(1, np.int64), reward=np.zeros(1), next_obs=one,
            done=np.zeros(1, bool), truncated=np.zeros(1, bool), episode=np.zeros(1, np.int64),
            decision=np.zeros(1, np.int64), tutor=np.zeros(1, bool), version=np.array([self.version]), env_steps=1,
            started=[], finished=[], seconds=dict.fromkeys(TIMERS, 0.0), last=False)

    def close(self) -> None:
        pass


class CountingWorker(StampWorker):
    """Five one-step batches numbered 0..4 (in ``decision``), the fifth marked last; empty last batches after."""

    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        self.sent = 0

    def collect(self) -> TransitionBatch:
        batch = super().collect()
        if self.sent >= 5:
            empty = np.zeros((0, 1), np.float32)
            return batch._replace(obs=empty, next_obs=empty, **{k: getattr(batch, k)[:0] for k in (
                "action", "reward", "done", "truncated", "episode", "decision", "tutor", "version")},
                env_steps=0, last=True)
        self.sent += 1
        return batch._replace(decision=np.array([self.sent - 1]), last=self.sent == 5)


class BrokenWorker(StampWorker):
    """Fails while it is built."""

    def __init__(self, spec: WorkerSpec) -> None:
        raise RuntimeError(f"worker {spec.index} broken on purpose")
