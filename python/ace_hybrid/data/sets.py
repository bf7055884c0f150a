"""A generated set on disk: a writable copy of an environment whose ``chronics/`` holds generated weeks.

Layout of ``<root>/<name>/`` (``root`` is ``$ACE_HYBRID_DATA``, else ``./data``)::

    ace_set.json          what the set is: environment, seed, loss handling (written once, checked on every run)
    grid.json, config.py, prods_charac.csv, ...   the environment's files, copied from its offline copy
    chronics/000_2035-06-18/  one folder a finished week (moved in whole: a week is there complete or not at all)
    failed.json           weeks chronix2grid could not generate, with its error
    checks.json           each week's checks (ace-hybrid data check); splits.json: train / validation / test weeks
    logs/timing.jsonl     how long each week took (the one file that differs between two runs of the same seed)
    .partial/             weeks being written; removed at the next run

Everything but ``logs/`` is a function of the environment's files, the seed and the number of weeks: a second run
with the same seed reproduces it byte for byte. grid2op opens the folder as any environment (``grid2op.make(path)``);
:func:`ace_hybrid.grid.env.make_env` opens it by name or path and maps scenario id k to week k.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ace_hybrid.files import atomic_write_json
from ace_hybrid.grid.env import SET_META, data_root

__all__ = ["GENERATION_FILES", "GeneratedSet", "create_set", "find_set", "offline_copy_dir", "source_dir"]

#: The parameter files chronix2grid reads to generate weeks of an environment (l2rpn_idf_2023 and the 2022+ grids).
GENERATION_FILES = ("scenario_params.json", "params.json", "params_opf.json", "params_load.json", "params_res.json",
                    "prods_charac.csv", "loads_charac.csv")
_FORMAT = 1


def offline_copy_dir(env_name: str) -> Path:
    """The folder of the small offline copy of ``env_name`` that grid2op ships (``grid2op.make(name, test=True)``)."""
    import grid2op

    return Path(grid2op.__file__).parent / "data" / env_name


def source_dir(env_name: str) -> Path:
    """The folder of ``env_name``'s data that weeks are generated from: the user's full dataset where grid2op has
    it, else the offline copy grid2op ships. Raises ``ValueError`` for an environment without generation parameters.
    """
    from ace_hybrid.grid.env import SUPPORTED_ENVS, choose_dataset  # grid2op: imported when needed

    if env_name not in SUPPORTED_ENVS:
        raise ValueError(f"env = {env_name!r} is not one of {', '.join(SUPPORTED_ENVS)}")
    choice = choose_dataset(env_name)
    folder = Path(choice.path) if choice.path is not None else offline_copy_dir(env_name)
    missing = [f for f in GENERATION_FILES if not (folder / f).is_file()]
    if missing:
        raise ValueError(f"{env_name} has no generation parameters ({', '.join(missing)} missing in {folder}): "
                         "chronix2grid generates weeks of l2rpn_idf_2023 and the other grids it made (2022 on)")
    return folder


@dataclass(frozen=True)
class GeneratedSet:
    """A set's folder and what its files say."""

    path: Path

    @property
    def meta(self) -> dict[str, Any]:
        return _read_json(self.path / SET_META)

    @property
    def env_name(self) -> str:
        return str(self.meta["env"])

    def dates(self) -> list[str]:
        """The start dates weeks are taken from (its ``scenario_params.json``)."""
        return list(_read_json(self.path / "scenario_params.json")["all_dates"])

    def week_dir(self, name: str) -> Path:
        return self.path / "chronics" / name

    def finished(self) -> list[str]:
        """Names of the weeks in ``chronics/`` (complete: a week is moved in whole), sorted, i.e. by week number."""
        folder = self.path / "chronics"
        return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []

    def failed(self) -> dict[str, str]:
        """Weeks chronix2grid could not generate: name -> its error."""
        return _read_json(self.path / "failed.json") if (self.path / "failed.json").is_file() else {}

    def record_failure(self, name: str, error: str) -> None:
        failed = self.failed()
        failed[name] = error
        atomic_write_json(self.path / "failed.json", dict(sorted(failed.items())))

    def weeks(self) -> dict[int, str]:
        """Week number -> folder name of every finished week."""
        return {int(name.split("_", 1)[0]): name for name in self.finished()}

    def partial_dir(self) -> Path:
        return self.path / ".partial"

    def log_timing(self, record: dict[str, Any]) -> None:
        (self.path / "logs").mkdir(exist_ok=True)
        with open(self.path / "logs" / "timing.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def is_set(path: Path) -> bool:
    return (path / SET_META).is_file()


def create_set(path: Path, env_name: str, seed: int, *, with_loss: bool = True,
               steps: int | None = None) -> GeneratedSet:
    """Make the set folder (the environment's files, no weeks yet), or check that an existing one was made from the
    same environment, seed, loss handling and week length (``steps``: None for whole weeks). Raises ``ValueError``
    naming what differs."""
    meta = {"format": _FORMAT, "env": env_name, "seed": int(seed), "with_loss": bool(with_loss), "steps": steps}
    if path.exists():
        if not is_set(path):
            raise ValueError(f"{path} exists and is not a generated set (no {SET_META}): "
                             "choose another --name or --root")
        old = _read_json(path / SET_META)
        differs = [f"{k} = {old.get(k)!r} there, {v!r} asked" for k, v in meta.items() if old.get(k) != v]
        if differs:
            raise ValueError(f"the set {path} was made differently ({'; '.join(differs)}): choose another --name")
        return GeneratedSet(path)
    source = source_dir(env_name)
    tmp = path.with_name(path.name + ".making")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("chronics", "__pycache__", "_grid2op_classes",
                                                                "_statistics_*"))
    (tmp / "chronics").mkdir()
    atomic_write_json(tmp / SET_META, meta)
    os.replace(tmp, path)  # a set folder is complete or absent
    return GeneratedSet(path)


def find_set(name: str | os.PathLike[str]) -> GeneratedSet | None:
    """The generated set ``name`` names: a folder path, or a set's name under :func:`data_root`; None if neither."""
    for candidate in (Path(name), data_root() / str(name)):
        if is_set(candidate):
            return GeneratedSet(candidate)
    return None
