"""Generate one week of an environment's time series with chronix2grid: the worker of ``ace-hybrid data generate``.

Runs as a script inside the generation environment (``make data-env``: chronix2grid needs numpy < 2, the main install
has numpy 2), so it imports nothing from ace_hybrid. It is chronix2grid's own per-week generator
(``generate_a_scenario``, what grid2op's ``Environment.generate_data`` calls 52 times a year) driven with the seeds
the caller gives, so one week is a function of (parameters, date, seeds) alone: weeks reproduce one by one, in any
order, on any number of cores.

The week is written under ``--out`` (a private folder of the caller's); the caller checks it and moves it into place.
chronix2grid's ``generation_quality.json`` records how long the week took: those timings move to ``timing.json`` so
that every other file depends on the seeds alone. Prints one JSON line: ``{"week": name, "seconds": s}`` or, on a
generation error, ``{"week": name, "error": text}`` with exit code 3.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import warnings

# chronix2grid's own timings: they vary run to run, so they leave the week's data files.
_TIMING_KEYS = ("generation_time", "saving_time", "forecast_generation_time")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", required=True, help="folder of the environment whose grid and parameters are used")
    p.add_argument("--out", required=True, help="folder the week's folder is written into")
    p.add_argument("--start-date", required=True, help="the week's first day, one of scenario_params.json's dates")
    p.add_argument("--scen-id", required=True, help="suffix of the week's name: <start-date>_<scen-id>")
    p.add_argument("--seeds", required=True, type=int, nargs=3, metavar=("LOAD", "RENEW", "FORECAST"))
    p.add_argument("--without-loss", action="store_true", help="skip the AC loss correction (faster, rougher)")
    p.add_argument("--steps", type=int, default=None,
                   help="generate this many 5-minute steps instead of the week (the tests' short run)")
    return p.parse_args(argv)


def _move_timings(week_dir: str) -> float:
    """Move chronix2grid's timings out of ``generation_quality.json`` into ``timing.json``; return the total."""
    path = os.path.join(week_dir, "generation_quality.json")
    with open(path, encoding="utf-8") as f:
        quality = json.load(f)
    timing = {k: quality.pop(k) for k in _TIMING_KEYS if k in quality}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(quality, f, indent=4, sort_keys=True)
    with open(os.path.join(week_dir, "timing.json"), "w", encoding="utf-8") as f:
        json.dump(timing, f, indent=4, sort_keys=True)
    return float(timing.get("generation_time", 0.0))


def _cbc_on_path() -> None:
    """pypsa calls the ``cbc`` executable by name: use the one PuLP's wheel ships when the system has none."""
    if shutil.which("cbc") is None:
        import pulp

        folder = os.path.dirname(os.path.realpath(pulp.PULP_CBC_CMD().path))
        os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", "")
        if shutil.which("cbc") is None:
            raise FileNotFoundError(f"no cbc executable on PATH nor in PuLP's wheel ({folder}): pip install pulp")


def _grid_only(folder: str):  # -> grid2op Environment
    """The environment of ``folder`` without its time series (a new set has no week yet) nor its opponent (which
    needs them): only its generators' names and types are read."""
    import grid2op
    from grid2op.Chronics import ChangeNothing
    from grid2op.Opponent import BaseOpponent, NeverAttackBudget

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return grid2op.make(folder, chronics_class=ChangeNothing, opponent_class=BaseOpponent,
                            opponent_budget_class=NeverAttackBudget, opponent_init_budget=0,
                            opponent_budget_per_ts=0, opponent_attack_duration=0, opponent_attack_cooldown=99999)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    _cbc_on_path()
    name = f"{args.start_date}_{args.scen_id}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from chronix2grid.grid2op_utils.utils import generate_a_scenario
    with open(os.path.join(args.source, "scenario_params.json"), encoding="utf-8") as f:
        dt = json.load(f)["dt"]
    kwargs_path = os.path.join(args.source, "chronix2grid_adddata_kwargs.json")
    extra: dict = {}
    if os.path.isfile(kwargs_path):  # the environment's own settings, as generate_data reads them
        with open(kwargs_path, encoding="utf-8") as f:
            extra = json.load(f)
    env = _grid_only(args.source)
    start = time.perf_counter()
    error, *_ = generate_a_scenario(
        args.source, env.name_gen, env.gen_type, args.out, args.start_date, dt, args.scen_id,
        *args.seeds,
        handle_loss=not args.without_loss,
        nb_steps=args.steps,
        files_to_copy=tuple(extra.get("files_to_copy", ("maintenance_meta.json",))),
        save_ref_curve=bool(extra.get("save_ref_curve", False)),
        day_lag=int(extra.get("day_lag", 6)),
        tol_zero=float(extra.get("tol_zero", 1e-3)),
        debug=bool(extra.get("debug", False)),
    )
    env.close()
    if error is not None:
        print(json.dumps({"week": name, "error": f"{type(error).__name__}: {error}"}), flush=True)
        return 3
    _move_timings(os.path.join(args.out, name))
    print(json.dumps({"week": name, "seconds": round(time.perf_counter() - start, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
