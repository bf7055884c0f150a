"""A fixed exam for the LLM: held-out bad transitions whose candidates the simulator has already labelled.

Co-evolution changes the model while a run trains; to see whether a LoRA round taught it anything, the run asks the
same questions after every round (:class:`Exam`). The questions are problems of a labelled set
(``benchmarks/data/coevolution_problems.json.gz``, built by ``benchmarks/bench_coevolution.py --build``): bad
transitions of l2rpn_case14_sandbox and l2rpn_neurips_2020_track1, each with its shortlist of candidates, the state
and each candidate's simulated one-step effect as the actor shows them, and the simulator's validation of each
candidate (``good``). The exam's split is chosen by episode (:func:`split_of`), so its episodes are never the
run's: a run trains on episode seeds from 1,000, the set's episodes are seeded 15,000 on, and its held-out split is
never trained on by the offline curves either.

A first choice is scored without a simulator: the labels say whether the actor would have accepted it. Each problem
is asked with its candidates in a seeded shuffled order (:func:`first_choices`), the same order at every round, so a
model that answers by position scores like a random choice. Beside the model stand the controls that explain a
score without it (:func:`position_controls`: the shortlist's first candidate, its best fixed position, any fixed
letter) and the simulation ranker (the lowest simulated loading, :func:`simulation_choice`).
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ace_hybrid.llm.rankers import CandidateEffect, ChoiceProblem, Ranker, neutral_order, points_vs_played

__all__ = ["BELOW_PLAYED", "EXAM_SPLITS", "PROBLEM_FORMAT", "Exam", "below_played_choice", "bootstrap",
           "choice_problem", "expected_random", "first_choices", "good_rate", "paired", "position_controls",
           "read_problem_set", "select", "split_of"]

PROBLEM_FORMAT = 2
"""Format of the labelled problem sets this module reads."""
EXAM_SPLITS = ("train", "dev", "held-out")
BELOW_PLAYED = "one-line rule: a candidate simulated below what was played"
"""The control :func:`below_played_choice` scores."""


def read_problem_set(path: str | Path) -> dict[str, Any]:
    """The labelled problem set at ``path`` (``.json`` or ``.json.gz``), checked to be of :data:`PROBLEM_FORMAT`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"labelled problem set {path} not found (benchmarks/data/coevolution_problems.json.gz "
                                "is the repository's; benchmarks/bench_coevolution.py --build makes one)")
    data = json.loads(gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text())
    if data.get("format") != PROBLEM_FORMAT:
        raise ValueError(f"{path} holds problems of format {data.get('format')!r}; this version reads format "
                         f"{PROBLEM_FORMAT}: rebuild it with benchmarks/bench_coevolution.py --build")
    return data


def split_of(problem: dict[str, Any]) -> str:
    """held-out: episode seeds ending in 0 or 1; dev: ending in 2; train: the rest (whole episodes each)."""
    last = problem["seed"] % 10
    return "held-out" if last in (0, 1) else "dev" if last == 2 else "train"


def select(problems: list[dict[str, Any]], split: str, limit: int) -> list[dict[str, Any]]:
    """The split's problems that offer a choice, or every k-th of them (k = their number / ``limit``, rounded) up to
    ``limit`` (0: all): the grids follow one another in a set, so each keeps its share."""
    if split not in EXAM_SPLITS:
        raise ValueError(f"split = {split!r} is invalid; valid: {' | '.join(EXAM_SPLITS)}")
    chosen = [p for p in problems if split_of(p) == split and len(p["candidates"]) >= 2]
    return chosen[:: max(1, round(len(chosen) / limit))][:limit] if limit else chosen


def choice_problem(problem: dict[str, Any], show_effects: bool = True, vs_played: bool = False) -> ChoiceProblem:
    """The actor's first question for ``problem``, candidates in the shortlist's order (``vs_played``: each effect
    also compared with what was played, as ``ace.effects_vs_played`` shows it)."""
    effects = tuple(CandidateEffect(float(e[0]), int(e[1]), int(e[2]), bool(e[3])) for e in problem["effects"])
    return ChoiceProblem(problem["state_text"], problem["rl_text"], problem["rl_outcome"], tuple(problem["texts"]),
                         effects, (), show_effects, _played_max_rho(problem) if vs_played else None)


