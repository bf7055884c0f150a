"""The tutor's decisions at scale: collected once on the training episodes, kept on disk, reused by every learner.

``ace-hybrid junior collect`` plays training episodes ``k = 0, 1, ...`` (scenario and seed from
:func:`~ace_hybrid.training.rollout.episode_of`, as a training run plays them) with the greedy tutor deciding in
every danger state (``train.tutor_budget`` simulations over the run's action set) and the safe rule elsewhere --
the rollout worker of a training run, unchanged, with the tutor on for every step. Each decision is kept as the
transition a run would store, with the tutor's legal mask and the episode step it was taken at.

With a ``driver`` (a junior file), the junior plays instead and the tutor only labels: at every decision the tutor's
choice is kept as the decision's ``action`` and the junior's, which the grid stepped, as ``executed`` -- DAgger's
data (Ross et al. 2011): the tutor's labels on the states the junior's own mistakes lead to, which a collection
the tutor plays never holds. Such a collection serves ``junior fit --also`` only: its transitions are the junior's,
not its labels', so ``train.tutor_data`` refuses it. Its summary gives the junior's on-policy agreement with the
tutor.

The folder holds ``tutor.json`` (the configuration, the action set, the format) and one ``episodes/ep-<k>.npz`` per
episode, each written atomically when its episode ends: a kill loses the episodes in flight and nothing else, and
the same command continues. ``first_episode`` starts the ids elsewhere than 0: more episodes of the same weeks and
action set, apart from a collection that played ``0, 1, ...`` (its episodes would repeat). Episodes are independent
of the worker that plays them (the tutor reads no normaliser and every episode reseeds the grid), so ``--jobs``
changes the wall-clock time, never the data.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ace_hybrid.config import Config, config_from_dict
from ace_hybrid.files import atomic_write, atomic_write_json
from ace_hybrid.processes import start_child
from ace_hybrid.training.dealer import Grant
from ace_hybrid.training.rollout import PolicyWeights, RolloutWorker, WorkerSpec, episode_of

__all__ = ["DECISIONS_FORMAT", "Decisions", "collect_decisions", "concatenate", "load_decisions", "read_meta"]

DECISIONS_FORMAT = 1
_META = "tutor.json"
_COLUMNS = ("obs", "action", "reward", "next_obs", "done", "truncated", "decision", "mask", "step")
_KEPT_SINCE = ("candidates", "candidate_rho")
"""Columns of later collections only (0.x: the tutor's candidates and their simulated max rho)."""


class Decisions(NamedTuple):
    """Tutor decisions, in episode order then decision order."""

    obs: np.ndarray
    """(N, D) float32 raw features (not normalised)."""
    action: np.ndarray
    """(N,) int64 index in the action set."""
    mask: np.ndarray
    """(N, n) bool: the actions legal at the decision."""
    episode: np.ndarray
    """(N,) int64 training episode id (scenario and seed: :func:`episode_of`)."""
    step: np.ndarray
    """(N,) int64 the episode step of the decision."""
    reward: np.ndarray
    next_obs: np.ndarray
    done: np.ndarray
    truncated: np.ndarray
    decision: np.ndarray
    """(N,) int64 the index of the decision within its episode."""
    candidates: np.ndarray | None = None
    """(N, budget) int64 the tutor's simulated candidates (do nothing first, then its shortlist; -1 pads a shorter
    shortlist); None for a collection made before they were kept."""
    candidate_rho: np.ndarray | None = None
    """(N, budget) float32 each candidate's simulated max rho (+inf: failed, illegal or game over; NaN pads)."""

    def __len__(self) -> int:
        return int(self.action.shape[0])

    def rows(self, keep: np.ndarray) -> Decisions:
        """The decisions ``keep`` (a bool mask or indices) selects."""
        return Decisions(*(None if col is None else col[keep] for col in self))

    def among(self, k: int) -> Decisions:
        """These decisions with each legal mask kept to do nothing and the first ``k - 1`` of the tutor's shortlist:
        the choices of a policy deployed with ``env.deploy_among = k``."""
        from ace_hybrid.grid.agents import among_mask

        return self.with_mask(among_mask(self.mask, self._candidates("among", k)[:, :k]))

    def with_mask(self, mask: np.ndarray) -> Decisions:
        """These decisions with another legal mask (``_replace`` trips over ``__len__``, the number of decisions)."""
        return Decisions(*(mask if name == "mask" else col for name, col in zip(self._fields, self, strict=True)))

    def near_best(self, tolerance: float | None, never_worse: bool = False) -> np.ndarray:
        """(N, n) bool: the actions as good as the tutor's choice -- the candidates whose simulated max rho is within
        ``tolerance`` of the best (the tutor's own choice always), with ``never_worse`` only those no worse than
        doing nothing's (as the tutor never is); None: the tutor's choice alone."""
        good = np.zeros_like(self.mask)
        good[np.arange(len(self)), self.action] = True
        if tolerance is None:
            return good
        cands = self._candidates("tolerance", tolerance)
        rho = np.where(cands >= 0, self.candidate_rho, np.inf)
        best = rho.min(1, keepdims=True)
        close = (rho <= best + tolerance) & np.isfinite(rho) & (cands >= 0)
        if never_worse:
            close &= rho <= rho[:, :1]  # column 0 is do nothing
        rows = np.repeat(np.arange(len(self)), cands.shape[1]).reshape(cands.shape)
        good[rows[close], cands[close]] = True
        return good & self.mask

    def _candidates(self, name: str, value: float) -> np.ndarray:
        if self.candidates is None or self.candidate_rho is None:
            raise ValueError(f"{name} = {value}: these decisions do not keep the tutor's candidates (collected before "
                             "they were kept): collect them again")
        return self.candidates


def concatenate(parts: list[Decisions]) -> Decisions:
    """The decisions of ``parts`` one after the other; a column some part lacks (or of another width) is None."""
    def joined(cols: tuple[np.ndarray | None, ...]) -> np.ndarray | None:
        if any(c is None for c in cols) or len({c.shape[1:] for c in cols}) > 1:  # type: ignore[union-attr]
            return None
        return np.concatenate(cols)  # type: ignore[arg-type]

    return Decisions(*(joined(cols) for cols in zip(*parts, strict=True)))


def read_meta(folder: str | Path) -> dict[str, Any]:
    """``tutor.json`` of a collection: its configuration (``config``), ``action_set`` and ``format``."""
    path = Path(folder) / _META
    if not path.is_file():
        raise FileNotFoundError(f"{folder} holds no tutor decisions (no {_META}): run `ace-hybrid junior collect`")
    meta = json.loads(path.read_text())
    if meta.get("format") != DECISIONS_FORMAT:
        raise ValueError(f"{path} has format {meta.get('format')!r}, this version reads {DECISIONS_FORMAT}")
    return meta


def _episode_path(folder: Path, k: int) -> Path:
    return folder / "episodes" / f"ep-{k:06d}.npz"


def _episodes_on_disk(folder: Path) -> dict[int, int]:
    """{episode id: decisions} of the finished episodes."""
    found = {}
    for path in sorted((folder / "episodes").glob("ep-*.npz")):
        with np.load(path) as z:
            found[int(path.stem[3:])] = int(z["action"].shape[0])
    return found


def _prefix(counts: dict[int, int], first: int = 0) -> tuple[int, int]:
    """(episodes, decisions) of the episodes first, first + 1, ... present without a gap."""
    k, total = first, 0
    while k in counts:
        total += counts[k]
        k += 1
    return k - first, total


def collect_decisions(cfg: Config, folder: str | Path, decisions: int, *, jobs: int = 1, progress: bool = True,
                      driver: str | Path | None = None, scenarios: list[int] | None = None,
                      first_episode: int = 0) -> dict[str, Any]:
    """Play training episodes ``first_episode``, ``first_episode + 1``, ... with the tutor until they hold at least
    ``decisions`` tutor decisions; with ``driver`` (a junior file over the same action set), the junior plays and
    the tutor labels; with ``scenarios``, the episodes are on those scenarios, the action set still selected on
    ``env.train_scenarios``.

    Rerunning continues (finished episodes are kept); a folder collected with another configuration is refused.
    Returns the summary also written into ``tutor.json``: episodes, decisions, steps, blackouts, seconds.

    Raises
    ------
    ValueError
        ``decisions``, ``jobs`` or ``first_episode`` out of range, a folder made with another configuration, action
        set, driver or first episode, a driver over another action set, or ``scenarios`` holding a test week of a
        generated set.
    """
    if isinstance(decisions, bool) or not isinstance(decisions, int) or not 1 <= decisions <= 10_000_000:
        raise ValueError(f"decisions = {decisions!r} out of range: expected an integer in [1, 10000000]")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= 64:
        raise ValueError(f"jobs = {jobs!r} out of range: expected an integer in [1, 64]")
    if isinstance(first_episode, bool) or not isinstance(first_episode, int) or not 0 <= first_episode <= 10**9:
        raise ValueError(f"first_episode = {first_episode!r} out of range: expected an integer in [0, 1000000000]")
    folder = Path(folder)
    driver = None if driver is None else str(driver)
    indices, cfg = _prepare_folder(cfg, folder, driver, scenarios, first_episode)
    counts = _episodes_on_disk(folder)
    started = time.perf_counter()
    bar = _bar(progress, decisions, _prefix(counts, first_episode)[1])
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(jobs, initializer=_init_worker, initargs=(os.getpid(), cfg, indices, driver)) as pool:
        pending: dict[int, Any] = {}
        k = first_episode
        while True:
            have = _prefix(counts, first_episode)[1]
            # Keep every process busy while the gap-free prefix of episodes holds too few decisions.
            while _prefix(counts, first_episode)[1] < decisions and len(pending) < jobs:
                while k in counts or k in pending:
                    k += 1
                pending[k] = pool.apply_async(_play, (str(folder), k))
            if not pending:
                break
            finished = [e for e, r in pending.items() if r.ready()]
            if not finished:
                time.sleep(0.05)
                continue
            for e in finished:
                counts[e] = pending.pop(e).get()
            episodes, now = _prefix(counts, first_episode)
            bar.update(now - have)
            bar.set_postfix(episodes=episodes)
    bar.close()
    return _write_summary(folder, cfg, indices, time.perf_counter() - started)


def _prepare_folder(cfg: Config, folder: Path, driver: str | None, scenarios: list[int] | None,
                    first_episode: int = 0) -> tuple[list[int] | None, Config]:
    """The action set (selected and cached as a run selects it) and the configuration the episodes are played
    with, after writing ``tutor.json``; a folder made with another configuration or driver, and a driver over
    another action set, are refused."""
    from ace_hybrid.grid.action_set import action_set_indices
    from ace_hybrid.grid.catalog import ActionCatalog
    from ace_hybrid.grid.env import make_config_env

    cfg = _tutor_everywhere(cfg)
    played = cfg if scenarios is None else _played_on(cfg, scenarios)  # checked before the action set's minutes
    env = make_config_env(cfg)
    try:
        indices = action_set_indices(cfg, env, ActionCatalog.for_env(env))
    finally:
        env.close()
    cfg = played
    if driver is not None:
        from ace_hybrid.training.junior_file import load_junior

        if load_junior(driver)["action_set"] != indices:
            raise ValueError(f"driver = {driver}: the junior acts over another action set than env.action_set = "
                             f"{cfg.env.action_set!r} selects here")
    if (folder / _META).exists():
        meta = read_meta(folder)
        if meta["config"] != json.loads(json.dumps(cfg.to_dict())) or meta["action_set"] != indices:
            raise ValueError(f"{folder} holds tutor decisions of another configuration or action set: collect "
                             f"into a new folder (its configuration: {folder / _META})")
        if meta.get("driver") != driver:
            raise ValueError(f"{folder} was collected with driver = {meta.get('driver')!r}, not {driver!r}: collect "
                             "into a new folder")
        if meta.get("first_episode", 0) != first_episode:
            raise ValueError(f"{folder} starts at episode {meta.get('first_episode', 0)}, not first_episode = "
                             f"{first_episode}: give the same, or collect into a new folder")
        return indices, cfg
    atomic_write_json(folder / _META, {"format": DECISIONS_FORMAT, "config": cfg.to_dict(), "action_set": indices,
                                       "driver": driver, "first_episode": first_episode})
    return indices, cfg


def _played_on(cfg: Config, scenarios: list[int]) -> Config:
    """``cfg`` with its episodes on ``scenarios`` (checked: integers, and no test week of a generated set)."""
    from ace_hybrid.data.sets import find_set
    from ace_hybrid.data.splits import read_splits

    if not scenarios or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in scenarios):
        raise ValueError(f"scenarios = {scenarios!r} out of range: expected a non-empty list of scenario ids >= 0")
    dataset = find_set(cfg.env.data) if cfg.env.data else None
    if dataset is not None:
        test = sorted(set(scenarios) & set(read_splits(dataset)["test"]))
        if test:
            raise ValueError(f"scenarios = {scenarios}: weeks {test} of {cfg.env.data} are test weeks, which no "
                             "collection may play (choose among its training and validation weeks)")
    return dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, train_scenarios=list(scenarios)))


