"""The ``ace-hybrid`` command line, and where it finds what ships with the package.

``--config`` takes a path or the name of a shipped file: the training configurations of the repository's
``configs/`` and the experiment files of its ``experiments/`` travel inside the wheel (``ace_hybrid/data/``), so
``ace-hybrid train --config l2rpn_case14_sandbox`` works wherever the package is installed. A command whose optional
dependencies are missing names the extra to install (``pip install 'ace-hybrid[train]'``) instead of a traceback.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ace_hybrid.known_warnings import ignore_known_warnings

__all__ = ["SHIPPED_KINDS", "build_parser", "find_config", "main", "missing_extra", "shipped_names"]

_PACKAGE = Path(__file__).resolve().parent
#: The repository, when the package runs from a source checkout (PYTHONPATH=python, editable installs); else None.
_CHECKOUT = _PACKAGE.parents[1] if (_PACKAGE.parents[1] / "pyproject.toml").is_file() else None

SHIPPED_KINDS: dict[str, str] = {"configs": "training configuration", "experiments": "experiment file"}
"""The folders of shipped TOML files (``configs/``, ``experiments/``) and what each holds."""

COMMAND_EXTRAS: dict[str, str] = {"train": "train", "evaluate": "grid", "experiment": "train", "report": "report",
                                  "data": "grid", "junior": "train"}
"""The extra of pyproject.toml each command needs (``evaluate`` with a checkpoint agent also needs ``train``)."""


# ----------------------------------------------------------------------------- shipped configurations


def _shipped_dir(kind: str) -> Path:
    """The folder of the shipped ``kind`` files: the checkout's ``<kind>/``, else the installed package's copy."""
    if kind not in SHIPPED_KINDS:
        raise ValueError(f"kind = {kind!r} is not one of {', '.join(SHIPPED_KINDS)}")
    for folder in ([_CHECKOUT / kind] if _CHECKOUT else []) + [_PACKAGE / "data" / kind]:
        if folder.is_dir():
            return folder
    raise FileNotFoundError(f"no shipped {kind}/ found beside {_PACKAGE} (a broken installation: reinstall)")


def shipped_names(kind: str = "configs") -> list[str]:
    """Names of the shipped ``kind`` files ("configs" or "experiments"), e.g. ``["l2rpn_case14_sandbox", ...]``."""
    return sorted(p.stem for p in _shipped_dir(kind).glob("*.toml"))


def find_config(name: str | Path, kind: str = "configs") -> Path:
    """A TOML file by path, or by the name of a shipped one.

    Parameters
    ----------
    name
        A path to an existing file, or a bare name (``l2rpn_case14_sandbox``, with or without ``.toml``) of a file
        in the package's ``configs/`` (``kind="configs"``) or ``experiments/`` (``kind="experiments"``).
    kind
        Where bare names are looked up.

    Raises ``FileNotFoundError`` naming the shipped files when ``name`` is neither.
    """
    path = Path(name)
    if path.is_file():
        return path
    what = SHIPPED_KINDS.get(kind, kind)
    if path.parent == Path(".") and path.suffix in ("", ".toml"):
        shipped = _shipped_dir(kind) / f"{path.stem}.toml"
        if shipped.is_file():
            return shipped
        raise FileNotFoundError(f"no {what} {str(name)!r}: not a file, nor a shipped name "
                                f"({', '.join(shipped_names(kind))})")
    raise FileNotFoundError(f"{what} {path} does not exist")


def _toml_argument(kind: str) -> Callable[[str], Path]:
    """An argparse ``type`` resolving ``--config`` through :func:`find_config` (a usage error when it fails)."""

    def convert(text: str) -> Path:
        try:
            return find_config(text, kind)
        except FileNotFoundError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def _names_hint(kind: str) -> str:
    try:
        return ", ".join(shipped_names(kind))
    except FileNotFoundError:
        return "none found"


# ----------------------------------------------------------------------------- missing optional dependencies


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


def _declared_extras() -> dict[str, list[str]]:
    """Each extra's requirements, in pyproject.toml's order: from the checkout's pyproject.toml (the one list of
    dependencies) or, installed, from the package's metadata (which the wheel build copies from it)."""
    if _CHECKOUT is not None:
        from ace_hybrid.config import read_toml

        return dict(read_toml(_CHECKOUT / "pyproject.toml", "pyproject")["project"].get("optional-dependencies", {}))
    from importlib import metadata

    try:
        requires = metadata.requires("ace-hybrid") or []
    except metadata.PackageNotFoundError:
        return {}
    out: dict[str, list[str]] = {}
    for req in requires:
        marker = _EXTRA_MARKER.search(req)
        if marker:
            out.setdefault(marker.group(1), []).append(req.split(";")[0])
    return out