def _played_max_rho(problem: dict[str, Any]) -> float | None:
    """What :func:`ace_hybrid.llm.actor.played_max_rho` gives for the played segment of a labelled problem."""
    if problem["blackout"]:
        return math.inf
    return None if problem["rl_outcome"].startswith("the episode ended") else float(problem["max_rho"])


def first_choices(ranker: Ranker, problems: list[dict[str, Any]], orders: int, *, show_effects: bool = True,
                  vs_played: bool = False, seed: int = 0, desc: str = "first choices") -> tuple[np.ndarray, np.ndarray]:
    """Each problem asked ``orders`` times, its candidates in a seeded shuffled order each time (the same orders for
    every ranker and model: seeds (seed, problem, k)). Returns (chosen, position), both (n_problems, orders) int:
    the chosen candidate's index in the shortlist and the position it stood at (0 = A)."""
    from tqdm.auto import tqdm

    chosen = np.zeros((len(problems), orders), dtype=np.int64)
    position = np.zeros_like(chosen)
    for i, problem in enumerate(tqdm(problems, desc=desc, unit="problem", leave=False)):
        base = choice_problem(problem, show_effects, vs_played)
        for k in range(orders):
            order = neutral_order(len(base.texts), np.random.default_rng([seed, i, k]))
            position[i, k] = ranker.choose(base.reordered(order))
            chosen[i, k] = order[position[i, k]]
    return chosen, position


def good_rate(problems: list[dict[str, Any]], chosen: np.ndarray) -> np.ndarray:
    """(n_problems,) share of each problem's choices that the simulator accepts."""
    return np.array([np.mean([problems[i]["good"][c] for c in row]) for i, row in enumerate(chosen)])


def expected_random(problem: dict[str, Any], rounds: int) -> tuple[float, float]:
    """Exact accept and first-choice rates of a uniformly random order over the problem's candidates."""
    n, g = len(problem["good"]), sum(problem["good"])
    r = min(rounds, n)
    return 1.0 - math.comb(n - g, r) / math.comb(n, r), g / n