def _tutor_everywhere(cfg: Config) -> Config:
    """``cfg`` with the tutor on at every step (the collection's only setting of its own)."""
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, tutor_steps=2**62))


def _write_summary(folder: Path, cfg: Config, indices: list[int] | None, seconds: float) -> dict[str, Any]:
    meta = read_meta(folder)
    rows, agree = [], 0
    for path in sorted((folder / "episodes").glob("ep-*.npz")):
        with np.load(path) as z:
            rows.append((int(z["action"].shape[0]), int(z["steps"]), bool(z["blackout"]), float(z["seconds"])))
            agree += int(np.sum(z["executed"] == z["action"])) if "executed" in z else 0
    n = np.asarray(rows, dtype=np.float64).reshape(-1, 4)
    meta["summary"] = {
        "episodes": len(rows), "decisions": int(n[:, 0].sum()), "steps": int(n[:, 1].sum()),
        "blackouts": int(n[:, 2].sum()), "episode_seconds": round(float(n[:, 3].sum()), 1),
        "last_session_seconds": round(seconds, 1),
    }
    if meta.get("driver") is not None:  # the junior's choice equal to the tutor's, on the junior's own states
        meta["summary"]["driver_agreement"] = round(agree / max(n[:, 0].sum(), 1), 4)
    atomic_write_json(folder / _META, meta)
    return meta["summary"]