def _extra_packages() -> dict[str, set[str]]:
    """Each extra's distribution names (normalised), with self-references such as ``ace-hybrid[grid]`` expanded."""
    declared = _declared_extras()

    def expand(extra: str, seen: frozenset[str]) -> set[str]:
        out: set[str] = set()
        for req in declared.get(extra, []):
            match = _REQUIREMENT.match(req)
            if match is None:
                continue
            if _normalise(match.group(1)) == "ace-hybrid":
                for sub in (s.strip() for s in (match.group(2) or "").split(",")):
                    if sub and sub not in seen:
                        out |= expand(sub, seen | {sub})
            else:
                out.add(_normalise(match.group(1)))
        return out

    return {extra: expand(extra, frozenset([extra])) for extra in declared}


def missing_extra(exc: BaseException, wanted: str | None = None) -> str | None:
    """What to install when ``exc`` comes from a missing optional dependency, or None when it does not.

    Follows the exception's cause chain to the ``ModuleNotFoundError`` and maps its top-level module to the extras
    of pyproject.toml that provide it: ``wanted`` (the extra the caller needs) if it is one of them, else the first
    (in pyproject's order) that also holds all of ``wanted``, else the first. Returns e.g.
    ``"torch is not installed: pip install 'ace-hybrid[train]'"``.
    """
    seen: set[int] = set()
    node: BaseException | None = exc
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        if isinstance(node, ModuleNotFoundError) and node.name:
            break
        node = node.__cause__ or node.__context__
    if node is None or not isinstance(node, ModuleNotFoundError) or not node.name:
        return None
    module = node.name.split(".")[0]
    extras = _extra_packages()
    providers = [extra for extra, packages in extras.items() if _normalise(module) in packages]
    if not providers:
        return None
    need = extras.get(wanted or "", set())
    extra = wanted if wanted in providers else next((e for e in providers if need <= extras[e]), providers[0])
    return f"{module} is not installed: pip install 'ace-hybrid[{extra}]'"


