"""Survival on the training episodes two tutor collections share -- the tutor's own and one a junior played
(`ace-hybrid junior collect --driver`) -- beside doing nothing played here on the same episodes, with the share of
the tutor's gain over doing nothing that the junior keeps. Paired over episodes, 95% bootstrap intervals.

    python tools/collection_survival.py runs/junior/tutor8-train runs/junior/dagger8-1

It tells where a junior's shortfall on held-out weeks comes from: imitation (it falls short of its tutor on the
very weeks it learnt from) or generalisation (it keeps the tutor's gain there, not on other weeks).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ace_hybrid.experiment.statistics import interval

DRAWS, SEED = 10_000, 0


def _episodes(folder: Path) -> dict[int, tuple[int, int, int, bool]]:
    """{k: (scenario, seed, steps survived, blackout)} of a collection's finished episodes; a blackout's last
    (failed) step is not counted, as :func:`~ace_hybrid.grid.evaluation.play_episode` counts."""
    out = {}
    for path in sorted((folder / "episodes").glob("ep-*.npz")):
        with np.load(path) as z:
            blackout = bool(z["blackout"])
            out[int(path.stem[3:])] = (int(z["scenario"]), int(z["seed"]), int(z["steps"]) - blackout, blackout)
    return out


def _do_nothing(folder: Path, pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(steps survived, playable steps) of doing nothing (under the safe rule) on ``pairs``, in the collection's
    configuration (grid, weeks, start spread, episode length)."""
    from tqdm.auto import tqdm

    from ace_hybrid.grid.agents import DoNothingAgent
    from ace_hybrid.grid.env import make_config_env
    from ace_hybrid.grid.evaluation import play_episode
    from ace_hybrid.training.tutor_decisions import config_of

    cfg = config_of(folder)
    env = make_config_env(cfg)
    try:
        agent = DoNothingAgent(env.action_space, cfg.env.threshold)
        results = [play_episode(env, agent, s, seed, max_steps=cfg.env.max_episode_steps or None)
                   for s, seed in tqdm(pairs, desc="doing nothing", unit="episode")]
    finally:
        env.close()
    return (np.array([r.steps_survived for r in results], float), np.array([r.max_steps for r in results], float))


def _interval(draws: np.ndarray) -> str:
    lo, hi = interval(draws)
    return "[n/a]" if lo is None else f"[{lo:+.1f}, {hi:+.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tutor", type=Path, help="the tutor's own collection (junior collect)")
    parser.add_argument("driven", type=Path, help="a collection the junior played (junior collect --driver)")
    args = parser.parse_args()
    tutor, driven = _episodes(args.tutor), _episodes(args.driven)
    common = sorted(set(tutor) & set(driven))
    if not common:
        parser.error(f"{args.tutor} and {args.driven} share no finished episode")
    if any(tutor[k][:2] != driven[k][:2] for k in common):
        parser.error("the collections' episode k is not the same (scenario, seed): collected with other settings")
    dn, horizon = _do_nothing(args.tutor, [tutor[k][:2] for k in common])
    rate = {"DoNothing": dn / horizon,
            "Tutor": np.array([tutor[k][2] for k in common]) / horizon,
            "Junior (driving)": np.array([driven[k][2] for k in common]) / horizon}
    idx = np.random.default_rng(SEED).integers(0, len(common), size=(DRAWS, len(common)))
    print(f"{len(common)} training episodes played by both collections; survival = steps survived / playable steps\n")
    print("| Agent | Survival | Blackouts |\n|:---|---:|---:|")
    blackouts = {"DoNothing": int(np.sum(dn < horizon)), "Tutor": sum(tutor[k][3] for k in common),
                 "Junior (driving)": sum(driven[k][3] for k in common)}
    for name, r in rate.items():
        print(f"| {name} | {r.mean():.1%} | {blackouts[name]} |")
    print("\n| A − B | points [95% CI] |\n|:---|---:|")
    for a, b in (("Tutor", "DoNothing"), ("Junior (driving)", "DoNothing"), ("Junior (driving)", "Tutor")):
        d = 100 * (rate[a] - rate[b])
        print(f"| {a} − {b} | {d.mean():+.1f} {_interval(d[idx].mean(1))} |")
    gain_t = (rate["Tutor"] - rate["DoNothing"])[idx].mean(1)
    gain_j = (rate["Junior (driving)"] - rate["DoNothing"])[idx].mean(1)
    kept = 100 * gain_j / np.where(gain_t == 0, np.nan, gain_t)
    whole = 100 * (rate["Junior (driving)"] - rate["DoNothing"]).mean() / (rate["Tutor"] - rate["DoNothing"]).mean()
    lo, hi = interval(kept)
    spread = "no interval: the tutor gains nothing in any draw" if lo is None else f"[{lo:.0f}, {hi:.0f}]"
    print(f"\nShare of the tutor's gain over doing nothing the junior keeps: {whole:.0f}% {spread}")


if __name__ == "__main__":
    main()
