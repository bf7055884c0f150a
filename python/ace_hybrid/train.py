"""The training loop: act, store, refine and shape (the LLM), update, evaluate, log, save.

The agent decides only in danger states (max rho >= ``env.threshold``); between decisions the safe rule steps the
grid. One transition is stored per decision (a semi-MDP): its reward is accumulated over every environment step
until the next decision (see :class:`~ace_hybrid.config.RewardConfig`), its next observation is the next decision's
observation, and the discount applies per decision (gamma per transition, not gamma^k: the value counts decisions).

With ``llm.backend`` other than "none" the run is ACE (:mod:`ace_hybrid.llm.loop`): each decision keeps a snapshot of
the environment, a completed transition with reward below ``ace.r_bar`` goes to the LLM policy actor (its validated
proposals fill the replay's LLM partition), the LLM value critic reshapes stored trajectories after episodes, and
co-evolution fine-tunes the LLM's LoRA adapter (saved under ``adapters/``, named in the checkpoint).

Run directory layout::

    config.json          the full configuration of the run
    checkpoint.pt        the latest checkpoint (networks, optimisers, normaliser, counters, generators)
    replay-<d>-<u>.bin   the replay buffer the checkpoint refers to (after d decisions and u updates)
    best.pt              the checkpoint with the best evaluation survival so far
    metrics.jsonl        one JSON line per log interval and per evaluation
    refinements.jsonl    one JSON line per bad transition the LLM actor refined (ACE runs)
    events.*             TensorBoard event files
    eval/                each evaluation's JSON and markdown
    adapters/round-<k>/  the LoRA adapter after each co-evolution round (ACE runs)

Checkpoints are written atomically (temporary file, fsync, rename). ``resume`` continues from the last one: the
episode that was running when the run stopped is not recoverable (Grid2Op's state is not saved), so the run starts
the next training episode; everything stored up to the checkpoint is kept.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ace_hybrid.config import Config, config_from_dict
from ace_hybrid.evaluate import EvaluationReport, evaluate
from ace_hybrid.grid.agents import RuleAgent
from ace_hybrid.grid.catalog import ActionCatalog
from ace_hybrid.grid.env import make_env, n_scenarios, reset_episode
from ace_hybrid.grid.features import ObservationFeatures, RunningNormalizer
from ace_hybrid.grid.rules import SafeRule, in_danger
from ace_hybrid.replay import MixedReplayBuffer
from ace_hybrid.sac import DiscreteSAC

if TYPE_CHECKING:  # pragma: no cover
    from ace_hybrid.llm.loop import LLMInLoop

CHECKPOINT_FORMAT = 1
REFINEMENTS_LOG = "refinements.jsonl"
"""One line per transition the LLM actor looked at (ACE runs)."""


# ----------------------------------------------------------------------------- the pieces of a run


@dataclass
class Counters:
    """Progress of a run; saved in every checkpoint."""

    env_steps: int = 0
    decisions: int = 0
    updates: int = 0
    episodes: int = 0
    next_eval: int = 0
    next_checkpoint: int = 0
    best_survival: float = -1.0
    train_seconds: float = 0.0
    eval_history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Pending:
    """The last decision, waiting for its next observation and its accumulated reward."""

    obs: np.ndarray
    action: int
    reward: float
    episode: int
    decision: int
    grid_obs: Any = None
    """The grid2op observation of the decision (for the LLM actor's prompt and shortlist)."""
    snapshot: Any = None
    """``env.copy()`` before the action, kept only while the LLM actor may refine this transition."""


class MaskFromFeatures:
    """Rebuilds legal masks from stored raw feature vectors (line status and cooldown blocks), so the replay need not
    store a 67K-entry mask per transition."""

    def __init__(self, features: ObservationFeatures, catalog: ActionCatalog) -> None:
        offsets, start = {}, 0
        for name, length in features.blocks:
            offsets[name] = slice(start, start + length)
            start += length
        self.status, self.cooldown_line, self.cooldown_sub = (
            offsets["line_status"], offsets["cooldown_line"], offsets["cooldown_sub"])
        self.catalog = catalog

    def __call__(self, raw: np.ndarray) -> np.ndarray:
        """(B, D) raw features -> (B, n_actions) bool legal masks."""
        status = raw[:, self.status] > 0.5
        cdl = (raw[:, self.cooldown_line] > 0).astype(np.int64)
        cds = (raw[:, self.cooldown_sub] > 0).astype(np.int64)
        return self.catalog.masker.mask_batch(status, cdl, cds)


class SACAgent(RuleAgent):
    """The trained policy as a grid2op agent under the activation rule.

    With ``topk = 0`` it plays the policy's most likely legal action. With ``topk = k`` it checks the k most likely
    legal actions and do nothing with one ``obs.simulate`` each and plays the one with the lowest simulated max rho
    (the top-k validation most L2RPN agents deploy with); the policy still chooses what is worth simulating.
    """

    name = "sac"

    def __init__(self, env: Any, sac: DiscreteSAC, catalog: ActionCatalog, features: ObservationFeatures,
                 normalizer: RunningNormalizer, threshold: float, topk: int = 0) -> None:
        super().__init__(env.action_space, threshold)
        if topk < 0:
            raise ValueError(f"topk = {topk} out of range [0, inf)")
        self.sac, self.catalog, self.features, self.normalizer = sac, catalog, features, normalizer
        self.topk = int(topk)

    def decide(self, observation: Any) -> Any:
        x = self.normalizer(self.features(observation))
        mask = self.catalog.legal_mask(observation)
        if self.topk == 0:
            return self.catalog.action(self.sac.act(x, mask, deterministic=True))
        probs = self.sac.policy_probs(x, mask)
        candidates = [0, *(int(a) for a in np.argsort(-probs, kind="stable")[: self.topk] if a != 0 and mask[a])]
        rhos = [self._simulate_max_rho(observation, self.catalog.action(a)) for a in candidates]
        return self.catalog.action(candidates[int(np.argmin(rhos))])


class Run:
    """Everything the loop touches: environments, networks, replay, counters, loggers."""

    def __init__(self, cfg: Config, run_dir: Path) -> None:
        self.cfg, self.dir = cfg, run_dir
        if cfg.train.torch_threads:
            torch.set_num_threads(cfg.train.torch_threads)
        torch.manual_seed(cfg.train.seed)
        self.env = make_env(cfg.env.name, seed=cfg.env.env_seed)
        self.eval_env = make_env(cfg.env.name, seed=cfg.env.env_seed)
        count = n_scenarios(self.env)
        for s in [*cfg.env.train_scenarios, *(p[0] for p in cfg.env.eval_pairs)]:
            if not 0 <= s < count:
                raise IndexError(f"scenario {s} (env.train_scenarios / env.eval_pairs) out of range [0, {count}) "
                                 f"for {cfg.env.name}")
        self.catalog = ActionCatalog.for_env(self.env)
        self.features = ObservationFeatures(self.env)
        self.masks = MaskFromFeatures(self.features, self.catalog)
        self.normalizer = RunningNormalizer(self.features.dim)
        self.safe_rule = SafeRule(self.env.action_space, threshold=cfg.env.threshold)
        self.sac = DiscreteSAC(self.features.dim, len(self.catalog), cfg.sac,
                               action_features=self.catalog.features(), seed=cfg.train.seed)
        r = cfg.replay
        self.replay = MixedReplayBuffer(self.features.dim, r.rl_capacity, r.llm_capacity, alpha=r.alpha,
                                        beta=r.beta, tau=r.tau, seed=cfg.train.seed)
        self.counters = Counters(next_eval=cfg.train.eval_every or cfg.train.total_env_steps,
                                 next_checkpoint=cfg.train.checkpoint_every)
        self.time_split = {"env": 0.0, "reset": 0.0, "update": 0.0, "eval": 0.0, "llm": 0.0}
        self.logger = MetricsLogger(run_dir, cfg.log.tensorboard)
        self.replay_files: dict[str, str] = {}
        """Replay file named by each checkpoint file (checkpoint.pt, best.pt): the ones to keep."""
        self.llm: LLMInLoop | None = None
        if cfg.llm.backend != "none":
            from ace_hybrid.llm.loop import LLMInLoop

            self.llm = LLMInLoop(self)

    def step_reward(self, obs: Any, blackout: bool) -> float:
        return step_reward(self.cfg, obs, blackout)

    def agent(self, env: Any) -> SACAgent:
        return SACAgent(env, self.sac, self.catalog, self.features, self.normalizer, self.cfg.env.threshold,
                        self.cfg.env.deploy_topk)


# ----------------------------------------------------------------------------- the loop


def train(cfg: Config | None, run_dir: str | Path, *, resume: bool = False,
          total_env_steps: int | None = None) -> dict[str, Any]:
    """Train SAC (and, later, ACE's LLM parts) as ``cfg`` says; returns the final summary.

    With ``resume``, the configuration saved in ``run_dir`` is used (``cfg`` is ignored) and ``total_env_steps``, if
    given, extends or shortens the budget.
    """
    run_dir = Path(run_dir)
    if resume:
        run = restore(run_dir, total_env_steps)
        cfg = run.cfg
    else:
        if cfg is None:
            raise ValueError("a new run needs a configuration")
        if (run_dir / "checkpoint.pt").exists():
            raise FileExistsError(f"{run_dir} already holds a run: use --resume {run_dir} or another --run-dir")
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
        run = Run(cfg, run_dir)
    bar = _progress(run)
    started = time.perf_counter()
    try:
        while run.counters.env_steps < cfg.train.total_env_steps:
            run_episode(run, bar)
    finally:
        run.counters.train_seconds += time.perf_counter() - started
        bar.close()
        if run.llm is not None:
            run.llm.close()
    if not run.counters.eval_history or run.counters.eval_history[-1]["env_steps"] != run.counters.env_steps:
        evaluate_and_keep_best(run)
    save_checkpoint(run)
    run.logger.close()
    return summary(run)


def run_episode(run: Run, bar: Any) -> None:
    """One training episode: act, store, refine, update, shape at the end, and evaluate / log / save on schedule."""
    cfg, c = run.cfg, run.counters
    scenario = cfg.env.train_scenarios[c.episodes % len(cfg.env.train_scenarios)]
    t0 = time.perf_counter()
    obs = reset_episode(run.env, scenario, cfg.env.train_seed_start + c.episodes)
    run.time_split["reset"] += time.perf_counter() - t0
    episode, pending, steps = c.episodes, None, 0
    c.episodes += 1
    while c.env_steps < cfg.train.total_env_steps:
        if in_danger(obs, cfg.env.threshold):
            x = run.features(obs)
            if pending is not None:
                store(run, pending, x, done=False, truncated=False)
            pending = decide(run, obs, x, episode, 0 if pending is None else pending.decision + 1)
            grid_action = run.catalog.action(pending.action)
            update(run)
        else:
            grid_action = run.safe_rule(obs)
        t0 = time.perf_counter()
        obs, _, done, info = run.env.step(grid_action)
        run.time_split["env"] += time.perf_counter() - t0
        c.env_steps += 1
        steps += 1
        bar.update(1)
        blackout = bool(done and info.get("exception"))
        if pending is not None:
            pending.reward += step_reward(run.cfg, obs, blackout)
        cut = cfg.env.max_episode_steps and steps >= cfg.env.max_episode_steps
        if done or cut or c.env_steps >= cfg.train.total_env_steps:
            if pending is not None:
                store(run, pending, run.features(obs), done=blackout, truncated=not blackout)
            if run.llm is not None:
                _llm_hook(run, run.llm.after_episode, run)
            bar.set_postfix(decisions=c.decisions, survived=steps, **_llm_postfix(run), refresh=False)
            run.logger.write(c.env_steps, {"episode/steps": steps, "episode/blackout": float(blackout)})
            on_schedule(run)
            return
        on_schedule(run)


def step_reward(cfg: Config, obs: Any, blackout: bool) -> float:
    """The reward of one environment step (see :class:`~ace_hybrid.config.RewardConfig`)."""
    r = cfg.reward
    if blackout:
        return -r.blackout_penalty
    margin = float(np.clip(1.0 - np.max(obs.rho), -1.0, 1.0))
    return r.step_scale * (1.0 + r.margin_weight * margin)


def decide(run: Run, obs: Any, x: np.ndarray, episode: int, decision: int) -> Pending:
    """The policy's action in a danger state (sampled: SAC explores through its entropy)."""
    run.normalizer.update(x)
    action = run.sac.act(run.normalizer(x), run.catalog.legal_mask(obs))
    run.counters.decisions += 1
    snapshot = None
    if run.llm is not None and run.llm.wants_snapshot():
        t0 = time.perf_counter()
        snapshot = run.env.copy()
        run.time_split["llm"] += time.perf_counter() - t0
    return Pending(obs=x, action=action, reward=0.0, episode=episode, decision=decision, grid_obs=obs,
                   snapshot=snapshot)


def store(run: Run, p: Pending, next_x: np.ndarray, *, done: bool, truncated: bool) -> None:
    """One semi-MDP transition into the RL partition (raw features: normalised when sampled), then the LLM actor's
    look at it (ACE runs)."""
    run.replay.add_rl(p.obs, p.action, p.reward, next_x, done, truncated, p.episode, p.decision)
    if run.llm is not None:
        _llm_hook(run, run.llm.after_store, run, p)


def _llm_hook(run: Run, hook: Any, *args: Any) -> None:
    """Run an LLM hook, timing it as LLM time and logging what it reports."""
    t0 = time.perf_counter()
    metrics = hook(*args)
    run.time_split["llm"] += time.perf_counter() - t0
    if metrics:
        run.logger.write(run.counters.env_steps, metrics)


def _llm_postfix(run: Run) -> dict[str, Any]:
    if run.llm is None:
        return {}
    m = run.llm.metrics()
    return {"llm_calls": int(m["llm/calls"]), "accepted": int(m["llm/accepted"])}


def update(run: Run) -> None:
    """``updates_per_decision`` SAC updates on prioritised batches; priorities from the new TD errors."""
    cfg = run.cfg
    if cfg.train.updates_per_decision == 0 or len(run.replay) < cfg.train.learning_starts:
        return
    t0 = time.perf_counter()
    for _ in range(cfg.train.updates_per_decision):
        batch = run.replay.sample(cfg.sac.batch_size, is_exponent=cfg.replay.is_exponent)
        result = run.sac.update(
            run.normalizer(batch.obs), batch.action, batch.reward, run.normalizer(batch.next_obs), batch.done,
            batch.weight, run.masks(batch.obs), run.masks(batch.next_obs))
        run.replay.update_priorities(batch.index, np.abs(result.td_error) + cfg.replay.priority_eps)
        run.counters.updates += 1
    run.time_split["update"] += time.perf_counter() - t0
    if run.counters.updates % 10 == 0:
        run.logger.write(run.counters.env_steps, {f"sac/{k}": v for k, v in result.metrics.items()})


def on_schedule(run: Run) -> None:
    """Log, evaluate and checkpoint when their intervals come up."""
    c, cfg = run.counters, run.cfg
    if c.env_steps % cfg.log.log_every == 0:
        run.logger.write(c.env_steps, {"train/decisions": c.decisions, "train/updates": c.updates,
                                       "train/replay": len(run.replay), **{f"time/{k}": v for k, v in
                                                                           run.time_split.items()}})
    if cfg.train.eval_every and c.env_steps >= c.next_eval:
        evaluate_and_keep_best(run)
        c.next_eval += cfg.train.eval_every
    if c.env_steps >= c.next_checkpoint:
        save_checkpoint(run)
        c.next_checkpoint += cfg.train.checkpoint_every


def evaluate_and_keep_best(run: Run) -> EvaluationReport:
    """Evaluate the deterministic policy on the held-out pairs; keep ``best.pt`` when survival improves."""
    t0 = time.perf_counter()
    cfg, c = run.cfg, run.counters
    pairs = [(int(s), int(seed)) for s, seed in cfg.env.eval_pairs]
    report = evaluate(run.eval_env, run.agent(run.eval_env), pairs, agent_name="sac",
                      max_steps=cfg.env.eval_max_steps or None, progress=False)
    totals = report.totals()
    report.save(run.dir / "eval" / f"step-{c.env_steps:08d}")
    c.eval_history.append({"env_steps": c.env_steps, **totals})
    run.logger.write(c.env_steps, {"eval/survival_rate": totals["survival_rate"],
                                   "eval/mean_reward": totals["mean_reward"]})
    run.time_split["eval"] += time.perf_counter() - t0
    if totals["survival_rate"] > c.best_survival:
        c.best_survival = totals["survival_rate"]
        save_checkpoint(run, name="best.pt")
    return report


# ----------------------------------------------------------------------------- checkpoints


def _atomic_torch_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_checkpoint(run: Run, name: str = "checkpoint.pt") -> Path:
    """Write the replay (its own atomic file) then the checkpoint that names it; drop older replay files."""
    c = run.counters
    # Named by what changes the replay (adds at decisions, priorities at updates): an unchanged replay is not rewritten.
    replay_name = f"replay-{c.decisions:08d}-{c.updates:08d}.bin"
    if not (run.dir / replay_name).exists():
        run.replay.save(run.dir / replay_name)
    state = {
        "format": CHECKPOINT_FORMAT,
        "config": run.cfg.to_dict(),
        "sac": run.sac.state_dict(),
        "normalizer": run.normalizer.state_dict(),
        "counters": vars(c).copy(),
        "torch_rng": torch.get_rng_state(),
        "replay_file": replay_name,
        "time_split": dict(run.time_split),
        "llm": run.llm.state_dict() if run.llm is not None else None,
    }
    path = run.dir / name
    _atomic_torch_save(state, path)
    run.replay_files[name] = replay_name
    for old in run.dir.glob("replay-*.bin"):
        if old.name not in run.replay_files.values():
            old.unlink(missing_ok=True)
    return path


def load_checkpoint_file(path: str | Path) -> dict[str, Any]:
    """A checkpoint's contents, or a clear error for a missing, foreign or damaged file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a damaged file
        raise ValueError(f"{path} is not a readable checkpoint: {exc}") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not an ace_hybrid checkpoint of format {CHECKPOINT_FORMAT}")
    return state


def restore(run_dir: Path, total_env_steps: int | None = None) -> Run:
    """Rebuild a :class:`Run` from ``run_dir/checkpoint.pt`` with its saved configuration (``total_env_steps`` may
    change the budget)."""
    state = load_checkpoint_file(run_dir / "checkpoint.pt")
    saved = config_from_dict(state["config"])
    if total_env_steps is not None:
        if total_env_steps <= 0:
            raise ValueError(f"train.total_env_steps = {total_env_steps} must be > 0")
        saved.train.total_env_steps = int(total_env_steps)
    run = Run(saved, run_dir)
    run.sac.load_state_dict(state["sac"])
    run.normalizer.load_state_dict(state["normalizer"])
    counters = dict(state["counters"])
    run.counters = Counters(**counters)
    torch.set_rng_state(state["torch_rng"])
    run.time_split.update(state["time_split"])
    if run.llm is not None and state.get("llm") is not None:
        run.llm.load_state_dict(state["llm"])
    replay_path = run_dir / state["replay_file"]
    run.replay = MixedReplayBuffer.load(replay_path)
    run.replay_files["checkpoint.pt"] = state["replay_file"]
    if (run_dir / "best.pt").exists():
        run.replay_files["best.pt"] = load_checkpoint_file(run_dir / "best.pt")["replay_file"]
    run.logger.truncate_after(run.counters.env_steps)
    truncate_jsonl(run_dir / REFINEMENTS_LOG, run.counters.env_steps)
    return run


def load_agent(path: str | Path, env: Any, topk: int | None = None) -> SACAgent:
    """A trained agent from a checkpoint file, for ``ace-hybrid evaluate --agent checkpoint:PATH`` (``topk``
    overrides the run's ``env.deploy_topk``)."""
    state = load_checkpoint_file(path)
    cfg = config_from_dict(state["config"])
    catalog = ActionCatalog.for_env(env)
    features = ObservationFeatures(env)
    sac = DiscreteSAC(features.dim, len(catalog), cfg.sac, action_features=catalog.features(), seed=cfg.train.seed)
    sac.load_state_dict(state["sac"])
    normalizer = RunningNormalizer(features.dim)
    normalizer.load_state_dict(state["normalizer"])
    return SACAgent(env, sac, catalog, features, normalizer, cfg.env.threshold,
                    cfg.env.deploy_topk if topk is None else topk)


# ----------------------------------------------------------------------------- logging


class MetricsLogger:
    """JSON lines in ``metrics.jsonl`` plus TensorBoard scalars (when tensorboardX is installed and enabled)."""

    def __init__(self, run_dir: Path, tensorboard: bool) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.writer = None
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter
            except ImportError as exc:
                raise ImportError("log.tensorboard = true needs tensorboardX: pip install tensorboardX "
                                  "(or set log.tensorboard=false)") from exc
            self.writer = SummaryWriter(str(run_dir))

    def write(self, step: int, values: dict[str, float]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"env_steps": step, "time": time.time(), **values}) + "\n")
        if self.writer is not None:
            for key, value in values.items():
                self.writer.add_scalar(key, float(value), step)

    def truncate_after(self, step: int) -> None:
        """Drop lines written after ``step`` (by a run that died before its next checkpoint)."""
        truncate_jsonl(self.path, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def truncate_jsonl(path: Path, step: int) -> None:
    """Drop the lines of a JSONL log whose ``env_steps`` is after ``step``."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["env_steps"] <= step]
    path.write_text("".join(line + "\n" for line in kept))


def summary(run: Run) -> dict[str, Any]:
    c = run.counters
    last = c.eval_history[-1] if c.eval_history else {}
    split = {**run.time_split, "safe_rule_simulate": run.safe_rule.simulate_seconds}
    out = {"env_steps": c.env_steps, "decisions": c.decisions, "updates": c.updates, "episodes": c.episodes,
           "best_survival": c.best_survival, "last_eval": last, "train_seconds": c.train_seconds,
           "time_split": split, "run_dir": str(run.dir)}
    if run.llm is not None:
        out["llm"] = run.llm.summary()
    return out


def _progress(run: Run) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=run.cfg.train.total_env_steps, initial=run.counters.env_steps, unit="step",
                desc=f"train {run.cfg.env.name}", disable=not run.cfg.log.progress, dynamic_ncols=True)
