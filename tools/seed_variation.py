"""Does an episode seed change the episode? DoNothing on each grid's offline copy, one scenario, several seeds.

On a grid with an opponent the seed moves its attacks; without one (and without random maintenance) every seed of a
scenario plays the same episode, and a test set of (scenario, seed) pairs holds only as many episodes as the copy
has scenarios. Prints, per grid, the steps played and DoNothing's summed reward for each seed, and whether they all
agree (over ``--steps``: l2rpn_wcci_2020 draws maintenance days from the seed, a few per month at most). With
``--start-spread N`` the seed also chooses the step the episode starts at (``env.start_spread``, as the grid files of
the grids without an opponent set it): then every seed plays its own episode.

    PYTHONPATH=python python tools/seed_variation.py [--steps 300] [--seeds 100,101,102] [--start-spread N] [GRID ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from ace_hybrid.grid.env import make_env, playable_steps, reset_episode  # noqa: E402
from ace_hybrid.known_warnings import ignore_known_warnings  # noqa: E402

GRIDS = ("l2rpn_case14_sandbox", "l2rpn_wcci_2020", "l2rpn_neurips_2020_track1", "l2rpn_idf_2023")


def do_nothing_run(env, scenario: int, seed: int, steps: int) -> tuple[int, int, float]:
    """Steps played (at most ``steps``), the steps the episode has, and the summed reward of DoNothing on episode
    (scenario, seed)."""
    reset_episode(env, scenario, seed)
    total, played = 0.0, 0
    for played in range(1, steps + 1):
        _, reward, done, _ = env.step(env.action_space({}))
        total += float(reward)
        if done:
            break
    return played, playable_steps(env), total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("grids", nargs="*", default=list(GRIDS))
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seeds", default="100,101,102")
    p.add_argument("--scenario", type=int, default=0)
    p.add_argument("--start-spread", type=int, default=0, help="env.start_spread (default 0: the first step)")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    for grid in args.grids:
        env = make_env(grid, seed=0, start_spread=args.start_spread)
        runs = [do_nothing_run(env, args.scenario, seed, args.steps) for seed in seeds]
        env.close()
        same = len(set(runs)) == 1
        print(f"{grid}, scenario {args.scenario}: " + ", ".join(f"seed {s}: {n} of {m} steps, reward {r:,.2f}"
                                                             for s, (n, m, r) in zip(seeds, runs))
              + (" -> the same episode for every seed" if same else " -> the seed changes the episode"))
    return 0


if __name__ == "__main__":
    ignore_known_warnings()
    raise SystemExit(main())
