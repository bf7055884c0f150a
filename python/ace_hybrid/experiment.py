"""Experiments: agents x seeds, trained and tested on held-out episodes, tabulated with 95% bootstrap intervals.

An experiment file (TOML) names the environment configuration, the held-out test episodes, the seeds and the rows::

    name = "make_run"
    config = "../configs/l2rpn_neurips_2020_track1.toml"  # relative to this file; its eval_pairs select best.pt
    set = ["train.total_env_steps=5000"]                  # overrides applied to every row
    ace_set = ["llm.backend=smollm2"]                     # overrides of the LLM rows (ace, llm_lac)
    seeds = [0, 1, 2]                                     # train.seed (and llm.seed) of the training rows
    test_pairs = [[0, 100], [1, 101]]                     # held-out (scenario, seed): never env.eval_pairs
    test_max_steps = 0                                    # cut test episodes (0: full length)
    greedy_budget = 30                                    # simulations per decision of the greedy expert

    [[rows]]
    name = "ACE w/o actor"   # display name
    kind = "ace"             # donothing | reco | greedy | tutor | llm_lac | sac_only | ace
    id = "ace-no-actor"      # file name of its cells (default: the name, lowercased, '-' for other characters)
    set = ["ace.actor=false"]
    deploy_topk = [0, 8]     # training rows only: one table row per value, all from the same training

A row's configuration is: the config file, then ``set``, then ``ace_set`` (LLM rows), then the command line's
``--set``, then the row's ``set``, then what its kind fixes (``llm.backend=none`` for sac_only), then
``train.seed = llm.seed = seed``. Every row's configuration is built and validated before anything runs, so a bad
key fails at once with its name.

``deploy_topk``. A training row with ``deploy_topk = [0, 8]`` becomes two table rows, "NAME (policy alone)" (id
``ID-alone``: the policy's most likely legal action; "A (B, policy alone)" for a name "A (B)") and "NAME + top-8
check" (id ``ID-top8``: the 8 most likely legal actions and do nothing are simulated once each and the lowest
simulated max rho is played). Both test the same ``best.pt`` of one training run per seed on the same pairs, so the
difference between them is the check's share. ``best.pt`` itself is chosen on ``env.eval_pairs`` with the run's own
``env.deploy_topk`` (8 by default), also for the row that tests the policy alone. Without ``deploy_topk`` a row is
tested with its run's own ``env.deploy_topk``. ``--rows ID`` keeps every row made from ``ID``; ``--rows ID-top8`` just that one.

Cells. A training row has one cell per seed: train into ``<out>/runs/<id>-seed<k>`` (a half-done run is resumed
from its last checkpoint; rows made by one ``deploy_topk`` share it), then test ``best.pt`` (chosen on
``env.eval_pairs``) on ``test_pairs``. A baseline row has one cell: its agents are deterministic on fixed episodes,
so further seeds would repeat the same numbers. Each cell's result is written to ``<out>/cells/<id>[-seed<k>].json``
with a fingerprint of its configuration; a cell whose file exists is never rerun, and one whose fingerprint no longer
matches is an error (not silently reused).

Intervals. Every test metric of a row is pooled over its episodes (seed x test pair) and given a 95% percentile
bootstrap interval from :data:`BOOTSTRAP_DRAWS` draws with the generator seeded by :data:`BOOTSTRAP_SEED`. The design
is crossed (every row plays the same test pairs; every training row trains with the same seeds), so a draw resamples
the test pairs and, independently, the training seeds, each with replacement, and applies the same draw to every row
(Owen's pigeonhole bootstrap for crossed designs, Ann. Appl. Stat. 2007); baselines have no seed level. The paired
difference between two rows is computed within each draw, so what the rows share (the pairs, the seeds, one
training for the rows of one ``deploy_topk``) cancels. Survival rate is grid2op's: total steps survived over total
steps playable, summed over the episodes (not the mean of per-episode rates; the two agree when the episodes have
equal lengths). With 2-3 seeds the seed level is coarse and the interval is a lower bound on the uncertainty.

Outputs: ``results.json`` (rows with every per-episode value, the bootstrap's settings, the comparisons, every cell
and the command that made them), ``results.csv`` (one line per row), ``results.md`` (the table and the paired
differences) and ``report.md`` with figures (:mod:`ace_hybrid.report`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import platform
import re
import shlex
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ace_hybrid.agents import make_agent
from ace_hybrid.config import Config, load_config, read_toml
from ace_hybrid.files import atomic_write_json
from ace_hybrid.grid.evaluation import evaluate
from ace_hybrid.processes import exit_with_parent

BASELINE_KINDS: tuple[str, ...] = ("donothing", "reco", "greedy", "tutor", "llm_lac")
"""Rows that only test a fixed agent. "greedy" is the greedy expert over the whole catalog with the file's
``greedy_budget`` simulations per decision; "tutor" is expert-guided RL's tutor acting alone: the greedy expert over
the row's action set (``env.action_set``) with ``train.tutor_budget`` simulations per decision."""
TRAINING_KINDS: tuple[str, ...] = ("sac_only", "ace")
"""Rows that train (SAC alone, or ACE with its LLM roles) and then test best.pt."""
ROW_KINDS: tuple[str, ...] = BASELINE_KINDS + TRAINING_KINDS
LLM_KINDS: tuple[str, ...] = ("llm_lac", "ace")
"""Rows that take the experiment's ``ace_set``."""

BOOTSTRAP_DRAWS = 10_000
"""Bootstrap draws of every interval."""
BOOTSTRAP_SEED = 250602522
"""Seed of the bootstrap's generator (numpy's default_rng), fixed so a table is reproduced to the digit."""
LEVEL = 0.95
"""Coverage of the intervals (percentile bootstrap)."""

