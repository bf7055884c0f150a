"""Fixed sets of bad transitions, labelled by the simulator, for measuring the policy actor's rankers and the LLM.

A problem is a bad transition (an overload or a blackout inside it, :func:`ace_hybrid.training.ace.is_bad`) met by a
half-do-nothing, half-random policy on a grid, with its shortlist of candidates (the actor's
:meth:`~ace_hybrid.llm.actor.PolicyActor.candidates`, heuristic order, do nothing last). Each is stored twice over:

* as a *recipe* (grid, scenario, seed, the actions of the decisions before it, the bad action), replayed to rebuild
  the grid state when a ranker must run live (grid2op and the safe rule are deterministic for a seed; the replay is
  checked against the stored max loading);
* as *content*: the state text, the RL action's text and outcome, each candidate's text and simulated one-step
  effect, and each candidate's validation (like for like in a simulator copy, :meth:`PolicyActor.better`): ``good``,
  its segment reward, the loading where it ended and its outcome text. A ranker's first choice, and a language
  model's, is then scored without a simulator: the labels say whether it would have been accepted.

The validated ``best`` candidate of a problem is the good one with the highest segment reward (lowest end loading
on ties); a problem with no good candidate has none.
"""

from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

# The reading and scoring of a labelled set live in the package (the training loop's exam uses them too).
from ace_hybrid.llm.exam import (PROBLEM_FORMAT as FORMAT, bootstrap, choice_problem, expected_random,  # noqa: F401
                                 first_choices, good_rate, position_controls, read_problem_set)

ROOT = Path(__file__).resolve().parents[1]
ENVS = ("l2rpn_case14_sandbox", "l2rpn_neurips_2020_track1")
THRESHOLD, CANDIDATES, VALIDATION_STEPS, MAX_STEPS = 0.9, 8, 48, 1000
ACE_MARGINS = (0.01, 0.05)
"""ace.min_improvement and ace.min_rho_drop defaults (checked against the configuration in the tests)."""


def make_actor(env: Any, catalog: Any, ranker: str, backend: Any = None, seed: int = 0,
               show_effects: bool = True) -> Any:
    """The policy actor of the benchmarks: the configuration's acceptance margins, 8 candidates, 48-step validation."""
    from ace_hybrid.config import ACEConfig, RewardConfig
    from ace_hybrid.grid.reward import step_reward
    from ace_hybrid.grid.text import LineEndpoints
    from ace_hybrid.llm.actor import PolicyActor

    reward, ace = RewardConfig(), ACEConfig()
    return PolicyActor(backend, catalog, LineEndpoints.from_env(env), reward_fn=lambda o, b: step_reward(reward, o, b),
                       threshold=THRESHOLD, candidates=CANDIDATES, max_rounds=ace.max_rounds,
                       validation_steps=VALIDATION_STEPS, min_improvement=ace.min_improvement,
                       min_rho_drop=ace.min_rho_drop, ranker=ranker, show_effects=show_effects, seed=seed)


# ----------------------------------------------------------------------------- building

