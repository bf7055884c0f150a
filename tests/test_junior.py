"""The tutor's decisions collected at scale, the junior cloned on them, and runs started from it (real grid, tutor,
worker processes and networks; the sandbox grid at a tiny size)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("grid2op")

import torch

from ace_hybrid.agents import make_agent
from ace_hybrid.config import load_config
from ace_hybrid.grid.env import make_env
from ace_hybrid.training.junior import fit_junior, load_junior, save_junior
from ace_hybrid.training.loop import train
from ace_hybrid.training.tutor_decisions import Decisions, collect_decisions, load_decisions

from tiny_settings import TINY  # noqa: E402 (tests/ is on sys.path: see conftest.py)

pytestmark = [pytest.mark.grid2op, pytest.mark.slow]

COLLECT = [*TINY, "env.action_set=tutor:6", "env.action_set_states=20", "train.tutor_budget=4",
           "env.max_episode_steps=60", "env.threshold=0.3"]


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tutor") / "decisions"
    collect_decisions(load_config(None, COLLECT), folder, 60, jobs=2, progress=False)
    return folder


def test_collection_keeps_every_tutor_decision_with_its_legal_mask(collection: Path) -> None:
    d = load_decisions(collection)
    assert len(d) >= 60
    assert d.mask[np.arange(len(d)), d.action].all()  # the tutor chose a legal action every time
    assert d.obs.shape == d.next_obs.shape and np.isfinite(d.obs).all()
    assert (np.diff(d.episode) >= 0).all() and d.episode[0] == 0  # episode order, from 0
    first = d.episode == 0
    assert (np.diff(d.step[first]) > 0).all()  # decisions in step order within an episode
    assert set(np.unique(d.action)) != {0}  # not do-nothing alone: the tutor acted
    assert len(load_decisions(collection, 10)) == 10


def test_an_episode_is_the_same_whichever_worker_plays_it_and_a_rerun_continues(collection: Path,
                                                                                  tmp_path: Path) -> None:
    again = tmp_path / "again"
    summary = collect_decisions(load_config(None, COLLECT), again, 5, jobs=1, progress=False)
    first = load_decisions(again)
    theirs = load_decisions(collection, len(first))
    for mine, other in zip(first, theirs, strict=True):
        np.testing.assert_array_equal(mine, other)
    kept = {p: p.stat().st_mtime_ns for p in (again / "episodes").glob("*.npz")}
    more = collect_decisions(load_config(None, COLLECT), again, summary["decisions"] + 1, jobs=1, progress=False)
    assert more["episodes"] > summary["episodes"]
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())  # finished episodes are not replayed


def test_a_collection_refuses_another_configuration_and_bad_counts(collection: Path) -> None:
    with pytest.raises(ValueError, match="another configuration"):
        collect_decisions(load_config(None, [*COLLECT, "train.tutor_budget=5"]), collection, 10, progress=False)
    with pytest.raises(ValueError, match=r"decisions = 0 out of range"):
        collect_decisions(load_config(None, COLLECT), collection, 0, progress=False)
    with pytest.raises(ValueError, match=r"limit = 1000000 out of range: .* holds \d+ decisions"):
        load_decisions(collection, 1_000_000)
    with pytest.raises(FileNotFoundError, match="no tutor.json"):
        load_decisions(collection.parent)


def _scripted_collection(real: Path, folder: Path, episodes: int = 30, per_episode: int = 30) -> None:
    """A collection in the real format whose 'tutor' picks action argmax(obs[:5]): a rule a clone can learn and
    must generalise to held-out episodes (the sandbox tutor at this size picks one action almost always)."""
    (folder / "episodes").mkdir(parents=True)
    (folder / "tutor.json").write_text((real / "tutor.json").read_text())
    ref = load_decisions(real)
    rng = np.random.default_rng(0)
    for k in range(episodes):
        obs = np.zeros((per_episode, ref.obs.shape[1]), np.float32)  # constant features carry nothing
        obs[:, :5] = rng.normal(size=(per_episode, 5))
        action = np.argmax(obs[:, :5], axis=1)
        np.savez(folder / "episodes" / f"ep-{k:06d}.npz", obs=obs, action=action, reward=np.zeros(per_episode),
                 next_obs=obs, done=np.zeros(per_episode, bool), truncated=np.zeros(per_episode, bool),
                 decision=np.arange(per_episode), mask=np.ones((per_episode, ref.mask.shape[1]), bool),
                 step=np.arange(per_episode), scenario=0, seed=k, steps=per_episode, blackout=False, seconds=0.0)


def test_the_clone_learns_a_rule_and_generalises_to_held_out_episodes(collection: Path, tmp_path: Path) -> None:
    _scripted_collection(collection, tmp_path / "scripted")
    junior = fit_junior(tmp_path / "scripted", epochs=60, lr=3e-3, progress=False)
    assert junior.fit["validation_decisions"] == 3 * 30  # episodes 9, 19, 29
    assert junior.fit["validation_accuracy"] >= 0.7  # chance: 0.2
    assert junior.fit["train_accuracy"] >= junior.fit["validation_accuracy"] - 0.05


def test_the_junior_imitates_the_tutor_and_acts_from_its_file(collection: Path, tmp_path: Path) -> None:
    junior = fit_junior(collection, epochs=40, lr=3e-3, progress=False)
    d = load_decisions(collection)
    share = float(np.mean(d.action == np.bincount(d.action).argmax()))
    assert junior.fit["train_accuracy"] >= share - 0.05  # about the tutor's most frequent choice, or better (split)
    assert junior.fit["validation_decisions"] + junior.fit["decisions"] == len(d)
    path = save_junior(tmp_path / "junior.pt", junior)
    env = make_env("l2rpn_case14_sandbox", seed=0)
    try:
        agent = make_agent(f"checkpoint:{path}", env, topk=0)
        x = junior.normalizer(d.obs[:20])
        for row, mask in zip(x, d.mask[:20], strict=True):
            assert agent.most_likely(row, mask) == junior.policy.act(row, mask, deterministic=True)
    finally:
        env.close()


def test_a_run_starts_from_the_junior_and_refuses_one_of_another_action_set(collection: Path,
                                                                           tmp_path: Path) -> None:
    path = save_junior(tmp_path / "junior.pt", fit_junior(collection, epochs=2, progress=False))
    state = load_junior(path)
    base = [*COLLECT, "train.total_env_steps=30", "train.updates_per_decision=0", "train.eval_every=0",
            "log.tensorboard=false", f"train.init_policy={path}"]
    train(load_config(None, base), tmp_path / "run")
    saved = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    for key, value in state["actor"].items():
        torch.testing.assert_close(saved["sac"]["actor"][key], value)  # no update: still the junior's actor
    with pytest.raises(ValueError, match=r"init_policy = .*another action set"):
        train(load_config(None, [*base, "env.action_set=tutor:4"]), tmp_path / "other")


def test_an_anchored_run_evaluates_its_junior_first_and_resumes_with_its_anchor(collection: Path,
                                                                              tmp_path: Path) -> None:
    """train.eval_at_start: the junior is evaluated at step 0 and best.pt starts as it; sac.anchor_weight: the
    updates report the KL to the junior, which the checkpoint keeps, and a resumed run goes on from it."""
    path = save_junior(tmp_path / "junior.pt", fit_junior(collection, epochs=2, progress=False))
    cfg = load_config(None, [*COLLECT, "train.total_env_steps=120", "train.updates_per_decision=2",
                             "train.learning_starts=8", "train.eval_every=0", "train.eval_at_start=true",
                             "log.tensorboard=false", f"train.init_policy={path}", "sac.anchor_weight=5"])
    run = tmp_path / "run"
    assert train(cfg, run, total_env_steps=60)["updates"] > 0
    assert (run / "eval" / "step-00000000").exists() and (run / "best.pt").exists()
    junior = load_junior(path)["actor"]
    saved = torch.load(run / "checkpoint.pt", weights_only=True)["sac"]
    for key, value in junior.items():
        torch.testing.assert_close(saved["anchor"][key], value)  # the anchor is the junior, however the actor moved
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(m.get("sac/anchor_kl", 0) > 0 for m in metrics)
    first = (run / "eval" / "step-00000000").stat().st_mtime_ns
    assert train(None, run, resume=True, total_env_steps=120)["env_steps"] == 120
    assert (run / "eval" / "step-00000000").stat().st_mtime_ns == first  # not evaluated at the start again
    resumed = torch.load(run / "checkpoint.pt", weights_only=True)["sac"]
    for key, value in junior.items():
        torch.testing.assert_close(resumed["anchor"][key], value)


def test_junior_files_refuse_foreign_and_bad_arguments(collection: Path, tmp_path: Path) -> None:
    torch.save({"format": 1, "kind": "something"}, tmp_path / "x.pt")
    with pytest.raises(ValueError, match="not an ace_hybrid junior file"):
        load_junior(tmp_path / "x.pt")
    with pytest.raises(ValueError, match=r"epochs = 0 out of range"):
        fit_junior(collection, epochs=0, progress=False)
    with pytest.raises(ValueError, match=r"lr = 2 out of range"):
        fit_junior(collection, lr=2, progress=False)
    with pytest.raises(ValueError, match=r"weight_decay = -0.1 out of range: expected \[0, 10\]"):
        fit_junior(collection, weight_decay=-0.1, progress=False)
    with pytest.raises(ValueError, match=r"noise = 11 out of range: expected \[0, 10\]"):
        fit_junior(collection, noise=11, progress=False)
    # The regularisers change the fit and are recorded.
    plain = fit_junior(collection, epochs=2, progress=False)
    noisy = fit_junior(collection, epochs=2, weight_decay=0.1, noise=0.5, progress=False)
    assert noisy.fit["weight_decay"] == 0.1 and noisy.fit["noise"] == 0.5
    first = next(iter(plain.policy.actor.state_dict()))
    assert not torch.equal(plain.policy.actor.state_dict()[first], noisy.policy.actor.state_dict()[first])


def test_an_experiment_row_tests_the_junior_its_set_names(collection: Path, tmp_path: Path) -> None:
    from ace_hybrid.experiment import load_experiment, run_experiment

    from tiny_settings import experiment_file, rows

    path = save_junior(tmp_path / "junior.pt", fit_junior(collection, epochs=2, progress=False))
    table = rows(("DoNothing", "do-nothing"),
                 ("Junior", "junior", f'set = ["train.init_policy={path}", "env.deploy_among=4"]',
                  "deploy_topk = [0, 2]", "deploy_among = [3]"))
    result = run_experiment(load_experiment(experiment_file(tmp_path / "x.toml", table)), tmp_path / "out",
                            progress=False)
    cells = json.loads((tmp_path / "out" / "results.json").read_text())
    assert {r["id"] for r in cells["rows"]} >= {"donothing", "junior-alone", "junior-top2", "junior-among3"}
    # How each row was deployed: its own deploy_among, else its configuration's (alone), none with the check.
    assert [next(r for r in cells["rows"] if r["id"] == i)["deploy_among"]
            for i in ("junior-alone", "junior-among3", "junior-top2")] == [4, 3, None]
    assert "Junior + top-2 check" in result["markdown"]
    import subprocess

    tool = Path(__file__).resolve().parents[1] / "tools" / "compare_rows.py"
    out = subprocess.run([sys.executable, str(tool), str(tmp_path / "out" / "results.json"), "junior-top2",
                          "junior-alone"], capture_output=True, text=True, check=True).stdout
    assert "| Junior + top-2 check | Junior (policy alone) |" in out and "[" in out  # an interval beside it
    share = subprocess.run([sys.executable, str(tool), str(tmp_path / "out" / "results.json"), "--share",
                            "junior-top2", "junior-alone", "donothing"], capture_output=True, text=True,
                           check=True).stdout
    assert share.startswith("Junior + top-2 check keeps ") and "of Junior (policy alone)'s gain over DoNothing" in share
    # A row pooled with itself is that row: the same figure and interval (the same pair draws).
    one, two = (subprocess.run([sys.executable, str(tool), str(tmp_path / "out" / "results.json"), a, "donothing"],
                               capture_output=True, text=True, check=True).stdout.splitlines()[-1]
                for a in ("junior-alone", "junior-alone+junior-alone"))
    assert one.split("|")[3:] == two.split("|")[3:] and "(2 pooled)" in two
    by_week = subprocess.run([sys.executable, str(tool), str(tmp_path / "out" / "results.json"), "junior-alone",
                              "--by-week", "donothing"], capture_output=True, text=True, check=True).stdout
    assert "resample the " in by_week and by_week.splitlines()[-1].split("|")[3:5] == one.split("|")[3:5]
    # Results of a file with cluster = "scenario" resample weeks whole without the flag.
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    results["bootstrap"]["cluster"] = "scenario"
    (tmp_path / "clustered.json").write_text(json.dumps(results))
    default = subprocess.run([sys.executable, str(tool), str(tmp_path / "clustered.json"), "junior-alone", "donothing"],
                             capture_output=True, text=True, check=True).stdout
    assert default == by_week
    weekly = subprocess.run([sys.executable, str(tool), str(tmp_path / "out" / "results.json"), "junior-alone",
                             "donothing", "--per-week"], capture_output=True, text=True, check=True).stdout
    assert "| Week | junior-alone | donothing |" in weekly and weekly.count("\n| 0 | ") == weekly.count("\n| 1 | ") == 1
    # A file's pairs split in two files and pooled with --also are the file itself (pairs in the same order).
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    cut = len(results["pairs"]) // 2
    for name, part in (("first.json", slice(None, cut)), ("second.json", slice(cut, None))):
        half = {**results, "pairs": results["pairs"][part], "rows": [
            {**r, "episodes": {f: [per_seed[part] for per_seed in v] for f, v in r["episodes"].items()}}
            for r in results["rows"]]}
        (tmp_path / name).write_text(json.dumps(half))
    pooled = subprocess.run([sys.executable, str(tool), str(tmp_path / "first.json"), "--also",
                             str(tmp_path / "second.json"), "junior-alone", "donothing"], capture_output=True,
                            text=True, check=True).stdout
    assert pooled == by_week and "p (uncorrected)" in pooled
    twice = subprocess.run([sys.executable, str(tool), str(tmp_path / "first.json"), "--also",
                            str(tmp_path / "first.json"), "junior-alone", "donothing"], capture_output=True, text=True)
    assert twice.returncode == 2 and "pair is in two of the files" in twice.stderr
    bad = subprocess.run([sys.executable, str(tool), str(tmp_path / "out" / "results.json"), "nope", "junior-alone"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "no row nope" in bad.stderr
    with pytest.raises(ValueError, match="kind junior.*no train.init_policy"):
        load_experiment(experiment_file(tmp_path / "y.toml", rows(("Junior", "junior"))))


def test_a_run_starts_with_the_tutor_data_in_its_validated_partition(collection: Path, tmp_path: Path) -> None:
    from ace_hybrid.replay import MixedReplayBuffer
    from ace_hybrid.training.checkpoint import load_checkpoint_file

    base = [*COLLECT, "train.total_env_steps=30", "train.updates_per_decision=0", "train.eval_every=0",
            "log.tensorboard=false", "replay.validated_capacity=500", f"train.tutor_data={collection}"]
    train(load_config(None, base), tmp_path / "run")
    state = load_checkpoint_file(tmp_path / "run" / "checkpoint.pt")
    replay = MixedReplayBuffer.load(tmp_path / "run" / state["replay_file"])
    assert replay.validated_size == len(load_decisions(collection))
    assert state["normalizer"]["count"] >= len(load_decisions(collection))  # folded in: no junior gave one
    with pytest.raises(ValueError, match=r"tutor_data = .*env.train_scenarios = \[0, 1\], this run has \[1\]"):
        train(load_config(None, [*base, "env.train_scenarios=[1]"]), tmp_path / "other")
    with pytest.raises(ValueError, match=r"more than replay.validated_capacity = 10"):
        train(load_config(None, [*base, "replay.validated_capacity=10"]), tmp_path / "small")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_collection_leaves_no_worker_and_the_rerun_matches(collection: Path, tmp_path: Path) -> None:
    import subprocess
    import time

    from process_fixtures import assert_children_exit_with_parent

    folder = tmp_path / "killed"
    code = ("from ace_hybrid.config import load_config; from ace_hybrid.training.tutor_decisions import "
            f"collect_decisions; collect_decisions(load_config(None, {COLLECT!r}), {str(folder)!r}, 100000, jobs=2, "
            "progress=False)")
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 180
        while not (folder / "episodes" / "ep-000000.npz").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (folder / "episodes" / "ep-000000.npz").exists(), "no episode was written"
        out = subprocess.run(["pgrep", "-P", str(parent.pid)], capture_output=True, text=True).stdout
        workers = [int(w) for w in out.split()]
        assert workers, "the workers did not start"
        assert_children_exit_with_parent(parent, workers, timeout=20)
    finally:
        parent.kill()
    kept, theirs = load_decisions(folder), load_decisions(collection)  # every file left is whole
    n = min(len(kept), len(theirs))
    np.testing.assert_array_equal(kept.action[:n], theirs.action[:n])
    np.testing.assert_array_equal(kept.obs[:n], theirs.obs[:n])


def test_a_refitted_junior_is_another_input_for_an_experiment_cell(collection: Path, tmp_path: Path) -> None:
    from ace_hybrid.experiment import load_experiment, run_experiment

    from tiny_settings import experiment_file, rows

    path = save_junior(tmp_path / "junior.pt", fit_junior(collection, epochs=1, progress=False))
    spec = load_experiment(experiment_file(tmp_path / "x.toml", rows(
        ("Junior", "junior", f'set = ["train.init_policy={path}"]'))))
    run_experiment(spec, tmp_path / "out", progress=False)
    run_experiment(spec, tmp_path / "out", progress=False)  # the same file: the cell is reused
    save_junior(path, fit_junior(collection, epochs=2, progress=False))
    with pytest.raises(ValueError, match="made with another configuration"):
        run_experiment(spec, tmp_path / "out", progress=False)


def test_junior_errors_tool_reports_where_the_junior_departs_from_its_tutor(collection: Path, tmp_path: Path) -> None:
    import subprocess

    # The scripted collection has held-out episodes (9, 19, 29), which the tiny real one lacks.
    _scripted_collection(collection, tmp_path / "scripted")
    path = save_junior(tmp_path / "junior.pt", fit_junior(tmp_path / "scripted", epochs=40, lr=3e-3,
                                                          progress=False))
    tool = Path(__file__).resolve().parents[1] / "tools" / "junior_errors.py"
    out = subprocess.run([sys.executable, str(tool), str(tmp_path / "scripted"), str(path)], capture_output=True,
                         text=True, check=True).stdout
    accuracy = float(out.split(f"| {path} | ")[1].split("%")[0])
    assert out.startswith("90 held-out decisions") and accuracy >= 70.0


def test_dagger_the_junior_plays_the_tutor_labels_and_a_refit_trains_on_both(collection: Path,
                                                                             tmp_path: Path) -> None:
    """``collect --driver``: the junior's actions step the grid, the tutor's choices on those states are the labels
    (checked against the tutor asked again on the same observations), and ``fit --also`` trains on both."""
    from ace_hybrid.training.junior import store_tutor_data
    from ace_hybrid.training.tutor_decisions import read_meta

    # A junior unlike its tutor: trained for one epoch, it disagrees with the tutor on some of its own states.
    junior = save_junior(tmp_path / "junior.pt", fit_junior(collection, epochs=1, progress=False))
    folder = tmp_path / "dagger"
    summary = collect_decisions(load_config(None, COLLECT), folder, 30, jobs=1, progress=False, driver=junior)
    d = load_decisions(folder)
    assert len(d) >= 30 and read_meta(folder)["driver"] == str(junior)
    with np.load(folder / "episodes" / "ep-000000.npz") as z:
        executed, labels = z["executed"], z["action"]
    first = d.episode == 0
    agent = make_agent(f"checkpoint:{junior}", env := make_env("l2rpn_case14_sandbox", seed=0), topk=0)
    try:
        junior_choice = [agent.most_likely(agent.normalizer(x), m) for x, m in zip(d.obs[first], d.mask[first],
                                                                                     strict=True)]
    finally:
        env.close()
    np.testing.assert_array_equal(executed, junior_choice)  # the junior stepped the grid, alone
    assert summary["driver_agreement"] == pytest.approx(
        float(np.mean(np.concatenate([np.load(p)["executed"] == np.load(p)["action"]
                                      for p in sorted((folder / "episodes").glob("*.npz"))]))), abs=1e-4)
    assert d.mask[np.arange(len(d)), d.action].all()  # the labels are the tutor's legal choices
    # The labels are not the junior's: the episodes the junior plays differ from the tutor's own.
    theirs = load_decisions(collection)
    assert len(d) != len(theirs) or not np.array_equal(d.obs, theirs.obs)
    assert not np.array_equal(labels, executed)  # the one-epoch junior departs from its tutor: those are the labels
    refit = fit_junior(collection, also=[folder], epochs=1, progress=False)
    plain = fit_junior(collection, epochs=1, progress=False)
    assert refit.fit["decisions"] == plain.fit["decisions"] + len(d) and refit.fit["also"] == [str(folder)]
    assert refit.fit["episodes"] == plain.fit["episodes"] + np.unique(d.episode).size
    assert refit.fit["validation_decisions"] == plain.fit["validation_decisions"]  # validated on the same decisions
    # Both collections played the same training episodes: the tool pairs them with doing nothing played on them.
    import subprocess

    tool = Path(__file__).resolve().parents[1] / "tools" / "collection_survival.py"
    out = subprocess.run([sys.executable, str(tool), str(collection), str(folder)], capture_output=True, text=True,
                         check=True).stdout
    shared = len(set(np.unique(d.episode)) & set(np.unique(theirs.episode)))
    assert out.startswith(f"{shared} training episodes played by both collections")
    assert "| Junior (driving) − Tutor |" in out and "Share of the tutor's gain" in out
    # A DAgger collection is no transition data, and a driver over another action set is refused.
    with pytest.raises(ValueError, match="tutor_data = .* was played by the junior"):
        store_tutor_data(type("R", (), {"cfg": load_config(None, COLLECT)})(), folder)
    with pytest.raises(ValueError, match="driver = .*another action set"):
        collect_decisions(load_config(None, [*COLLECT, "env.action_set=tutor:4"]), tmp_path / "x", 5,
                          progress=False, driver=junior)
    with pytest.raises(ValueError, match="collected with driver = None"):
        collect_decisions(load_config(None, COLLECT), collection, 5, progress=False, driver=junior)


def test_a_collection_on_other_scenarios_keeps_the_action_set_and_validates_a_fit(collection: Path,
                                                                                  tmp_path: Path) -> None:
    """``collect --scenarios``: episodes on scenarios the junior never trains on, over the action set the training
    scenarios select, so ``fit --validation`` measures accuracy on them; never a run's tutor data."""
    import subprocess

    from ace_hybrid.training.junior import store_tutor_data
    from ace_hybrid.training.tutor_decisions import read_meta

    folder = tmp_path / "held-out"
    collect_decisions(load_config(None, COLLECT), folder, 20, jobs=1, progress=False, scenarios=[2])
    meta = read_meta(folder)
    assert meta["action_set"] == read_meta(collection)["action_set"]  # selected on scenarios 0 and 1, as the fit's
    assert meta["config"]["env"]["train_scenarios"] == [2]
    assert {int(np.load(p)["scenario"]) for p in (folder / "episodes").glob("*.npz")} == {2}
    held = load_decisions(folder)
    # The command line makes the same collection from the first one's configuration (--like): nothing to replay.
    from ace_hybrid.cli import main

    like = ["junior", "collect", "--like", str(collection), "--scenarios", "2", "--decisions", "20", "--out",
            str(folder), "--no-progress"]
    assert main(like) == 0 and len(load_decisions(folder)) == len(held)
    assert main([*like, "--set", "env.threshold=0.5"]) == 2
    fitted = fit_junior(collection, validation=folder, epochs=2, progress=False).fit
    assert fitted["validation_decisions"] == len(held) and fitted["validation_collection"] == str(folder)
    assert 0.0 <= fitted["validation_accuracy"] <= 1.0
    with pytest.raises(ValueError, match="env.train_scenarios = \\[2\\], this run has \\[0, 1\\]"):
        store_tutor_data(type("R", (), {"cfg": load_config(None, COLLECT)})(), folder)
    with pytest.raises(ValueError, match="scenarios = \\[\\] out of range"):
        collect_decisions(load_config(None, COLLECT), tmp_path / "x", 5, progress=False, scenarios=[])
    # The errors tool measures a junior on such a collection (every decision of it held out).
    junior = save_junior(tmp_path / "junior.pt", fit_junior(collection, epochs=2, progress=False))
    tool = Path(__file__).resolve().parents[1] / "tools" / "junior_errors.py"
    out = subprocess.run([sys.executable, str(tool), str(collection), str(junior), "--on", str(folder)],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith(f"{len(held)} held-out decisions")
    # A junior of scenario 0's episodes only, and the curve against training weeks measured on the unseen scenario.
    theirs = load_decisions(collection)
    on_zero = fit_junior(collection, scenarios=[0], epochs=1, progress=False).fit
    assert on_zero["decisions"] == int(np.sum(theirs.episode % 2 == 0)) and on_zero["scenarios"] == [0]
    assert on_zero["learnt_from"] == [0] and fitted["learnt_from"] == [0, 1]  # never the validation scenario
    with pytest.raises(ValueError, match=r"scenarios = \[5\] out of range: .* plays scenarios \[0, 1\]"):
        fit_junior(collection, scenarios=[5], progress=False)
    tool = tool.with_name("junior_weeks_curve.py")
    out = subprocess.run([sys.executable, str(tool), str(collection), str(folder), "--weeks", "1,2"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 2 and f"| {on_zero['decisions']:,} |" in rows[0]


def test_a_collection_from_another_first_episode_adds_new_episodes_of_the_same_weeks(collection: Path,
                                                                                       tmp_path: Path) -> None:
    """``collect --first-episode K``: episodes K, K+1, ... (new seeds, the same weeks and action set) for ``fit
    --also``; a rerun must give the same K."""
    from ace_hybrid.cli import main
    from ace_hybrid.training.rollout import episode_of
    from ace_hybrid.training.tutor_decisions import read_meta

    folder = tmp_path / "later"
    summary = collect_decisions(load_config(None, COLLECT), folder, 10, jobs=1, progress=False, first_episode=500)
    d = load_decisions(folder)
    assert len(d) == summary["decisions"] >= 10 and d.episode[0] == 500 and (np.diff(d.episode) >= 0).all()
    assert read_meta(folder)["action_set"] == read_meta(collection)["action_set"]
    ours = set(np.unique(load_decisions(collection).episode))
    assert not ours & set(np.unique(d.episode))  # no episode of the first collection repeats
    for path in (folder / "episodes").glob("*.npz"):
        with np.load(path) as z:
            assert (int(z["scenario"]), int(z["seed"])) == episode_of(load_config(None, COLLECT), int(path.stem[3:]))
    assert len(load_decisions(folder, 3)) == 3
    again = ["junior", "collect", "--like", str(folder), "--decisions", "10", "--out", str(folder), "--no-progress"]
    assert main([*again, "--first-episode", "500"]) == 0 and len(load_decisions(folder)) == len(d)  # nothing replayed
    with pytest.raises(ValueError, match="starts at episode 500, not first_episode = 0"):
        collect_decisions(load_config(None, COLLECT), folder, 10, progress=False)
    with pytest.raises(ValueError, match=r"first_episode = -1 out of range: expected an integer in \[0, 1000000000\]"):
        collect_decisions(load_config(None, COLLECT), tmp_path / "x", 10, progress=False, first_episode=-1)
    fitted = fit_junior(collection, also=[folder], epochs=1, progress=False).fit
    assert fitted["decisions"] > len(d)


def test_an_ensemble_of_juniors_acts_by_their_mean_probabilities(collection: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``junior ensemble``: juniors fitted on the same decisions (other seeds) in one file, played as one policy;
    the batch path (the errors tool's) and the acting path choose alike; a run never starts from it."""
    from ace_hybrid.cli import main
    from ace_hybrid.sac.ensemble import PolicyEnsemble
    from ace_hybrid.training.junior import junior_choices, junior_policies

    paths = [save_junior(tmp_path / f"j{seed}.pt", fit_junior(collection, epochs=2, seed=seed, progress=False))
             for seed in (0, 1, 2)]
    out = tmp_path / "ensemble.pt"
    assert main(["junior", "ensemble", *map(str, paths), "--out", str(out)]) == 0
    state = load_junior(out)
    assert len(state["members"]) == 3 and state["fit"]["ensemble_of"] == list(map(str, paths))
    d = load_decisions(collection)
    policies, normalizer = junior_policies(state, d.obs.shape[1])
    batch = junior_choices(policies, normalizer, d)
    env = make_env("l2rpn_case14_sandbox", seed=0)
    try:
        agent = make_agent(f"checkpoint:{out}", env, topk=0)
        assert isinstance(agent.sac, PolicyEnsemble)
        singles = [make_agent(f"checkpoint:{p}", env, topk=0) for p in paths]
        for i, (row, mask) in enumerate(zip(normalizer(d.obs[:25]), d.mask[:25], strict=True)):
            mean = np.mean([a.policy_probs(row, mask) for a in singles], axis=0)
            np.testing.assert_allclose(agent.policy_probs(row, mask), mean, rtol=1e-5, atol=1e-7)
            assert agent.most_likely(row, mask) == batch[i] == int(np.argmax(np.where(mask, mean, -1)))
    finally:
        env.close()
    with pytest.raises(ValueError, match="is an ensemble of 3 juniors, a run has one actor"):
        train(load_config(None, [*COLLECT, "train.total_env_steps=30", "log.tensorboard=false",
                                 f"train.init_policy={out}"]), tmp_path / "r")
    other = save_junior(tmp_path / "fewer.pt", fit_junior(collection, 20, epochs=1, progress=False))
    assert main(["junior", "ensemble", str(paths[0]), str(other), "--out", str(tmp_path / "bad.pt")]) == 2
    assert "fewer.pt: another normaliser than" in capsys.readouterr().err
    assert main(["junior", "ensemble", str(paths[0]), "--out", str(tmp_path / "bad.pt")]) == 2
    assert "at least 2 junior files, got 1" in capsys.readouterr().err and not (tmp_path / "bad.pt").exists()
    with pytest.raises(ValueError, match="acts deterministically"):
        agent.sac.act(row, mask, deterministic=False)


def test_the_tutor_keeps_its_candidates_and_their_simulated_outcomes(collection: Path) -> None:
    """Each decision keeps the tutor's candidates (do nothing, then its shortlist) and their simulated max rho, of
    which its choice is the lowest; recorded on a real grid, each rho is that of a fresh ``obs.simulate``."""
    from ace_hybrid.grid.agents import GreedyExpertAgent
    from ace_hybrid.grid.catalog import ActionCatalog
    from ace_hybrid.training.tutor_decisions import _RecordingTutor

    d = load_decisions(collection)
    assert d.candidates is not None and d.candidate_rho is not None
    assert d.candidates.shape == (len(d), 4) and (d.candidates[:, 0] == 0).all()  # train.tutor_budget = 4
    rho = np.where(d.candidates >= 0, d.candidate_rho, np.inf)
    np.testing.assert_array_equal(d.candidates[np.arange(len(d)), rho.argmin(1)], d.action)
    listed = d.candidates >= 0
    assert d.mask[np.nonzero(listed)[0], d.candidates[listed]].all()  # every candidate was legal
    env = make_env("l2rpn_case14_sandbox", seed=0)
    try:
        obs = env.reset()
        catalog = ActionCatalog.for_env(env)
        tutor = GreedyExpertAgent(env.action_space, catalog, budget=5, threshold=0.3)
        recording = _RecordingTutor(tutor, catalog)
        label = recording.choose(obs)
        assert label == tutor.choose(obs)
        for index, got in zip(recording.candidates[0], recording.rhos[0], strict=True):
            sim, _, done, info = obs.simulate(catalog.action(int(index)))
            want = np.inf if done or info.get("is_illegal") or info.get("exception") else float(np.max(sim.rho))
            assert got == pytest.approx(want, rel=1e-6)
    finally:
        env.close()


def _with_candidates(folder: Path) -> None:
    """Give a scripted collection the tutor's candidates: do nothing, the tutor's choice (moved to action
    1 + argmax(obs[:5])) and two others, of which one simulates as well as the choice (a near-tie) and one ends the
    game."""
    rng = np.random.default_rng(1)
    for path in sorted((folder / "episodes").glob("*.npz")):
        with np.load(path) as z:
            cols = dict(z)
        n = len(cols["action"])
        action = cols["action"] = cols["action"] + 1
        twin = 1 + (action + rng.integers(0, 4, n)) % 5  # another of actions 1-5, never the choice
        cands = np.stack([np.zeros(n, np.int64), action, twin, np.full(n, 6)], 1)
        rho = np.tile(np.array([1.2, 0.8, 0.8005, np.inf], np.float32), (n, 1))
        np.savez(path, **cols, candidates=cands, candidate_rho=rho)


def test_a_junior_learns_among_the_candidates_and_counts_near_ties_right(collection: Path, tmp_path: Path) -> None:
    """``fit --among``: the junior chooses among the tutor's candidates only, as ``env.deploy_among`` deploys it;
    ``fit --tolerance``: every candidate within it of the tutor's best is right (a near-tie is no mistake)."""
    import subprocess

    folder = tmp_path / "scripted"
    _scripted_collection(collection, folder)
    with pytest.raises(ValueError, match="among = 3: these decisions do not keep the tutor's candidates"):
        fit_junior(folder, among=3, progress=False)
    assert load_decisions(folder).candidates is None  # collected before candidates were kept
    _with_candidates(folder)
    d = load_decisions(folder)
    near = d.near_best(0.001)
    assert near.sum(1).tolist() == [2] * len(d) and near[np.arange(len(d)), d.action].all()
    assert (d.near_best(None).sum(1) == 1).all() and (d.near_best(0.0).sum(1) == 1).all()
    # Doing nothing between the choice (0.8) and its twin (0.8005): never worse than it keeps the twin out.
    rho = d.candidate_rho.copy()
    rho[:, 0] = 0.8002
    closer = Decisions(*(rho if name == "candidate_rho" else col for name, col in zip(d._fields, d, strict=True)))
    assert (closer.near_best(0.001).sum(1) == 3).all()
    safe = closer.near_best(0.001, never_worse=True)
    assert (safe.sum(1) == 2).all() and safe[:, 0].all() and safe[np.arange(len(d)), d.action].all()
    with pytest.raises(ValueError, match="never_worse = True needs a tolerance"):
        fit_junior(folder, never_worse=True, progress=False)
    # Beside a collection made before candidates were kept, the candidates are gone (and `among` says so).
    from ace_hybrid.training.tutor_decisions import concatenate

    _scripted_collection(collection, tmp_path / "older")
    both = concatenate([d, load_decisions(tmp_path / "older")])
    assert both.candidates is None and both.mask.shape == (2 * len(d), d.mask.shape[1])
    assert concatenate([d, d]).candidates.shape == (2 * len(d), 4)
    with pytest.raises(ValueError, match="among = 4: these decisions do not keep the tutor's candidates"):
        fit_junior(folder, also=[tmp_path / "older"], among=4, progress=False)
    restricted = d.among(3)
    assert (restricted.mask.sum(1) == 3).all() and not restricted.mask[:, 6].any()  # the 4th is cut
    fitted = fit_junior(folder, among=4, tolerance=0.001, epochs=40, lr=3e-3, progress=False)
    kept = fitted.fit["history"][fitted.fit["kept_epoch"] - 1]
    assert fitted.fit["among"] == 4 and fitted.fit["tolerance"] == 0.001
    assert kept["validation_near_best"] >= 0.9 > kept["validation_accuracy"]  # the coin between twins is not learnt
    assert kept["validation_near_best"] == max(h["validation_near_best"] for h in fitted.fit["history"])
    assert fitted.fit["validation_near_best"] == kept["validation_near_best"]
    for bad, message in (({"among": 3}, r"among = 3 out of range: the tutor chose among 4 candidates"),
                         ({"among": 1}, r"among = 1 out of range: expected 0 or \[2, 1000\]"),
                         ({"tolerance": -0.1}, r"tolerance = -0.1 out of range")):
        with pytest.raises(ValueError, match=message):
            fit_junior(folder, progress=False, **bad)
    path = save_junior(tmp_path / "among.pt", fitted)
    # The batch gate (the errors tool's --sure) does nothing where the acting path's would: pi(choice) among the
    # legal candidates below P.
    from ace_hybrid.training.junior import junior_choices, junior_policies

    policies, normalizer = junior_policies(load_junior(path), d.obs.shape[1])
    restricted = d.among(4)
    batch = junior_choices(policies, normalizer, restricted)
    acting = np.flatnonzero(batch != 0)
    sure = np.array([policies[0].policy_probs(normalizer(restricted.obs[i]), restricted.mask[i])[batch[i]]
                     / policies[0].policy_probs(normalizer(restricted.obs[i]), restricted.mask[i]).sum()
                     for i in acting])
    p = float(np.median(sure))
    gated = junior_choices(policies, normalizer, restricted, sure=p)
    np.testing.assert_array_equal(gated[acting], np.where(sure < p, 0, batch[acting]))
    assert acting.size > 1 and 0 < np.sum(gated[acting] == 0) < acting.size and np.all(gated[batch == 0] == 0)
    with pytest.raises(ValueError, match=r"sure = 1.0 out of range: expected \[0, 1\)"):
        junior_choices(policies, normalizer, restricted, sure=1.0)
    tool = Path(__file__).resolve().parents[1] / "tools" / "junior_errors.py"
    out = subprocess.run([sys.executable, str(tool), str(folder), str(path), "--among", "3", "--sure", "0.999"],
                         capture_output=True, text=True, check=True).stdout
    row = next(line for line in out.splitlines() if line.startswith(f"| {path}, among 3 |"))
    gated = next(line for line in out.splitlines() if line.startswith(f"| {path}, among 3, sure 0.999 |"))
    assert float(gated.split("|")[3].strip(" %")) <= float(row.split("|")[3].strip(" %"))  # acts no more often
    cells = [c.strip(" %") for c in row.split("|")]
    assert float(cells[4]) == 0.0  # never worse than doing nothing: do nothing is the worst here
    assert float(cells[6].split("%")[0]) >= 90.0 and float(cells[7].split()[0]) <= 0.05  # near-best, low regret
    assert "| do nothing | 0.0% " in out and "the tutor's choice is among them at 100.0%" in out
    assert "| the tutor | 100.0% " in out
    failed = subprocess.run([sys.executable, str(tool), str(folder), str(path), "--among", "1"], capture_output=True,
                            text=True)
    assert failed.returncode == 2 and "--among 1: expected K >= 2" in failed.stderr
    failed = subprocess.run([sys.executable, str(tool), str(folder), str(path), "--among", "3", "--sure", "1.5"],
                            capture_output=True, text=True)
    assert failed.returncode == 2 and "--sure '1.5': expected probabilities in (0, 1)" in failed.stderr


def test_a_policy_alone_among_the_shortlist_plays_one_of_its_candidates(collection: Path, tmp_path: Path) -> None:
    """``env.deploy_among = k``: the policy alone plays its most likely of do nothing and the first k - 1 of the
    heuristic shortlist (no simulation); an experiment's junior row applies its own setting, alone only."""
    from ace_hybrid.experiment.cells import baseline_agent

    path = save_junior(tmp_path / "junior.pt", fit_junior(collection, epochs=2, progress=False))
    env = make_env("l2rpn_case14_sandbox", seed=0)
    try:
        agent = make_agent(f"checkpoint:{path}", env, topk=0, among=3)
        obs = env.reset()
        allowed = [0, *agent.actions.shortlist(obs, 2)]
        x, mask = agent.normalizer(agent.features(obs)), agent.actions.legal_mask(obs)
        want = int(allowed[int(np.argmax(agent.policy_probs(x, mask)[allowed]))])
        assert agent.decide(obs) == agent.actions.action(want) and agent.simulations == 0
        with pytest.raises(ValueError, match=r"among = 3 out of range: .* alone \(topk = 0, not 2\)"):
            make_agent(f"checkpoint:{path}", env, topk=2, among=3)
        cfg = load_config(None, [*COLLECT, f"train.init_policy={path}", "env.deploy_among=3"])
        assert baseline_agent("junior", env, cfg, 4, topk=0).among == 3
        assert baseline_agent("junior", env, cfg, 4, topk=2).among == 0
    finally:
        env.close()
    with pytest.raises(ValueError, match="env.deploy_among"):
        load_config(None, [*COLLECT, "env.deploy_among=1"])


def test_a_policy_deployed_from_a_higher_threshold_leaves_the_states_below_to_the_safe_rule(
        collection: Path, tmp_path: Path) -> None:
    """``env.deploy_threshold = t``: a trained policy decides only where max rho >= t, the safe rule below; the
    argument, else the run's own setting (an experiment's junior row: the row's), else ``env.threshold``."""
    from ace_hybrid.experiment.cells import baseline_agent

    path = save_junior(tmp_path / "junior.pt", fit_junior(collection, epochs=2, progress=False))
    env = make_env("l2rpn_case14_sandbox", seed=0)
    try:
        trained_at = load_config(None, COLLECT).env.threshold
        assert make_agent(f"checkpoint:{path}", env, topk=0).threshold == trained_at
        obs = env.reset()
        rho = float(np.max(obs.rho))
        low, high = (make_agent(f"checkpoint:{path}", env, topk=0, threshold=t) for t in (rho * 0.99, rho * 1.01))
        assert low.safe_rule.threshold == rho * 0.99 and high.safe_rule.threshold == rho * 1.01
        low.act(obs, 0.0), high.act(obs, 0.0)
        assert (low.decisions, high.decisions) == (1, 0)  # the higher threshold leaves this state to the safe rule
        cfg = load_config(None, [*COLLECT, f"train.init_policy={path}", f"env.deploy_threshold={trained_at + 0.1}"])
        assert baseline_agent("junior", env, cfg, 4, topk=0).threshold == trained_at + 0.1
        assert baseline_agent("junior", env, cfg, 4, topk=0, threshold=2.0).threshold == 2.0
    finally:
        env.close()
    for bad in (trained_at / 2, 5.5):
        with pytest.raises(ValueError, match=rf"env.deploy_threshold = {bad}.*must be 0 or in \[env.threshold = "):
            load_config(None, [*COLLECT, f"env.deploy_threshold={bad}"])


def test_a_policy_alone_does_nothing_where_it_is_not_sure(collection: Path, tmp_path: Path) -> None:
    """``env.deploy_sure = p``: the policy alone plays its most likely action only where it gives it at least p
    (among the actions it chooses from), else does nothing; an experiment's junior row applies its own setting."""
    from ace_hybrid.experiment.cells import baseline_agent

    path = save_junior(tmp_path / "junior.pt", fit_junior(collection, epochs=2, progress=False))
    env = make_env("l2rpn_case14_sandbox", seed=0)
    try:
        agent = make_agent(f"checkpoint:{path}", env, topk=0)
        obs = env.reset()
        x, mask = agent.normalizer(agent.features(obs)), agent.actions.legal_mask(obs)
        probs = agent.policy_probs(x, mask)
        # Its most likely action other than do nothing, made the most likely: the gate then decides alone.
        acting = int(np.argmax(np.where(mask & (np.arange(len(mask)) != 0), probs, -1.0)))
        agent.most_likely = lambda *_: acting  # type: ignore[method-assign]
        p = agent.confidence(x, mask, acting)
        assert 0.0 < p < 1.0 and np.isclose(p, probs[acting] / probs[mask].sum())
        agent.sure = min(p * 1.01, 0.999)
        assert agent.decide(obs) == agent.actions.action(0) and agent.unsure == 1
        agent.sure = p * 0.99
        assert agent.decide(obs) == agent.actions.action(acting) and agent.unsure == 1
        assert agent.simulations == 0
        with pytest.raises(ValueError, match=r"sure = 0.5 out of range: .* alone \(topk = 0, not 2\)"):
            make_agent(f"checkpoint:{path}", env, topk=2, sure=0.5)
        cfg = load_config(None, [*COLLECT, f"train.init_policy={path}", "env.deploy_sure=0.6"])
        assert baseline_agent("junior", env, cfg, 4, topk=0).sure == 0.6
        assert baseline_agent("junior", env, cfg, 4, topk=2).sure == 0.0
        assert make_agent(f"checkpoint:{path}", env, topk=0).sure == 0.0  # the junior file's own setting
    finally:
        env.close()
    for bad in ("1.0", "-0.1"):
        with pytest.raises(ValueError, match="env.deploy_sure"):
            load_config(None, [*COLLECT, f"env.deploy_sure={bad}"])
