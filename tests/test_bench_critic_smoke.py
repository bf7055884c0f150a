"""benchmarks/bench_critic.py end to end on a tiny trajectory set: built, saved, reused, rated and reported."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest

pytest.importorskip("grid2op")
pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import bench_critic  # noqa: E402
import llm_fixtures as fixtures  # noqa: E402 (tests/ is on sys.path: see conftest.py)

pytestmark = [pytest.mark.grid2op, pytest.mark.slow]


def test_the_ground_truth_is_the_discounted_return_after_each_decision() -> None:
    after = bench_critic.discounted_after([0.01, 0.02, -1.0], 0.5)
    np.testing.assert_allclose(after, [0.5 * 0.02 + 0.25 * -1.0, 0.5 * -1.0, 0.0])


def test_a_constant_rater_has_no_correlation_not_a_number() -> None:
    x, y = np.full(6, -2.0), np.arange(6.0)
    assert np.isnan(bench_critic.spearman(x, y))
    stats = bench_critic.clustered_spearman([(x[:3], y[:3]), (x[3:], y[3:])], draws=200)
    text, verdict = bench_critic._rho_text(stats, x)
    assert text == "undefined: every rating is -2K" and verdict == "no correlation (constant)"
    assert bench_critic.spearman(np.array([1.0, 2, 2, 3]), np.array([0.1, 0.3, 0.2, 0.9])) == pytest.approx(
        0.9486832980505138)  # scipy.stats.spearmanr on the same ties


def test_a_tiny_set_is_built_reused_rated_and_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = fixtures.build_tiny_model(tmp_path / "tiny")
    data = tmp_path / "critic_trajectories.json"
    out = tmp_path / "results.md"
    argv = ["--build", "--envs", "l2rpn_case14_sandbox", "--per-env", "3", "--draws", "200", "--data", str(data),
            "--backend", f"transformers:{model}", "--output", str(out)]
    assert bench_critic.main(argv) == 0
    manifest = json.loads(data.read_text())
    grid = manifest["grids"]["l2rpn_case14_sandbox"]
    assert sum(e["judged"] for e in grid["episodes"]) == 3 and (tmp_path / grid["replay"]).is_file()
    text = capsys.readouterr().out
    for row in (f"| llm (transformers:{model}) |", "| hindsight |", "| random |"):
        assert row in text
    assert "3 trajectories (3 on l2rpn_case14_sandbox)" in text and "compare_peers:critic:begin" in out.read_text()
    results = json.loads(data.with_name("critic_trajectories-results.json").read_text())["results"]
    for name, recs in results.items():
        assert len(recs) == 3 and all(r["error"] is None and len(r["units"]) + r["malformed"] == r["calls"] >= 1
                                      for r in recs)
        assert all(set(r["units"].values()) <= {-2, -1, 1, 2} for r in recs)
        if not name.startswith("llm"):  # a random tiny model may leave steps unread (malformed); a rule never does
            assert all(r["malformed"] == 0 for r in recs)
    # The rule raters answer the critic's own prompts: both are asked about the very steps the model was.
    assert [r["units"].keys() for r in results["hindsight"]] == [r["units"].keys() for r in results["random"]]
    assert bench_critic.main(argv[1:]) == 0  # reused, not rebuilt
    assert json.loads(data.read_text()) == manifest


def test_the_critic_is_handed_what_value_critic_run_would_hand_it(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import gzip

    from ace_hybrid.config import ACEConfig
    from ace_hybrid.llm.critic import Judgement, ValueCritic
    from ace_hybrid.replay import MixedReplayBuffer

    data = tmp_path / "critic_trajectories.json"
    manifest = bench_critic.load_trajectories(data, 2, 0, True, ("l2rpn_case14_sandbox",))
    ours = bench_critic.critic_inputs(manifest, data)
    grid = manifest["grids"]["l2rpn_case14_sandbox"]
    (tmp_path / "replay.bin").write_bytes(gzip.decompress((tmp_path / grid["replay"]).read_bytes()))
    replay = MixedReplayBuffer.load(tmp_path / "replay.bin")
    seen = []

    def judge(self, steps, *, survived=None, may_call=lambda: True):
        seen.append((list(steps), survived))
        return Judgement({}, 0, 0, True, None, False)

    monkeypatch.setattr(ValueCritic, "judge", judge)
    n_line = grid["n_line"]
    critic = ValueCritic(None, ACEConfig(critic_trajectories=1000),  # type: ignore[arg-type]
                         describe_action=lambda i: grid["actions"][str(i)], max_rho=lambda raw: raw[:, :n_line].max(1))
    critic.run(replay, may_call=lambda: True)
    assert len(seen) == len(ours) == 2
    assert sorted([(t["steps"], t["survived"]) for t in ours], key=str) == sorted(seen, key=str)
    for t in ours:
        np.testing.assert_allclose(t["after"], bench_critic.discounted_after(t["rewards"], manifest["gamma"]))
