"""Running an experiment: which cells are left, in what order and how many at once, and resuming where it stopped.

Each cell's result is written to ``<out>/cells/<id>[-seed<k>].json`` (``cells-validation/`` when the rows are
tested on the validation pairs) with a fingerprint of its configuration; a cell whose file exists is never rerun, and
one whose fingerprint no longer matches is an error (not silently reused). The trained runs in ``<out>/runs/`` are
shared by the test and the validation cells. The cells made from one training (one ``deploy_topk``, one seed) run together and in order, so the first
trains (or resumes) the run and the others reuse it; ``--jobs N`` runs N such groups at once in worker processes.
"""

from __future__ import annotations

import json
import os
import platform
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ace_hybrid.config import Config
from ace_hybrid.experiment.cells import cell_id, finished_model, fingerprint, run_cell, run_dir_of
from ace_hybrid.experiment.eta import BAR_FORMAT, RemainingTime
from ace_hybrid.experiment.spec import LLM_KINDS, ExperimentSpec, RowSpec
from ace_hybrid.experiment.statistics import (
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_SEED,
    aggregate,
    compare_rows,
    relative_differences,
)
from ace_hybrid.experiment.tables import setup_text, to_markdown, write_results
from ace_hybrid.files import atomic_write_json
from ace_hybrid.processes import start_child