def _bar(progress: bool, total: int, initial: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=min(initial, total), unit="decision", desc="tutor decisions",
                disable=not progress)


# ------------------------------------------------------------------------------------------- in a worker process

_WORKER: dict[str, Any] = {}


class _OneEpisode:
    """A dealer of one episode, one step at a time, for as long as it lasts."""

    def __init__(self, k: int) -> None:
        self.k, self.next = k, 0

    def episode(self) -> int:
        return self.k

    def steps(self, want: int) -> Grant:
        self.next += 1
        return Grant(self.next - 1, 1, False)


class _RecordingTutor:
    """The tutor, keeping the legal mask, the episode step and its choice at each decision; with a ``driver`` (a
    loaded junior), the junior's choice is what the grid steps."""

    def __init__(self, tutor: Any, actions: Any, driver: Any = None) -> None:
        self.tutor, self.actions, self.driver = tutor, actions, driver
        self.masks: list[np.ndarray] = []
        self.steps: list[int] = []
        self.labels: list[int] = []
        self.candidates: list[np.ndarray] = []
        self.rhos: list[np.ndarray] = []

    def choose(self, obs: Any) -> int:
        mask = self.actions.legal_mask(obs)
        self.masks.append(mask)
        self.steps.append(int(obs.current_step))
        candidates, rhos = self.tutor.simulated(obs)
        width = self.tutor.budget
        self.candidates.append(np.pad(np.asarray(candidates, np.int64), (0, width - len(candidates)),
                                      constant_values=-1))
        self.rhos.append(np.pad(np.asarray(rhos, np.float32), (0, width - len(rhos)), constant_values=np.nan))
        self.labels.append(self.tutor.best(candidates, rhos))
        if self.driver is None:
            return self.labels[-1]
        d = self.driver
        return d.most_likely(d.normalizer(d.features(obs)), mask)


