"""benchmarks/bench_coevolution.py end to end with a tiny random model: a curve is trained, evaluated, resumed and
drawn, and its pairs never teach a letter."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import actor_problems as ap  # noqa: E402
import bench_coevolution as bc  # noqa: E402

import llm_fixtures as fixtures  # noqa: E402 (tests/ is on sys.path: see conftest.py)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def problems() -> list[dict]:
    return ap.load_problems(bc.DEFAULT_PROBLEMS, 0, 0, False)


def test_the_shipped_set_has_disjoint_splits_of_two_grids_and_a_best_candidate_where_one_is_good(problems) -> None:
    episodes = {}
    for p in problems:
        episodes.setdefault((p["env"], p["seed"]), set()).add(bc.split_of(p))
    assert all(len(s) == 1 for s in episodes.values())  # whole episodes per split
    held = [p for p in problems if bc.split_of(p) == "held-out"]
    assert len(held) >= 150 and {p["env"] for p in held} == set(ap.ENVS)
    for p in problems[:200]:
        best = ap.best_candidate(p)
        assert (best is None) == (not any(p["good"]))
        if best is not None:
            assert p["good"][best] and p["rewards"][best] == max(r for r, g in zip(p["rewards"], p["good"]) if g)


def test_a_limited_evaluation_keeps_both_grids_in_their_shares(problems) -> None:
    held = bc.evaluation_problems(problems, "held-out", 240)
    counts = Counter(p["env"] for p in held)
    assert len(held) == 240 and set(counts) == set(ap.ENVS) and min(counts.values()) >= 100
    assert len(bc.evaluation_problems(problems, "dev", 0)) == sum(bc.split_of(p) == "dev" for p in problems)


def test_a_curve_trains_evaluates_resumes_and_is_drawn(problems, tmp_path: Path) -> None:
    model = fixtures.build_tiny_model(tmp_path / "tiny")
    args = ["--backend", f"transformers:{model}", "--format", "letter", "--split", "dev", "--eval-limit", "4", "--eval-orders", "2",
            "--threads", "1", "--out", str(tmp_path / "curves"), "--name", "c"]
    assert bc.main([*args, "--pairs", "0,8"]) == 0
    curve = json.loads((tmp_path / "curves" / "c" / "curve.json").read_text())
    assert [p["pairs"] for p in curve["points"]] == [0, 8] and curve["points"][1]["steps"] == 2  # 16 pairs, batch 8
    assert np.array(curve["points"][0]["chosen"]).shape == (4, 2) and len(curve["evaluation"]) == 4
    assert (tmp_path / "curves" / "c" / "adapter-8").is_dir()
    assert bc.main([*args, "--pairs", "0,8,16"]) == 0  # resumed: the first two points are kept
    again = json.loads((tmp_path / "curves" / "c" / "curve.json").read_text())
    assert again["points"][:2] == curve["points"] and again["points"][2]["pairs"] == 16
    with pytest.raises(SystemExit, match="not a start of"):
        bc.main([*args, "--pairs", "0,4"])
    judge = ["--backend", f"transformers:{model}", "--format", "judge", "--split", "dev", "--eval-limit", "3",
             "--eval-orders", "1", "--threads", "1", "--out", str(tmp_path / "curves"), "--name", "j"]
    assert bc.main([*judge, "--pairs", "0,6"]) == 0
    judged = json.loads((tmp_path / "curves" / "j" / "curve.json").read_text())
    assert judged["config"]["format"] == "judge" and 1 <= judged["points"][1]["steps"] <= 2  # <= 12 pairs, batch 8
    # Another evaluation list: each point keeps its answers where it has them and answers the rest with its model.
    assert bc.main([*judge[:7], "6", *judge[8:], "--pairs", "0,6"]) == 0
    wider = json.loads((tmp_path / "curves" / "j" / "curve.json").read_text())
    assert len(wider["evaluation"]) == 6 and len(wider["points"]) == 2
    kept = {tuple(k) for k in judged["evaluation"]} & {tuple(k) for k in wider["evaluation"]}
    assert kept
    for before, after in zip(judged["points"], wider["points"]):
        old = dict(zip(map(tuple, judged["evaluation"]), before["chosen"]))
        new = dict(zip(map(tuple, wider["evaluation"]), after["chosen"]))
        assert all(old[k] == new[k] for k in kept) and len(after["chosen"]) == 6
    figure = tmp_path / "curve.png"
    assert bc.main(["--plot", f"{tmp_path / 'curves' / 'c'},{tmp_path / 'curves' / 'j'}", "--figure", str(figure)]) == 0
    assert figure.stat().st_size > 1000


def test_the_training_pairs_spread_the_target_letter_and_balance_the_verdicts(problems) -> None:
    stream = bc.training_stream(problems, seed=0)[:200]
    letters = Counter(label for _, label in bc.training_pairs(stream, "letter", 2, True, 0))
    assert max(letters.values()) / sum(letters.values()) < 0.15  # 8 letters: 12.5% each
    verdicts = Counter(v for _, v in bc.training_pairs(stream, "judge", 1, True, 0))
    assert verdicts["GOOD"] == verdicts["BAD"] > 100