Cell = tuple[RowSpec, int | None, Config]
"""(row, seed, configuration) of one cell of the plan; the seed is None for a baseline."""


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
        ``{"rows": aggregate(...), "comparisons": compare_rows(...), "relative": relative_differences(...) (the
        file's ``reward_vs``), "cells": [...], "ran": [cell ids run now],
        "reused": [cell ids read back], "markdown": the table, "command": the command line, "out": str(out)}``.
        Each cell record holds ``metrics`` (its own values), ``train`` (the training summary, None for baselines),
        ``test`` (the per-episode test report) and the cell's configuration.
    """
    out = Path(out)
    (out / cells_dir(spec)).mkdir(parents=True, exist_ok=True)
    plan = [(row, seed, spec.row_config(row, seed)) for row, seed in spec.cells()]
    if not progress:
        for _, _, cfg in plan:
            cfg.log.progress = False
    done = _finished_cells(spec, plan, out)
    if jobs < 1:
        raise ValueError(f"jobs = {jobs} out of range [1, inf)")
    todo = [(row, seed, cfg) for row, seed, cfg in plan if cell_id(row, seed) not in done]
    ran: list[str] = []
    for cell in _run_cells(spec, plan, todo, out, jobs, progress):
        done[cell["cell"]] = cell
        ran.append(cell["cell"])
    cells = [done[cell_id(row, seed)] for row, seed, _ in plan]
    ran_now = set(ran)
    reused = [c["cell"] for c in cells if c["cell"] not in ran_now]
    rows = aggregate(spec, cells, draws=draws, seed=bootstrap_seed)
    comparisons = compare_rows(rows, spec.seeds, len(spec.pairs), primaries=spec.primaries, holm_metrics=spec.holm,
                               draws=draws, seed=bootstrap_seed, clusters=spec.clusters)
    relative = relative_differences(rows, spec.seeds, len(spec.pairs), spec.reward_vs, draws=draws,
                                    seed=bootstrap_seed, clusters=spec.clusters)
    markdown = to_markdown(rows)
    command = spec.command(out)
    write_results(spec, out, {"rows": rows, "comparisons": comparisons, "relative": relative, "cells": cells,
                              "markdown": markdown, "setup": setup_text(spec, cells, draws, bootstrap_seed),
                              "command": command, "draws": draws, "seed": bootstrap_seed}, _machine())
    return {"rows": rows, "comparisons": comparisons, "relative": relative, "cells": cells, "ran": ran,
            "reused": reused, "markdown": markdown, "command": command, "out": str(out)}


def cells_dir(spec: ExperimentSpec) -> str:
    """The folder of the cells' files in the experiment's output: "cells", or "cells-validation" (``--on``)."""
    return f"cells{spec.suffix}"


def _finished_cells(spec: ExperimentSpec, plan: Sequence[Cell], out: Path) -> dict[str, dict[str, Any]]:
    """Cell id -> record of the plan's cells already in the cells folder; ValueError for one made otherwise."""
    done: dict[str, dict[str, Any]] = {}
    for row, seed, cfg in plan:
        path = out / cells_dir(spec) / f"{cell_id(row, seed)}.json"
        if path.is_file():
            cell = json.loads(path.read_text())
            if cell.get("fingerprint") != fingerprint(spec, row, cfg):
                raise ValueError(f"{path} was made with another configuration, other test pairs or other input "
                                 f"files (a junior, tutor data): delete it to rerun that cell, or use another --out")
            done[cell_id(row, seed)] = cell
    return done


def _run_cells(spec: ExperimentSpec, plan: Sequence[Cell], todo: Sequence[Cell], out: Path, jobs: int,
               progress: bool) -> Iterator[dict[str, Any]]:
    """Run the cells of ``todo`` (here, or in ``jobs`` workers), yielding each record as it finishes, under one
    progress bar over the whole ``plan``."""
    from tqdm.auto import tqdm

    trained = _finished_trainings(out) if todo else {}
    eta = RemainingTime(spec, cell_groups(todo), jobs, trained)  # from the cells' expected costs, not a mean
    bar = tqdm(total=len(plan), initial=len(plan) - len(todo), desc=f"experiment {spec.name}", unit="cell",
               disable=not progress, dynamic_ncols=True, bar_format=BAR_FORMAT)

    def advance(cell: dict[str, Any], running: str = "") -> None:
        eta.finished(cell)
        bar.set_postfix_str(eta.describe(running), refresh=False)
        bar.update(1)

    try:
        if jobs == 1 or len(todo) <= 1:
            envs: dict[tuple[str, int], Any] = {}
            try:
                for group in cell_groups(todo):
                    running = cell_id(group[0][0], group[0][1])
                    bar.set_postfix_str(eta.describe(running))
                    for cell in run_cell_group(spec, group, out, trained, envs):
                        yield cell
                        advance(cell, running)
            finally:
                for env in envs.values():
                    env.close()
        else:
            yield from _run_in_workers(spec, todo, out, trained, jobs, advance)
    finally:
        bar.close()


def cell_groups(plan: Sequence[Cell]) -> list[list[Cell]]:
    """The plan's cells grouped so that the rows made from one training (one ``deploy_topk``, one seed) stay
    together and in order: the first trains (or resumes) the run, the others reuse it. A baseline cell is a group of
    its own. Groups keep the plan's order."""
    groups: dict[str, list[Cell]] = {}
    for row, seed, cfg in plan:
        key = run_dir_of(row, seed) if row.trains else f"baseline:{cell_id(row, seed)}"
        groups.setdefault(key, []).append((row, seed, cfg))
    return list(groups.values())


def run_cell_group(spec: ExperimentSpec, group: Sequence[Cell], out: Path,
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
            atomic_write_json(out / cells_dir(spec) / f"{cell['cell']}.json", cell)
            if cell["run_dir"]:
                trained.setdefault((cell["run_dir"], cell["train_fingerprint"]), cell)
            yield cell
    finally:
        if own:
            for env in envs.values():
                env.close()


def _run_group_in_worker(spec: ExperimentSpec, group: Sequence[Cell], out: Path,
                         trained: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    for _, _, cfg in group:
        cfg.log.progress = False  # one bar (the parent's); workers' bars would interleave
    return list(run_cell_group(spec, group, out, trained))


def longest_first(groups: Sequence[Sequence[Cell]]) -> list[Any]:
    """Cell groups, those that look longest first, so that no long one is left to run alone at the end: the groups
    with a language model (ACE's trainings, and the LLM-only agent, which asks it at every test decision: about 45
    minutes of one core for make run's 16 test episodes), then the other trainings, then the other baselines; the
    file's order within each."""
    def cost(group: Sequence[Cell]) -> int:
        row, _, cfg = group[0]
        return 2 if row.kind in LLM_KINDS and cfg.llm.backend != "none" else 1 if row.trains else 0

    return sorted(groups, key=cost, reverse=True)


def _run_in_workers(spec: ExperimentSpec, todo: Sequence[Cell], out: Path,
                    trained: dict[tuple[str, str], dict[str, Any]], jobs: int,
                    advance: Callable[[dict[str, Any]], None]) -> Iterator[dict[str, Any]]:
    """Run the groups of ``todo`` in ``jobs`` fresh ("spawn") processes, in :func:`longest_first` order, yielding
    cells as groups finish. A failing group stops the experiment after the running groups finish (their cells are
    saved; a rerun continues)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    groups = longest_first(cell_groups(todo))
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                             initializer=start_child, initargs=(os.getpid(),)) as pool:
        pending = {pool.submit(_run_group_in_worker, spec, group, out, trained) for group in groups}
        for cells in results_as_finished(pending):
            for cell in cells:
                advance(cell)
                yield cell


def results_as_finished(pending: set[Future]) -> Iterator[Any]:
    """Each future's result as soon as it finishes (the progress bar moves per group, not at the end); the first
    failure cancels the futures not yet started and is raised."""
    from concurrent.futures import FIRST_COMPLETED, wait

    while pending:
        finished, pending = wait(pending, return_when=FIRST_COMPLETED)
        for future in finished:
            if future.exception() is not None:
                for other in pending:
                    other.cancel()
                raise future.exception()
            yield future.result()


def _finished_trainings(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(run directory, training fingerprint) -> a finished cell that trained it, from every cell file in
    ``out/cells`` and ``out/cells-validation`` (rows not selected now included), so a row of the same ``deploy_topk``,
    or the same row on the other pairs, reuses that training instead of resuming it."""
    trained: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted((out / "cells").glob("*.json")) + sorted((out / "cells-validation").glob("*.json")):
        try:
            cell = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
        run_dir = cell.get("run_dir")
        if (run_dir and cell.get("train_fingerprint") and cell.get("train")
                and (out / run_dir / finished_model(cell.get("kind", ""))).is_file()):
            trained.setdefault((run_dir, cell["train_fingerprint"]), cell)
    return trained


def _test_env(spec: ExperimentSpec, cfg: Config) -> Any:
    """The environment the test (or validation) episodes are played on; checks their scenarios exist."""
    from ace_hybrid.grid.env import check_scenarios, make_config_env

    env = make_config_env(cfg)
    try:
        check_scenarios(env, [scenario for scenario, _ in spec.pairs], f"{spec.on} pairs")
    except IndexError:
        env.close()
        raise
    return env


def _machine() -> dict[str, Any]:
    """What the times in the table were measured on."""
    try:
        import torch

        cuda = bool(torch.cuda.is_available())
    except ImportError:  # baseline-only experiments need no torch
        cuda = False
    return {"cpus": os.cpu_count(), "cuda": cuda, "platform": platform.platform(), "python": platform.python_version()}
