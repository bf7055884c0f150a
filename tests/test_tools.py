"""The analysis scripts under tools/ that the docs cite for figures, run on a real (tiny) checkpoint."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("grid2op")

from tiny_settings import TINY  # noqa: E402 (tests/ is on sys.path: see conftest.py)

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def _tool(name: str):
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.grid2op
@pytest.mark.parametrize("prior", [0.5, 0.8])
def test_policy_choices_reads_an_untrained_policys_prior(prior: float, tmp_path: Path, capsys) -> None:
    """A checkpoint saved before any update holds the initial policy: do nothing at ``sac.prior_prob`` at every
    decision (give or take what the random network adds), the rest near uniform below it, so it is played at every
    decision."""
    from ace_hybrid.config import load_config
    from ace_hybrid.training.loop import train

    run = tmp_path / "run"
    train(load_config(None, [*TINY, f"sac.prior_prob={prior}", "train.total_env_steps=40",
                             "train.learning_starts=10000", "train.eval_every=0", "log.tensorboard=false"]), run)
    assert _tool("policy_choices").main([str(run / "checkpoint.pt"), "--seeds", "5,6", "--max-steps", "60"]) == 0
    out = capsys.readouterr().out
    total = re.search(r"all 2 episodes: +(\d+) decisions, acts at +([\d.]+)%, p\(do nothing\) ([\d.]+) "
                      r"\[([\d.]+), ([\d.]+)\], best other ([\d.]+)", out)
    assert total, out
    decisions, acts, mean, lo, hi, other = (float(g) for g in total.groups())
    assert decisions > 0 and acts == 0.0
    assert (mean, lo, hi) == pytest.approx((prior, prior, prior), abs=0.02)  # the untrained network adds a little
    assert 0 < other < 1 - prior


@pytest.mark.grid2op
def test_policy_choices_refuses_a_missing_checkpoint(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        _tool("policy_choices").main([str(tmp_path / "none.pt")])
    assert "none.pt is not a file" in capsys.readouterr().err


@pytest.mark.grid2op
def test_policy_choices_refuses_a_file_that_is_not_a_checkpoint(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "best.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit):
        _tool("policy_choices").main([str(bad)])
    assert str(bad) in capsys.readouterr().err
