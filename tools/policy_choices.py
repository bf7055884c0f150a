"""What a trained policy puts its probability on where it decides: do nothing, or something it would play.

Plays a checkpoint's policy alone (``topk = 0``, as ``ace-hybrid evaluate --topk 0`` does) on the given (scenario,
seed) pairs and, at every decision (max rho above the run's threshold), reads the policy's probabilities over its
action set. Prints, per episode and over all, the decisions, the share where the policy plays an action that is not
do nothing, the mean probability of do nothing and of the most likely other action, and the three actions played
most. A policy still at its initial probabilities (``sac.prior_prob`` on do nothing, the rest near uniform) shows do
nothing's probability at the prior, give or take what the untrained network adds, at every decision: it never acts
because it has not learned, not because it learned that doing nothing is best.

The episodes are the run's own grid with its generator seed and episode starts (``env.start_spread``). With
``--play critic`` the agent plays the critics' greedy action instead (the legal action of highest min(Q1, Q2)), still
without simulating: whether the critics rank actions better than the policy does (the probabilities printed stay the
policy's). The last line gives the survival over all the episodes.

    PYTHONPATH=python python tools/policy_choices.py runs/X/runs/sac-only-seed0/best.pt --episodes 0 \\
        --seeds 200-203 [--max-steps N] [--play critic]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ace_hybrid.cli import int_list, positive_int
from ace_hybrid.config import config_from_dict
from ace_hybrid.grid.env import make_config_env
from ace_hybrid.grid.evaluation import parse_pairs, play_episode
from ace_hybrid.training.checkpoint import load_checkpoint_file
from ace_hybrid.training.policy import SACAgent, load_agent


PLAYS = ("policy", "critic")
"""What the agent plays at a decision: the policy's most likely action, or the critics' greedy one."""


class RecordingAgent(SACAgent):
    """A :class:`SACAgent` (policy alone) that keeps, per decision, p(do nothing), the most likely other action's
    probability, the action played and whether it changes nothing (a line action that leaves the grid as it is:
    reconnecting a connected line, disconnecting a disconnected one; a bus assignment equal to the substation's
    topology)."""

    def __init__(self, env: Any, agent: SACAgent, play: str = "policy") -> None:
        super().__init__(env, agent.sac, agent.actions, agent.features, agent.normalizer,
                         agent.threshold, topk=0)
        if play not in PLAYS:
            raise ValueError(f"play = {play!r} is not one of {', '.join(PLAYS)}")
        self.play = play
        self.records: list[tuple[float, float, int, bool]] = []
        self._obs: Any = None

    def decide(self, observation: Any) -> Any:
        self._obs = observation
        return super().decide(observation)

    def most_likely(self, x: np.ndarray, mask: np.ndarray) -> int:
        # PolicyAgent.decide asks this at each decision (topk = 0): record, then play as the deployed agent does
        # (or the critics' greedy action).
        probs = self.policy_probs(x, mask)
        played = super().most_likely(x, mask) if self.play == "policy" else int(np.argmax(self.sac.q_values(x, mask)))
        changes = self.actions.legal_mask(self._obs, only_changes=True)
        no_op = played != 0 and not changes[played]
        self.records.append((float(probs[0]), float(np.max(probs[1:], initial=0.0)), played, bool(no_op)))
        return played


def summary(records: list[tuple[float, float, int, bool]]) -> str:
    if not records:
        return "no decision"
    p_dn, p_other, played, no_op = (np.asarray(c) for c in zip(*records))
    top = ", ".join(f"{a} x{n}" for a, n in Counter(played.tolist()).most_common(3))
    return (f"{len(records):>5} decisions, acts at {np.mean(played != 0):6.1%} (changing nothing at "
            f"{np.mean(no_op):6.1%}), p(do nothing) {p_dn.mean():.3f} [{p_dn.min():.3f}, {p_dn.max():.3f}], best "
            f"other {p_other.mean():.3f}; played: {top}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint", type=Path, help="a run's checkpoint (best.pt, best-N.pt or checkpoint.pt)")
    p.add_argument("--episodes", type=int_list, default=[0],
                   help="scenario ids, one per seed or one for all, e.g. '0,1' (default 0)")
    p.add_argument("--seeds", type=int_list, default=[200], help="episode seeds, e.g. '200,201' or '200-203'")
    p.add_argument("--max-steps", type=positive_int, default=None, help="cut each episode after this many steps")
    p.add_argument("--play", choices=PLAYS, default="policy",
                   help="play the policy's most likely action (default) or the critics' greedy one")
    args = p.parse_args(argv)
    if not args.checkpoint.is_file():
        p.error(f"checkpoint {args.checkpoint} is not a file")
    scenarios = args.episodes * len(args.seeds) if len(args.episodes) == 1 else args.episodes  # one for every seed
    try:
        pairs = parse_pairs(scenarios, args.seeds)
        # The run's own grid, generator seed and episode starts, as its evaluation had them.
        env = make_config_env(config_from_dict(load_checkpoint_file(args.checkpoint)["config"]))
        agent = RecordingAgent(env, load_agent(args.checkpoint, env, topk=0), args.play)
        every: list[tuple[float, float, int, bool]] = []
        steps, playable = 0, 0
        for scenario, seed in pairs:
            agent.records = []
            result = play_episode(env, agent, scenario, seed, max_steps=args.max_steps)
            every += agent.records
            steps, playable = steps + result.steps_survived, playable + result.max_steps
            survived = f"{result.steps_survived:>5}/{result.max_steps:<5}"
            print(f"({scenario}, {seed}) survived {survived} {summary(agent.records)}")
    except (ValueError, IndexError) as exc:  # a bad pair or file: its message names the value and the range
        p.error(str(exc))
    print(f"all {len(pairs)} episodes: {summary(every)}")
    print(f"survival ({args.play} plays): {steps} of {playable} steps, {steps / max(playable, 1):.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
