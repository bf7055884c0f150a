"""Does the LLM help the policy actor? Each ranker against the same fixed set of bad transitions.

Run:  PYTHONPATH=python python benchmarks/bench_actor.py [--rankers llm,sim,random] [--backend smollm2]
          [--problems benchmarks/data/actor_problems.json] [--output benchmarks/RESULTS.md]

The problem set is built once (``--build``, or when the file is missing) and reused: bad transitions (an overload or
a blackout inside them, :func:`ace_hybrid.training.ace.is_bad`) met by a half-do-nothing, half-random policy on the
training seeds of two grids. Each problem is stored as a recipe, not as a grid state: (grid, scenario, seed, the
actions of the decisions before it, the bad action, the candidate shortlist); it is reproduced by replaying the
recipe (grid2op and the safe rule are deterministic for a seed) and checked against the stored max loading.

Every candidate of every problem is validated once (the "oracle": which candidates beat the bad action by the
acceptance margin, like for like in a simulator copy). Each ranker then refines every problem with up to
``--rounds`` rounds (failed attempts fed back), and is reported as: accept rate, first-choice accept rate, rounds
used, with 95% bootstrap intervals over problems, and its difference to the random ranker's *expected* accept rate
(exact from the oracle: 1 - C(n-g, R) / C(n, R) for g good among n candidates), paired per problem. "Discriminating"
problems are those where some but not all candidates are good: only there can a ranker show skill.

``--backend`` names the language model: ``smollm2`` (embedded), ``transformers:/path/to/model`` or
``openai:http://127.0.0.1:8000/v1#model-name`` (any OpenAI-compatible server).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_peers import markdown_table, update_markdown  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PROBLEMS = ROOT / "benchmarks" / "data" / "actor_problems.json"
FORMAT = 1
ENVS = ("l2rpn_case14_sandbox", "l2rpn_neurips_2020_track1")
THRESHOLD, CANDIDATES, VALIDATION_STEPS, MAX_STEPS = 0.9, 8, 48, 1000
ACE_MARGINS = (0.01, 0.05)
"""ace.min_improvement and ace.min_rho_drop defaults (checked against the configuration in the tests)."""


# ----------------------------------------------------------------------------- the problem set

def _actor(env: Any, catalog: Any, ranker: str, backend: Any = None, seed: int = 0) -> Any:
    from ace_hybrid.config import ACEConfig, RewardConfig
    from ace_hybrid.grid.reward import step_reward
    from ace_hybrid.grid.text import LineEndpoints
    from ace_hybrid.llm.actor import PolicyActor

    reward, ace = RewardConfig(), ACEConfig()
    return PolicyActor(backend, catalog, LineEndpoints.from_env(env), reward_fn=lambda o, b: step_reward(reward, o, b),
                       threshold=THRESHOLD, candidates=CANDIDATES, max_rounds=ace.max_rounds,
                       validation_steps=VALIDATION_STEPS, min_improvement=ace.min_improvement,
                       min_rho_drop=ace.min_rho_drop, ranker=ranker,
                       seed=seed)


def build_problems(env_name: str, n: int, seed: int, per_episode: int = 3) -> list[dict[str, Any]]:
    """``n`` bad transitions of ``env_name`` with their recipes, shortlists and oracle labels."""
    from tqdm.auto import tqdm

    from ace_hybrid.config import ACEConfig, RewardConfig
    from ace_hybrid.grid.catalog import ActionCatalog
    from ace_hybrid.grid.env import make_env, n_scenarios, reset_episode
    from ace_hybrid.grid.reward import step_reward
    from ace_hybrid.grid.rules import SafeRule, in_danger

    env = make_env(env_name, seed=0)
    catalog = ActionCatalog.for_env(env)
    actor = _actor(env, catalog, "sim")
    rule, reward_cfg, ace = SafeRule(env.action_space, threshold=THRESHOLD), RewardConfig(), ACEConfig()
    rng = np.random.default_rng(seed)
    problems: list[dict[str, Any]] = []
    bar = tqdm(total=n, desc=f"problems {env_name}", unit="problem")
    episode = 0
    while len(problems) < n and episode < 40 * n:
        scenario, ep_seed = episode % n_scenarios(env), 5000 + episode
        episode += 1
        obs, prefix, pending, found = reset_episode(env, scenario, ep_seed), [], None, 0
        for _ in range(MAX_STEPS):
            if in_danger(obs, THRESHOLD):
                if pending is not None:
                    found += _keep_if_bad(pending, actor, catalog, ace, env_name, scenario, ep_seed, problems)
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
                    _keep_if_bad(pending, actor, catalog, ace, env_name, scenario, ep_seed, problems)
                    pending = None
                break
        if pending is not None:
            pending["snapshot"].close()
        bar.update(len(problems) - bar.n)
    bar.close()
    env.close()
    return problems[:n]


def _keep_if_bad(p: dict[str, Any], actor: Any, catalog: Any, ace: Any, env_name: str, scenario: int, seed: int,
                 problems: list[dict[str, Any]]) -> int:
    """Add the completed transition ``p`` to ``problems`` if it is bad; closes its snapshot. Returns 1 if added."""
    snapshot = p.pop("snapshot")
    try:
        if not (p["blackout"] or p["max_rho"] >= ace.bad_rho or p["reward"] < ace.r_bar):
            return 0
        obs = p.pop("obs")
        candidates = actor.candidates(obs, None, p["action"])
        baseline = actor._simulate(snapshot, p["action"])
        good = [actor.better(actor._simulate(snapshot, c), baseline) for c in candidates]
        problems.append({"env": env_name, "scenario": scenario, "seed": seed, "prefix": p["prefix"],
                         "rl_action": p["action"], "rl_text": catalog.describe(p["action"]),
                         "decision_max_rho": float(np.max(obs.rho)), "reward": p["reward"], "max_rho": p["max_rho"],
                         "blackout": p["blackout"], "candidates": candidates, "good": good,
                         "baseline_reward": baseline.reward})
        return 1
    finally:
        snapshot.close()


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
    if path.is_file() and not rebuild:
        data = json.loads(path.read_text())
        if data.get("format") == FORMAT:
            return data["problems"]
        print(f"{path} is of another format: rebuilding", file=sys.stderr)
    problems = [p for env in envs for p in build_problems(env, per_env, seed)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": FORMAT, "threshold": THRESHOLD, "candidates": CANDIDATES,
                                "validation_steps": VALIDATION_STEPS, "seed": seed, "problems": problems}, indent=1))
    return problems


# ----------------------------------------------------------------------------- rankers on the set

def make_llm(spec: str) -> Any:
    """A backend from ``smollm2`` | ``transformers:PATH`` | ``openai:URL#MODEL``."""
    from ace_hybrid.config import LLMConfig
    from ace_hybrid.llm import make_backend

    if spec == "smollm2":
        return make_backend(LLMConfig(backend="smollm2"))
    kind, _, rest = spec.partition(":")
    if kind == "transformers" and rest:
        return make_backend(LLMConfig(backend="transformers", model_path=rest))
    if kind == "openai" and "#" in rest:
        url, model = rest.split("#", 1)
        return make_backend(LLMConfig(backend="openai", base_url=url, model=model))
    raise SystemExit(f"--backend {spec!r}: expected smollm2, transformers:PATH or openai:URL#MODEL")


