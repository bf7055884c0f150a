"""One cell of the table: one row and one seed, trained (training rows) and tested on the held-out pairs.

A training row has one cell per seed: train into ``<out>/runs/<id>-seed<k>`` (a half-done run is resumed from its
last checkpoint; rows made by one ``deploy_topk`` or ``budgets`` share it), then test ``best.pt`` (chosen on
``env.eval_pairs``; a budget's row ``best-<steps>.pt``, best.pt as it was then) on ``test_pairs``. A baseline row has one cell: its agents are deterministic on fixed episodes, so further seeds would
repeat the same numbers. Each cell's record carries a fingerprint of what its result depends on, so a finished cell
is reused only under the same configuration. A ``maskable-ppo`` row trains sb3-contrib's MaskablePPO instead
(:mod:`ace_hybrid.training.ppo`): a finished model in its run directory is reused, a half-done one trained anew
(PPO keeps no checkpoint to resume from), and its last model is tested.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

from ace_hybrid.config import Config, renamed_keys, without_added_defaults
from ace_hybrid.experiment.metrics import episode_metrics
from ace_hybrid.experiment.ppo_settings import PPOSettings
from ace_hybrid.experiment.spec import ExperimentSpec, RowSpec

FINISHED_MODEL = {"maskable-ppo": "maskable_ppo.json"}
"""A training kind -> the file whose presence in its run directory marks a finished training (default best.pt;
:data:`ace_hybrid.training.ppo.STATE_FILE` for MaskablePPO: named here so that reading cells needs no torch)."""


def finished_model(kind: str) -> str:
    """The file of a run directory that marks a training of ``kind`` finished (see :data:`FINISHED_MODEL`)."""
    return FINISHED_MODEL.get(kind, "best.pt")


def cell_id(row: RowSpec, seed: int | None) -> str:
    return row.id if seed is None else f"{row.id}-seed{seed}"


def run_dir_of(row: RowSpec, seed: int | None) -> str:
    """The training run a cell tests, relative to the experiment's folder (shared by one row's deploy_topk)."""
    return f"runs/{row.train_id}-seed{seed}"


def _settings(cfg: Config) -> dict[str, Any]:
    # Renamed keys under their first names: a rename does not change what a cell computes, nor its fingerprint.
    settings = without_added_defaults(renamed_keys(json.loads(json.dumps(cfg.to_dict())), first_names=True))
    settings.pop("log", None)
    return {**settings, **_input_files(cfg)}


def _input_files(cfg: Config) -> dict[str, str]:
    """Digests of the files a configuration names by path (a junior, tutor data): a file refitted or a collection
    grown under the same name is another input, so its cells are not reused. Added only when set."""
    digests = {}
    if cfg.train.init_policy:
        path = Path(cfg.train.init_policy)
        digests["init_policy_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    if cfg.train.tutor_data:
        folder = Path(cfg.train.tutor_data)
        listing = [(p.name, p.stat().st_size) for p in sorted((folder / "episodes").glob("ep-*.npz"))]
        meta = json.loads((folder / "tutor.json").read_text()) if (folder / "tutor.json").is_file() else {}
        made = [meta.get("config"), meta.get("action_set")]  # not its summary, which a rerun rewrites
        digests["tutor_data_sha256"] = hashlib.sha256(json.dumps([made, listing]).encode()).hexdigest()
    return digests


def training_fingerprint(cfg: Config, ppo: PPOSettings | None = None) -> str:
    """What a training run depends on (logging settings excluded; MaskablePPO's hyperparameters included), hashed."""
    what = _settings(cfg) if ppo is None else {**_settings(cfg), "ppo": ppo.to_dict()}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def fingerprint(spec: ExperimentSpec, row: RowSpec, cfg: Config) -> str:
    """What a cell's result depends on (logging settings excluded), hashed."""
    # "test_pairs" names the pairs played, the validation pairs under --on validation (key kept: old cells match).
    what = {"kind": row.kind, "config": _settings(cfg), "test_pairs": spec.pairs,
            "test_max_steps": spec.test_max_steps,
            "greedy_budget": spec.greedy_budget if row.kind == "greedy" else None}
    if row.topk is not None:
        what["deploy_topk"] = row.topk
    if row.shortlist:
        what["deploy_shortlist"] = row.shortlist  # added only when on: cells of the plain check stay valid
    if row.among:
        what["deploy_among"] = row.among  # likewise
    if row.sure:
        what["deploy_sure"] = row.sure  # likewise
    if row.threshold is not None:
        what["deploy_threshold"] = row.threshold  # likewise
    if row.budget is not None:
        what["budget"] = row.budget
    if row.ppo is not None:
        what["ppo"] = row.ppo.to_dict()
    if spec.score:
        what["score"] = True  # added only when on: cells made without it stay valid
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def _first_difference(a: Any, b: Any, prefix: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{prefix}{key}.")
    return f"{prefix.rstrip('.')}: {a!r} in the run, {b!r} now"


def tutor_agent(env: Any, cfg: Config) -> Any:
    """Expert-guided RL's tutor acting alone: the greedy expert over the run's action set (``env.action_set``), with
    ``train.tutor_budget`` simulations per decision, under the configuration's danger threshold."""
    from ace_hybrid.grid.agents import make_tutor

    return make_tutor(env, cfg)


def baseline_agent(kind: str, env: Any, cfg: Config, greedy_budget: int, topk: int | None = None,
                   shortlist: int | None = None, among: int | None = None, sure: float | None = None,
                   threshold: float | None = None) -> Any:
    """The agent of a baseline row, under the configuration's danger threshold (a junior alone, or with the top-k
    check of ``topk`` and ``shortlist`` as the row's ``deploy_topk`` asks, or alone among ``among`` candidates, or
    alone where it is ``sure``, or alone from max rho ``threshold``)."""
    from ace_hybrid.agents import make_agent

    if kind == "tutor":
        return tutor_agent(env, cfg)
    if kind == "junior":
        from ace_hybrid.grid.agents import deployed_check, deployed_threshold

        # The row's deploy_among, deploy_sure and deploy_threshold, else its own env.deploy_* (set beside
        # train.init_policy), not the junior file's, apply alone.
        _, _, among, sure = deployed_check(cfg, topk or 0, shortlist, among, sure)
        return make_agent(f"checkpoint:{cfg.train.init_policy}", env, topk=topk or 0, cfg=cfg, shortlist=shortlist,
                          among=among, sure=sure, threshold=deployed_threshold(cfg, threshold))
    return make_agent(kind, env, budget=greedy_budget, cfg=cfg)  # the kinds of baselines are make_agent's names


def _check_same_run(run_dir: Path, saved: dict[str, Any], cfg: Config, extra: dict[str, Any] | None = None) -> None:
    """ValueError when the run in ``run_dir`` (its saved configuration) was made otherwise than ``cfg`` (logging
    settings aside) and ``extra`` (settings beside the configuration, e.g. MaskablePPO's)."""
    now = without_added_defaults({**json.loads(json.dumps(cfg.to_dict())), **(extra or {})})
    saved = without_added_defaults(renamed_keys(saved))  # a run saved before a key was renamed or added
    for settings in (saved, now):
        settings.pop("log", None)
    if saved != now:
        raise ValueError(f"{run_dir} holds a run with another configuration ({_first_difference(saved, now)}); "
                         f"delete it or use another --out")


def train_cell(cfg: Config, run_dir: Path, ppo: PPOSettings | None = None) -> tuple[dict[str, Any], bool]:
    """Train (or resume) one run; returns its summary and whether it was resumed (a finished MaskablePPO run:
    reused). ``ppo`` given: a MaskablePPO run with these hyperparameters, else the project's training loop."""
    if ppo is not None:
        return _train_maskable_ppo(cfg, run_dir, ppo)
    from ace_hybrid.training.loop import train  # torch: imported when a table trains

    if (run_dir / "checkpoint.pt").is_file():
        _check_same_run(run_dir, json.loads((run_dir / "config.json").read_text()), cfg)
        return train(None, run_dir, resume=True), True
    if run_dir.exists():
        # Stopped before its first checkpoint: nothing to resume, and its metrics lines would be stale.
        shutil.rmtree(run_dir)
    return train(cfg, run_dir), False


def _train_maskable_ppo(cfg: Config, run_dir: Path, ppo: PPOSettings) -> tuple[dict[str, Any], bool]:
    """A finished MaskablePPO run of this configuration is reused; anything else in ``run_dir`` is trained anew."""
    from ace_hybrid.training.ppo import read_state, train_maskable_ppo  # torch and sb3-contrib: the rl extra

    if (run_dir / finished_model("maskable-ppo")).is_file():
        state = read_state(run_dir)
        _check_same_run(run_dir, {**state["config"], "ppo": state["settings"]}, cfg, {"ppo": ppo.to_dict()})
        return state["summary"], True
    if run_dir.exists():
        shutil.rmtree(run_dir)  # stopped before its model was saved: PPO keeps nothing to resume from
    return train_maskable_ppo(cfg, run_dir, ppo.to_dict()), False


def _training(cfg: Config, row: RowSpec, run_dir: Path, known: dict[str, Any] | None) -> dict[str, Any]:
    """The training summary a cell records: that of ``known`` (a cell that already trained the run), else of
    :func:`train_cell`."""
    if known is not None:
        return known["train"]
    summary, resumed = train_cell(cfg, run_dir, row.ppo)
    info = {k: summary.get(k) for k in ("env_steps", "decisions", "updates", "episodes", "best_survival",
                                        "train_seconds", "time_split", "last_eval", "kept_best")}
    info["llm"] = dict(summary.get("llm") or {})
    info["resumed"] = resumed
    return info


def run_cell(spec: ExperimentSpec, row: RowSpec, seed: int | None, cfg: Config, out: Path, test_env: Any,
             trained: dict[tuple[str, str], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Train (training rows) and test one cell; returns the cell's record (see
    :func:`~ace_hybrid.experiment.schedule.run_experiment`).

    ``trained`` maps (run directory, training fingerprint) to a cell that already trained that run (a row of the
    same ``deploy_topk``): its training is reused, not resumed.
    """
    # grid2op: imported when a cell runs, so that reading results.json (ace-hybrid report) needs no grid extra
    from ace_hybrid.agents import make_agent
    from ace_hybrid.grid.evaluation import evaluate

    started = time.time()
    train_info: dict[str, Any] | None = None
    run_rel = None
    if row.trains:
        run_rel = run_dir_of(row, seed)
        known = (trained or {}).get((run_rel, training_fingerprint(cfg, row.ppo)))
        train_info = _training(cfg, row, out / run_rel, known)
        policy = (f"maskable-ppo:{out / run_rel}" if row.kind == "maskable-ppo"
                  else f"checkpoint:{out / run_rel / best_file(row)}")

        def build(env: Any) -> Any:
            return make_agent(policy, env, topk=row.topk, cfg=cfg, shortlist=row.shortlist, among=row.among,
                              sure=row.sure, threshold=row.threshold)
    else:
        def build(env: Any) -> Any:
            return baseline_agent(row.kind, env, cfg, spec.greedy_budget, row.topk, row.shortlist, row.among,
                                  row.sure, row.threshold)
    agent = build(test_env)
    report = evaluate(test_env, agent, spec.pairs, agent_name=row.name, max_steps=spec.test_max_steps or None,
                      progress=cfg.log.progress)
    if spec.score:
        from ace_hybrid.grid.scores import score_report

        score_report(report, build, max_steps=spec.test_max_steps or None, env_source=cfg.env.data or None)
    test = report.to_dict()
    if not row.trains and hasattr(agent, "llm_calls"):
        # The LLM-only agent asks the model at test time; kept apart from the table's training refinements.
        report_llm = {"calls": int(agent.llm_calls), "errors": int(getattr(agent, "llm_errors", 0)),
                      "seconds": float(getattr(agent, "llm_seconds", 0.0))}
    else:
        report_llm = None
    metrics = {**episode_metrics(test["episodes"]), **_training_costs(row, cfg, train_info)}
    return {
        "cell": cell_id(row, seed), "row": row.id, "name": row.name, "kind": row.kind, "seed": seed,
        "train_id": row.train_id, "deploy_topk": row.topk, "deploy_shortlist": row.shortlist,
        "deploy_among": row.among, "deploy_sure": row.sure, "deploy_threshold": row.threshold, "budget": row.budget,
        "fingerprint": fingerprint(spec, row, cfg),
        "train_fingerprint": training_fingerprint(cfg, row.ppo) if row.trains else None,
        "env": cfg.env.name, "llm_backend": cfg.llm.backend,
        "dataset": test_env.ace_dataset.describe() if hasattr(test_env, "ace_dataset") else None,
        "run_dir": run_rel, "started": started, "finished": time.time(), "metrics": metrics,
        "train": train_info, "test": test, "test_llm": report_llm, "config": cfg.to_dict(),
    }


def best_file(row: RowSpec) -> str:
    """The checkpoint a training row tests: ``best-<steps>.pt`` at its budget, else ``best.pt``."""
    return "best.pt" if row.budget is None else f"best-{row.budget}.pt"


def _training_costs(row: RowSpec, cfg: Config, train_info: dict[str, Any] | None) -> dict[str, Any]:
    """What the tested policy's training cost: the whole run's, or what was spent by the row's budget (as
    ``kept_best`` recorded it)."""
    if train_info is None:
        return {"env_steps": None, "llm_calls": None, "llm_accepted": None, "train_seconds": None}
    uses_llm = cfg.llm.backend != "none"
    llm = train_info.get("llm") or {}
    costs = {"env_steps": train_info["env_steps"], "train_seconds": train_info["train_seconds"],
             "llm_calls": llm.get("calls", 0), "llm_accepted": llm.get("accepted", 0)}
    if row.budget is not None:
        at = next((k for k in train_info.get("kept_best") or [] if k["env_steps"] == row.budget), None)
        if at is None:
            raise ValueError(f"row {row.name!r}: its training kept no best.pt at {row.budget} steps "
                             f"(train.keep_best_at); delete its run directory to train it again")
        costs.update({k: at.get(k, 0) for k in ("env_steps", "train_seconds", "llm_calls", "llm_accepted")})
    for key in ("llm_calls", "llm_accepted"):
        costs[key] = int(costs[key]) if uses_llm else None
    return costs