EPISODE_FIELDS: tuple[str, ...] = ("steps_survived", "max_steps", "cumulative_reward", "decisions", "simulations",
                                   "decision_simulations", "wall_time_s")
"""Per-episode values kept in every row of results.json (one seeds x test pairs matrix each; NaN where a cell made
by an older version lacks one)."""

TEST_METRICS: tuple[tuple[str, str, str, str, str | None, bool], ...] = (
    ("survival_rate", "Survival rate", "{:.1%}", "steps_survived", "max_steps", True),
    ("episode_reward", "Episode reward", "{:.1f}", "cumulative_reward", None, True),
    ("simulations_per_decision", "Simulations / decision", "{:.1f}", "decision_simulations", "decisions", False),
    ("all_simulations_per_decision", "With the safe rule's", "{:.1f}", "simulations", "decisions", False),
    ("test_seconds_per_episode", "Test time / episode (s)", "{:.2f}", "wall_time_s", None, False),
)
"""(key, column title, format, numerator, denominator, interval shown in the table) of the metrics measured on the
test episodes: the sum of the numerator over a row's episodes divided by the sum of the denominator (by the number
of episodes when None); the simulation columns are as :data:`SIMULATIONS_NOTE` says. Every one has its interval in
results.json; the table prints those of the outcomes (the costs, simulations and seconds, vary little and print as
points)."""
SIMULATIONS_NOTE = ("Simulations / decision counts the agent's own obs.simulate calls per danger state (the greedy "
                    "expert's budget, the top-k check's k + 1); 'with the safe rule's' adds those of the safe rule "
                    "every agent runs outside danger (reconnecting lines, reverting substations).")
"""What the two simulation columns count (results.md's setup and report.md's deployment costs)."""
TRAIN_METRICS: tuple[tuple[str, str, str], ...] = (
    ("env_steps", "RL env steps", "{:,.0f}"),
    ("llm_calls", "LLM calls", "{:,.0f}"),
    ("llm_accepted", "LLM accepted", "{:,.0f}"),
    ("train_seconds", "Training time (s)", "{:,.0f}"),
)
"""(key, column title, format) of the training costs: mean over seeds."""
COLUMNS: tuple[str, ...] = ("survival_rate", "episode_reward", "simulations_per_decision",
                             "all_simulations_per_decision", "env_steps", "llm_calls", "llm_accepted", "train_seconds",
                             "test_seconds_per_episode")
"""The table's metric columns, in order."""
METRICS: tuple[tuple[str, str, str], ...] = tuple(
    next((k, t, f) for k, t, f, *_ in (*TEST_METRICS, *TRAIN_METRICS) if k == key) for key in COLUMNS)
"""(key, column title, format) of the table's columns, in order."""

_TOP_KEYS = {"name", "description", "config", "set", "ace_set", "seeds", "test_pairs", "test_max_steps",
             "greedy_budget", "rows"}
_ROW_KEYS = {"name", "id", "kind", "set", "deploy_topk"}
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
    topk: int | None = None
    """Top-k simulation check when testing best.pt (None: the run's own ``env.deploy_topk``)."""
    train_id: str = ""
    """Id of the training this row tests (its run directories); rows made by one ``deploy_topk`` share it."""
    train_name: str = ""
    """Display name of that training (the name in the experiment file)."""

    def __post_init__(self) -> None:
        self.train_id = self.train_id or self.id
        self.train_name = self.train_name or self.name

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
    row_filter: list[str] | None = None
    """The ``rows`` argument of :func:`load_experiment` (None: every row)."""
    seeds_replaced: bool = False
    """Whether the ``seeds`` argument of :func:`load_experiment` replaced the file's."""

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

    def command(self, out: str | Path) -> str:
        """The ``ace-hybrid experiment`` command line that runs this experiment into ``out``."""
        words = ["ace-hybrid", "experiment", "--config", str(self.path), "--out", str(out)]
        for item in self.cli_overrides:
            words += ["--set", item]
        if self.row_filter is not None:
            words += ["--rows", ",".join(self.row_filter)]
        if self.seeds_replaced:
            words += ["--seeds", ",".join(map(str, self.seeds))]
        return shlex.join(words)


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


