"""The junior: a policy behaviour-cloned on the tutor's decisions, and SAC or ACE started from it.

The recipe of the L2RPN 2020 winners (a tutor, a junior that imitates it, then RL from the junior): the junior is
the run's own actor network (:class:`~ace_hybrid.sac.SACPolicy` of the configuration the decisions were collected
with), trained by masked cross-entropy on the tutor's choices (:mod:`ace_hybrid.training.tutor_decisions`), over
features normalised by the statistics of those decisions. Its accuracy is measured against the tutor on decisions
it never trained on: whole episodes (every ``HOLDOUT_EVERY``-th of the collection), or another collection (the
tutor on validation weeks).

A junior file holds what :func:`~ace_hybrid.training.policy.load_agent` needs to act (``ace-hybrid evaluate --agent
checkpoint:JUNIOR.pt``) and what ``train.init_policy`` copies into a new run: the configuration, the actor, the
normaliser, the action set, and how it was trained. :func:`ensemble_juniors` puts juniors fitted on the same
decisions (other seeds) into one file that acts by their mean probabilities.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from ace_hybrid.config import Config, config_from_dict
from ace_hybrid.files import atomic_write
from ace_hybrid.grid.features import RunningNormalizer
from ace_hybrid.sac import SACPolicy
from ace_hybrid.training.junior_file import (JUNIOR_FORMAT, actor_policies, actors, checked_junior, is_junior,
                                             learnt_from, load_junior)
from ace_hybrid.training.tutor_decisions import Decisions, concatenate, config_of, load_decisions, read_meta

__all__ = ["HOLDOUT_EVERY", "JUNIOR_FORMAT", "Junior", "action_features", "checked_junior", "ensemble_juniors",
           "fit_junior", "init_from_junior", "is_junior", "junior_choices", "junior_hits", "junior_policies",
           "load_junior", "save_ensemble", "save_junior", "store_tutor_data"]

_SAME_EPISODES = ("name", "data", "train_scenarios", "train_seed_start", "action_set", "threshold", "start_spread",
                  "max_episode_steps")
"""The ``[env]`` keys a run and the tutor data it starts with must share: the same grid, training weeks, episodes
and action set (test weeks never enter a run through its tutor data)."""

HOLDOUT_EVERY = 10
"""Without a validation collection, episodes ``k`` with ``k % HOLDOUT_EVERY == HOLDOUT_EVERY - 1`` are held out."""


class Junior(NamedTuple):
    """A fitted junior (:func:`fit_junior`), as :func:`save_junior` writes it."""

    policy: SACPolicy
    """The actor network, cloned on the tutor's decisions."""
    normalizer: RunningNormalizer
    """The feature statistics of the decisions it trained on."""
    config: Config
    """The configuration the decisions were collected with."""
    action_set: list[int] | None
    """Catalog indices of its actions (None: the whole catalog)."""
    fit: dict[str, Any]
    """How it was trained: decisions, epochs, accuracies per epoch, seconds."""


def _accuracy(policy: SACPolicy, x: torch.Tensor, action: torch.Tensor, mask: torch.Tensor,
              good: torch.Tensor | None = None) -> float:
    """Share of decisions where the policy's most likely legal action is the tutor's (``good``: one of the actions
    it marks, :meth:`~ace_hybrid.training.tutor_decisions.Decisions.near_best`)."""
    if action.numel() == 0:
        return float("nan")
    with torch.no_grad():
        chosen = _logits(policy, x).masked_fill(~mask, -torch.inf).argmax(1)
        hit = chosen == action if good is None else good[torch.arange(len(chosen)), chosen]
        return float(hit.float().mean())


def _logits(policy: SACPolicy, x: torch.Tensor) -> torch.Tensor:
    """(B, n) actor logits with autograd (the acting path's scores up to a per-state constant)."""
    emb, bias = policy.actor.action_factors()
    return policy.actor.state_factor(x) @ emb.T + bias