def run_ranker(ranker: str, problems: list[dict[str, Any]], backend: Any, rounds: int) -> list[dict[str, Any]]:
    """Refine every problem with ``ranker``; one record per problem (accepted, first choice, rounds, seconds)."""
    from tqdm.auto import tqdm

    from ace_hybrid.grid.catalog import ActionCatalog
    from ace_hybrid.grid.env import make_env
    from ace_hybrid.llm.actor import max_rho

    out, envs = [], {}
    for problem in tqdm(problems, desc=f"ranker {ranker}", unit="problem"):
        if problem["env"] not in envs:
            env = make_env(problem["env"], seed=0)
            catalog = ActionCatalog.for_env(env)
            envs[problem["env"]] = (env, catalog, _actor(env, catalog, ranker, backend))
        env, catalog, actor = envs[problem["env"]]
        snapshot, obs = reproduce(env, catalog, problem)
        try:
            started = time.perf_counter()
            ref = actor.refine(snapshot, obs, problem["rl_action"], shortlist=problem["candidates"],
                               max_rounds=rounds)
            record = {"accepted": ref.accepted, "first": ref.first_choice_accepted, "rounds": ref.rounds,
                      "calls": ref.calls, "error": ref.error, "seconds": time.perf_counter() - started}
            if ref.accepted:
                record["gain"] = ref.improvement
                record["rho_drop"] = (max_rho(ref.baseline.obs) - max_rho(ref.rollout.obs)
                                      if not (ref.baseline.blackout or ref.rollout.blackout) else None)
                record["margin_met"] = (ref.improvement >= actor.min_improvement
                                        or (record["rho_drop"] is not None and ref.improvement >= 0
                                            and record["rho_drop"] >= actor.min_rho_drop))
            out.append(record)
        finally:
            snapshot.close()
    for env, _, _ in envs.values():
        env.close()
    return out


def expected_random(problem: dict[str, Any], rounds: int) -> tuple[float, float]:
    """Exact accept and first-choice rates of a uniformly random order over the problem's candidates."""
    n, g = len(problem["good"]), sum(problem["good"])
    r = min(rounds, n)
    return 1.0 - math.comb(n - g, r) / math.comb(n, r), g / n


