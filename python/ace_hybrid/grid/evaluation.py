"""Evaluation of agents on fixed (scenario, seed) pairs of a Grid2Op environment.

Reports per episode and in total: steps survived / max steps (survival rate), cumulative reward, decisions taken
(danger states), simulations used (all of them, and the decisions' own: those the safe rule makes outside danger are
the same rule for every agent), wall time, and the environment's L2RPN score where grid2op provides one
(:mod:`ace_hybrid.grid.scores`). Results are written as JSON plus a markdown table.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ace_hybrid.files import atomic_write_json, atomic_write_text
from ace_hybrid.grid.env import episode_start, playable_steps, reset_episode


@dataclass
class EpisodeResult:
    """One evaluated episode."""

    scenario: int
    seed: int
    steps_survived: int
    max_steps: int
    cumulative_reward: float
    decisions: int
    simulations: int
    """Every ``obs.simulate`` of the agent: its decisions' and its safe rule's."""
    wall_time_s: float
    score: float | None = None
    """The L2RPN score of this episode, when computed."""
    score_steps_survived: int | None = None
    """Steps survived by the score's replay of this episode (grid2op's runner), when computed: equal to
    ``steps_survived`` when the replay played the same episode."""
    decision_simulations: int | None = None
    """The simulations the agent made to decide in danger states (its safe rule's excluded); None for an agent that
    does not count them apart."""
    start_step: int = 0
    """The step of its scenario the episode started at (``env.start_spread``); ``max_steps`` counts from there."""
    acted: int | None = None
    """Decisions whose action was not do-nothing (None for an agent that does not count them): a policy that does
    nothing at almost every decision survives like doing nothing."""

    @property
    def survival_rate(self) -> float:
        return self.steps_survived / self.max_steps if self.max_steps else 0.0


@dataclass
class EvaluationReport:
    """All episodes of one agent on one environment."""

    env_name: str
    agent_name: str
    episodes: list[EpisodeResult] = field(default_factory=list)
    score_note: str = "not computed"

    def totals(self) -> dict[str, float]:
        """Sums and means over episodes (survival rate = total steps survived / total max steps)."""
        eps = self.episodes
        survived = sum(e.steps_survived for e in eps)
        total = sum(e.max_steps for e in eps)
        scores = [e.score for e in eps if e.score is not None]
        return {
            "episodes": len(eps),
            "steps_survived": survived,
            "max_steps": total,
            "survival_rate": survived / total if total else 0.0,
            "cumulative_reward": float(sum(e.cumulative_reward for e in eps)),
            "mean_reward": float(np.mean([e.cumulative_reward for e in eps])) if eps else 0.0,
            "decisions": sum(e.decisions for e in eps),
            "acted": None if any(e.acted is None for e in eps) else sum(int(e.acted or 0) for e in eps),
            "simulations": sum(e.simulations for e in eps),
            "decision_simulations": (None if any(e.decision_simulations is None for e in eps)
                                     else sum(int(e.decision_simulations or 0) for e in eps)),
            "wall_time_s": float(sum(e.wall_time_s for e in eps)),
            "mean_score": float(np.mean(scores)) if scores else float("nan"),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env_name,
            "agent": self.agent_name,
            "score_note": self.score_note,
            "episodes": [dict(asdict(e), survival_rate=e.survival_rate) for e in self.episodes],
            "totals": self.totals(),
        }

    def to_markdown(self) -> str:
        """Per-episode rows and a total row."""
        head = ("| scenario | seed | survived | max steps | survival | reward | decisions | acted | simulations | "
                "time (s) | score |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        rows = [
            f"| {e.scenario} | {e.seed} | {e.steps_survived} | {e.max_steps} | {e.survival_rate:.1%} | "
            f"{e.cumulative_reward:.1f} | {e.decisions} | {_fmt_count(e.acted)} | {e.simulations} | "
            f"{e.wall_time_s:.1f} | {_fmt_score(e.score)} |"
            for e in self.episodes
        ]
        t = self.totals()
        rows.append(
            f"| **all** | | {t['steps_survived']} | {t['max_steps']} | {t['survival_rate']:.1%} | "
            f"{t['cumulative_reward']:.1f} | {t['decisions']} | {_fmt_count(t['acted'])} | {t['simulations']} | "
            f"{t['wall_time_s']:.1f} | {_fmt_score(t['mean_score'])} |"
        )
        title = f"**{self.agent_name}** on `{self.env_name}` (score: {self.score_note})"
        return "\n".join([title, "", head, *rows])

    def save(self, out_dir: str | Path) -> tuple[Path, Path]:
        """Write ``evaluation.json`` and ``evaluation.md`` into ``out_dir``; returns both paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        json_path, md_path = out / "evaluation.json", out / "evaluation.md"
        atomic_write_json(json_path, self.to_dict())
        atomic_write_text(md_path, self.to_markdown() + "\n")
        return json_path, md_path


def _fmt_count(count: int | None) -> str:
    return "n/a" if count is None else str(count)


def _fmt_score(score: float | None) -> str:
    return "n/a" if score is None or not np.isfinite(score) else f"{score:.2f}"


def play_episode(
    env: Any,
    agent: Any,
    scenario: int,
    seed: int,
    *,
    max_steps: int | None = None,
    on_step: Callable[[], None] | None = None,
) -> EpisodeResult:
    """Run ``agent`` (a grid2op ``BaseAgent``) on the episode (scenario, seed) until it ends or ``max_steps``."""
    started = time.perf_counter()
    obs = reset_episode(env, scenario, seed)
    agent.seed(seed)
    if hasattr(agent, "reset"):
        agent.reset(obs)
    decisions0 = getattr(agent, "decisions", 0)
    acted0 = getattr(agent, "acted", None)
    sims0 = getattr(agent, "total_simulations", 0)
    decision_sims0 = getattr(agent, "simulations", None)
    horizon = playable_steps(env)
    if max_steps is not None:
        if max_steps <= 0:
            raise ValueError(f"max_steps = {max_steps} out of range [1, inf)")
        horizon = min(horizon, int(max_steps))
    reward, done, survived, total_reward = 0.0, False, 0, 0.0
    while survived < horizon:
        action = agent.act(obs, reward, done)
        obs, reward, done, info = env.step(action)
        total_reward += float(reward)
        if on_step is not None:
            on_step()
        if done:
            # grid2op ends an episode either by a blackout (the last step failed) or at the end of the data.
            if info.get("exception"):
                break
            survived += 1
            break
        survived += 1
    return EpisodeResult(
        scenario=int(scenario),
        seed=int(seed),
        steps_survived=survived,
        max_steps=horizon,
        cumulative_reward=total_reward,
        decisions=getattr(agent, "decisions", 0) - decisions0,
        simulations=getattr(agent, "total_simulations", 0) - sims0,
        wall_time_s=time.perf_counter() - started,
        decision_simulations=None if decision_sims0 is None else int(agent.simulations) - int(decision_sims0),
        start_step=int(getattr(env, "ace_episode_start", 0)),
        acted=None if acted0 is None else int(agent.acted) - int(acted0),
    )


def evaluate(
    env: Any,
    agent: Any,
    pairs: Sequence[tuple[int, int]],
    *,
    agent_name: str | None = None,
    max_steps: int | None = None,
    progress: bool = True,
) -> EvaluationReport:
    """Evaluate ``agent`` on every (scenario, seed) pair, with a progress bar over environment steps."""
    pairs = list(pairs)
    if not pairs:
        raise ValueError("pairs is empty: give at least one (scenario, seed)")
    name = env.ace_dataset.name if hasattr(env, "ace_dataset") else str(env.env_name)
    report = EvaluationReport(env_name=name, agent_name=agent_name or getattr(agent, "name", "agent"))
    total = sum(min(int(env.max_episode_duration()) - episode_start(env, seed), max_steps or 10**12)
                for _, seed in pairs)
    bar = _progress(total, f"{report.agent_name} on {report.env_name}", progress)
    for scenario, seed in pairs:
        report.episodes.append(play_episode(env, agent, scenario, seed, max_steps=max_steps, on_step=bar.update))
        bar.set_postfix(survival=f"{report.totals()['survival_rate']:.0%}")
    bar.close()
    return report


def parse_pairs(scenarios: Iterable[int], seeds: Iterable[int]) -> list[tuple[int, int]]:
    """Pairs from ``--episodes`` and ``--seeds``: zipped when the lengths match, one seed broadcast otherwise."""
    scenarios, seeds = list(scenarios), list(seeds)
    if len(seeds) == 1:
        seeds = seeds * len(scenarios)
    if len(seeds) != len(scenarios):
        raise ValueError(f"{len(scenarios)} scenarios but {len(seeds)} seeds: give one seed or one per scenario")
    return list(zip(scenarios, seeds))


def _progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="step", disable=not enabled, leave=False)
