"""Overrides that make a training run tiny and fast: the 14-substation sandbox, small networks, short episodes.

Shared by the tests that train (test_train, test_experiment, test_report, test_llm_actor); each appends what it needs
(later overrides win). :func:`experiment_file` writes a small experiment file (test_eta, test_known_warnings).
"""

TINY = [
    "env.name=l2rpn_case14_sandbox", "env.train_scenarios=[0, 1]", "env.eval_pairs=[[2, 0]]",
    "env.threshold=0.5", "env.eval_max_steps=40", "env.max_episode_steps=120",
    "sac.hidden=[32]", "sac.embed_dim=8", "sac.batch_size=16",
    "replay.rl_capacity=2000", "replay.validated_capacity=10",
    "train.learning_starts=16", "train.checkpoint_every=100", "train.eval_every=150", "train.torch_threads=1",
    "log.progress=false", "log.log_every=50",
]

def rows(*specs: tuple[str, ...]) -> str:
    """``[[rows]]`` tables of an experiment file, one per (name, kind[, extra TOML line])."""
    return "".join(f'\n[[rows]]\nname = "{s[0]}"\nkind = "{s[1]}"\n' + "".join(f"{x}\n" for x in s[2:]) for s in specs)


BASELINE_ROWS = rows(("DoNothing", "do-nothing"), ("Reconnect", "reco"))
"""Two baseline rows of an experiment file: a few seconds of testing, no training."""


def experiment_file(path, rows: str = BASELINE_ROWS, *, header: str = "", test_max_steps: int = 3):
    """Write an experiment on the sandbox (test pairs [0, 100] and [1, 101]) to ``path`` and return it; ``header``
    adds top-level keys (``set = [...]``, ...)."""
    from pathlib import Path

    config = Path(__file__).resolve().parents[1] / "configs" / "l2rpn_case14_sandbox.toml"
    path.write_text(f'name = "tiny"\nconfig = "{config}"\nseeds = [0]\ntest_pairs = [[0, 100], [1, 101]]\n'
                    f"test_max_steps = {test_max_steps}\n{header}\n{rows}")
    return path