def deployed_rows(row_id: str, name: str, kind: str, overrides: list[str], topks: Any, where: str) -> list[RowSpec]:
    """The table rows of one training row: one per ``deploy_topk`` value, or the row itself without one."""
    if topks is None:
        return [RowSpec(row_id, name, kind, overrides)]
    if kind not in TRAINING_KINDS:
        raise ValueError(f"{where}.deploy_topk (row {name!r}): kind {kind!r} trains no policy; deploy_topk belongs to "
                         f"the training rows ({', '.join(TRAINING_KINDS)})")
    if (not isinstance(topks, list) or not topks
            or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in topks)
            or len(set(topks)) != len(topks)):
        raise ValueError(f"{where}.deploy_topk = {topks!r} (row {name!r}) must be a non-empty list of distinct "
                         f"integers >= 0, e.g. [0, 8] (0: the policy alone)")
    alone = f"{name[:-1]}, policy alone)" if name.endswith(")") else f"{name} (policy alone)"
    return [RowSpec(f"{row_id}-alone", alone, kind, overrides, topk=0, train_id=row_id, train_name=name) if k == 0
            else RowSpec(f"{row_id}-top{k}", f"{name} + top-{k} check", kind, overrides, topk=k, train_id=row_id,
                         train_name=name)
            for k in topks]


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
        Row ids to keep (default all), in the file's order. The id of a row with ``deploy_topk`` keeps every table
        row it makes; ``ID-alone`` or ``ID-top8`` keeps one.
    seeds
        Seeds replacing the file's ``seeds``.

    Raises
    ------
    FileNotFoundError
        For a missing experiment or configuration file.
    ValueError
        Naming the bad key, row, kind, seed or pair; or when a test pair is repeated, is also a checkpoint-selection
        pair (``env.eval_pairs``) or is possibly a training episode.
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
    repeated = sorted({p for p in test_pairs if test_pairs.count(p) > 1})
    if repeated:
        raise ValueError(f"test pair(s) {', '.join(f'[{s}, {k}]' for s, k in repeated)} appear more than once: each "
                         f"held-out episode counts once in the intervals")
    raw_rows = data.get("rows")
    if not isinstance(raw_rows, list) or not raw_rows:
        raise ValueError(f"{path}: no [[rows]]: give at least one row (kinds: {', '.join(ROW_KINDS)})")
    row_specs: list[RowSpec] = []
    train_ids: list[str] = []
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
        train_ids.append(row_id)
        row_specs += deployed_rows(row_id, name, kind, _str_list(raw.get("set", []), f"{where}.set"),
                                   raw.get("deploy_topk"), where)
    ids = [r.id for r in row_specs]
    every = train_ids + [r.id for r in row_specs if r.id != r.train_id]
    dupes = sorted({i for i in every if every.count(i) > 1})
    if dupes:
        raise ValueError(f"row id(s) {', '.join(dupes)} appear more than once: give each row a distinct id")
    if rows is not None:
        missing = [r for r in rows if r not in ids and r not in train_ids]
        if missing:
            known = list(dict.fromkeys([*train_ids, *ids]))
            raise ValueError(f"unknown row(s) {', '.join(map(repr, missing))}; rows of {path.name}: {', '.join(known)}")
        row_specs = [r for r in row_specs if r.id in set(rows) or r.train_id in set(rows)]
    spec = ExperimentSpec(
        name=str(data.get("name", path.stem)), path=path, config=config,
        overrides=_str_list(data.get("set", []), "set"), ace_overrides=_str_list(data.get("ace_set", []), "ace_set"),
        cli_overrides=list(overrides), seeds=seed_list, test_pairs=test_pairs,
        test_max_steps=_int(data.get("test_max_steps", 0), "test_max_steps", 0),
        greedy_budget=_int(data.get("greedy_budget", 30), "greedy_budget", 2), rows=row_specs,
        description=str(data.get("description", "")), row_filter=list(rows) if rows is not None else None,
        seeds_replaced=seeds is not None)
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


def run_dir_of(row: RowSpec, seed: int | None) -> str:
    """The training run a cell tests, relative to the experiment's folder (shared by one row's deploy_topk)."""
    return f"runs/{row.train_id}-seed{seed}"


def _settings(cfg: Config) -> dict[str, Any]:
    settings = json.loads(json.dumps(cfg.to_dict()))
    settings.pop("log", None)
    return settings


def training_fingerprint(cfg: Config) -> str:
    """What a training run depends on (logging settings excluded), hashed."""
    return hashlib.sha256(json.dumps(_settings(cfg), sort_keys=True).encode()).hexdigest()[:16]


