"""Stand-in rollout workers for the executor tests: no environment, so a worker starts in the time its imports take.

Imported by name inside the workers: spawned processes get the test process's sys.path (tests/ included, see
conftest.py), Ray actors the PYTHONPATH the tests' ``ray.init`` gives them.
"""

from __future__ import annotations

import time

import numpy as np

from ace_hybrid.config import Config
from ace_hybrid.training.dealer import Budget
from ace_hybrid.training.rollout import TIMERS, PolicyWeights, TransitionBatch, WorkerSpec
from ace_hybrid.training.run import Pending


def spec(index: int) -> WorkerSpec:
    return WorkerSpec(index=index, config=Config(), action_indices=None)


def budget() -> Budget:
    return Budget(first_step=0, total_steps=10**9, first_episode=0)


def policy(version: int) -> PolicyWeights:
    return PolicyWeights(version, {}, {})


class StampWorker:
    """One one-row batch every 20 ms, stamped with the version of the last policy it was given."""

    @classmethod
    def prepare(cls, config: Config) -> None:
        return None  # no grid to build

    def __init__(self, spec: WorkerSpec, dealer: object = None, prepared: object = None) -> None:
        self.spec, self.version = spec, -1

    def set_policy(self, policy: PolicyWeights) -> None:
        self.version = policy.version

    def collect(self) -> TransitionBatch:
        time.sleep(0.02)
        one = Pending(obs=np.zeros(1, np.float32), action=0, reward=0.0, episode=0, decision=0, version=self.version,
                      next_obs=np.zeros(1, np.float32))
        return TransitionBatch(worker=self.spec.index, transitions=[one], decisions=1, env_steps=1, started=[],
                               finished=[], seconds=dict.fromkeys(TIMERS, 0.0), last=False)

    def close(self) -> None:
        pass


class CountingWorker(StampWorker):
    """Five one-step batches numbered 0..4 (in ``decision``), the fifth marked last; empty last batches after."""

    def __init__(self, spec: WorkerSpec, dealer: object = None, prepared: object = None) -> None:
        super().__init__(spec)
        self.sent = 0

    def collect(self) -> TransitionBatch:
        batch = super().collect()
        if self.sent >= 5:
            return batch._replace(transitions=[], decisions=0, env_steps=0, last=True)
        self.sent += 1
        batch.transitions[0].decision = self.sent - 1
        return batch._replace(last=self.sent == 5)


class BrokenWorker(StampWorker):
    """Fails while it is built."""

    def __init__(self, spec: WorkerSpec, dealer: object = None, prepared: object = None) -> None:
        raise RuntimeError(f"worker {spec.index} broken on purpose")