def int_list(text: str) -> list[int]:
    """``"0,1,2"`` or ``"0-2"`` or a mix, as a list of ints."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part[1:]:
            lo, hi = part.split("-", 1) if not part.startswith("-") else (part, part)
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    if not out:
        raise argparse.ArgumentTypeError(f"{text!r} holds no integers")
    return out


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} out of range [1, inf)")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ace-hybrid",
        description="LLM-guided reinforcement learning for huge discrete action spaces (ACE) on Grid2Op grids.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_evaluate, _add_train, _add_experiment, _add_report, _add_data, _add_junior):
        add(sub)
    return parser


def _add_evaluate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ev = sub.add_parser(
        "evaluate",
        help="run an agent on fixed (scenario, seed) pairs and report survival, reward, score and time",
        description="Run an agent on fixed (scenario, seed) pairs of a Grid2Op environment. Writes evaluation.json "
        "and evaluation.md into --out and prints the markdown table.",
    )
    ev.add_argument("--env", required=True,
                    help="environment name (e.g. l2rpn_neurips_2020_track1), environment folder (a full dataset) or "
                    "generated set (its name under $ACE_HYBRID_DATA or ./data, or its path; scenario ids are weeks)")
    ev.add_argument("--agent", required=True,
                    help="do-nothing | reco | greedy | lac (the LLM-only LAC agent, embedded model) | checkpoint:PATH "
                    "(a trained agent's checkpoint) | maskable-ppo:RUN_DIR (an experiment's trained MaskablePPO run)")
    ev.add_argument("--episodes", type=int_list, default=[0], help="scenario ids, e.g. '0,1' or '0-2' (default 0)")
    ev.add_argument("--seeds", type=int_list, default=[0],
                    help="episode seeds: one for all scenarios or one per scenario (default 0)")
    ev.add_argument("--env-seed", type=int, default=0, help="seed of the environment's own generators (default 0)")
    ev.add_argument("--start-spread", type=int, default=0, metavar="N",
                    help="with N > 0 the episode seed also chooses the step its episode starts at, in [0, N) "
                         "(env.start_spread of a configuration; default 0: the scenario's first step)")
    ev.add_argument("--max-steps", type=int, default=None, help="cut every episode after this many steps")
    ev.add_argument("--threshold", type=float, default=None,
                    help="danger threshold on max rho: the agent decides at or above it, the safe rule acts below "
                    "(default 0.9; a trained agent's own env.deploy_threshold, else its env.threshold)")
    ev.add_argument("--budget", type=int, default=30, help="greedy expert: simulations per decision (default 30)")
    ev.add_argument("--topk", type=int, default=None,
                    help="trained agents: simulate the policy's k most likely actions and play the safest "
                    "(0: the most likely, unchecked; default: the run's env.deploy_topk)")
    ev.add_argument("--shortlist", type=int, default=None, metavar="M",
                    help="trained agents: M of the k checked are the greedy expert's heuristic shortlist, k - M the "
                    "policy's most likely (default: the run's env.deploy_shortlist; 0: all the policy's)")
    ev.add_argument("--among", type=int, default=None, metavar="K",
                    help="trained agents alone (topk 0): the most likely of do nothing and K - 1 of the greedy "
                    "expert's heuristic shortlist, none simulated (default: the run's env.deploy_among; 0: of every "
                    "legal action)")
    ev.add_argument("--sure", type=float, default=None, metavar="P",
                    help="trained agents alone (topk 0): do nothing where the policy gives its most likely action a "
                    "probability below P, in (0, 1) (default: the run's env.deploy_sure; 0: always act)")
    ev.add_argument("--score", action="store_true",
                    help="also compute grid2op's L2RPN score (runs its reference agents on a writable data copy)")
    ev.add_argument("--out", type=Path, default=Path("runs/evaluate"), help="output folder (default runs/evaluate)")
    ev.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _add_training_config(parser: argparse.ArgumentParser) -> None:
    """``--config`` and ``--set``: a training configuration, as ``train`` and ``junior collect`` take it."""
    parser.add_argument("--config", type=_toml_argument("configs"), default=None, metavar="FILE|NAME",
                        help=f"a TOML file, or a shipped configuration by name ({_names_hint('configs')})")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one field, e.g. --set sac.lr_actor=1e-4 --set train.total_env_steps=5000")


def _add_train(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tr = sub.add_parser(
        "train",
        help="train SAC, or ACE when llm.backend is set, and write a run directory",
        description="Train on a Grid2Op environment: SAC alone (llm.backend = none, the default) or ACE with an LLM "
        "as policy actor, value critic and co-evolving partner (e.g. --set llm.backend=smollm2, or a config from "
        "configs/ace_*.toml). The configuration is the defaults, then --config FILE.toml, "
        "then every --set key=value. A run directory holds checkpoints, the replay, metrics.jsonl, TensorBoard "
        "events and evaluations; --resume continues a stopped run from its last checkpoint.",
    )
    _add_training_config(tr)
    tr.add_argument("--run-dir", type=Path, default=None, help="output folder (default runs/<env>-<time>)")
    tr.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR",
                    help="continue the run in RUN_DIR from its last checkpoint (only train.total_env_steps may "
                    "be changed, with --set)")
    tr.add_argument("--help-config", action="store_true", help="list every configuration field with its default")


def _add_experiment(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ex = sub.add_parser(
        "experiment",
        help="train and test a grid of agents x seeds and write the paper-style table and a report",
        description="Run the rows of an experiment file (baselines: do-nothing, reco, greedy, tutor, lac; training "
        "rows: sac-only, expert-guided, ace and its ablations, maskable-ppo) for each seed: train into "
        "OUT/runs/<row>-seed<k> (resuming a half-done run), test best.pt (maskable-ppo: its last model) on the file's "
        "held-out test_pairs (or, with --on validation, its validation_pairs), and save each cell in OUT/cells/. "
        "A finished cell is never rerun, so rerunning the command continues where it stopped. Writes results.json, "
        "results.csv, results.md (mean ± std over seeds) and report.md with figures, and prints the table.",
    )
    ex.add_argument("--config", type=_toml_argument("experiments"), required=True, metavar="FILE|NAME",
                    help=f"an experiment TOML file, or a shipped one by name ({_names_hint('experiments')})")
    ex.add_argument("--out", type=Path, default=None, help="output folder (default runs/<experiment name>)")
    ex.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a configuration field in every row, after the file's set/ace_set and before "
                    "each row's own overrides, e.g. --set train.total_env_steps=2000")
    ex.add_argument("--rows", default=None, metavar="ID,ID",
                    help="run only these row ids (default: every row of the file)")
    ex.add_argument("--seeds", type=int_list, default=None, help="replace the file's seeds, e.g. '0,1,2' or '0-2'")
    ex.add_argument("--jobs", type=positive_int, default=1, metavar="N",
                    help="run N cells at once in worker processes (default 1; a cell's figures do not depend on "
                    "it, its times do)")
    ex.add_argument("--on", choices=("test", "validation"), default="test",
                    help="the pairs every row is tested on: the held-out test_pairs (default), or the file's "
                    "validation_pairs, where configurations are chosen: writes OUT/results-validation.{json,csv,md} "
                    "from OUT/cells-validation/, never mixed with the test results (the trained runs are shared)")
    ex.add_argument("--smoke", action="store_true",
                    help="a smoke version of the file, to check that every row runs (minutes, not results): its first "
                    "2 pairs and first seed, test episodes cut at 50 steps, trainings of 300 steps (budgets scaled "
                    "into them, names kept); output in runs/<name>-smoke unless --out is given")
    ex.add_argument("--no-report", action="store_true", help="skip report.md and its figures")
    ex.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def _add_report(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rp = sub.add_parser(
        "report",
        help="write DIR/report.md with figures from a finished (or partial) experiment directory",
        description="Write DIR/report.md and DIR/figures/*.png from DIR/results.json and the runs' metrics.jsonl: "
        "learning curves, survival per held-out episode, LLM calls and acceptance, the time split, and our figures "
        "beside the ACE paper's. Missing data becomes a sentence in the report.",
    )
    rp.add_argument("dir", type=Path, help="the experiment's output folder (ace-hybrid experiment --out)")


def _add_data(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ace_hybrid.data.splits import SPLITS  # no numpy: the parser stays light

    da = sub.add_parser(
        "data",
        help="generate weeks of an environment (chronix2grid), check them and split them by week",
        description="Weeks of time series beyond grid2op's offline copies. `generate` writes weeks 0..N-1 into a "
        "writable set folder ($ACE_HYBRID_DATA or ./data, then --name), one worker process per week in the "
        "generation environment (make data-env), resumably; `check` checks every week against the offline copy "
        "and writes checks.json and splits.json (training, validation, test weeks); `show` prints them. A set is "
        "used by name or path: ace-hybrid evaluate --env NAME, or env.data = NAME in a configuration.",
    )
    verbs = da.add_subparsers(dest="verb", required=True, metavar="VERB")
    gen = verbs.add_parser("generate", help="make (or complete) a set of N weeks; prints where it is and the time")
    gen.add_argument("--env", default="l2rpn_idf_2023", help="environment with generation parameters "
                     "(default l2rpn_idf_2023)")
    gen.add_argument("--weeks", type=positive_int, required=True, metavar="N", help="weeks 0..N-1 (at most 999)")
    gen.add_argument("--seed", type=int, required=True, help="the set's seed: week k is a function of (seed, k)")
    gen.add_argument("--name", default=None, help="the set's folder name (default <env>-weeks-s<seed>)")
    gen.add_argument("--root", type=Path, default=None, help="where sets live (default $ACE_HYBRID_DATA or ./data)")
    gen.add_argument("--jobs", type=positive_int, default=1, metavar="N", help="weeks at once, one core each")
    gen.add_argument("--python", default=None, help="the generation environment's python (default: "
                     "$ACE_HYBRID_DATA_PYTHON, else .venv-data/bin/python)")
    gen.add_argument("--without-loss", action="store_true",
                     help="skip chronix2grid's AC loss correction (about 1.5x faster, rougher; a set is one or the other)")
    gen.add_argument("--steps", type=positive_int, default=None, metavar="N",
                     help="weeks of N five-minute steps instead of 2,016 (short sets for trials)")
    gen.add_argument("--split", action="append", choices=SPLITS, default=None, dest="splits",
                     help="only the weeks of this split among 0..N-1 (repeatable), e.g. --split test for more held-out "
                     "weeks; the others stay missing until a run without it")
    gen.add_argument("--first", type=int, default=0, metavar="K", help="only weeks K..N-1 (default 0)")
    gen.add_argument("--only", type=int_list, default=None, metavar="K,K-K",
                     help="only these week numbers, e.g. the weeks an experiment file trains and plays on")
    gen.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    chk = verbs.add_parser("check", help="check every week of a set and write checks.json and splits.json")
    chk.add_argument("set", help="the set's name (under $ACE_HYBRID_DATA or ./data) or path")
    chk.add_argument("--jobs", type=positive_int, default=1, metavar="N", help="weeks checked at once")
    chk.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    show = verbs.add_parser("show", help="print a set's checks and splits")
    show.add_argument("set", help="the set's name or path")


def _add_junior(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ju = sub.add_parser(
        "junior",
        help="collect the tutor's decisions on training episodes, and behaviour-clone a junior policy on them",
        description="The tutor's knowledge at scale. `collect` plays a configuration's training episodes with the "
        "greedy tutor deciding in every danger state and keeps each decision (features, legal actions, the tutor's "
        "choice, the transition) in a folder, resumably; `fit` trains the run's actor network to imitate them and "
        "writes a junior file, which `evaluate --agent checkpoint:JUNIOR.pt` plays and `train.init_policy` starts a "
        "run from.",
    )
    verbs = ju.add_subparsers(dest="verb", required=True, metavar="VERB")
    col = verbs.add_parser("collect", help="play training episodes with the tutor until N decisions are kept")
    _add_training_config(col)  # its episodes, action set and tutor are the training run's
    col.add_argument("--decisions", type=positive_int, required=True, metavar="N", help="tutor decisions to keep")
    col.add_argument("--out", type=Path, required=True, help="the collection's folder (rerun to continue)")
    col.add_argument("--jobs", type=positive_int, default=1, metavar="N", help="episodes at once, one core each")
    col.add_argument("--driver", type=Path, default=None, metavar="JUNIOR.pt",
                     help="DAgger: this junior plays (alone) and the tutor only labels its decisions; for fit --also")
    col.add_argument("--like", type=Path, default=None, metavar="DIR",
                     help="the configuration of this collection (instead of --config and --set), e.g. with "
                     "--scenarios to extend it to more weeks over the same action set")
    col.add_argument("--scenarios", default=None, metavar="LIST|validation",
                     help="play these scenarios (comma-separated ids, or `validation`: a generated set's validation "
                     "weeks) instead of env.train_scenarios, over the action set those select; for fit --validation")
    col.add_argument("--first-episode", type=int, default=0, metavar="K",
                     help="play training episodes K, K+1, ... (default 0): more episodes of the same weeks, apart "
                     "from a collection that played 0, 1, ...; for fit --also")
    col.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    fit = verbs.add_parser("fit", help="behaviour-clone a junior on a collection's first N decisions")
    fit.add_argument("--data", type=Path, required=True, help="a collection folder (junior collect --out)")
    fit.add_argument("--decisions", type=positive_int, default=None, metavar="N",
                     help="train on the first N decisions (default: all)")
    fit.add_argument("--validation", type=Path, default=None, metavar="DIR",
                     help="a collection to measure validation accuracy on (default: every 10th episode of --data)")
    fit.add_argument("--also", type=Path, action="append", default=[], metavar="DIR",
                     help="another collection to train on in full (repeatable), e.g. one of collect --driver")
    fit.add_argument("--epochs", type=positive_int, default=30)
    fit.add_argument("--lr", type=float, default=1e-3)
    fit.add_argument("--weight-decay", type=float, default=0.0, help="AdamW's weight decay (default 0)")
    fit.add_argument("--noise", type=float, default=0.0,
                     help="std of Gaussian noise on the normalised features of each training batch (default 0)")
    fit.add_argument("--among", type=int, default=0, metavar="K",
                     help="learn to choose among do nothing and the first K - 1 of the tutor's shortlist only, as "
                     "env.deploy_among = K deploys it (collections that keep the tutor's candidates; default 0: all)")
    fit.add_argument("--tolerance", type=float, default=None, metavar="RHO",
                     help="every candidate whose simulated max rho is within RHO of the tutor's best is right "
                     "(default: the tutor's choice alone)")
    fit.add_argument("--never-worse", action="store_true",
                     help="with --tolerance: a candidate simulated worse than doing nothing is never right")
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("--out", type=Path, required=True, help="the junior file to write (e.g. junior.pt)")
    fit.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    ens = verbs.add_parser("ensemble", help="one junior file of several fitted on the same decisions (other seeds)",
                           description="Write a junior file that acts by the mean probabilities of the juniors "
                           "given (fitted on the same decisions with other --seed): played like one junior, never "
                           "trained (train.init_policy refuses it).")
    ens.add_argument("juniors", type=Path, nargs="+", metavar="JUNIOR.pt", help="at least 2 junior files")
    ens.add_argument("--out", type=Path, required=True, help="the ensemble file to write")


def _collect_scenarios(cfg: Any, spec: str | None) -> list[int] | None:
    """``junior collect --scenarios``: None, the ids of a comma-separated list, or the set's validation weeks."""
    if spec is None:
        return None
    if spec.strip() == "validation":
        from ace_hybrid.data.sets import find_set
        from ace_hybrid.data.splits import read_splits

        dataset = find_set(cfg.env.data) if cfg.env.data else None
        if dataset is None:
            raise ValueError(f"--scenarios validation: env.data = {cfg.env.data!r} is not a generated set (make data); "
                             "give the scenario ids instead, e.g. --scenarios 6,20")
        return [int(k) for k in read_splits(dataset)["validation"]]
    try:
        return [int(k) for k in spec.split(",")]
    except ValueError:
        raise ValueError(f"--scenarios {spec!r}: expected comma-separated scenario ids or `validation`") from None