def build_problems(env_name: str, n: int, seed: int, per_episode: int = 3, first_episode: int = 0
                   ) -> list[dict[str, Any]]:
    """``n`` labelled bad transitions of ``env_name`` (episodes ``first_episode``, ``first_episode + 1``, ...:
    scenario ``k mod n_scenarios``, seed ``5000 + k``)."""
    from tqdm.auto import tqdm

    from ace_hybrid.config import ACEConfig, RewardConfig
    from ace_hybrid.grid.catalog import ActionCatalog
    from ace_hybrid.grid.env import make_env, n_scenarios, reset_episode
    from ace_hybrid.grid.reward import step_reward
    from ace_hybrid.grid.rules import SafeRule, in_danger

    env = make_env(env_name, seed=0)
    catalog = ActionCatalog.for_env(env)
    actor = make_actor(env, catalog, "sim")
    rule, reward_cfg, ace = SafeRule(env.action_space, threshold=THRESHOLD), RewardConfig(), ACEConfig()
    rng = np.random.default_rng(seed)
    problems: list[dict[str, Any]] = []
    bar = tqdm(total=n, desc=f"problems {env_name}", unit="problem")
    episode = first_episode
    while len(problems) < n and episode < first_episode + 40 * n:
        scenario, ep_seed = episode % n_scenarios(env), 5000 + episode
        episode += 1
        obs, prefix, pending, found = reset_episode(env, scenario, ep_seed), [], None, 0
        where = {"env": env_name, "scenario": scenario, "seed": ep_seed}
        for _ in range(MAX_STEPS):
            if in_danger(obs, THRESHOLD):
                if pending is not None:
                    found += _keep_if_bad(pending, actor, ace, where, problems)
                    prefix.append(pending["action"])
                    pending = None
                if found >= per_episode or len(problems) >= n:
                    break
                legal = np.flatnonzero(catalog.legal_mask(obs))
                action = 0 if rng.random() < 0.5 else int(rng.choice(legal))
                pending = {"snapshot": env.copy(), "obs": obs, "action": action, "reward": 0.0, "max_rho": 0.0,
                           "blackout": False, "prefix": list(prefix)}
                grid_action = catalog.action(action)
            else:
                grid_action = rule(obs)
            obs, _, done, info = env.step(grid_action)
            if pending is not None:
                blackout = bool(done and info.get("exception"))
                pending["reward"] += step_reward(reward_cfg, obs, blackout)
                pending["max_rho"] = max(pending["max_rho"], float(np.max(obs.rho)))
                pending["blackout"] |= blackout
            if done:
                if pending is not None:
                    _keep_if_bad(pending, actor, ace, where, problems)
                    pending = None
                break
        if pending is not None:
            pending["snapshot"].close()
        bar.update(len(problems) - bar.n)
    bar.close()
    env.close()
    return problems[:n]


def _keep_if_bad(p: dict[str, Any], actor: Any, ace: Any, where: dict[str, Any],
                 problems: list[dict[str, Any]]) -> int:
    """Add the completed transition ``p`` to ``problems`` if it is bad; closes its snapshot. Returns 1 if added."""
    from ace_hybrid.grid.text import describe_state
    from ace_hybrid.llm.actor import describe_outcome, max_rho
    from ace_hybrid.llm.rankers import simulate_effects

    snapshot = p.pop("snapshot")
    try:
        if not (p["blackout"] or p["max_rho"] >= ace.bad_rho or p["reward"] < ace.r_bar):
            return 0
        obs, catalog = p.pop("obs"), actor.catalog
        candidates = actor.candidates(obs, None, p["action"])
        baseline = actor._simulate(snapshot, p["action"])
        outcomes = [actor._simulate(snapshot, c) for c in candidates]
        problems.append({
            **where, "prefix": p["prefix"], "rl_action": p["action"], "decision_max_rho": float(np.max(obs.rho)),
            "reward": p["reward"], "max_rho": p["max_rho"], "blackout": p["blackout"], "candidates": candidates,
            "good": [actor.better(o, baseline) for o in outcomes], "baseline_reward": baseline.reward,
            "state_text": describe_state(obs, actor.layout), "rl_text": catalog.describe(p["action"]),
            "rl_outcome": describe_outcome(baseline), "texts": [catalog.describe(c) for c in candidates],
            "effects": [list(e) for e in simulate_effects(obs, [catalog.action(c) for c in candidates])],
            "rewards": [o.reward for o in outcomes],
            "end_rho": [math.inf if o.blackout else max_rho(o.obs) for o in outcomes],
            "outcomes": [describe_outcome(o) for o in outcomes]})
        return 1
    finally:
        snapshot.close()


# ----------------------------------------------------------------------------- reading

