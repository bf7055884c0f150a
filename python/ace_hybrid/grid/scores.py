"""The L2RPN score of an environment, computed by grid2op's own score classes on writable data copies.

grid2op's score classes run reference agents (do nothing, reconnect lines) to normalise the score and cache their
statistics inside the environment's data folder, which may be read-only (site-packages) and holds every scenario.
So each scenario gets a private copy of the environment folder under the cache directory, holding that scenario
only (linked, not copied), and the score class is run there with the episode's seed: one score per (scenario, seed).
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable

from ace_hybrid.grid.evaluation import EvaluationReport
from ace_hybrid.files import cache_root

#: grid2op's score class per environment (the competitions' own scores).
SCORE_CLASSES: dict[str, str] = {
    "l2rpn_case14_sandbox": "ScoreL2RPN2020",
    "l2rpn_wcci_2020": "ScoreL2RPN2020",
    "l2rpn_neurips_2020_track1": "ScoreL2RPN2020",
    "l2rpn_icaps_2021": "ScoreICAPS2021",
    "l2rpn_wcci_2022": "ScoreL2RPN2022",
    "l2rpn_idf_2023": "ScoreL2RPN2023",
}




def scenario_copy(env: Any, scenario: int) -> Path:
    """A writable copy of ``env``'s data folder that holds only scenario ``scenario`` (made once, then reused)."""
    source = Path(env.get_path_env())
    chronics = sorted(env.chronics_handler.real_data.available_chronics())
    if not 0 <= scenario < len(chronics):
        raise IndexError(f"scenario {scenario} out of range [0, {len(chronics)})")
    chronic = Path(chronics[scenario])
    target = cache_root() / "score_envs" / source.name / chronic.name
    if not (target / "chronics" / chronic.name).exists():
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("chronics", "_statistics_*", "__pycache__"))
        (tmp / "chronics").mkdir()
        (tmp / "chronics" / chronic.name).symlink_to(chronic.resolve(), target_is_directory=True)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)  # atomic: a half-made copy is never used
    return target


def score_report(
    report: EvaluationReport,
    agent_factory: Callable[[Any], Any],
    *,
    max_steps: int | None = None,
    env_name: str | None = None,
) -> None:
    """Fill ``score`` of every episode of ``report`` (in place) with the environment's L2RPN score.

    ``agent_factory(env)`` builds a fresh agent for the scored environment copy ``env``. Environments without a grid2op score
    class get ``score_note`` saying so.
    """
    import grid2op
    import grid2op.utils as scores
    from lightsim2grid import LightSimBackend

    from ace_hybrid.grid.env import make_env

    name = env_name or report.env_name
    if name not in SCORE_CLASSES:
        report.score_note = f"grid2op has no score class for {name}"
        return
    score_cls = getattr(scores, SCORE_CLASSES[name])
    reference = make_env(name, seed=0)
    for episode in report.episodes:
        folder = scenario_copy(reference, episode.scenario)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = grid2op.make(str(folder), backend=LightSimBackend())
            scorer = score_cls(env, nb_scenario=1, env_seeds=[episode.seed], agent_seeds=[episode.seed],
                               max_step=max_steps if max_steps else -1, verbose=0)
            agent = agent_factory(env)
            all_scores, _, _ = scorer.get(agent)[:3]
        first = all_scores[0]
        episode.score = float(first[0] if isinstance(first, (tuple, list)) else first)
        env.close()
    report.score_note = f"grid2op {SCORE_CLASSES[name]}, one (scenario, seed) at a time"