def cmd_junior(args: argparse.Namespace) -> int:
    if args.verb == "collect":
        from ace_hybrid.config import load_config
        from ace_hybrid.training.tutor_decisions import collect_decisions, config_of

        if args.like is not None and (args.config is not None or args.overrides):
            raise ValueError("--like takes the configuration of a collection: give it without --config and --set")
        cfg = config_of(args.like) if args.like is not None else load_config(args.config, args.overrides)
        done = collect_decisions(cfg, args.out, args.decisions, jobs=args.jobs, progress=not args.no_progress,
                                 driver=args.driver, scenarios=_collect_scenarios(cfg, args.scenarios),
                                 first_episode=args.first_episode)
        print(f"{args.out}: {done['decisions']} tutor decisions in {done['episodes']} episodes "
              f"({done['steps']} steps, {done['blackouts']} blackouts); this session {done['last_session_seconds']} s")
        if args.driver is None:
            print(f"next: ace-hybrid junior fit --data {args.out} --out junior.pt")
        else:
            print(f"the junior chose the tutor's action at {done['driver_agreement']:.1%} of its decisions; next: "
                  f"ace-hybrid junior fit --data TUTOR_COLLECTION --also {args.out} --out junior-dagger.pt")
        return 0
    if args.verb == "ensemble":
        from ace_hybrid.training.junior import save_ensemble

        save_ensemble(args.out, args.juniors)
        print(f"{args.out}: acts by the mean probabilities of {len(args.juniors)} juniors")
        return 0
    from ace_hybrid.training.junior import fit_junior, save_junior

    junior = fit_junior(args.data, args.decisions, validation=args.validation, also=args.also, epochs=args.epochs,
                        lr=args.lr, weight_decay=args.weight_decay, noise=args.noise, among=args.among,
                        tolerance=args.tolerance, never_worse=args.never_worse, seed=args.seed,
                        progress=not args.no_progress)
    save_junior(args.out, junior)
    f = junior.fit
    held = (f"{f['validation_accuracy']:.1%} (validation, {f['validation_decisions']} decisions)"
            if f["validation_decisions"] else "no validation decisions (collect more episodes, or give --validation)")
    if f.get("validation_near_best") is not None:
        held += f"; near-best (within {f['tolerance']}) {f['validation_near_best']:.1%} on validation"
    print(f"{args.out}: trained on {f['decisions']} decisions ({f['episodes']} episodes), kept epoch "
          f"{f['kept_epoch']}: accuracy against the tutor {f['train_accuracy']:.1%} (training), {held}")
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    import json

    from ace_hybrid.data.sets import find_set

    if args.verb == "generate":
        from ace_hybrid.data.generate import generate_weeks

        done = generate_weeks(args.env, args.weeks, args.seed, name=args.name, root=args.root, jobs=args.jobs,
                              python=args.python, with_loss=not args.without_loss, steps=args.steps,
                              progress=not args.no_progress, splits=args.splits,
                              first=args.first, only=args.only)
        print(f"{done['path']}: {len(done['generated'])} week(s) generated, {len(done['reused'])} already there, "
              f"{len(done['failed'])} failed, in {done['seconds']:.0f} s")
        if done["failed"]:
            print(f"failed (kept in failed.json, left out of the splits): {', '.join(done['failed'])}")
        print(f"next: ace-hybrid data check {done['path']} --jobs {args.jobs}")
        return 0
    dataset = find_set(args.set)
    if dataset is None:
        raise FileNotFoundError(f"no generated set {args.set!r}: not a set folder, nor a set's name under the data "
                                "root ($ACE_HYBRID_DATA or ./data); make one with ace-hybrid data generate")
    from ace_hybrid.data.checks import check_set, checks_markdown

    if args.verb == "check":
        checks = check_set(dataset, jobs=args.jobs, progress=not args.no_progress)
    else:
        path = dataset.path / "checks.json"
        if not path.is_file():
            raise FileNotFoundError(f"{dataset.path} has no checks.json yet: ace-hybrid data check {args.set}")
        checks = json.loads(path.read_text())
    print(checks_markdown(checks, json.loads((dataset.path / "splits.json").read_text())))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    import shlex
    import time

    from ace_hybrid.config import Config, describe_fields, load_config
    from ace_hybrid.training.executors import WorkerError
    from ace_hybrid.training.loop import TrainingInterrupted, train

    if args.help_config:
        print("\n".join(describe_fields(Config())))
        return 0
    cfg: Config | None = None
    steps: int | None = None
    if args.resume is not None:
        for text in args.overrides:
            key, _, value = text.partition("=")
            if key.strip() != "train.total_env_steps":
                raise ValueError(f"--resume continues with the run's saved configuration: only "
                                 f"train.total_env_steps may be set, not {key.strip()!r}")
            steps = int(value.replace("_", ""))
        if args.config is not None:
            raise ValueError("--resume uses the run's saved configuration: drop --config")
        run_dir = args.resume
    else:
        cfg = load_config(args.config, args.overrides)
        run_dir = args.run_dir or Path("runs") / f"{cfg.env.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    resume = f"ace-hybrid train --resume {shlex.quote(str(run_dir))}"
    try:
        summary = train(cfg, run_dir, resume=cfg is None, total_env_steps=steps)
    except TrainingInterrupted as stop:
        print(f"interrupted after {stop.summary['env_steps']} environment steps; checkpoint saved in {run_dir}")
        print(f"resume with: {resume}")
        return 130
    except KeyboardInterrupt:
        saved = (Path(run_dir) / "checkpoint.pt").is_file()
        print("interrupted before saving: " + (f"resume from the last checkpoint with: {resume}" if saved
                                               else "no checkpoint was saved yet"))
        return 130
    except WorkerError as exc:  # the learner is fine; what it had not saved is lost, as with a kill
        saved = (Path(run_dir) / "checkpoint.pt").is_file()
        print(f"ace-hybrid train: error: {exc}", file=sys.stderr)
        print(f"resume from the last checkpoint with: {resume}" if saved else "no checkpoint was saved yet",
              file=sys.stderr)
        return 1
    for warning in summary["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    last = summary["last_eval"]
    print(f"trained {summary['env_steps']} environment steps, {summary['decisions']} decisions, "
          f"{summary['updates']} updates in {summary['train_seconds']:.0f} s")
    if last:
        print(f"survival on env.eval_pairs {last['survival_rate']:.1%} (best {summary['best_survival']:.1%}); "
              f"run directory: {summary['run_dir']}")
    llm = summary.get("llm")
    if llm:
        print(f"LLM: {llm['calls']} calls ({llm['actor_calls']} actor, {llm['critic_calls']} critic; "
              f"+{llm['probe_calls']} probe), {llm['accepted']} of {llm['bad_transitions']} bad transitions "
              f"refined, {llm['finetunes']} LoRA round(s), {llm['seconds']:.0f} s")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ace_hybrid.agents import make_agent
    from ace_hybrid.grid.evaluation import evaluate, parse_pairs
    from ace_hybrid.grid.env import make_env

    pairs = parse_pairs(args.episodes, args.seeds)
    env = make_env(args.env, seed=args.env_seed, start_spread=args.start_spread)

    def build(e: Any) -> Any:
        return make_agent(args.agent, e, threshold=args.threshold, budget=args.budget, topk=args.topk,
                          shortlist=args.shortlist, among=args.among, sure=args.sure)

    agent = build(env)
    report = evaluate(env, agent, pairs, agent_name=args.agent, max_steps=args.max_steps,
                      progress=not args.no_progress)
    if args.score:
        from ace_hybrid.grid.scores import score_report

        score_report(report, build, max_steps=args.max_steps, env_source=args.env)
    json_path, md_path = report.save(args.out)
    print(report.to_markdown())
    print(f"\nwritten: {json_path} and {md_path}")
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    from ace_hybrid.experiment import load_experiment, run_experiment
    from ace_hybrid.experiment.tables import results_name

    rows = [r.strip() for r in args.rows.split(",") if r.strip()] if args.rows else None
    spec = load_experiment(args.config, args.overrides, rows=rows, seeds=args.seeds, on=args.on)
    if args.smoke:
        from ace_hybrid.experiment.smoke import smoke_version

        spec = smoke_version(spec)
    out = args.out or Path("runs") / (f"{spec.name}-smoke" if spec.smoke else spec.name)
    result = run_experiment(spec, out, progress=not args.no_progress, jobs=args.jobs)
    report = not args.no_report and spec.on == "test"  # report.md describes the test results only
    if report:
        from ace_hybrid.report import write_report

        write_report(out)
    print(result["markdown"])
    written = ", ".join(results_name(spec, ext) for ext in ("json", "csv", "md"))
    print(f"\n{len(result['ran'])} cell(s) run, {len(result['reused'])} reused; written: {out}/{written}"
          + (", report.md" if report else ""))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from ace_hybrid.report import write_report

    print(f"written: {write_report(args.dir)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ignore_known_warnings()  # third-party noise (grid2op's numba notice, deprecations): ace_hybrid.known_warnings
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        commands = {"evaluate": cmd_evaluate, "train": cmd_train, "experiment": cmd_experiment, "report": cmd_report,
                    "data": cmd_data, "junior": cmd_junior}
        return commands[args.command](args)
    except (ValueError, IndexError, FileNotFoundError, FileExistsError) as exc:
        print(f"ace-hybrid {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:  # an optional dependency the command needs: name the extra, not a traceback
        hint = missing_extra(exc, COMMAND_EXTRAS.get(args.command))
        if hint is None:
            raise
        print(f"ace-hybrid {args.command}: error: {hint}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
