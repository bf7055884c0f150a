"""Experiments: agents x seeds, trained and tested on held-out episodes, tabulated like the ACE paper's table.

An experiment file (TOML) names the environment configuration, the held-out test episodes, the seeds and the rows::

    name = "make_run"
    config = "../configs/l2rpn_neurips_2020_track1.toml"  # relative to this file; its eval_pairs select best.pt
    set = ["train.total_env_steps=5000"]                  # overrides applied to every row
    ace_set = ["llm.backend=smollm2"]                     # overrides of the LLM rows (ace, llm_lac)
    seeds = [0, 1, 2]                                     # train.seed (and llm.seed) of the training rows
    test_pairs = [[0, 0], [1, 1]]                         # held-out (scenario, seed): never env.eval_pairs
    test_max_steps = 0                                    # cut test episodes (0: full length)
    greedy_budget = 30                                    # simulations per decision of the greedy expert

    [[rows]]
    name = "ACE w/o actor"   # display name
    kind = "ace"             # donothing | reco | greedy | llm_lac | sac_only | ace
    id = "ace-no-actor"      # file name of its cells (default: the name, lowercased, '-' for other characters)
    set = ["ace.actor=false"]

A row's configuration is: the config file, then ``set``, then ``ace_set`` (LLM rows), then the command line's
``--set``, then the row's ``set``, then what its kind fixes (``llm.backend=none`` for sac_only), then
``train.seed = llm.seed = seed``. Every row's configuration is built and validated before anything runs, so a bad
key fails at once with its name.

Cells. A training row has one cell per seed: train into ``<out>/runs/<id>-seed<k>`` (a half-done run is resumed
from its last checkpoint), then test ``best.pt`` (chosen on ``env.eval_pairs``) on ``test_pairs``. A baseline row
has one cell: its agents are deterministic on fixed episodes, so further seeds would repeat the same numbers. Each
cell's result is written to ``<out>/cells/<id>[-seed<k>].json`` with a fingerprint of its configuration; a cell
whose file exists is never rerun, and one whose fingerprint no longer matches is an error (not silently reused).

Outputs: ``results.json`` (rows and cells), ``results.csv`` (one line per row), ``results.md`` (the table, mean ±
std over seeds; the sample std, shown when a row has two or more seeds), and ``report.md`` with figures
(:mod:`ace_hybrid.report`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import platform
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ace_hybrid.agents import make_agent
from ace_hybrid.config import Config, load_config, read_toml
from ace_hybrid.files import atomic_write_json
from ace_hybrid.grid.evaluation import evaluate

BASELINE_KINDS: tuple[str, ...] = ("donothing", "reco", "greedy", "llm_lac")
"""Rows that only test a fixed agent."""
TRAINING_KINDS: tuple[str, ...] = ("sac_only", "ace")
"""Rows that train (SAC alone, or ACE with its LLM roles) and then test best.pt."""
ROW_KINDS: tuple[str, ...] = BASELINE_KINDS + TRAINING_KINDS
LLM_KINDS: tuple[str, ...] = ("llm_lac", "ace")
"""Rows that take the experiment's ``ace_set``."""

METRICS: tuple[tuple[str, str, str], ...] = (
    ("episode_reward", "Episode reward", "{:.1f}"),
    ("survival_rate", "Survival rate", "{:.1%}"),
    ("env_steps", "RL env steps", "{:,.0f}"),
    ("llm_calls", "LLM calls", "{:,.0f}"),
    ("llm_accepted", "LLM accepted", "{:,.0f}"),
    ("train_seconds", "Training time (s)", "{:,.0f}"),
    ("test_seconds_per_episode", "Test time / episode (s)", "{:.2f}"),
)
"""(key, column title, format) of the table's metrics, in the paper's order."""

_TOP_KEYS = {"name", "description", "config", "set", "ace_set", "seeds", "test_pairs", "test_max_steps",
             "greedy_budget", "rows"}