def fit_junior(folder: str | Path, decisions: int | None = None, *, validation: str | Path | None = None,
               also: Sequence[str | Path] = (), scenarios: Sequence[int] | None = None, epochs: int = 30,
               batch_size: int = 256, lr: float = 1e-3, weight_decay: float = 0.0, noise: float = 0.0,
               among: int = 0, tolerance: float | None = None, never_worse: bool = False, seed: int = 0,
               progress: bool = True) -> Junior:
    """Behaviour-clone the tutor's first ``decisions`` decisions (None: all) of the collection in ``folder``, and
    every decision of the collections ``also`` (e.g. DAgger's: the tutor's labels on a junior's own states, ``junior
    collect --driver``), which the validation decisions never include. ``scenarios``: only the episodes of ``folder``
    on these scenarios (e.g. the first n training weeks, for a curve against weeks), training and held out alike.
    Two regularisers against learning the training weeks by heart: ``weight_decay`` (AdamW's, decoupled) and
    ``noise``, the standard deviation of Gaussian noise added to the normalised features of every training batch.

    Two uses of the tutor's simulations (collections that keep its candidates): ``among = k`` learns to choose
    among do nothing and the first ``k - 1`` of the tutor's shortlist only, as ``env.deploy_among = k`` deploys it;
    ``tolerance`` counts every candidate whose simulated max rho is within it of the best as right (the loss is
    minus the log of their total probability, and the kept epoch is the one most often choosing one of them): the
    tutor's choice among near-ties is a coin the junior need not learn; with ``never_worse``, a candidate that
    simulates worse than doing nothing is never right, however close (the tutor never plays one).

    ``validation``: a collection to measure validation accuracy on (same configuration's grid and action set);
    None holds out every :data:`HOLDOUT_EVERY`-th episode of the whole collection instead, and ``decisions``
    counts the decisions of the other episodes, in order. The policy of the epoch with the
    best validation accuracy is kept (the last one when nothing is held out).

    Raises
    ------
    ValueError
        An argument out of range (naming it), or a validation or ``also`` collection over another action set.
    """
    _check_fit_arguments(epochs, batch_size, lr, weight_decay, noise, among, tolerance, never_worse)
    meta, cfg = read_meta(folder), config_of(folder)
    train, val, episodes = _split(folder, decisions, validation, also, scenarios)
    if among:
        train, val = _among(train, among), _among(val, among)
    goods = ([torch.from_numpy(d.near_best(tolerance, never_worse)) for d in (train, val)] if tolerance is not None
             else [None] * 2)
    normalizer = RunningNormalizer(train.obs.shape[1])
    normalizer.update(train.obs)
    torch.manual_seed(seed)
    policy = SACPolicy(train.obs.shape[1], train.mask.shape[1], cfg.sac,
                       action_features=action_features(cfg, meta["action_set"]), seed=seed)
    t = _tensors(train, normalizer)
    v = _tensors(val, normalizer)
    opt = torch.optim.AdamW(policy.actor.parameters(), lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    history, best, best_state = [], -1.0, None
    started = time.perf_counter()
    from tqdm.auto import trange

    for epoch in trange(epochs, desc=f"junior on {len(train)} decisions", disable=not progress):
        _train_epoch(policy, opt, t, goods[0], noise, batch_size, gen)
        acc = (_accuracy(policy, *t), _accuracy(policy, *v))
        history.append({"epoch": epoch + 1, "train_accuracy": round(acc[0], 4),
                        "validation_accuracy": round(acc[1], 4)})
        if goods[1] is not None:
            history[-1]["validation_near_best"] = round(_accuracy(policy, *v, goods[1]), 4)
        score = history[-1].get("validation_near_best", acc[1]) if len(val) else float(epoch)
        if score > best:
            best, best_state = score, {k: p.detach().clone() for k, p in policy.actor.state_dict().items()}
    policy.actor.load_state_dict(best_state)
    policy._factor_cache.clear()  # noqa: SLF001 - parameters changed outside an optimiser step of the policy
    kept = (max(history, key=lambda h: h.get("validation_near_best", h["validation_accuracy"])) if len(val)
            else history[-1])
    fit = {"collection": str(folder), "also": [str(f) for f in also],
           "scenarios": None if scenarios is None else [int(k) for k in scenarios],
           "learnt_from": sorted({int(k) for k in (scenarios or cfg.env.train_scenarios)}
                                 | {int(k) for f in also for k in config_of(f).env.train_scenarios}),
           "validation_collection": str(validation) if validation else None,
           "decisions": len(train), "validation_decisions": len(val), "episodes": episodes,
           "epochs": epochs, "batch_size": batch_size, "lr": lr, "weight_decay": weight_decay, "noise": noise,
           "among": among, "tolerance": tolerance, "never_worse": never_worse, "seed": seed,
           "kept_epoch": kept["epoch"],
           "train_accuracy": kept["train_accuracy"], "validation_accuracy": kept["validation_accuracy"],
           "validation_near_best": kept.get("validation_near_best"),
           "tutor_do_nothing_share": round(float(np.mean(train.action == 0)), 4),
           "history": history, "seconds": round(time.perf_counter() - started, 1)}
    return Junior(policy, normalizer, cfg, meta["action_set"], fit)


def _among(d: Decisions, k: int) -> Decisions:
    """``d`` among the tutor's first ``k`` candidates; ``ValueError`` when it had more (its choice may be outside)."""
    d = d.among(k)
    width = d.candidates.shape[1]  # type: ignore[union-attr]  # among() refuses decisions without candidates
    if k < width:
        raise ValueError(f"among = {k} out of range: the tutor chose among {width} candidates, its choice would fall "
                         f"outside the first {k}; expected >= {width}")
    return d


def _check_fit_arguments(epochs: int, batch_size: int, lr: float, weight_decay: float, noise: float, among: int,
                         tolerance: float | None, never_worse: bool) -> None:
    for name, v, low in (("epochs", epochs, 1), ("batch_size", batch_size, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{name} = {v!r} out of range: expected an integer >= {low}")
    if not 0 < lr <= 1:
        raise ValueError(f"lr = {lr!r} out of range: expected (0, 1]")
    for name, v in (("weight_decay", weight_decay), ("noise", noise)):
        if not 0 <= v <= 10:
            raise ValueError(f"{name} = {v!r} out of range: expected [0, 10]")
    if among != 0 and not 2 <= among <= 1000:
        raise ValueError(f"among = {among!r} out of range: expected 0 or [2, 1000]")
    if tolerance is not None and not 0 <= tolerance <= 10:
        raise ValueError(f"tolerance = {tolerance!r} out of range: expected [0, 10] (max rho)")
    if never_worse and tolerance is None:
        raise ValueError("never_worse = True needs a tolerance: without one only the tutor's choice is right")


def _train_epoch(policy: SACPolicy, opt: torch.optim.Optimizer, t: tuple[torch.Tensor, ...],
                 good: torch.Tensor | None, noise: float, batch_size: int, gen: torch.Generator) -> None:
    """One pass over the training decisions ``t`` (features, tutor's action, legal mask) in random batches: the
    cross-entropy of the tutor's choice, or with ``good`` (near-best actions) minus the log of their probability."""
    policy.actor.train()
    for rows in torch.randperm(len(t[0]), generator=gen).split(batch_size):
        x = t[0][rows]
        logits = _logits(policy, x + noise * torch.randn(x.shape, generator=gen) if noise else x)
        logits = logits.masked_fill(~t[2][rows], -1e9)
        if good is None:
            loss = F.cross_entropy(logits, t[1][rows])
        else:  # partial labels: any near-best candidate is right
            loss = (logits.logsumexp(1) - logits.masked_fill(~good[rows], -1e9).logsumexp(1)).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def _split(folder: str | Path, decisions: int | None, validation: str | Path | None, also: Sequence[str | Path],
           scenarios: Sequence[int] | None = None) -> tuple[Decisions, Decisions, int]:
    """(training decisions, validation decisions, training episodes) of :func:`fit_junior`'s arguments."""
    action_set = read_meta(folder)["action_set"]
    on = None if scenarios is None else _on_scenarios(folder, scenarios)
    for other in (*([validation] if validation is not None else []), *also):
        if read_meta(other)["action_set"] != action_set:
            raise ValueError(f"{other} was collected over another action set than {folder}")
    if validation is not None:
        train, val = load_decisions(folder, decisions if on is None else None), load_decisions(validation)
        if on is not None:
            train = _first(train.rows(on(train.episode)), decisions, folder)
    else:
        # The same held-out episodes whatever ``decisions``: juniors of different sizes are compared on one set.
        data = load_decisions(folder)
        if on is not None:
            data = data.rows(on(data.episode))
        held = data.episode % HOLDOUT_EVERY == HOLDOUT_EVERY - 1
        train, val = data.rows(~held), data.rows(held)
        train = _first(train, decisions, folder)
    episodes = int(np.unique(train.episode).size)
    if also:
        extra = [load_decisions(f) for f in also]
        episodes += sum(int(np.unique(d.episode).size) for d in extra)  # each collection numbers its own from 0
        train = concatenate([train, *extra])
    return train, val, episodes


def _first(train: Decisions, decisions: int | None, folder: str | Path) -> Decisions:
    """The first ``decisions`` of ``train`` (None: all); ``ValueError`` when it holds fewer."""
    if decisions is None:
        return train
    if decisions > len(train):
        raise ValueError(f"decisions = {decisions} out of range: {folder} holds {len(train)} decisions to train on "
                         f"(outside held-out episodes, on the chosen scenarios); expected [1, {len(train)}]")
    return train.rows(np.arange(len(train)) < decisions)


def _on_scenarios(folder: str | Path, scenarios: Sequence[int]) -> Any:
    """A test of episode ids: is the episode on one of ``scenarios``? (``ValueError`` naming a scenario the
    collection never plays.)"""
    from ace_hybrid.training.rollout import episode_of

    cfg = config_of(folder)
    played = set(cfg.env.train_scenarios)
    missing = sorted(set(int(k) for k in scenarios) - played)
    if not scenarios or missing:
        raise ValueError(f"scenarios = {list(scenarios)} out of range: {folder} plays scenarios {sorted(played)}")
    keep = {int(k) for k in scenarios}
    return lambda episode: np.asarray([episode_of(cfg, int(k))[0] in keep for k in episode], bool)


def junior_choices(policy: SACPolicy | Sequence[SACPolicy], normalizer: RunningNormalizer, d: Decisions,
                   sure: float = 0.0) -> np.ndarray:
    """(N,) the most likely legal action at each decision of ``d`` (the acting path's choice), in one batch; of
    several policies (an ensemble's members), by their mean probabilities. ``sure`` gates it as ``env.deploy_sure``
    does: do nothing where the choice's probability among the legal actions is below it."""
    if not 0 <= sure < 1:
        raise ValueError(f"sure = {sure!r} out of range: expected [0, 1) (0: always the most likely action)")
    members = [policy] if isinstance(policy, SACPolicy) else list(policy)
    x, _, mask = _tensors(d, normalizer)
    with torch.no_grad():
        probs = torch.stack([torch.softmax(_logits(p, x).masked_fill(~mask, -torch.inf), 1) for p in members]).mean(0)
    top, chosen = probs.max(1)
    return torch.where(top < sure, torch.zeros_like(chosen), chosen).numpy()


def junior_policies(state: dict[str, Any], obs_dim: int) -> tuple[list[SACPolicy], RunningNormalizer]:
    """The actor networks (one, or an ensemble's members) and the normaliser of a junior file's contents, for
    :func:`junior_choices` (the action features built from its grid)."""
    rows = action_features(config_from_dict(state["config"]), state["action_set"])
    policies = actor_policies(state, obs_dim, rows)
    normalizer = RunningNormalizer(obs_dim)
    normalizer.load_state_dict(state["normalizer"])
    return policies, normalizer


def junior_hits(junior: Junior, d: Decisions) -> np.ndarray:
    """(N,) bool: at each decision of ``d`` (e.g. another collection's), is the junior's most likely legal action
    the tutor's? Its mean is the accuracy :func:`fit_junior` reports."""
    return junior_choices(junior.policy, junior.normalizer, d) == d.action


def _tensors(d: Decisions, normalizer: RunningNormalizer) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = normalizer(d.obs) if len(d) else np.zeros((0, normalizer.dim), np.float32)
    return torch.from_numpy(x), torch.from_numpy(d.action), torch.from_numpy(d.mask)


_ACTION_FEATURES: dict[tuple[str, str], np.ndarray] = {}
"""Action features by grid and action set, made once per process (a grid takes up to a minute to load)."""


def action_features(cfg: Config, action_set: list[int] | None) -> np.ndarray:
    """The features of the action set ``action_set`` of ``cfg``'s grid, as a run builds its networks with them."""
    from ace_hybrid.grid.action_set import ActionSet
    from ace_hybrid.grid.catalog import ActionCatalog
    from ace_hybrid.grid.env import make_config_env

    key = (f"{cfg.env.name}|{cfg.env.data}", json.dumps(action_set))  # the catalog is the grid's alone
    if key not in _ACTION_FEATURES:
        env = make_config_env(cfg)
        try:
            _ACTION_FEATURES[key] = ActionSet(ActionCatalog.for_env(env), action_set).features()
        finally:
            env.close()
    return _ACTION_FEATURES[key].copy()


def save_junior(path: str | Path, junior: Junior) -> Path:
    """Write a junior file (atomically), of tensors and plain values only, as a checkpoint."""
    from ace_hybrid.training.checkpoint import plain

    state = {"format": JUNIOR_FORMAT, "kind": "junior", "config": junior.config.to_dict(),
             "actor": {k: torch.from_numpy(v) for k, v in junior.policy.policy_state().items()},
             "normalizer": plain(junior.normalizer.state_dict()), "action_set": junior.action_set, "fit": junior.fit}
    return atomic_write(path, lambda f: torch.save(state, f))


def ensemble_juniors(paths: Sequence[str | Path]) -> dict[str, Any]:
    """The contents of an ensemble file (:func:`save_ensemble`) of the juniors in ``paths``: fitted on the same
    decisions (the same configuration, action set and normaliser; other seeds), acting by their mean probabilities.

    Raises
    ------
    ValueError
        Fewer than 2 files, or one that differs from the first in its configuration, action set or normaliser
        (naming the file and what differs).
    """
    if len(paths) < 2:
        raise ValueError(f"an ensemble needs at least 2 junior files, got {len(paths)}")
    states = [load_junior(p) for p in paths]
    first = states[0]
    for path, state in zip(paths[1:], states[1:], strict=True):
        for key in ("config", "action_set"):
            if state[key] != first[key]:
                raise ValueError(f"{path}: another {key} than {paths[0]}: an ensemble's juniors are fitted on the "
                                 "same decisions")
        theirs, ours = state["normalizer"], first["normalizer"]
        if any(not np.allclose(np.asarray(theirs[k], np.float64), np.asarray(ours[k], np.float64)) for k in ours):
            raise ValueError(f"{path}: another normaliser than {paths[0]}: an ensemble's juniors are fitted on the "
                             "same decisions")
    members = [a for state in states for a in actors(state)]
    fit = {"ensemble_of": [str(p) for p in paths], "member_fits": [s["fit"] for s in states],
           "learnt_from": sorted({k for s in states for k in learnt_from(s)})}
    return {**first, "members": members, "fit": fit}  # "actor": the first's, the first member


def save_ensemble(path: str | Path, paths: Sequence[str | Path]) -> Path:
    """Write the ensemble file of the juniors in ``paths`` (:func:`ensemble_juniors`), atomically."""
    state = ensemble_juniors(paths)
    return atomic_write(path, lambda f: torch.save(state, f))


def init_from_junior(run: Any, path: str | Path) -> None:
    """Start a new run's actor and normaliser from a junior file (``train.init_policy``); the critics start as
    they would. The junior must have the run's action set and network shape (the message names both); an
    ensemble file, of several actors, is refused."""
    state = load_junior(path)
    if len(actors(state)) > 1:
        raise ValueError(f"train.init_policy = {path} is an ensemble of {len(actors(state))} juniors, a run has one "
                         "actor: start it from one of them")
    mine = None if run.actions.is_full else [int(i) for i in run.actions.indices]
    if state["action_set"] != mine:
        size = "the whole catalog" if state["action_set"] is None else f"{len(state['action_set'])} actions"
        raise ValueError(f"train.init_policy = {path}: the junior acts over another action set ({size}) than this "
                         f"run ({len(run.actions)} actions from env.action_set = {run.cfg.env.action_set!r})")
    try:
        run.sac.load_policy_state({k: v.numpy() for k, v in state["actor"].items()})
    except ValueError as exc:
        raise ValueError(f"train.init_policy = {path}: the junior's network does not fit this run's "
                         f"(sac.hidden, sac.head, sac.embed_dim): {exc}") from None
    run.normalizer.load_state_dict(state["normalizer"])


def store_tutor_data(run: Any, folder: str | Path) -> int:
    """Put every decision of a collection into a new run's validated partition (``train.tutor_data``); returns how
    many. The collection must be of the run's grid, weeks, episodes and action set (the message names the key)."""
    meta = read_meta(folder)
    if meta.get("driver") is not None:
        raise ValueError(f"train.tutor_data = {folder} was played by the junior {meta['driver']} (the tutor only "
                         "labelled it): its transitions are not the tutor's; use it with `junior fit --also`")
    theirs, mine = meta["config"]["env"], run.cfg.to_dict()["env"]
    for key in _SAME_EPISODES:
        if theirs.get(key) != mine.get(key):
            raise ValueError(f"train.tutor_data = {folder}: collected with env.{key} = {theirs.get(key)!r}, this run "
                             f"has {mine.get(key)!r}")
    own = None if run.actions.is_full else [int(i) for i in run.actions.indices]
    if meta["action_set"] != own:
        raise ValueError(f"train.tutor_data = {folder}: collected over another action set than this run's")
    d = load_decisions(folder)
    if len(d) > run.replay.validated_capacity:
        raise ValueError(f"train.tutor_data = {folder} holds {len(d)} decisions, more than replay.validated_capacity "
                         f"= {run.replay.validated_capacity}: raise it")
    if not run.cfg.train.init_policy:
        run.normalizer.update(d.obs)
    run.replay.add_validated_batch(d.obs, d.action, d.reward.astype(np.float64), d.next_obs, d.done, d.truncated,
                                   d.episode, d.decision, np.zeros(len(d)), np.ones(len(d), bool))
    return len(d)
