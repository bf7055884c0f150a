"""Checkpoints and LoRA adapters are read as data: a crafted file never runs code, whichever way a user loads it
(``ace-hybrid evaluate --agent checkpoint:PATH``, ``ace-hybrid train --resume DIR``, ``load_agent``), and it fails
with an error that names the file."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from ace_hybrid.training.checkpoint import load_checkpoint_file  # noqa: E402

from tiny_settings import TINY  # noqa: E402 (tests/ is on sys.path: see conftest.py)


class _Payload:
    """Unpickling this creates the directory ``marker``: what a crafted checkpoint does to an unsafe loader."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _crafted(path: Path, marker: Path, kind: str) -> Path:
    """A file shaped like a checkpoint whose ``sac`` entry is the payload: torch's zip format or a bare pickle."""
    state = {"format": 1, "config": {}, "sac": _Payload(marker), "normalizer": {}}
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "zip":
        torch.save(state, path)
    else:
        path.write_bytes(pickle.dumps(state))
    return path


@pytest.fixture(params=["zip", "pickle"])
def crafted(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "payload-ran"
    return _crafted(tmp_path / "run" / "checkpoint.pt", marker, request.param), marker


def test_a_crafted_checkpoint_is_refused_by_the_loader_without_running(crafted) -> None:
    path, marker = crafted
    with pytest.raises(ValueError, match=re.escape(str(path))):
        load_checkpoint_file(path)
    assert not marker.exists()


@pytest.mark.grid2op
def test_a_crafted_checkpoint_is_refused_by_load_agent(crafted, make_grid_env) -> None:
    from ace_hybrid.training.policy import load_agent

    path, marker = crafted
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        load_agent(path, make_grid_env("l2rpn_case14_sandbox"))
    assert not marker.exists()


@pytest.mark.grid2op
def test_a_crafted_checkpoint_is_refused_by_evaluate(crafted, tmp_path: Path, capsys) -> None:
    from ace_hybrid.cli import main

    path, marker = crafted
    code = main(["evaluate", "--env", "l2rpn_case14_sandbox", "--agent", f"checkpoint:{path}", "--episodes", "0",
                 "--seeds", "5", "--max-steps", "5", "--out", str(tmp_path / "eval"), "--no-progress"])
    assert code == 2
    assert str(path) in capsys.readouterr().err
    assert not marker.exists()


@pytest.mark.grid2op
def test_a_crafted_checkpoint_is_refused_by_train_resume(crafted, capsys) -> None:
    from ace_hybrid.cli import main

    path, marker = crafted
    assert main(["train", "--resume", str(path.parent)]) == 2
    assert "not a readable checkpoint" in capsys.readouterr().err
    assert not marker.exists()


# ------------------------------------------------------------------------------ what our checkpoints hold


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("grid2op")
    from ace_hybrid.config import load_config
    from ace_hybrid.training.loop import train

    run = tmp_path_factory.mktemp("safety") / "run"
    train(load_config(None, [*TINY, "train.total_env_steps=60", "train.eval_every=0", "log.tensorboard=false"]),
          run)
    return run / "checkpoint.pt"


@pytest.mark.grid2op
def test_checkpoints_hold_only_tensors_and_plain_values(checkpoint: Path) -> None:
    state = torch.load(checkpoint, weights_only=True)  # no allow-list at all
    assert isinstance(state["normalizer"]["mean"], torch.Tensor)
    assert state["counters"]["env_steps"] == 60


@pytest.mark.grid2op
def test_checkpoints_of_the_previous_version_still_load(checkpoint: Path, tmp_path: Path, make_grid_env) -> None:
    """0.2 wrote the normaliser's statistics as numpy arrays: exactly those are allowed back in."""
    from ace_hybrid.training.policy import load_agent

    state = torch.load(checkpoint, weights_only=True)
    for key in ("mean", "m2"):
        state["normalizer"][key] = state["normalizer"][key].numpy()
    old = tmp_path / "old.pt"
    torch.save(state, old)
    agent = load_agent(old, make_grid_env("l2rpn_case14_sandbox"))
    assert agent.normalizer.count == state["normalizer"]["count"]
    assert (agent.normalizer.mean == state["normalizer"]["mean"]).all()


@pytest.mark.grid2op
def test_a_checkpoint_cannot_name_a_replay_file_outside_its_run(checkpoint: Path, tmp_path: Path) -> None:
    state = torch.load(checkpoint, weights_only=True)
    state["replay_file"] = "../../elsewhere.bin"
    torch.save(state, tmp_path / "checkpoint.pt")
    with pytest.raises(ValueError, match="names the replay file"):
        load_checkpoint_file(tmp_path / "checkpoint.pt")


# ------------------------------------------------------------------------- a checkpoint's replay fits its run


def _fake_run(obs_dim: int, n_actions: int) -> object:
    """What restore's replay check reads from a Run: the observation size and the action set."""
    from types import SimpleNamespace

    return SimpleNamespace(features=SimpleNamespace(dim=obs_dim), actions=list(range(n_actions)))


def _replay_file(path: Path, obs_dim: int, action: int) -> Path:
    import numpy as np

    from ace_hybrid import MixedReplayBuffer

    buf = MixedReplayBuffer(obs_dim, 10, 4)
    o = np.zeros(obs_dim, np.float32)
    buf.add_rl(o, action, 0.0, o + 1, False, False, 0, 0)
    buf.save(path)
    return path


@pytest.mark.parametrize(("obs_dim", "action", "problem"), [
    (7, 3, r"holds observations of size 7, not the obs_dim = 6 asked for"),
    (6, 5, r"rl\.action\[slot 0\] = 5 is not an action of this buffer: out of range \[0, 5\) for num_actions = 5"),
    (6, 2**40, r"rl\.action\[slot 0\] = 1099511627776 is not an action of this buffer"),
], ids=["observation size", "action just outside", "action far outside"])
def test_a_replay_that_does_not_fit_the_run_is_refused_naming_both(tmp_path: Path, obs_dim: int, action: int,
                                                                    problem: str) -> None:
    from ace_hybrid.training.checkpoint import _load_replay

    path = _replay_file(tmp_path / "replay-00000001-00000000.bin", obs_dim, action)
    checkpoint = tmp_path / "checkpoint.pt"
    with pytest.raises(ValueError, match=rf"cannot restore {re.escape(str(checkpoint))}: its replay does not fit this "
                                         rf"run \(observations of size 6, an action set of 5 actions\) or is "
                                         rf"damaged: replay file '{re.escape(str(path))}'.*{problem}"):
        _load_replay(checkpoint, path, _fake_run(6, 5))
    fits = _load_replay(checkpoint, _replay_file(tmp_path / "ok.bin", 6, 4), _fake_run(6, 5))
    assert fits.num_actions == 5 and fits.rl_size == 1  # later adds are held to the action set too


@pytest.mark.grid2op
def test_restore_refuses_a_checkpoint_whose_replay_holds_a_foreign_action(checkpoint: Path, tmp_path: Path) -> None:
    import shutil

    from ace_hybrid import MixedReplayBuffer
    from ace_hybrid.training.checkpoint import restore

    run_dir = tmp_path / "run"
    shutil.copytree(checkpoint.parent, run_dir)
    replay = run_dir / load_checkpoint_file(run_dir / "checkpoint.pt")["replay_file"]
    obs_dim = MixedReplayBuffer.load(replay).obs_dim
    _replay_file(replay, obs_dim, 2**40)
    with pytest.raises(ValueError, match=rf"cannot restore .*checkpoint\.pt: its replay does not fit this run "
                                         rf"\(observations of size {obs_dim}, an action set of (\d+) actions\).*"
                                         r"rl\.action\[slot 0\] = 1099511627776 is not an action of this buffer: "
                                         r"out of range \[0, \1\)"):
        restore(run_dir)


# ------------------------------------------------------------------------------------------ LoRA adapters


def test_an_adapter_is_read_from_safetensors_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing may be downloaded
    import llm_fixtures as fixtures

    from ace_hybrid.llm import LLMConfig, LLMError
    from ace_hybrid.llm.transformers_backend import TransformersBackend

    model = fixtures.build_tiny_model(tmp_path / "tiny_lm")
    backend = TransformersBackend(model, LLMConfig(backend="transformers", model_path=str(model), seed=0))
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"]}')
    marker = tmp_path / "payload-ran"
    torch.save({"weights": _Payload(marker)}, adapter / "adapter_model.bin")
    with pytest.raises(LLMError, match="safetensors"):
        backend.load_adapter(adapter)
    assert not marker.exists()


def test_a_checkpoint_loads_adapters_from_its_run_only(tmp_path: Path) -> None:
    from ace_hybrid.llm.coevolution import CoEvolution

    class Backend:
        name, supports_finetune = "fake", True

        def __init__(self) -> None:
            self.loaded: list[str] = []

        def load_adapter(self, directory: str) -> None:
            self.loaded.append(directory)

    backend = Backend()
    adapters = tmp_path / "moved-run" / "adapters"
    (adapters / "round-002").mkdir(parents=True)
    coevo = CoEvolution(backend, every=1, n_pairs=1, adapter_dir=adapters, probe_size=0)
    state = {"records": [], "since_last": 0, "history": []}
    coevo.load_state_dict({**state, "adapter": "/where/the/run/was/adapters/round-002"})
    assert backend.loaded == [str(adapters / "round-002")]  # found in the run, which may have moved
    (tmp_path / "outside").mkdir()
    with pytest.raises(FileNotFoundError, match="missing"):
        coevo.load_state_dict({**state, "adapter": str(adapters / ".." / ".." / "outside")})
    assert len(backend.loaded) == 1
