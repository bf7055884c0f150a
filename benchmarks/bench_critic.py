"""Does the LLM value critic see what happened next? Its ratings against the discounted return that followed.

Run:  PYTHONPATH=python python benchmarks/bench_critic.py [--backend smollm2 [--backend openai:URL#MODEL ...]]
          [--raters llm,hindsight,random] [--data benchmarks/data/critic_trajectories.json]
          [--output benchmarks/data/critic_results.md]

Trajectories
------------
Stored as the training loop stores them (:func:`ace_hybrid.training.loop.train_episode`): one semi-MDP transition per
decision in a :class:`~ace_hybrid.replay.MixedReplayBuffer` (features from
:class:`~ace_hybrid.grid.features.ObservationFeatures`, the reward summed over the decision's environment steps with
:func:`~ace_hybrid.grid.reward.step_reward`, done on a blackout, truncated at the end of the scenario), made by a
fixed, seeded policy that decides well and badly: at each decision a third of the time do nothing, a third a random
legal catalog action, a third the greedy expert's choice (do nothing and the catalog's 7-action shortlist, each
simulated one step, lowest max loading). Episodes (scenario ``k mod n``, seed ``5000 + k``) run to their end. The set
is built once per grid (``--build``, or when missing) and saved: one replay file per grid (``critic_<grid>.bin.gz``,
the replay's own file format, gzipped) and a manifest (``critic_trajectories.json``: seeds, the policy's choice
kinds, the text of every action used, so rating needs no grid2op). The critic is handed exactly what
:meth:`ValueCritic.run <ace_hybrid.llm.critic.ValueCritic.run>` would hand it: the trajectories
:meth:`~ace_hybrid.llm.critic.ValueCritic.select` chooses (finished, with a key transition ``|r| > ace.r_key``), each
step's max loading read from the stored features, the steps it asks about chosen by the critic itself.

Ground truth: the discounted return of the decisions after the judged one
------------------------------------------------------------------------
For decision ``i`` of a trajectory with stored rewards ``r_0 .. r_{n-1}``::

    after_i = sum_{j > i} gamma^(j - i) r_j        (gamma = sac.gamma, applied per decision as SAC applies it)

Why this one: the critic's options are defined against the immediate reward -- "+K: better than its reward shows",
"-K: worse than its reward shows (it contributed to later trouble)" -- so the truth must be the part of the decision's
outcome that its immediate reward does *not* contain, which is what followed it: ``G_i - r_i = after_i``. It is
also the quantity shaping feeds: SAC learns ``r_i + gamma V(s_{i+1})``, and the critic's adjustment is meant to move
credit of that later outcome to the decision. A collapse decision's own -1 is already in its reward (after = 0 when
nothing follows); the decisions leading up to it carry the collapse discounted. The alternatives were set aside:
"collapsed within k decisions" is the same quantity coarsened to two values (mostly ties); a counterfactual (the
judged action's simulated continuation against do nothing's) measures the action's causal worth, but nothing in the
critic's prompt shows the alternative, so it would test a question the critic is never asked. Caveats: a
trajectory that survives to the end of its scenario is cut there (its tail is unknown: about +0.01 per step, small
beside a collapse's -1), and ``after_i`` counts later decisions' luck as well as decision ``i``'s effect (the
usual hindsight credit).

Measure
-------
Spearman's rank correlation between the rating (units of K: -2, -1, +1, +2) and ``after_i`` over every judged step,
with a 95% percentile-bootstrap interval clustered by trajectory (whole trajectories are resampled, their judged
steps together). A rater whose ratings are all equal has no rank correlation: it is reported as undefined, and so
is an interval when more than 2.5% of the resamples are constant. Raters: ``llm`` (the critic with each
``--backend``: ``smollm2`` embedded, ``transformers:/path/to/model``, ``openai:URL#MODEL``), and two rule "backends"
that answer the critic's very prompts (same steps asked about, same text): ``hindsight`` reads the summed reward of
the later decisions that the prompt states and rates by it (the cheapest strong heuristic: what a careful reader of
the prompt could do), ``random`` rates uniformly at random (seeded). Seconds per call: wall-clock time of the
critic's calls about one trajectory over their number (one call per judged decision).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_peers import markdown_table, update_markdown  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT / "benchmarks" / "data" / "critic_trajectories.json"
FORMAT = 1
ENVS = ("l2rpn_case14_sandbox", "l2rpn_neurips_2020_track1")
THRESHOLD, GREEDY_BUDGET, RL_CAPACITY = 0.9, 8, 100_000
KINDS = ("do nothing", "random", "greedy")
OPTION_ORDER = ("-2K", "-K", "+K", "+2K")


# ----------------------------------------------------------------------------- the trajectory set

def _greedy(obs: Any, catalog: Any) -> int:
    """The greedy expert's choice: do nothing or one of the catalog's shortlist, lowest simulated max rho."""
    best, best_rho = 0, float("inf")
    for index in [0, *catalog.shortlist(obs, GREEDY_BUDGET - 1).tolist()]:
        sim_obs, _, done, info = obs.simulate(catalog.action(int(index)))
        rho = float("inf") if done or info.get("is_illegal", False) or info.get("exception") else float(
            np.max(sim_obs.rho))
        if rho < best_rho:
            best, best_rho = int(index), rho
    return best


def build_trajectories(env_name: str, n: int, seed: int, out_dir: Path) -> dict[str, Any]:
    """Play the fixed policy on ``env_name`` until ``n`` stored trajectories are ones the critic would judge.

    Writes ``out_dir/critic_<env_name>.bin.gz`` (the replay, gzipped) and returns the grid's manifest entry.
    """
    from ace_hybrid.config import ACEConfig, RewardConfig
    from ace_hybrid.grid.catalog import ActionCatalog
    from ace_hybrid.grid.env import make_env, n_scenarios, reset_episode
    from ace_hybrid.grid.features import ObservationFeatures
    from ace_hybrid.grid.reward import step_reward
    from ace_hybrid.grid.rules import SafeRule, in_danger
    from ace_hybrid.llm.critic import ValueCritic
    from ace_hybrid.replay import MixedReplayBuffer
    from tqdm.auto import tqdm

    env = make_env(env_name, seed=0)
    catalog, features = ActionCatalog.for_env(env), ObservationFeatures(env)
    rule, reward_cfg = SafeRule(env.action_space, threshold=THRESHOLD), RewardConfig()
    # The critic's own selection (finished, two decisions or more, a key transition) says which episodes count.
    selector = ValueCritic(None, ACEConfig(critic_trajectories=1000), describe_action=str,  # type: ignore[arg-type]
                           max_rho=lambda raw: raw.max(1))
    rng = np.random.default_rng([seed, ENVS.index(env_name) if env_name in ENVS else len(ENVS)])
    replay = MixedReplayBuffer(features.dim, RL_CAPACITY, 1, seed=seed)
    episodes: list[dict[str, Any]] = []
    actions: dict[int, str] = {}
    bar = tqdm(total=n, desc=f"trajectories {env_name}", unit="traj")
    k = 0
    while sum(e["judged"] for e in episodes) < n and k < 40 * n:
        scenario, ep_seed = k % n_scenarios(env), 5000 + k
        obs, kinds, rewards, pending = reset_episode(env, scenario, ep_seed), [], [], None
        blackout = False
        while True:
            if in_danger(obs, THRESHOLD):
                x = features(obs)
                if pending is not None:
                    replay.add_rl(pending[0], pending[1], rewards[-1], x, False, False, k, len(rewards) - 1)
                kind = int(rng.integers(3))
                action = (0 if kind == 0 else int(rng.choice(np.flatnonzero(catalog.legal_mask(obs)))) if kind == 1
                          else _greedy(obs, catalog))
                actions.setdefault(action, catalog.describe(action))
                pending, grid_action = (x, action), catalog.action(action)
                kinds.append(kind)
                rewards.append(0.0)
            else:
                grid_action = rule(obs)
            obs, _, done, info = env.step(grid_action)
            blackout = bool(done and info.get("exception"))
            if pending is not None:
                rewards[-1] += step_reward(reward_cfg, obs, blackout)
            if done:
                break
        if pending is not None:
            replay.add_rl(pending[0], pending[1], rewards[-1], features(obs), blackout, not blackout, k,
                          len(rewards) - 1)
            columns = replay.rl_columns()
            judged = any(int(columns["episode"][rows[0]]) == k for rows in selector.select(columns))
            episodes.append({"episode": k, "scenario": scenario, "seed": ep_seed, "decisions": len(rewards),
                             "blackout": blackout, "kinds": [KINDS[i] for i in kinds], "judged": judged})
        k += 1
        bar.update(min(n, sum(e["judged"] for e in episodes)) - bar.n)
    bar.close()
    env.close()
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"critic_{env_name}.bin.gz"
    with tempfile.TemporaryDirectory() as tmp:
        replay.save(Path(tmp) / "replay.bin")
        (out_dir / name).write_bytes(gzip.compress((Path(tmp) / "replay.bin").read_bytes(), mtime=0))
    return {"replay": name, "n_line": features.n_line, "episodes_played": k,
            "actions": {str(a): t for a, t in sorted(actions.items())}, "episodes": episodes}


def load_trajectories(path: Path, per_env: int, seed: int, rebuild: bool, envs: tuple[str, ...] = ENVS
                      ) -> dict[str, Any]:
    """The manifest at ``path`` (built with its replay files when missing, of another format, or ``rebuild``)."""
    from ace_hybrid.config import SACConfig

    gamma = SACConfig().gamma
    if path.is_file() and not rebuild:
        data = json.loads(path.read_text())
        if data.get("format") == FORMAT:
            return data
        print(f"{path} is of another format: rebuilding", file=sys.stderr)
    data = {"format": FORMAT, "threshold": THRESHOLD, "gamma": gamma, "seed": seed,
            "policy": "per decision, uniformly: do nothing | a random legal catalog action | greedy (do nothing and "
                      f"the catalog shortlist, {GREEDY_BUDGET} simulated, lowest max rho)",
            "grids": {e: build_trajectories(e, per_env, seed, path.parent) for e in envs}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    return data


def critic_inputs(data: dict[str, Any], path: Path, limit: int = 0) -> list[dict[str, Any]]:
    """The trajectories the critic would judge, as :meth:`ValueCritic.run` builds them, with their ground truth.

    Returns one record per trajectory: ``grid``, ``episode``, ``steps`` (TrajectoryStep list), ``survived``,
    ``rewards`` (the stored original rewards) and ``after`` (the discounted return after each decision).
    """
    from ace_hybrid.config import ACEConfig
    from ace_hybrid.grid.text import TrajectoryStep
    from ace_hybrid.llm.critic import ValueCritic
    from ace_hybrid.replay import MixedReplayBuffer

    out: list[dict[str, Any]] = []
    for grid, entry in data["grids"].items():
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "replay.bin").write_bytes(gzip.decompress((path.parent / entry["replay"]).read_bytes()))
            replay = MixedReplayBuffer.load(Path(tmp) / "replay.bin")
        columns = replay.rl_columns()
        stored = {e["episode"]: e["decisions"] for e in entry["episodes"]}
        counts = dict(zip(*np.unique(columns["episode"], return_counts=True)))
        if {int(k): int(v) for k, v in counts.items()} != stored:
            raise RuntimeError(f"{entry['replay']} does not hold the trajectories {path.name} lists: rebuild with "
                               "--build")
        n_line, texts = int(entry["n_line"]), entry["actions"]
        cfg = ACEConfig(critic_trajectories=1000)
        selector = ValueCritic(None, cfg, describe_action=lambda i, t=texts: t[str(i)],  # type: ignore[arg-type]
                               max_rho=lambda raw, n=n_line: raw[:, :n].max(1))
        chosen = sorted(selector.select(columns), key=lambda rows: int(columns["episode"][rows[0]]))
        for rows in chosen[: limit or None]:
            # As ValueCritic.run: the stored observations' max loading, the original rewards, survival from done.
            obs = replay.get(np.asarray(columns["index"][rows], dtype=np.int64)).obs
            rho = np.asarray(selector.max_rho(obs), dtype=np.float64)
            original = np.asarray(columns["original_reward"][rows], dtype=np.float64)
            steps = [TrajectoryStep(int(columns["decision"][r]), selector.describe_action(int(columns["action"][r])),
                                    float(original[j]), float(rho[j])) for j, r in enumerate(rows)]
            out.append({"grid": grid, "episode": int(columns["episode"][rows[0]]), "steps": steps,
                        "survived": not bool(columns["done"][rows[-1]]), "rewards": original,
                        "after": discounted_after(original, float(data["gamma"]))})
    return out


def discounted_after(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """``after_i = sum_{j > i} gamma^(j - i) r_j`` for every i: what followed each decision."""
    r = np.asarray(rewards, dtype=np.float64)
    out, acc = np.zeros(len(r)), 0.0
    for i in range(len(r) - 1, -1, -1):
        out[i] = acc
        acc = gamma * (r[i] + acc)
    return out


# ----------------------------------------------------------------------------- raters

_FOLLOWED = re.compile(r"What followed: \d+ more decisions? earning ([+-]\d+\.\d+) in total")


class RuleBackend:
    """A rule that answers the critic's prompts through the backend protocol (what score mode calls).

    The critic asks about one decision with three prompts (what really followed, and its best and worst anchors) and
    reads good/bad label log-probabilities; a rule answers by placing the real outcome in the quarter of the
    anchors' range that gives its rating. ``hindsight``: by the summed reward of the later decisions that the prompt
    states, -2K below -0.5, -K below 0, +K below 0.5, +2K above. ``random``: uniform over the options (seeded).
    """

    supports_finetune = False

    def __init__(self, rule: str, seed: int = 0) -> None:
        if rule not in ("hindsight", "random"):
            raise ValueError(f"rule = {rule!r}: expected 'hindsight' or 'random'")
        self.name = self.rule = rule
        self.rng = np.random.default_rng(seed)
        self.stats = {"calls": 0}

    def _choice(self, text: str) -> int:
        if self.rule == "random":
            return int(self.rng.integers(4))
        total = float(_FOLLOWED.findall(text)[0])
        return int(np.searchsorted([-0.5, 0.0, 0.5], total, side="right"))

    def next_token_logprobs_many(self, prompts: Sequence[Any], tokens: Sequence[str]) -> np.ndarray:
        """(3, 4): margins good - bad of -1 (worst anchor), +1 (best anchor) and the chosen quarter's centre."""
        self.stats["calls"] += 1
        q = (0.125, 0.375, 0.625, 0.875)[self._choice(prompts[0][-1]["content"])]
        margins = np.array([-1.0 + 2.0 * q, 1.0, -1.0])
        half = len(tokens) // 2  # the critic asks for the good tokens, then as many bad ones
        out = np.full((len(prompts), len(tokens)), -50.0)
        out[:, 0], out[:, half] = margins / 2, -margins / 2
        return out


