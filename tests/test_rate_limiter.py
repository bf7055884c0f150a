"""The learner's rate limiter (train.samples_per_insert): a fixed ratio of sampled to inserted transitions with
rollout workers, the workers waiting while a slow learner catches up."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ace_hybrid.config import load_config
from ace_hybrid.training.limiter import SampleToInsertRatio

import tiny_settings  # noqa: E402 (tests/ is on sys.path: see conftest.py)


def test_the_learner_samples_what_is_due_and_no_more() -> None:
    limiter = SampleToInsertRatio(samples_per_insert=32, batch_size=16, tolerance=0.1)
    assert not limiter.owed() and not limiter.behind() and limiter.ratio() is None
    limiter.insert(10)  # 320 samples due: 20 updates
    assert limiter.owed() and limiter.behind()
    for _ in range(19):
        limiter.sample()
    assert limiter.owed() and not limiter.behind()  # 16 samples owed: within the tolerance (at least one update)
    limiter.sample()
    assert not limiter.owed() and limiter.ratio() == 32
    limiter.insert(1000)  # the tolerance grows with the samples due: 10% of 32,320
    for _ in range(1820):
        limiter.sample()
    assert limiter.debt() == 32_320 - 29_440 and not limiter.behind()  # 2,880 < 3,232
    limiter.insert(20)
    assert limiter.behind()  # 3,520 > 10% of 32,960
    assert SampleToInsertRatio.of(load_config(None, ["train.workers=2"])) is None  # off by default
    assert SampleToInsertRatio.of(load_config(None, ["train.samples_per_insert=64", "sac.batch_size=32",
                                                     "train.updates_per_decision=2"])) is None  # no workers
    limiter = SampleToInsertRatio.of(load_config(None, ["train.workers=2", "train.samples_per_insert=48"]))
    assert limiter.samples_per_insert == 48 and limiter.tolerance == 0.1


def test_a_ratio_the_in_process_loop_cannot_keep_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"train.samples_per_insert = 100 with train.workers = 0: .* set it to 0 or "
                                         r"256, or use workers"):
        load_config(None, ["train.samples_per_insert=100", "sac.batch_size=128", "train.updates_per_decision=2"])
    with pytest.raises(ValueError, match=r"train.samples_per_insert_tolerance = 2.0 is invalid: must be in \[0, 1\]"):
        load_config(None, ["train.samples_per_insert_tolerance=2"])


@pytest.mark.grid2op
@pytest.mark.slow
def test_a_slow_learner_keeps_the_ratio_and_the_workers_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("grid2op")
    pytest.importorskip("torch")
    from ace_hybrid.sac import DiscreteSAC
    from ace_hybrid.training.loop import train

    original = DiscreteSAC.update

    def slow(self, batch):
        time.sleep(0.01)
        return original(self, batch)

    monkeypatch.setattr(DiscreteSAC, "update", slow)  # the learner is this process: the workers never update
    cfg = load_config(None, [*tiny_settings.TINY, "log.tensorboard=false", "train.workers=2",
                             "train.worker_batch_steps=20", "train.total_env_steps=400", "train.eval_every=0",
                             "train.updates_per_decision=1", "train.samples_per_insert=32",
                             "train.samples_per_insert_tolerance=0.1", "log.log_every=40"])
    summary = train(cfg, tmp_path / "run")
    rates = summary["rates"]
    assert rates["samples_per_insert_target"] == 32 and summary["env_steps"] == 400
    assert abs(rates["samples_per_insert"] - 32) <= 0.1 * 32  # 2 updates of 16 per insert, not 1 per decision
    assert summary["updates"] * 16 == pytest.approx(32 * (summary["decisions"] - 16), rel=0.1)
    assert rates["blocked_seconds"] > 0  # the workers waited for the learner
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = [x["rate/samples_per_insert"] for x in lines if "rate/samples_per_insert" in x]
    assert logged and all(abs(r - 32) <= 0.1 * 32 + 1e-9 for r in logged[1:])
    assert any(x.get("rate/blocked_s", 0) > 0 for x in lines)