_ROW_KEYS = {"name", "id", "kind", "set"}
_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


# ----------------------------------------------------------------------------- the experiment file


@dataclass
class RowSpec:
    """One row of the table."""

    id: str
    """File-safe identifier (cells, run directories)."""
    name: str
    """Display name."""
    kind: str
    """One of :data:`ROW_KINDS`."""
    overrides: list[str] = field(default_factory=list)
    """``section.key=value`` overrides of this row."""

    @property
    def trains(self) -> bool:
        return self.kind in TRAINING_KINDS


@dataclass
class ExperimentSpec:
    """A parsed experiment file (see the module docstring)."""

    name: str
    path: Path
    config: Path | None
    overrides: list[str]
    ace_overrides: list[str]
    cli_overrides: list[str]
    seeds: list[int]
    test_pairs: list[tuple[int, int]]
    test_max_steps: int
    greedy_budget: int
    rows: list[RowSpec]
    description: str = ""

    def cells(self) -> list[tuple[RowSpec, int | None]]:
        """(row, seed) for every cell, in table order; baselines have one cell with seed None."""
        return [(row, seed) for row in self.rows for seed in (self.seeds if row.trains else [None])]

    def row_config(self, row: RowSpec, seed: int | None) -> Config:
        """The validated configuration of one cell (ValueError naming the row and the bad key)."""
        overrides = list(self.overrides)
        if row.kind in LLM_KINDS:
            overrides += self.ace_overrides
        overrides += self.cli_overrides + row.overrides
        if row.kind == "sac_only":
            overrides.append("llm.backend=none")
        if seed is not None:
            overrides += [f"train.seed={seed}", f"llm.seed={seed}"]
        try:
            cfg = load_config(self.config, overrides)
        except (ValueError, FileNotFoundError) as exc:
            raise type(exc)(f"row {row.name!r}: {exc}") from None
        if row.kind == "ace" and cfg.llm.backend == "none":
            raise ValueError(f"row {row.name!r} (kind ace) has llm.backend = 'none': set one in ace_set or the "
                             f"row's set (e.g. llm.backend=smollm2), or use kind sac_only")
        return cfg


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_.]+", "-", name.lower()).strip("-.")


def _str_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where} = {value!r} must be a list of 'section.key=value' strings")
    return list(value)