def rate(name: str, backend: Any, trajectories: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ask the critic (on ``backend``) about every trajectory; one record per trajectory."""
    from ace_hybrid.config import ACEConfig
    from ace_hybrid.llm.critic import ValueCritic
    from tqdm.auto import tqdm

    critic = ValueCritic(backend, ACEConfig(), describe_action=str, max_rho=lambda raw: raw.max(1))
    out = []
    for t in tqdm(trajectories, desc=f"rater {name}", unit="traj"):
        started = time.perf_counter()
        j = critic.judge(t["steps"], survived=t["survived"])
        out.append({"grid": t["grid"], "episode": t["episode"], "units": {str(k): v for k, v in j.units.items()},
                    "calls": j.calls, "malformed": j.malformed, "error": None if j.error is None else str(j.error),
                    "seconds": time.perf_counter() - started})
    return out


# ----------------------------------------------------------------------------- statistics

def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho (average ranks for ties); NaN when either side is constant (no rank correlation exists)."""
    from scipy.stats import rankdata

    if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    rx, ry = rankdata(x), rankdata(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return float((rx * ry).sum() / np.sqrt((rx * rx).sum() * (ry * ry).sum()))


def clustered_spearman(pairs: list[tuple[np.ndarray, np.ndarray]], draws: int = 4000, seed: int = 0
                       ) -> dict[str, Any]:
    """rho over all pairs and its 95% bootstrap interval, resampling whole clusters (trajectories).

    ``pairs``: per cluster, (ratings, targets). The interval is undefined (None) when more than 2.5% of the
    resamples have no rank correlation (constant ratings or targets).
    """
    x = np.concatenate([p[0] for p in pairs]) if pairs else np.zeros(0)
    y = np.concatenate([p[1] for p in pairs]) if pairs else np.zeros(0)
    rho = spearman(x, y)
    out: dict[str, Any] = {"rho": rho, "lo": None, "hi": None, "undefined_draws": 0, "n": len(x)}
    if np.isnan(rho):
        return out
    rng = np.random.default_rng(seed)
    stats = np.empty(draws)
    for d in range(draws):
        pick = rng.integers(0, len(pairs), size=len(pairs))
        stats[d] = spearman(np.concatenate([pairs[i][0] for i in pick]), np.concatenate([pairs[i][1] for i in pick]))
    defined = stats[~np.isnan(stats)]
    out["undefined_draws"] = int(draws - len(defined))
    if out["undefined_draws"] <= 0.025 * draws:
        out["lo"], out["hi"] = float(np.percentile(defined, 2.5)), float(np.percentile(defined, 97.5))
    return out


def _rho_text(s: dict[str, Any], ratings: np.ndarray) -> tuple[str, str]:
    if np.isnan(s["rho"]):
        if len(ratings) and np.all(ratings == ratings[0]):
            return f"undefined: every rating is {OPTION_ORDER[[-2, -1, 1, 2].index(int(ratings[0]))]}", \
                "no correlation (constant)"
        return "undefined", "no correlation (undefined)"
    if s["lo"] is None:
        return f"{s['rho']:+.2f} [undefined: {s['undefined_draws']} constant resamples]", "not shown (undefined)"
    verdict = "positive" if s["lo"] > 0 else "negative" if s["hi"] < 0 else "none shown (interval holds 0)"
    return f"{s['rho']:+.2f} [{s['lo']:+.2f}, {s['hi']:+.2f}]", verdict


def pairs_of(records: list[dict[str, Any]], trajectories: list[dict[str, Any]], grid: str | None = None
             ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per trajectory (of ``grid``, or all): (ratings, after) of its judged steps; trajectories with none left out."""
    out = []
    for rec, t in zip(records, trajectories):
        if (grid is None or t["grid"] == grid) and rec["units"]:
            pos = sorted(int(k) for k in rec["units"])
            out.append((np.array([rec["units"][str(p)] for p in pos], dtype=np.float64), t["after"][pos]))
    return out


def report(trajectories: list[dict[str, Any]], results: dict[str, list[dict[str, Any]]], draws: int) -> str:
    grids = sorted({t["grid"] for t in trajectories})
    header = ["rater", "Spearman rho [95% CI], all", "correlation", "-2K", "-K", "+K", "+2K", "trajectories",
              "judged steps", "s / call", *[f"rho, {g}" for g in grids]]
    rows = []
    for name, recs in results.items():
        pairs = pairs_of(recs, trajectories)
        ratings = np.concatenate([p[0] for p in pairs]) if pairs else np.zeros(0)
        rho, verdict = _rho_text(clustered_spearman(pairs, draws), ratings)
        counts = [int(np.sum(ratings == u)) for u in (-2, -1, 1, 2)]
        calls = sum(r["calls"] for r in recs)
        per_call = sum(r["seconds"] for r in recs) / calls if calls else float("nan")
        per_grid = []
        for g in grids:
            gp = pairs_of(recs, trajectories, g)
            gr = np.concatenate([p[0] for p in gp]) if gp else np.zeros(0)
            per_grid.append(_rho_text(clustered_spearman(gp, draws), gr)[0])
        rows.append([name, rho, verdict, *map(str, counts), str(len(pairs)), str(len(ratings)),
                     f"{per_call:.2f}" if calls else "-", *per_grid])
    per_grid_n = ", ".join(f"{sum(t['grid'] == g for t in trajectories)} on {g}" for g in grids)
    after = np.concatenate([t["after"] for t in trajectories]) if trajectories else np.zeros(0)
    errors = {n: sum(r["error"] is not None for r in recs) for n, recs in results.items()}
    malformed = {n: sum(r["malformed"] for r in recs) for n, recs in results.items()}
    return "\n".join([
        (f"{len(trajectories)} trajectories ({per_grid_n}), {sum(len(t['steps']) for t in trajectories)} decisions, "
        f"{sum(not t['survived'] for t in trajectories)} ending in a blackout. Ground truth: the discounted return of "
        f"the decisions after the judged one (mean {after.mean():+.2f}, range [{after.min():+.2f}, "
        f"{after.max():+.2f}] over all decisions). Interval: 95% bootstrap over trajectories ({draws} resamples)."),
        "", markdown_table(header, rows), "",
        f"LLM errors (trajectory skipped): {errors}; malformed answers ignored: {malformed}."])


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--raters", default="llm,hindsight,random", help="comma-separated: llm, hindsight, random")
    p.add_argument("--backend", action="append", help="smollm2 | transformers:PATH | openai:URL#MODEL (repeatable; "
                   "default smollm2)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the trajectory manifest (built if missing)")
    p.add_argument("--per-env", type=int, default=30, help="trajectories per grid when building (default 30)")
    p.add_argument("--build", action="store_true", help="rebuild the trajectory set")
    p.add_argument("--envs", default=",".join(ENVS), help="grids of a new trajectory set (comma-separated)")
    p.add_argument("--limit", type=int, default=0, help="use only the first N trajectories of each grid (0: all)")
    p.add_argument("--draws", type=int, default=4000, help="bootstrap resamples")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", type=Path, help="markdown file whose 'critic' section to write between markers")
    args = p.parse_args(argv)
    raters = [r.strip() for r in args.raters.split(",") if r.strip()]
    if not raters or any(r not in ("llm", "hindsight", "random") for r in raters):
        p.error(f"--raters {args.raters!r}: choose among llm, hindsight, random")
    if args.per_env < 1 or args.limit < 0 or args.draws < 100:
        p.error("--per-env must be >= 1, --limit >= 0, --draws >= 100")
    backends = args.backend or ["smollm2"]
    import torch
    from bench_actor import make_llm

    torch.set_num_threads(1)
    data = load_trajectories(args.data, args.per_env, args.seed, args.build,
                             tuple(e.strip() for e in args.envs.split(",") if e.strip()))
    trajectories = critic_inputs(data, args.data, args.limit)
    results: dict[str, list[dict[str, Any]]] = {}
    for rater in raters:
        if rater == "llm":
            for spec in backends:
                backend = make_llm(spec)
                results[f"llm ({spec})"] = rate(spec, backend, trajectories)
                del backend
        else:
            results[rater] = rate(rater, RuleBackend(rater, args.seed), trajectories)
    cmd = "PYTHONPATH=python python benchmarks/bench_critic.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = "\n".join(["### The value critic's ratings against what happened next", "",
                      f"Command: `{cmd.strip()}` (torch threads 1)", "",
                      report(trajectories, results, args.draws), ""])
    print(text)
    if args.output:
        update_markdown(args.output, "critic", text)
    raw = args.data.with_name(args.data.stem + "-results.json")
    raw.write_text(json.dumps({"backends": backends, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