def position_controls(problems: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Per-problem first-choice good rates of the rankers that read nothing but positions: the shortlist's first
    candidate, its best fixed position (chosen on these very problems: generous to the control), and any fixed
    letter under the shuffled orders (exactly a random choice, g / n)."""
    n = max(len(p["good"]) for p in problems)  # a problem with fewer candidates: its last one stands in
    by_position = np.array([[float(p["good"][min(k, len(p["good"]) - 1)]) for k in range(n)] for p in problems])
    best = int(np.argmax(by_position.mean(axis=0)))
    return {"first candidate (shortlist order)": by_position[:, 0],
            f"best fixed position (shortlist order: {'ABCDEFGHIJKLMNOPQRSTUVWXYZ'[best]})": by_position[:, best],
            "any fixed letter, shuffled orders (= random)": np.array([expected_random(p, 1)[1] for p in problems])}


def simulation_choice(problems: list[dict[str, Any]]) -> np.ndarray:
    """Per-problem good rate of the simulation ranker's first choice (the lowest simulated max loading; ties share
    the rate of the tied candidates, as the ranker breaks them at random)."""
    out = []
    for p in problems:
        rho = np.array([float(e[0]) for e in p["effects"]])
        tied = np.flatnonzero(rho == rho.min())
        out.append(float(np.mean([p["good"][k] for k in tied])))
    return np.array(out)


def below_played_choice(problems: list[dict[str, Any]]) -> np.ndarray:
    """Per-problem good rate of the one-line rule the words of ``ace.effects_vs_played`` spell out: a uniform choice
    among the candidates simulated below what was played (:func:`points_vs_played`), among all where none is."""
    out = []
    for p in problems:
        played = _played_max_rho(p)
        below = [k for k, e in enumerate(choice_problem(p).effects) if points_vs_played(e, played) < 0]
        out.append(float(np.mean([p["good"][k] for k in below])) if below else expected_random(p, 1)[1])
    return np.array(out)


def bootstrap(values: Any, draws: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """Mean and 95% percentile-bootstrap interval over the first axis."""
    values = np.asarray(values, dtype=np.float64)
    idx = np.random.default_rng(seed).integers(0, len(values), size=(draws, len(values)))
    means = values[idx].mean(axis=1)
    return float(values.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def paired(a: Any, b: Any) -> dict[str, float]:
    """The paired difference a - b over the same problems: mean, low, high (95% bootstrap)."""
    mean, low, high = bootstrap(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    return {"mean": mean, "low": low, "high": high}


@dataclass
class Exam:
    """The same ``problems`` asked at every round; :meth:`sit` scores a model's first choices on them.

    Parameters
    ----------
    problems
        Labelled problems (:func:`select`).
    show_effects
        Show each candidate's simulated effect in the prompt (``ace.show_effects``).
    vs_played
        Compare each shown effect with what was played (``ace.effects_vs_played``).
    seed
        Seed of the shuffled orders.
    """

    problems: list[dict[str, Any]]
    show_effects: bool = True
    seed: int = 0
    vs_played: bool = False

    @classmethod
    def load(cls, path: str | Path, *, split: str = "held-out", size: int = 160, show_effects: bool = True,
             vs_played: bool = False, seed: int = 0) -> Exam:
        """``size`` problems of ``split`` of the set at ``path``, both grids in their shares."""
        if size < 1:
            raise ValueError(f"exam size = {size} is invalid; valid: >= 1")
        problems = select(read_problem_set(path)["problems"], split, size)
        if not problems:
            raise ValueError(f"{path} has no {split} problem with two candidates or more")
        return cls(problems, show_effects, seed, vs_played)

    @property
    def grids(self) -> list[str]:
        return sorted({p["env"] for p in self.problems})

    def controls(self) -> dict[str, dict[str, float]]:
        """Each control's accuracy with its interval: the position-only ones and the simulation ranker."""
        rates = {**position_controls(self.problems), "simulation ranker (lowest simulated loading)":
                 simulation_choice(self.problems), BELOW_PLAYED: below_played_choice(self.problems)}
        return {name: dict(zip(("mean", "low", "high"), bootstrap(r))) for name, r in rates.items()}

    def per_grid(self, rates: Any) -> dict[str, float]:
        """Per-problem rates (in the exam's order) averaged over each grid's problems."""
        rates = np.asarray(rates, dtype=np.float64)
        envs = np.array([p["env"] for p in self.problems])
        return {grid: float(rates[envs == grid].mean()) for grid in self.grids}

    def best_position_control(self) -> np.ndarray:
        """Per-problem rates of the best position-only control on these problems."""
        return max(position_controls(self.problems).values(), key=lambda r: float(r.mean()))

    def sit(self, ranker: Ranker, untrained: list[float] | None = None) -> dict[str, Any]:
        """The ranker's first choice on every problem: its accuracy with an interval, the per-problem rates, the
        share of the most chosen position, and its paired differences from the best position-only control, the
        simulation ranker, the one-line rule and (given its per-problem rates) the untrained model."""
        chosen, position = first_choices(ranker, self.problems, 1, show_effects=self.show_effects,
                                         vs_played=self.vs_played, seed=self.seed, desc="exam")
        rates = good_rate(self.problems, chosen)
        mean, low, high = bootstrap(rates)
        counts = np.bincount(position.ravel(), minlength=2)
        out: dict[str, Any] = {"problems": len(rates), "accuracy": mean, "low": low, "high": high,
                               "per_problem": rates.tolist(), "per_grid": self.per_grid(rates),
                               "top_position_share": float(counts.max() / counts.sum()),
                               "minus_best_control": paired(rates, self.best_position_control()),
                               "minus_simulation": paired(rates, simulation_choice(self.problems)),
                               "minus_below_played": paired(rates, below_played_choice(self.problems))}
        if untrained is not None:
            out["minus_untrained"] = paired(rates, untrained)
        return out