def _int(value: Any, where: str, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{where} = {value!r} must be an integer >= {low}")
    return value


def load_experiment(path: str | Path, overrides: Sequence[str] = (), *, rows: Sequence[str] | None = None,
                    seeds: Sequence[int] | None = None) -> ExperimentSpec:
    """Read and check an experiment file; build and validate every cell's configuration.

    Parameters
    ----------
    path
        The experiment TOML file.
    overrides
        ``section.key=value`` for every row (the command line's ``--set``), applied before each row's own.
    rows
        Row ids to keep (default all), in the file's order.
    seeds
        Seeds replacing the file's ``seeds``.

    Raises
    ------
    FileNotFoundError
        For a missing experiment or configuration file.
    ValueError
        Naming the bad key, row, kind, seed or pair; or when a test pair is also a checkpoint-selection pair
        (``env.eval_pairs``) or possibly a training episode.
    """
    path = Path(path)
    data = read_toml(path, "experiment file")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(sorted(map(repr, unknown)))}; valid keys: "
                         f"{', '.join(sorted(_TOP_KEYS))}")
    config = None
    if "config" in data:
        if not isinstance(data["config"], str):
            raise ValueError(f"config = {data['config']!r} must be a path string")
        config = Path(data["config"])
        config = config if config.is_absolute() else (path.parent / config)
        if not config.is_file():
            raise FileNotFoundError(f"config = {data['config']!r}: {config} does not exist (paths are relative to "
                                    f"the experiment file)")
    seed_list = list(seeds) if seeds is not None else data.get("seeds", [0])
    if not isinstance(seed_list, list) or not seed_list:
        raise ValueError(f"seeds = {seed_list!r} must be a non-empty list of integers >= 0")
    seed_list = [_int(s, "seeds[]", 0) for s in seed_list]
    if len(set(seed_list)) != len(seed_list):
        raise ValueError(f"seeds = {seed_list!r} repeats a seed")
    pairs = data.get("test_pairs")
    if (not isinstance(pairs, list) or not pairs
            or not all(isinstance(p, list) and len(p) == 2 for p in pairs)):
        raise ValueError(f"test_pairs = {pairs!r} must be a non-empty list of [scenario, seed] (held-out episodes)")
    test_pairs = [(_int(s, "test_pairs[][0]", 0), _int(k, "test_pairs[][1]", 0)) for s, k in pairs]
    raw_rows = data.get("rows")
    if not isinstance(raw_rows, list) or not raw_rows:
        raise ValueError(f"{path}: no [[rows]]: give at least one row (kinds: {', '.join(ROW_KINDS)})")
    row_specs: list[RowSpec] = []
    for i, raw in enumerate(raw_rows):
        where = f"rows[{i}]"
        bad = set(raw) - _ROW_KEYS
        if bad:
            raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(map(repr, bad)))}; valid keys: "
                             f"{', '.join(sorted(_ROW_KEYS))}")
        name = raw.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}.name = {name!r} must be a non-empty string")
        kind = raw.get("kind")
        if kind not in ROW_KINDS:
            raise ValueError(f"{where}.kind = {kind!r} (row {name!r}) is not one of {', '.join(ROW_KINDS)}")
        row_id = raw.get("id", _slug(name))
        if not isinstance(row_id, str) or not _ID.match(row_id):
            raise ValueError(f"{where}.id = {row_id!r} must match {_ID.pattern}")
        row_specs.append(RowSpec(row_id, name, kind, _str_list(raw.get("set", []), f"{where}.set")))
    ids = [r.id for r in row_specs]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"row id(s) {', '.join(dupes)} appear more than once: give each row a distinct id")
    if rows is not None:
        missing = [r for r in rows if r not in ids]
        if missing:
            raise ValueError(f"unknown row(s) {', '.join(map(repr, missing))}; rows of {path.name}: {', '.join(ids)}")
        row_specs = [r for r in row_specs if r.id in set(rows)]
    spec = ExperimentSpec(
        name=str(data.get("name", path.stem)), path=path, config=config,
        overrides=_str_list(data.get("set", []), "set"), ace_overrides=_str_list(data.get("ace_set", []), "ace_set"),
        cli_overrides=list(overrides), seeds=seed_list, test_pairs=test_pairs,
        test_max_steps=_int(data.get("test_max_steps", 0), "test_max_steps", 0),
        greedy_budget=_int(data.get("greedy_budget", 30), "greedy_budget", 2), rows=row_specs,
        description=str(data.get("description", "")))
    for row, seed in spec.cells():
        _check_held_out(spec, row, spec.row_config(row, seed))
    return spec


def _check_held_out(spec: ExperimentSpec, row: RowSpec, cfg: Config) -> None:
    """Test pairs must be neither checkpoint-selection pairs nor (possibly) training episodes."""
    selection = {(int(s), int(k)) for s, k in cfg.env.eval_pairs}
    for scenario, seed in spec.test_pairs:
        if (scenario, seed) in selection:
            raise ValueError(f"test pair [{scenario}, {seed}] is also in env.eval_pairs (row {row.name!r}), which "
                             f"choose best.pt: test pairs must be held out")
        if not row.trains:
            continue
        # Training episode k plays (train_scenarios[k % n], train_seed_start + k); at most total_env_steps episodes.
        k = seed - cfg.env.train_seed_start
        scenarios = cfg.env.train_scenarios
        if 0 <= k < cfg.train.total_env_steps and scenarios[k % len(scenarios)] == scenario:
            raise ValueError(f"test pair [{scenario}, {seed}] may be training episode {k} of row {row.name!r} "
                             f"(env.train_seed_start = {cfg.env.train_seed_start}): pick other test seeds")


