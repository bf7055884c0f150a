"""The Python API: ``from ace_hybrid import train, evaluate, make_agent`` (and friends), loaded on first use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ace_hybrid

import tiny_settings  # tests/ is on sys.path: see conftest.py

#: Subprocesses import the ace_hybrid under test, wherever it is (not an older one installed in the environment).
UNDER_TEST = {**os.environ, "PYTHONPATH": str(Path(ace_hybrid.__file__).parents[1])}
API = ("train", "evaluate", "make_agent", "make_env", "load_config", "find_config")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120,
                          env=UNDER_TEST)


def test_import_stays_light_until_the_api_is_used() -> None:
    out = _python("import sys, ace_hybrid\n"
                  f"assert set({API!r}) <= set(dir(ace_hybrid))\n"
                  "heavy = ('torch', 'grid2op', 'gymnasium', 'matplotlib', 'ace_hybrid.training', 'ace_hybrid.grid')\n"
                  "print(sorted(m for m in heavy if m in sys.modules))\n"
                  "from ace_hybrid import find_config, load_config\n"
                  "load_config(find_config('l2rpn_case14_sandbox'))\n"
                  "print(sorted(m for m in heavy if m in sys.modules))\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[]", "[]"]


def test_a_missing_extra_is_named_not_a_bare_traceback() -> None:
    out = _python("import sys\nsys.modules['torch'] = None\n"
                  "try:\n    from ace_hybrid import train\nexcept ImportError as exc:\n    print(exc)\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ace_hybrid.train: torch is not installed: pip install 'ace-hybrid[train]'"


def test_unknown_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError, match="no attribute 'trian'"):
        ace_hybrid.trian  # noqa: B018 (the attribute access is the test)
    assert not hasattr(ace_hybrid, "trian")


@pytest.mark.grid2op
@pytest.mark.slow
def test_train_then_evaluate_end_to_end(tmp_path: Path) -> None:
    """The README's example with tiny settings."""
    pytest.importorskip("torch")
    pytest.importorskip("grid2op")
    from ace_hybrid import evaluate, find_config, load_config, make_agent, make_env, train
    from ace_hybrid.agents import make_agent as agents_make_agent
    from ace_hybrid.training.loop import train as loop_train

    assert train is loop_train and make_agent is agents_make_agent
    cfg = load_config(find_config("l2rpn_case14_sandbox"),
                      [*tiny_settings.TINY, "train.total_env_steps=150", "train.eval_every=0", "log.tensorboard=false"])
    summary = train(cfg, tmp_path / "run")
    assert summary["env_steps"] == 150
    env = make_env(cfg.env.name, seed=0)
    agent = make_agent(f"checkpoint:{tmp_path / 'run' / 'checkpoint.pt'}", env, topk=0)
    report = evaluate(env, agent, [(0, 0), (1, 1)], agent_name="sac", max_steps=30, progress=False)
    assert len(report.episodes) == 2 and all(0 < e.steps_survived <= e.max_steps == 30 for e in report.episodes)
    assert "sac" in report.to_markdown()
    env.close()