def _init_worker(parent: int, cfg: Config, indices: list[int] | None, driver: str | None) -> None:
    import torch

    start_child(parent)  # a killed collection leaves no worker playing on
    torch.set_num_threads(1)
    cfg = _tutor_everywhere(cfg)
    worker = RolloutWorker(WorkerSpec(0, cfg, indices), _OneEpisode(0), batch_steps=1)
    worker.set_policy(PolicyWeights(0, worker.sac.policy_state(), worker.normalizer.state_dict()))
    _WORKER["worker"] = worker
    if driver is not None:
        from ace_hybrid.training.policy import load_agent

        _WORKER["driver"] = load_agent(driver, worker.env, topk=0)  # the junior alone, as it is evaluated


def _play(folder: str, k: int) -> int:
    """Play training episode ``k`` with the tutor, write its file, return its number of decisions."""
    worker: RolloutWorker = _WORKER["worker"]
    tutor = worker.tutor = _RecordingTutor(getattr(worker.tutor, "tutor", worker.tutor), worker.actions,
                                           _WORKER.get("driver"))
    worker.dealer = _OneEpisode(k)
    worker._obs = None  # noqa: SLF001 - a fresh episode: the worker starts one when it has no observation
    rows, finished, t0 = [], [], time.perf_counter()
    while not finished:
        batch = worker.collect()
        rows += batch.transitions
        finished = batch.finished
    _, steps, blackout = finished[0]
    n, dim = len(rows), worker.features.dim
    cols = {
        "obs": np.asarray([p.obs for p in rows], np.float32).reshape(n, dim),
        "action": np.asarray(tutor.labels, np.int64),
        "reward": np.asarray([p.reward for p in rows], np.float32),
        "next_obs": np.asarray([p.next_obs for p in rows], np.float32).reshape(n, dim),
        "done": np.asarray([p.done for p in rows], bool),
        "truncated": np.asarray([p.truncated for p in rows], bool),
        "decision": np.asarray([p.decision for p in rows], np.int64),
        "mask": np.asarray(tutor.masks, bool).reshape(n, len(worker.actions)),
        "step": np.asarray(tutor.steps, np.int64),
        "candidates": np.asarray(tutor.candidates, np.int64).reshape(n, tutor.tutor.budget),
        "candidate_rho": np.asarray(tutor.rhos, np.float32).reshape(n, tutor.tutor.budget),
    }
    if tutor.driver is not None:
        cols["executed"] = np.asarray([p.action for p in rows], np.int64)
    scenario, seed = episode_of(worker.cfg, k)
    atomic_write(_episode_path(Path(folder), k), lambda f: np.savez_compressed(
        f, **cols, scenario=scenario, seed=seed, steps=steps, blackout=blackout, seconds=time.perf_counter() - t0))
    return n