def bootstrap(values: np.ndarray, draws: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """Mean and 95% percentile-bootstrap interval over the first axis."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(draws, len(values)))
    means = values[idx].mean(axis=1)
    return float(values.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def _ci(values: Any, pct: bool = True) -> str:
    m, lo, hi = bootstrap(np.asarray(values, dtype=np.float64))
    return f"{100 * m:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]" if pct else f"{m:.2f} [{lo:.2f}, {hi:.2f}]"


def report(problems: list[dict[str, Any]], results: dict[str, list[dict[str, Any]]], rounds: int,
           backend_name: str) -> str:
    exp = np.array([expected_random(p, rounds) for p in problems])
    disc = np.array([0 < sum(p["good"]) < len(p["good"]) for p in problems])
    oracle = np.array([any(p["good"]) for p in problems], dtype=np.float64)
    header = ["ranker", "accept rate", "first choice", "rounds", "accept − random (paired)",
              "first choice, discriminating", "s / problem"]
    rows = [["oracle (any candidate good)", _ci(oracle), "", "", "", "", ""],
            ["random (exact expectation)", _ci(exp[:, 0]), _ci(exp[:, 1]), "", "", _ci(exp[disc, 1]), ""]]
    for ranker, recs in results.items():
        acc = np.array([r["accepted"] for r in recs], dtype=np.float64)
        first = np.array([r["first"] for r in recs], dtype=np.float64)
        diff = acc - exp[:, 0]
        rows.append([ranker, _ci(acc), _ci(first), _ci([r["rounds"] for r in recs], pct=False),
                     _ci(diff), _ci(first[disc]), f"{np.mean([r['seconds'] for r in recs]):.2f}"])
    per_env = ", ".join(f"{sum(p['env'] == e for p in problems)} on {e}" for e in sorted({p["env"] for p in problems}))
    accepted = [r for recs in results.values() for r in recs if r["accepted"]]
    below = sum(not r["margin_met"] for r in accepted)
    return "\n".join([
        f"{len(problems)} bad transitions ({per_env}; {int(disc.sum())} discriminating), {CANDIDATES} candidates each, "
        f"up to {rounds} rounds; LLM: {backend_name}. Intervals: 95% bootstrap over problems.", "",
        markdown_table(header, rows), "",
        f"Accepted refinements below the acceptance margin (reward + {ACE_MARGINS[0]}, or max loading - "
        f"{ACE_MARGINS[1]:.0%} at no lower reward): {below} of {len(accepted)}."])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rankers", default="llm,sim,random", help="comma-separated: llm, lac, sim, random")
    p.add_argument("--backend", default="smollm2", help="smollm2 | transformers:PATH | openai:URL#MODEL")
    p.add_argument("--problems", type=Path, default=DEFAULT_PROBLEMS, help="the problem set (built if missing)")
    p.add_argument("--per-env", type=int, default=60, help="problems per grid when building (default 60)")
    p.add_argument("--build", action="store_true", help="rebuild the problem set")
    p.add_argument("--envs", default=",".join(ENVS), help="grids of a new problem set (comma-separated)")
    p.add_argument("--limit", type=int, default=0, help="use only the first N problems (0: all)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", type=Path, help="markdown file whose 'actor' section to write between markers")
    args = p.parse_args(argv)
    rankers = [r.strip() for r in args.rankers.split(",") if r.strip()]
    valid = ("llm", "lac", "sim", "random")
    if not rankers or any(r not in valid for r in rankers):
        p.error(f"--rankers {args.rankers!r}: choose among {', '.join(valid)} (q needs a trained critic: not here)")
    if args.per_env < 1 or args.rounds < 1 or args.limit < 0:
        p.error("--per-env and --rounds must be >= 1, --limit >= 0")
    import torch

    torch.set_num_threads(1)
    problems = load_problems(args.problems, args.per_env, args.seed, args.build,
                             tuple(e.strip() for e in args.envs.split(",") if e.strip()))
    if args.limit:
        problems = problems[: args.limit]
    backend = make_llm(args.backend) if any(r in ("llm", "lac") for r in rankers) else None
    results = {r: run_ranker(r, problems, backend if r in ("llm", "lac") else None, args.rounds) for r in rankers}
    cmd = "PYTHONPATH=python python benchmarks/bench_actor.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = "\n".join(["### The policy actor's rankers on a fixed set of bad transitions", "",
                      f"Command: `{cmd.strip()}` (torch threads 1)", "",
                      report(problems, results, args.rounds, args.backend if backend is not None else "none"), ""])
    print(text)
    if args.output:
        update_markdown(args.output, "actor", text)
    raw = args.problems.with_name(args.problems.stem + "-results.json")
    raw.write_text(json.dumps({"rounds": args.rounds, "backend": args.backend, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