def fingerprint(spec: ExperimentSpec, row: RowSpec, cfg: Config) -> str:
    """What a cell's result depends on (logging settings excluded), hashed."""
    what = {"kind": row.kind, "config": _settings(cfg), "test_pairs": spec.test_pairs,
            "test_max_steps": spec.test_max_steps,
            "greedy_budget": spec.greedy_budget if row.kind == "greedy" else None}
    if row.topk is not None:
        what["deploy_topk"] = row.topk
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def _first_difference(a: Any, b: Any, prefix: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{prefix}{key}.")
    return f"{prefix.rstrip('.')}: {a!r} in the run, {b!r} now"


def baseline_agent(kind: str, env: Any, cfg: Config, greedy_budget: int) -> Any:
    """The agent of a baseline row, under the configuration's danger threshold."""
    if kind == "tutor":
        from ace_hybrid.grid.action_set import ActionSet, action_set_indices
        from ace_hybrid.grid.agents import GreedyExpertAgent
        from ace_hybrid.grid.catalog import ActionCatalog

        catalog = ActionCatalog.for_env(env)
        return GreedyExpertAgent(env.action_space, ActionSet(catalog, action_set_indices(cfg, env, catalog)),
                                 budget=cfg.train.tutor_budget, threshold=cfg.env.threshold)
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


def episode_metrics(episodes: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """The test metrics (:data:`TEST_METRICS`) of a list of per-episode records, pooled as in the table."""
    out: dict[str, float | None] = {}
    for key, _, _, num, den, _ in TEST_METRICS:
        if any(e.get(num) is None for e in episodes):  # an agent that does not count it
            out[key] = None
            continue
        top = sum(float(e[num]) for e in episodes)
        bottom = sum(float(e[den]) for e in episodes) if den else float(len(episodes))
        out[key] = top / bottom if bottom else None
    return out


def run_cell(spec: ExperimentSpec, row: RowSpec, seed: int | None, cfg: Config, out: Path, test_env: Any,
             trained: dict[tuple[str, str], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Train (training rows) and test one cell; returns the cell's record (see :func:`run_experiment`).

    ``trained`` maps (run directory, training fingerprint) to a cell that already trained that run (a row of the
    same ``deploy_topk``): its training is reused, not resumed.
    """
    started = time.time()
    train_info: dict[str, Any] | None = None
    run_rel = None
    if row.trains:
        run_rel = run_dir_of(row, seed)
        known = (trained or {}).get((run_rel, training_fingerprint(cfg)))
        if known is not None:
            train_info = known["train"]
        else:
            summary, resumed = train_cell(cfg, out / run_rel)
            train_info = {k: summary.get(k) for k in ("env_steps", "decisions", "updates", "episodes",
                                                       "best_survival", "train_seconds", "time_split", "last_eval")}
            train_info["llm"] = dict(summary.get("llm") or {})
            train_info["resumed"] = resumed
        agent = make_agent(f"checkpoint:{out / run_rel / 'best.pt'}", test_env, topk=row.topk, cfg=cfg)
    else:
        agent = baseline_agent(row.kind, test_env, cfg, spec.greedy_budget)
    report = evaluate(test_env, agent, spec.test_pairs, agent_name=row.name, max_steps=spec.test_max_steps or None,
                      progress=cfg.log.progress)
    test = report.to_dict()
    if not row.trains and hasattr(agent, "llm_calls"):
        # The LLM-only agent asks the model at test time; kept apart from the table's training refinements.
        report_llm = {"calls": int(agent.llm_calls), "errors": int(getattr(agent, "llm_errors", 0)),
                      "seconds": float(getattr(agent, "llm_seconds", 0.0))}
    else:
        report_llm = None
    uses_llm = row.trains and cfg.llm.backend != "none"
    llm = (train_info or {}).get("llm", {})
    metrics = {
        **episode_metrics(test["episodes"]),
        "env_steps": train_info["env_steps"] if train_info else None,
        "llm_calls": int(llm.get("calls", 0)) if uses_llm else None,
        "llm_accepted": int(llm.get("accepted", 0)) if uses_llm else None,
        "train_seconds": train_info["train_seconds"] if train_info else None,
    }
    return {
        "cell": cell_id(row, seed), "row": row.id, "name": row.name, "kind": row.kind, "seed": seed,
        "train_id": row.train_id, "deploy_topk": row.topk,
        "fingerprint": fingerprint(spec, row, cfg),
        "train_fingerprint": training_fingerprint(cfg) if row.trains else None,
        "env": cfg.env.name, "llm_backend": cfg.llm.backend,
        "dataset": test_env.ace_dataset.describe() if hasattr(test_env, "ace_dataset") else None,
        "run_dir": run_rel, "started": started, "finished": time.time(), "metrics": metrics,
        "train": train_info, "test": test, "test_llm": report_llm, "config": cfg.to_dict(),
    }


# ----------------------------------------------------------------------------- intervals


@dataclass(frozen=True)
class Resample:
    """One set of bootstrap draws over a crossed design (training seeds x test pairs), shared by every row.

    A draw is a multiplicity for each test pair and, independently, for each training seed (resampling each with
    replacement): a row's statistic in that draw weights the episode (seed s, pair p) by ``seed_counts[s] *
    pair_counts[p]``. Rows without seeds (baselines) weight by the pairs alone.
    """

    seeds: tuple[int, ...]
    """The training seeds, in the order of ``seed_counts``' columns."""
    pair_counts: np.ndarray
    """(draws, test pairs) int64: how often each test pair is drawn."""
    seed_counts: np.ndarray
    """(draws, seeds) int64: how often each training seed is drawn."""

    @classmethod
    def draw(cls, seeds: Sequence[int], n_pairs: int, draws: int = BOOTSTRAP_DRAWS,
             seed: int = BOOTSTRAP_SEED) -> Resample:
        """``draws`` resamples of ``n_pairs`` test pairs and of ``seeds``, from ``numpy.random.default_rng(seed)``
        (pairs first, then seeds: the same arguments give the same draws)."""
        if n_pairs < 1 or draws < 1:
            raise ValueError(f"n_pairs = {n_pairs}, draws = {draws}: both must be >= 1")
        rng = np.random.default_rng(seed)
        pairs = rng.multinomial(n_pairs, np.full(n_pairs, 1.0 / n_pairs), size=draws)
        n_seeds = max(1, len(seeds))
        seed_counts = rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=draws)
        return cls(tuple(int(s) for s in seeds), pairs, seed_counts[:, : len(seeds)])

    def statistic(self, row: dict[str, Any], key: str) -> tuple[float | None, np.ndarray]:
        """A row's test metric ``key`` (:data:`TEST_METRICS`) on all its episodes, and in every draw (NaN where a
        draw leaves nothing to divide by).

        ``row`` is a row of results.json: ``row["seeds"]`` (None for a baseline) and ``row["episodes"][field]``, a
        (seeds, test pairs) matrix per field.
        """
        _, _, _, num, den, _ = _TEST[key]
        if num not in row["episodes"]:  # a results.json written before this field was recorded
            return None, np.full(self.pair_counts.shape[0], np.nan)
        top = np.asarray(row["episodes"][num], dtype=np.float64)
        bottom = np.asarray(row["episodes"][den], dtype=np.float64) if den else np.ones_like(top)
        if top.shape[1] != self.pair_counts.shape[1]:
            raise ValueError(f"row {row.get('id')!r} has {top.shape[1]} test pairs, the draws "
                             f"{self.pair_counts.shape[1]}")
        if np.isnan(top).any() or np.isnan(bottom).any():  # some cell did not record it: no figure, not a wrong one
            return None, np.full(self.pair_counts.shape[0], np.nan)
        if row["seeds"] == [None]:
            weights = np.ones((self.pair_counts.shape[0], 1))
        else:
            missing = [s for s in row["seeds"] if s not in self.seeds]
            if missing:
                raise ValueError(f"row {row.get('id')!r} has seed(s) {missing} outside the draws' seeds {self.seeds}")
            weights = self.seed_counts[:, [self.seeds.index(s) for s in row["seeds"]]].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            draws = ((weights @ top) * self.pair_counts).sum(1) / ((weights @ bottom) * self.pair_counts).sum(1)
        total = float(bottom.sum())
        return (float(top.sum()) / total if total else None), draws


_TEST = {m[0]: m for m in TEST_METRICS}


def interval(draws: np.ndarray, level: float = LEVEL) -> tuple[float | None, float | None]:
    """The percentile interval of bootstrap draws (NaN draws ignored; (None, None) when all are NaN)."""
    finite = draws[np.isfinite(draws)]
    if finite.size == 0:
        return None, None
    lo, hi = np.percentile(finite, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def _seed_level(row: dict[str, Any]) -> list[int]:
    return [] if row["seeds"] == [None] else list(row["seeds"])


def paired_difference(resample: Resample, a: dict[str, Any], b: dict[str, Any],
                      key: str = "survival_rate") -> dict[str, Any]:
    """Row ``a`` minus row ``b`` on metric ``key``, with the interval of the difference within each draw.

    Returns ``{"a", "b", "metric", "a_value", "b_value", "difference", "lo", "hi", "separated", "pairs", "seeds"}``;
    ``separated`` is True when the interval excludes 0, the only case in which the report states a difference.
    ``seeds`` counts the training seeds resampled (those of the training rows among the two).
    """
    va, da = resample.statistic(a, key)
    vb, db = resample.statistic(b, key)
    lo, hi = interval(da - db)
    diff = None if va is None or vb is None else va - vb
    return {"a": a["id"], "b": b["id"], "metric": key, "a_value": va, "b_value": vb, "difference": diff,
            "lo": lo, "hi": hi, "separated": lo is not None and (lo > 0 or hi < 0),
            "pairs": int(resample.pair_counts.shape[1]),
            "seeds": len(set(_seed_level(a)) | set(_seed_level(b)))}


def comparisons_to_make(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The table's declared comparisons, (row a, row b, why), fixed by the rows' kinds before any number is seen:

    - the check's share: each ``+ top-k check`` row against its own ``(policy alone)`` row (same best.pt);
    - against doing nothing: every training row (does learning help at all?);
    - against SAC-only: every other training row against the SAC-only row deployed the same way;
    - against expert-guided RL: every ACE row against the expert-guided row deployed the same way;
    - against ACE: every other ACE row (a variant or an ablation) against the first ACE row deployed the same way;
    - against the greedy expert: every other row;
    - against the tutor (expert-guided RL's teacher acting alone): every training row with a top-k check.

    SAC-only is the first ``sac_only`` training without a tutor, expert-guided RL the first with one
    (``train.tutor_steps`` > 0).
    """
    def first_training(match: Any) -> str | None:
        return next((r["train_id"] for r in rows if r["kind"] == "sac_only" and match(r)), None)

    sac = first_training(lambda r: not r.get("expert_guided"))
    guided = first_training(lambda r: r.get("expert_guided"))
    greedy = next((r["id"] for r in rows if r["kind"] == "greedy"), None)
    tutor = next((r["id"] for r in rows if r["kind"] == "tutor"), None)
    ace = next((r["train_id"] for r in rows if r["kind"] == "ace"), None)
    nothing = next((r["id"] for r in rows if r["kind"] == "donothing"), None)

    def same_deployment(train_id: str | None, row: dict[str, Any]) -> str | None:
        return next((r["id"] for r in rows if train_id is not None and r["train_id"] == train_id
                     and r.get("deploy_topk") == row.get("deploy_topk")), None)

    out: list[tuple[str, str, str]] = []
    for r in rows:
        if r.get("deploy_topk"):
            alone = next((x["id"] for x in rows if x["train_id"] == r["train_id"] and x.get("deploy_topk") == 0), None)
            if alone:
                out.append((r["id"], alone, "the top-k check's share"))
    for r in rows:
        if nothing is not None and r["kind"] in TRAINING_KINDS:
            out.append((r["id"], nothing, "against doing nothing"))
    for r in rows:
        if r["kind"] in TRAINING_KINDS and r["train_id"] != sac:
            other = same_deployment(sac, r)
            if other:
                out.append((r["id"], other, "against SAC-only"))
    for r in rows:
        if r["kind"] == "ace":
            other = same_deployment(guided, r)
            if other:
                out.append((r["id"], other, "against expert-guided RL"))
    for r in rows:
        if r["kind"] == "ace" and r["train_id"] != ace:
            other = same_deployment(ace, r)
            if other:
                out.append((r["id"], other, "against ACE"))
    for r in rows:
        if greedy is not None and r["id"] != greedy:
            out.append((r["id"], greedy, "against the greedy expert"))
    for r in rows:
        if tutor is not None and r["kind"] in TRAINING_KINDS and r.get("deploy_topk"):
            out.append((r["id"], tutor, "against the tutor"))
    return list(dict.fromkeys(out))


# ----------------------------------------------------------------------------- the table


def _row_record(spec: ExperimentSpec, row: RowSpec, cells: list[dict[str, Any]]) -> dict[str, Any]:
    """One row of results.json: its per-episode matrices (cells x test pairs) and per-seed training costs."""
    index = {tuple(p): i for i, p in enumerate(spec.test_pairs)}
    episodes = {f: np.full((len(cells), len(index)), np.nan) for f in EPISODE_FIELDS}
    for i, cell in enumerate(cells):
        for e in (cell.get("test") or {}).get("episodes", []):
            j = index.get((e["scenario"], e["seed"]))
            if j is None:
                raise ValueError(f"cell {cell['cell']} played ({e['scenario']}, {e['seed']}), not a test pair")
            for f in EPISODE_FIELDS:
                episodes[f][i, j] = np.nan if e.get(f) is None else float(e[f])
    if cells and np.isnan(episodes["max_steps"]).any():
        raise ValueError(f"row {row.id!r}: some cells lack test episodes; delete their files in cells/ and rerun")
    guided = any(float((c.get("config") or {}).get("train", {}).get("tutor_steps", 0) or 0) > 0 for c in cells)
    return {"id": row.id, "name": row.name, "kind": row.kind, "train_id": row.train_id, "train_name": row.train_name,
            "deploy_topk": row.topk,
            "expert_guided": guided, "n": len(cells), "seeds": [c["seed"] for c in cells],
            "episodes": {f: episodes[f].tolist() for f in EPISODE_FIELDS}, "metrics": {}}


def aggregate(spec: ExperimentSpec, cells: list[dict[str, Any]], *, draws: int = BOOTSTRAP_DRAWS,
              seed: int = BOOTSTRAP_SEED) -> list[dict[str, Any]]:
    """The table's rows, each with its per-episode matrices and, per metric, its value and interval.

    Test metrics (:data:`TEST_METRICS`): ``{"value"`` (pooled over the row's episodes), ``"lo", "hi"`` (the 95%
    bootstrap interval of :class:`Resample`), ``"values"`` (per seed), ``"mean", "std"`` (over seeds; std with 2+
    values)``}``. Training costs: ``{"values", "mean", "std"}``.
    """
    rows = [_row_record(spec, row, [c for c in cells if c["row"] == row.id]) for row in spec.rows]
    resample = Resample.draw(spec.seeds, len(spec.test_pairs), draws, seed)
    for record in rows:
        mine = [c for c in cells if c["row"] == record["id"]]
        for key, *_ in (*TEST_METRICS, *TRAIN_METRICS):
            values = [float(c["metrics"][key]) for c in mine if c["metrics"].get(key) is not None]
            stat: dict[str, Any] = {"values": values, "mean": float(np.mean(values)) if values else None,
                                    "std": float(np.std(values, ddof=1)) if len(values) >= 2 else None}
            if key in _TEST and mine:
                value, boot = resample.statistic(record, key)
                stat["value"] = value
                stat["lo"], stat["hi"] = interval(boot)
            record["metrics"][key] = stat
    return rows


def compare_rows(rows: Sequence[dict[str, Any]], seeds: Sequence[int], n_pairs: int, *,
                 draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED) -> list[dict[str, Any]]:
    """The paired survival differences of :func:`comparisons_to_make` (see :func:`paired_difference`), each with
    the names of its rows and why it is made."""
    resample = Resample.draw(seeds, n_pairs, draws, seed)
    by_id = {r["id"]: r for r in rows if r["n"]}
    out = []
    for a, b, why in comparisons_to_make([r for r in rows if r["n"]]):
        result = paired_difference(resample, by_id[a], by_id[b])
        out.append({**result, "a_name": by_id[a]["name"], "b_name": by_id[b]["name"], "why": why})
    return out


def _fmt(fmt: str, value: float | None) -> str:
    return "–" if value is None else fmt.format(value)


def format_value(stat: dict[str, Any], fmt: str, with_interval: bool = True) -> str:
    """``value [lo, hi]`` for a test metric (the value alone without ``with_interval``), ``mean`` over seeds for a
    training cost, an en dash when there is nothing."""
    if "value" in stat:
        text = _fmt(fmt, stat["value"])
        if with_interval and stat.get("lo") is not None and stat["value"] is not None:
            text += f" [{fmt.format(stat['lo'])}, {fmt.format(stat['hi'])}]"
        return text
    return _fmt(fmt, stat.get("mean"))


def _size(row: dict[str, Any]) -> str:
    pairs = len(row["episodes"]["max_steps"][0]) if row["n"] and row["episodes"]["max_steps"] else 0
    return f"{pairs}" if row["seeds"] == [None] else f"{row['n']} × {pairs}"


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The table: one line per row; outcomes with their 95% bootstrap interval, costs as points."""
    shown = {key: show for key, _, _, _, _, show in TEST_METRICS}
    head = "| Agent | seeds × test pairs | " + " | ".join(
        f"{title} [95% CI]" if shown.get(key) else title for key, title, _ in METRICS) + " |"
    rule = "|:---|---:|" + "---:|" * len(METRICS)
    lines = [head, rule]
    for r in rows:
        cells = [format_value(r["metrics"][key], fmt, shown.get(key, False)) if key in r["metrics"] else "–"
                 for key, _, fmt in METRICS]
        lines.append(f"| {r['name']} | {_size(r)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def points(value: float) -> str:
    """A survival difference in percentage points, signed: ``+12.5``."""
    return f"{100 * value:+.1f}"


def differences_markdown(comparisons: list[dict[str, Any]]) -> str:
    """The paired differences in survival as a table, each with its verdict."""
    if not comparisons:
        return "No comparisons: the table has no pair of rows it declares comparable."
    lines = ["| A | B | why | survival A | survival B | A − B, points [95% CI] | verdict |",
             "|:---|:---|:---|---:|---:|---:|:---|"]
    for c in comparisons:
        if c["difference"] is None or c["lo"] is None:
            diff, verdict = "–", "no data"
        else:
            diff = f"{points(c['difference'])} [{points(c['lo'])}, {points(c['hi'])}]"
            verdict = ("not distinguishable" if not c["separated"]
                       else "A survives longer" if c["lo"] > 0 else "B survives longer")
        lines.append(f"| {c['a_name']} | {c['b_name']} | {c['why']} | {_fmt('{:.1%}', c['a_value'])} | "
                     f"{_fmt('{:.1%}', c['b_value'])} | {diff} | {verdict} |")
    return "\n".join(lines)


def to_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["id", "name", "kind", "train_id", "deploy_topk", "n"]
                    + [f"{k}{s}" for k, *_ in TEST_METRICS for s in ("", "_lo", "_hi")]
                    + [f"{k}_{s}" for k, _, _ in TRAIN_METRICS for s in ("mean", "std")])
    for r in rows:
        values = []
        for key, *_ in TEST_METRICS:
            stat = r["metrics"].get(key, {})
            values += ["" if stat.get(s) is None else repr(stat[s]) for s in ("value", "lo", "hi")]
        for key, _, _ in TRAIN_METRICS:
            stat = r["metrics"].get(key, {})
            values += ["" if stat.get(s) is None else repr(stat[s]) for s in ("mean", "std")]
        writer.writerow([r["id"], r["name"], r["kind"], r["train_id"],
                         "" if r["deploy_topk"] is None else r["deploy_topk"], r["n"], *values])
    return buf.getvalue()


def _setup(spec: ExperimentSpec, cells: list[dict[str, Any]], draws: int, seed: int) -> str:
    envs = sorted({c["env"] for c in cells})
    pairs = ", ".join(f"({s}, {k})" for s, k in spec.test_pairs)
    cut = f", cut at {spec.test_max_steps} steps" if spec.test_max_steps else ""
    deployed = sorted({c["config"]["env"]["deploy_topk"] for c in cells if c["run_dir"]})
    selection = (f" best.pt is chosen on env.eval_pairs with the run's own check (env.deploy_topk = "
                 f"{', '.join(map(str, deployed))}), also for the rows that test it alone." if deployed else "")
    return (f"Environment: {', '.join(envs)}. {len(spec.test_pairs)} held-out test episodes (scenario, seed): "
            f"{pairs}{cut}. Seeds of the training rows: {', '.join(map(str, spec.seeds))}; baselines are "
            f"deterministic on fixed episodes and run once.{selection} Survival is total steps survived / total steps "
            f"playable over a row's episodes (grid2op's aggregate, not the mean of per-episode rates); episode reward "
            f"is the environment's reward summed over an episode, averaged over the episodes. {SIMULATIONS_NOTE} "
            f"Training costs are means over seeds; times are wall-clock seconds. [95% CI]: percentile bootstrap, "
            f"{draws:,} draws (numpy default_rng({seed})), resampling test pairs and training seeds (crossed), the "
            f"same draws for every row; with {len(spec.seeds)} seed(s) the seed level is coarse.")


# ----------------------------------------------------------------------------- the whole grid


def run_experiment(spec: ExperimentSpec, out: str | Path, *, progress: bool = True, draws: int = BOOTSTRAP_DRAWS,
                   bootstrap_seed: int = BOOTSTRAP_SEED, jobs: int = 1) -> dict[str, Any]:
    """Run every cell not yet finished, then write results.json, results.csv and results.md (the figures and
    ``report.md`` are :func:`ace_hybrid.report.write_report`'s, which reads results.json).

    ``jobs`` > 1 runs that many cell groups at once in worker processes (:func:`cell_groups`: the cells of one
    training stay together, in order); every cell is seeded on its own, so its figures do not depend on ``jobs``
    (its times do: the cells share the machine). The workers' own progress bars are off.

    Returns
    -------
    dict
        ``{"rows": aggregate(...), "comparisons": compare_rows(...), "cells": [...], "ran": [cell ids run now],
        "reused": [cell ids read back], "markdown": the table, "command": the command line, "out": str(out)}``.
        Each cell record holds ``metrics`` (its own values), ``train`` (the training summary, None for baselines),
        ``test`` (the per-episode test report) and the cell's configuration.
    """
    from tqdm.auto import tqdm

    out = Path(out)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    plan = [(row, seed, spec.row_config(row, seed)) for row, seed in spec.cells()]
    if not progress:
        for _, _, cfg in plan:
            cfg.log.progress = False
    done: dict[str, dict[str, Any]] = {}
    for row, seed, cfg in plan:
        path = out / "cells" / f"{cell_id(row, seed)}.json"
        if path.is_file():
            cell = json.loads(path.read_text())
            if cell.get("fingerprint") != fingerprint(spec, row, cfg):
                raise ValueError(f"{path} was made with another configuration or other test pairs: delete it to "
                                 f"rerun that cell, or use another --out")
            done[cell_id(row, seed)] = cell
    if jobs < 1:
        raise ValueError(f"jobs = {jobs} out of range [1, inf)")
    todo = [(row, seed, cfg) for row, seed, cfg in plan if cell_id(row, seed) not in done]
    trained = _finished_trainings(out) if todo else {}
    ran: list[str] = []
    bar = tqdm(total=len(plan), initial=len(plan) - len(todo), desc=f"experiment {spec.name}", unit="cell",
               disable=not progress, dynamic_ncols=True)
    try:
        if jobs == 1 or len(todo) <= 1:
            envs: dict[tuple[str, int], Any] = {}
            try:
                for group in cell_groups(todo):
                    bar.set_postfix_str(cell_id(group[0][0], group[0][1]))
                    for cell in run_cell_group(spec, group, out, trained, envs):
                        done[cell["cell"]] = cell
                        ran.append(cell["cell"])
                        bar.update(1)
            finally:
                for env in envs.values():
                    env.close()
        else:
            for cell in _run_in_workers(spec, todo, out, trained, jobs, bar):
                done[cell["cell"]] = cell
                ran.append(cell["cell"])
    finally:
        bar.close()
    cells = [done[cell_id(row, seed)] for row, seed, _ in plan]
    ran_now = set(ran)
    reused = [c["cell"] for c in cells if c["cell"] not in ran_now]
    rows = aggregate(spec, cells, draws=draws, seed=bootstrap_seed)
    comparisons = compare_rows(rows, spec.seeds, len(spec.test_pairs), draws=draws, seed=bootstrap_seed)
    markdown = to_markdown(rows)
    setup = _setup(spec, cells, draws, bootstrap_seed)
    command = spec.command(out)
    results = {"experiment": spec.name, "description": spec.description, "experiment_file": str(spec.path),
               "command": command, "seeds": spec.seeds, "test_pairs": [list(p) for p in spec.test_pairs],
               "test_max_steps": spec.test_max_steps, "setup": setup, "machine": _machine(),
               "bootstrap": {"draws": draws, "seed": bootstrap_seed, "level": LEVEL,
                             "method": "percentile; test pairs and training seeds resampled independently with "
                                       "replacement (crossed design), the same draws for every row; numpy "
                                       "default_rng(seed).multinomial, pairs first, then seeds",
                             "survival": "total steps survived / total steps playable over a row's episodes"},
               "rows": rows, "comparisons": comparisons, "cells": cells}
    atomic_write_json(out / "results.json", results)
    (out / "results.csv").write_text(to_csv(rows))
    title = f"# {spec.name}\n\n" + (f"{spec.description}\n\n" if spec.description else "")
    (out / "results.md").write_text(
        title + f"Made by `{command}`.\n\n" + setup + "\n\n" + markdown + "\n\n## Paired differences in survival\n\n"
        + differences_markdown(comparisons) + "\n\n" + DIFFERENCES_NOTE + "\n")
    return {"rows": rows, "comparisons": comparisons, "cells": cells, "ran": ran, "reused": reused,
            "markdown": markdown, "command": command, "out": str(out)}


def cell_groups(plan: Sequence[tuple[RowSpec, int | None, Config]]) -> list[list[tuple[RowSpec, int | None, Config]]]:
    """The plan's cells grouped so that the rows made from one training (one ``deploy_topk``, one seed) stay
    together and in order: the first trains (or resumes) the run, the others reuse it. A baseline cell is a group of
    its own. Groups keep the plan's order."""
    groups: dict[str, list[tuple[RowSpec, int | None, Config]]] = {}
    for row, seed, cfg in plan:
        key = run_dir_of(row, seed) if row.trains else f"baseline:{cell_id(row, seed)}"
        groups.setdefault(key, []).append((row, seed, cfg))
    return list(groups.values())


def run_cell_group(spec: ExperimentSpec, group: Sequence[tuple[RowSpec, int | None, Config]], out: Path,
                   trained: dict[tuple[str, str], dict[str, Any]],
                   envs: dict[tuple[str, int], Any] | None = None) -> Iterator[dict[str, Any]]:
    """Run one group's cells (:func:`cell_groups`), writing each cell's file as it finishes; yields the records.
    ``envs`` caches the test environments between groups (closed here when not given)."""
    own = envs is None
    envs = {} if envs is None else envs
    try:
        for row, seed, cfg in group:
            key = (cfg.env.name, cfg.env.env_seed)
            if key not in envs:
                envs[key] = _test_env(spec, cfg)
            cell = run_cell(spec, row, seed, cfg, out, envs[key], trained)
            atomic_write_json(out / "cells" / f"{cell['cell']}.json", cell)
            if cell["run_dir"]:
                trained.setdefault((cell["run_dir"], cell["train_fingerprint"]), cell)
            yield cell
    finally:
        if own:
            for env in envs.values():
                env.close()


def _run_group_in_worker(spec: ExperimentSpec, group: Sequence[tuple[RowSpec, int | None, Config]], out: Path,
                         trained: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    for _, _, cfg in group:
        cfg.log.progress = False  # one bar (the parent's); workers' bars would interleave
    return list(run_cell_group(spec, group, out, trained))


def longest_first(groups: Sequence[Sequence[tuple[RowSpec, int | None, Config]]]) -> list[Any]:
    """Cell groups, those that look longest first, so that no long one is left to run alone at the end: the groups
    with a language model (ACE's trainings, and the LLM-only agent, which asks it at every test decision: about 45
    minutes of one core for make run's 16 test episodes), then the other trainings, then the other baselines; the
    file's order within each."""
    def cost(group: Sequence[tuple[RowSpec, int | None, Config]]) -> int:
        row, _, cfg = group[0]
        return 2 if row.kind in LLM_KINDS and cfg.llm.backend != "none" else 1 if row.trains else 0

    return sorted(groups, key=cost, reverse=True)


def _run_in_workers(spec: ExperimentSpec, todo: Sequence[tuple[RowSpec, int | None, Config]], out: Path,
                    trained: dict[tuple[str, str], dict[str, Any]], jobs: int, bar: Any) -> Iterator[dict[str, Any]]:
    """Run the groups of ``todo`` in ``jobs`` fresh ("spawn") processes, in :func:`longest_first` order, yielding
    cells as groups finish. A failing group stops the experiment after the running groups finish (their cells are
    saved; a rerun continues)."""
    import multiprocessing
    from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait

    groups = longest_first(cell_groups(todo))
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                             initializer=exit_with_parent, initargs=(os.getpid(),)) as pool:
        pending = {pool.submit(_run_group_in_worker, spec, group, out, trained) for group in groups}
        while pending:
            finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for future in finished:
                if future.exception() is not None:
                    for other in pending:
                        other.cancel()
                    raise future.exception()
                for cell in future.result():
                    bar.update(1)
                    yield cell


DIFFERENCES_NOTE = ("A − B is computed within each bootstrap draw on the same test pairs and training seeds, so what "
                    "the rows share cancels. A difference is stated only when its 95% interval excludes 0; each "
                    "interval is for its own comparison (no correction for their number): were no two rows different, "
                    "about one comparison in twenty would still separate by chance.")


def _finished_trainings(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(run directory, training fingerprint) -> a finished cell that trained it, from every cell file in
    ``out/cells`` (rows not selected now included), so a row of the same ``deploy_topk`` reuses that training
    instead of resuming it."""
    trained: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted((out / "cells").glob("*.json")):
        try:
            cell = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
        run_dir = cell.get("run_dir")
        if run_dir and cell.get("train_fingerprint") and cell.get("train") and (out / run_dir / "best.pt").is_file():
            trained.setdefault((run_dir, cell["train_fingerprint"]), cell)
    return trained


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
