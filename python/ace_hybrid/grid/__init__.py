"""The Grid2Op layer: environments, the action catalog, rules, features, reward, baselines, evaluation.

Importing it registers the gymnasium environment ``ace_hybrid/Grid-v0``
(:class:`~ace_hybrid.grid.gym_env.GridGymEnv`) where gymnasium is installed::

    import gymnasium
    import ace_hybrid.grid  # noqa: F401 (registers ace_hybrid/Grid-v0)

    env = gymnasium.make("ace_hybrid/Grid-v0", env_name="l2rpn_case14_sandbox", threshold=0.5, max_steps=120)
"""

from __future__ import annotations

GYM_ID = "ace_hybrid/Grid-v0"
"""The gymnasium id of :class:`~ace_hybrid.grid.gym_env.GridGymEnv` (keyword arguments go to its constructor)."""


def _register_gym_env() -> None:
    """Register :data:`GYM_ID` by entry point (the environment's module is imported only by ``gymnasium.make``)."""
    try:
        import gymnasium
    except ImportError:  # the grid extra brings it; without it there is nothing to register with
        return
    if GYM_ID not in gymnasium.registry:
        gymnasium.register(id=GYM_ID, entry_point="ace_hybrid.grid.gym_env:GridGymEnv")


_register_gym_env()