# ------------------------------------------------------------------------------------------- reading

def load_decisions(folder: str | Path, limit: int | None = None) -> Decisions:
    """The first ``limit`` decisions (None: all) of the gap-free episodes of a collection (from its first)."""
    folder = Path(folder)
    first = read_meta(folder).get("first_episode", 0)
    counts = _episodes_on_disk(folder)
    episodes, total = _prefix(counts, first)
    if limit is not None and not 1 <= limit <= total:
        raise ValueError(f"limit = {limit} out of range: {folder} holds {total} decisions in episodes "
                         f"{first}-{first + episodes - 1}; expected [1, {total}] (collect more with --decisions)")
    parts: dict[str, list[np.ndarray]] = {c: [] for c in (*_COLUMNS, *_KEPT_SINCE, "episode")}
    have = 0
    for k in range(first, first + episodes):
        if limit is not None and have >= limit:
            break
        with np.load(_episode_path(folder, k)) as z:
            for c in (*_COLUMNS, *(c for c in _KEPT_SINCE if c in z.files)):
                parts[c].append(z[c])
            parts["episode"].append(np.full(z["action"].shape[0], k, np.int64))
            have += int(z["action"].shape[0])
    # Columns some episodes lack (collected before they were kept) are None for the whole collection.
    cols = {c: np.concatenate(v)[:limit] if len(v) == len(parts["episode"]) else None for c, v in parts.items()}
    return Decisions(obs=cols["obs"], action=cols["action"], mask=cols["mask"], episode=cols["episode"],
                     step=cols["step"], reward=cols["reward"], next_obs=cols["next_obs"], done=cols["done"],
                     truncated=cols["truncated"], decision=cols["decision"], candidates=cols["candidates"],
                     candidate_rho=cols["candidate_rho"])


def config_of(folder: str | Path) -> Config:
    """The configuration a collection was made with."""
    return config_from_dict(read_meta(folder)["config"])
