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