# ----------------------------------------------------------------------------- cells


def cell_id(row: RowSpec, seed: int | None) -> str:
    return row.id if seed is None else f"{row.id}-seed{seed}"


def fingerprint(spec: ExperimentSpec, row: RowSpec, cfg: Config) -> str:
    """What a cell's result depends on (logging settings excluded), hashed."""
    settings = cfg.to_dict()
    settings.pop("log", None)
    what = {"kind": row.kind, "config": settings, "test_pairs": spec.test_pairs,
            "test_max_steps": spec.test_max_steps,
            "greedy_budget": spec.greedy_budget if row.kind == "greedy" else None}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def _first_difference(a: Any, b: Any, prefix: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{prefix}{key}.")
    return f"{prefix.rstrip('.')}: {a!r} in the run, {b!r} now"


def baseline_agent(kind: str, env: Any, cfg: Config, greedy_budget: int) -> Any:
    """The agent of a baseline row, under the configuration's danger threshold."""
    spec = {"donothing": "do-nothing", "reco": "reco", "greedy": "greedy", "llm_lac": "lac"}[kind]
    return make_agent(spec, env, budget=greedy_budget, cfg=cfg)


def train_cell(cfg: Config, run_dir: Path) -> tuple[dict[str, Any], bool]:
    """Train (or resume) one run; returns its summary and whether it was resumed."""
    from ace_hybrid.training.loop import train  # torch: imported when a table trains

    if (run_dir / "checkpoint.pt").is_file():
        saved = json.loads((run_dir / "config.json").read_text())
        now = json.loads(json.dumps(cfg.to_dict()))
        for settings in (saved, now):
            settings.pop("log", None)
        if saved != now:
            raise ValueError(f"{run_dir} holds a run with another configuration ({_first_difference(saved, now)}); "
                             f"delete it or use another --out")
        return train(None, run_dir, resume=True), True
    if run_dir.exists():
        # Stopped before its first checkpoint: nothing to resume, and its metrics lines would be stale.
        shutil.rmtree(run_dir)
    return train(cfg, run_dir), False


def run_cell(spec: ExperimentSpec, row: RowSpec, seed: int | None, cfg: Config, out: Path,
             test_env: Any) -> dict[str, Any]:
    """Train (training rows) and test one cell; returns the cell's record (see :func:`run_experiment`)."""
    started = time.time()
    train_info: dict[str, Any] | None = None
    run_rel = None
    if row.trains:
        run_rel = f"runs/{cell_id(row, seed)}"
        summary, resumed = train_cell(cfg, out / run_rel)
        train_info = {k: summary.get(k) for k in ("env_steps", "decisions", "updates", "episodes", "best_survival",
                                                   "train_seconds", "time_split", "last_eval")}
        train_info["llm"] = dict(summary.get("llm") or {})
        train_info["resumed"] = resumed
        agent = make_agent(f"checkpoint:{out / run_rel / 'best.pt'}", test_env, cfg=cfg)
    else:
        agent = baseline_agent(row.kind, test_env, cfg, spec.greedy_budget)
    report = evaluate(test_env, agent, spec.test_pairs, agent_name=row.name, max_steps=spec.test_max_steps or None,
                      progress=cfg.log.progress)
    totals = report.totals()
    if not row.trains and hasattr(agent, "llm_calls"):
        # The LLM-only agent asks the model at test time; kept apart from the table's training refinements.
        report_llm = {"calls": int(agent.llm_calls), "errors": int(getattr(agent, "llm_errors", 0)),
                      "seconds": float(getattr(agent, "llm_seconds", 0.0))}
    else:
        report_llm = None
    uses_llm = row.trains and cfg.llm.backend != "none"
    llm = (train_info or {}).get("llm", {})
    metrics = {
        "episode_reward": totals["mean_reward"],
        "survival_rate": totals["survival_rate"],
        "env_steps": train_info["env_steps"] if train_info else None,
        "llm_calls": int(llm.get("calls", 0)) if uses_llm else None,
        "llm_accepted": int(llm.get("accepted", 0)) if uses_llm else None,
        "train_seconds": train_info["train_seconds"] if train_info else None,
        "test_seconds_per_episode": totals["wall_time_s"] / max(1, totals["episodes"]),
    }
    return {
        "cell": cell_id(row, seed), "row": row.id, "name": row.name, "kind": row.kind, "seed": seed,
        "fingerprint": fingerprint(spec, row, cfg), "env": cfg.env.name, "llm_backend": cfg.llm.backend,
        "dataset": test_env.ace_dataset.describe() if hasattr(test_env, "ace_dataset") else None,
        "run_dir": run_rel, "started": started, "finished": time.time(), "metrics": metrics,
        "train": train_info, "test": report.to_dict(), "test_llm": report_llm, "config": cfg.to_dict(),
    }


# ----------------------------------------------------------------------------- the table


def aggregate(spec: ExperimentSpec, cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per row: for each metric the values over its cells, their mean and sample std (None below 2 values)."""
    out = []
    for row in spec.rows:
        mine = [c for c in cells if c["row"] == row.id]
        stats: dict[str, Any] = {}
        for key, _, _ in METRICS:
            values = [float(c["metrics"][key]) for c in mine if c["metrics"].get(key) is not None]
            stats[key] = {
                "values": values,
                "mean": float(np.mean(values)) if values else None,
                "std": float(np.std(values, ddof=1)) if len(values) >= 2 else None,
            }
        out.append({"id": row.id, "name": row.name, "kind": row.kind, "n": len(mine),
                    "seeds": [c["seed"] for c in mine], "metrics": stats})
    return out


def format_value(stat: dict[str, Any], fmt: str) -> str:
    """``mean ± std`` (just the mean with one value, an en dash with none)."""
    if stat["mean"] is None:
        return "–"
    text = fmt.format(stat["mean"])
    if stat["std"] is not None:
        text += " ± " + fmt.format(stat["std"])
    return text


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The paper-style table: one line per row, mean ± std over seeds."""
    head = "| Agent | seeds | " + " | ".join(title for _, title, _ in METRICS) + " |"
    rule = "|:---|---:|" + "---:|" * len(METRICS)
    lines = [head, rule]
    for r in rows:
        cells = [format_value(r["metrics"][key], fmt) for key, _, fmt in METRICS]
        lines.append(f"| {r['name']} | {r['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def to_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["id", "name", "kind", "n"] + [f"{k}_{s}" for k, _, _ in METRICS for s in ("mean", "std")])
    for r in rows:
        values = []
        for key, _, _ in METRICS:
            stat = r["metrics"][key]
            values += ["" if stat["mean"] is None else repr(stat["mean"]),
                       "" if stat["std"] is None else repr(stat["std"])]
        writer.writerow([r["id"], r["name"], r["kind"], r["n"], *values])
    return buf.getvalue()


def _setup(spec: ExperimentSpec, cells: list[dict[str, Any]]) -> str:
    envs = sorted({c["env"] for c in cells})
    pairs = ", ".join(f"({s}, {k})" for s, k in spec.test_pairs)
    cut = f", cut at {spec.test_max_steps} steps" if spec.test_max_steps else ""
    return (f"Environment: {', '.join(envs)}. Held-out test episodes (scenario, seed): {pairs}{cut}. "
            f"Seeds of the training rows: {', '.join(map(str, spec.seeds))}; baselines are deterministic on fixed "
            f"episodes and run once. Mean ± sample std over seeds; episode reward is the environment's reward "
            f"summed over an episode, averaged over the test episodes; survival is steps survived / steps "
            f"played; times are wall-clock seconds.")


# ----------------------------------------------------------------------------- the whole grid


def run_experiment(spec: ExperimentSpec, out: str | Path, *, progress: bool = True) -> dict[str, Any]:
    """Run every cell not yet finished, then write results.json, results.csv and results.md (the figures and
    ``report.md`` are :func:`ace_hybrid.report.write_report`'s, which reads results.json).

    Returns
    -------
    dict
        ``{"rows": aggregate(...), "cells": [...], "ran": [cell ids run now], "reused": [cell ids read back],
        "markdown": the table, "out": str(out)}``. Each cell record holds ``metrics`` (the table's values),
        ``train`` (the training summary, None for baselines), ``test`` (the per-episode test report) and the
        cell's configuration.
    """
    from tqdm.auto import tqdm

    out = Path(out)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    plan = [(row, seed, spec.row_config(row, seed)) for row, seed in spec.cells()]
    if not progress:
        for _, _, cfg in plan:
            cfg.log.progress = False
    cells: list[dict[str, Any]] = []
    ran, reused = [], []
    envs: dict[tuple[str, int], Any] = {}
    bar = tqdm(total=len(plan), desc=f"experiment {spec.name}", unit="cell", disable=not progress,
               dynamic_ncols=True)
    try:
        for row, seed, cfg in plan:
            name = cell_id(row, seed)
            path = out / "cells" / f"{name}.json"
            expected = fingerprint(spec, row, cfg)
            bar.set_postfix_str(name)
            if path.is_file():
                cell = json.loads(path.read_text())
                if cell.get("fingerprint") != expected:
                    raise ValueError(f"{path} was made with another configuration or other test pairs: delete it to "
                                     f"rerun that cell, or use another --out")
                reused.append(name)
            else:
                key = (cfg.env.name, cfg.env.env_seed)
                if key not in envs:
                    envs[key] = _test_env(spec, cfg)
                cell = run_cell(spec, row, seed, cfg, out, envs[key])
                atomic_write_json(path, cell)
                ran.append(name)
            cells.append(cell)
            bar.update(1)
    finally:
        bar.close()
        for env in envs.values():
            env.close()
    rows = aggregate(spec, cells)
    markdown = to_markdown(rows)
    setup = _setup(spec, cells)
    results = {"experiment": spec.name, "description": spec.description, "experiment_file": str(spec.path),
               "seeds": spec.seeds, "test_pairs": [list(p) for p in spec.test_pairs],
               "test_max_steps": spec.test_max_steps, "setup": setup,
               "machine": _machine(),
               "rows": rows, "cells": cells}
    atomic_write_json(out / "results.json", results)
    (out / "results.csv").write_text(to_csv(rows))
    title = f"# {spec.name}\n\n" + (f"{spec.description}\n\n" if spec.description else "")
    (out / "results.md").write_text(title + setup + "\n\n" + markdown + "\n")
    return {"rows": rows, "cells": cells, "ran": ran, "reused": reused, "markdown": markdown, "out": str(out)}


def _test_env(spec: ExperimentSpec, cfg: Config) -> Any:
    """The environment the test episodes are played on; checks the test scenarios exist."""
    from ace_hybrid.grid.env import make_env, n_scenarios

    env = make_env(cfg.env.name, seed=cfg.env.env_seed)
    count = n_scenarios(env)
    for scenario, seed in spec.test_pairs:
        if not 0 <= scenario < count:
            env.close()
            raise IndexError(f"test pair [{scenario}, {seed}]: scenario {scenario} out of range [0, {count}) for "
                             f"{cfg.env.name}")
    return env


def _machine() -> dict[str, Any]:
    """What the times in the table were measured on."""
    try:
        import torch

        cuda = bool(torch.cuda.is_available())
    except ImportError:  # baseline-only experiments need no torch
        cuda = False
    return {"cpus": os.cpu_count(), "cuda": cuda, "platform": platform.platform(), "python": platform.python_version()}