def best_candidate(problem: dict[str, Any]) -> int | None:
    """Position (shortlist order) of the validated best candidate, None when no candidate is good."""
    good = [i for i, g in enumerate(problem["good"]) if g]
    if not good:
        return None
    return max(good, key=lambda i: (problem["rewards"][i], -problem["end_rho"][i], -i))


def reproduce(env: Any, catalog: Any, problem: dict[str, Any]) -> tuple[Any, Any]:
    """(snapshot, obs) of ``problem``'s decision, by replaying its recipe; the caller closes the snapshot."""
    from ace_hybrid.grid.env import reset_episode
    from ace_hybrid.grid.rules import SafeRule, in_danger

    rule = SafeRule(env.action_space, threshold=THRESHOLD)
    obs, prefix = reset_episode(env, problem["scenario"], problem["seed"]), list(problem["prefix"])
    for _ in range(MAX_STEPS):
        if in_danger(obs, THRESHOLD):
            if not prefix:
                if not math.isclose(float(np.max(obs.rho)), problem["decision_max_rho"], rel_tol=1e-5):
                    break
                return env.copy(), obs
            grid_action = catalog.action(prefix.pop(0))
        else:
            grid_action = rule(obs)
        obs, _, done, _ = env.step(grid_action)
        if done:
            break
    raise RuntimeError(f"problem ({problem['env']}, scenario {problem['scenario']}, seed {problem['seed']}, decision "
                       f"{len(problem['prefix'])}) no longer reproduces (another grid2op or lightsim2grid version?): "
                       f"rebuild the set with --build")


def load_problems(path: Path, per_env: int, seed: int, rebuild: bool, envs: tuple[str, ...] = ENVS
                  ) -> list[dict[str, Any]]:
    """The problems of the set at ``path`` (``.json`` or ``.json.gz``) that offer a choice (two candidates or more);
    the set is built and saved first when missing, of another format, or when ``rebuild``."""
    if path.is_file() and not rebuild:
        try:
            return [p for p in read_problem_set(path)["problems"] if len(p["candidates"]) >= 2]
        except ValueError as exc:
            print(f"{exc}: rebuilding", file=sys.stderr)
    return [p for p in build_set(path, per_env, seed, envs) if len(p["candidates"]) >= 2]


def build_set(path: Path, per_env: int, seed: int, envs: tuple[str, ...], first_episode: int = 0
              ) -> list[dict[str, Any]]:
    """Build ``per_env`` problems of each grid and save them at ``path`` (gzip-compressed if it ends in .gz)."""
    problems = [p for env in envs for p in build_problems(env, per_env, seed, first_episode=first_episode)]
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"format": FORMAT, "threshold": THRESHOLD, "candidates": CANDIDATES,
                       "validation_steps": VALIDATION_STEPS, "seed": seed, "problems": problems}, indent=None)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        path.write_text(text)
    return problems


# ----------------------------------------------------------------------------- statistics

def ci(values: Any, pct: bool = True) -> str:
    """"mean [low, high]" of a bootstrap over the values (in % points when ``pct``)."""
    m, lo, hi = bootstrap(np.asarray(values, dtype=np.float64))
    return f"{100 * m:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]" if pct else f"{m:.2f} [{lo:.2f}, {hi:.2f}]"


def diff_ci(values: Any) -> str:
    """A paired difference in points, signed: "+6.4 [+4.4, +8.6]"."""
    m, lo, hi = bootstrap(np.asarray(values, dtype=np.float64))
    return f"{100 * m:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def spread(position: np.ndarray, n: int) -> tuple[float, str]:
    """(share of the most chosen position, "A 31% B 12% ...") of the positions chosen."""
    counts = np.bincount(position.ravel(), minlength=n)[:n] / position.size
    return float(counts.max()), " ".join(f"{'ABCDEFGHIJKLMNOPQRSTUVWXYZ'[k]} {100 * c:.0f}%" for k, c in enumerate(counts))
