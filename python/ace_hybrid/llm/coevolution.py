"""Co-evolution: LoRA fine-tuning of the LLM on its best accepted refinements (ACE, arXiv 2506.02522, Sec. 3.4).

Every ``finetune_every`` accepted refinements, the accepted refinements whose transitions are still in the
validated partition are ranked by improvement r_hat - r and the best ``finetune_pairs`` train the LoRA adapter
(:meth:`~ace_hybrid.llm.backend.LLMBackend.finetune`). The adapter is written under ``adapter_dir/round-<k>`` and
stays loaded: the next proposals come from the fine-tuned model.

The pairs teach content, not a letter. For the "llm" ranker (:func:`content_pairs`) each accepted refinement is shown
under ``orders`` orders of its candidates, the accepted candidate's letter cycling evenly over the positions; for the
"judge" ranker (:func:`judge_pairs`) each candidate the simulator validated is a pair of its own, GOOD or BAD as it
was judged, the two answers in equal numbers; a judge round takes the refinements since the last round, accepted or
not (``ace.label_candidates`` has the simulator validate every candidate shown, so each gives both answers), and
trains on each once. A target that is
always the same letter teaches the letter: the embedded model chose A on every problem, the actor then accepted
the A's that validated, and a round on those pairs lowered the loss without changing a single choice.

Measuring what fine-tuning does: the first ``probe_size`` bad transitions are set aside as a probe (the actor never
refines them, so they are never trained on). Before and after each round the LLM makes one proposal per probe problem
(its first choice, no feedback; each problem in its own fixed shuffled order, the same before and after) and each is
validated in the simulator: the acceptance rate on identical problems, before against after, is what the ACE paper
reports as its LLM's own decisions improving (by about 11%). Eight problems cannot separate anything; given an
:class:`~ace_hybrid.llm.exam.Exam` (``ace.exam``), the model also answers a fixed set of labelled held-out problems
before the first round and after every round, beside the controls that read only positions and the simulation
ranker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ace_hybrid.llm.actor import PolicyActor, Refinement
from ace_hybrid.llm.backend import LLMBackend, LLMError
from ace_hybrid.llm.exam import Exam
from ace_hybrid.llm.rankers import LABELS, VERDICTS, ChoiceProblem

__all__ = ["TARGETS", "CoEvolution", "ProbeProblem", "content_pairs", "judge_pairs"]

TARGETS = ("letter", "judge")
"""What a round teaches: the right candidate's letter (the "llm" ranker) or the verdict on each candidate ("judge")."""


def content_pairs(examples: Sequence[tuple[ChoiceProblem, int]], orders: int, seed: int
                  ) -> list[tuple[list[dict[str, str]], str]]:
    """(prompt, label) pairs that teach which candidate is right: each (problem, right candidate) is rendered under
    ``orders`` orders, the right candidate put at positions 0, 1, 2, ... in turn over all the pairs (so every
    letter is the target about equally often) and the other candidates shuffled (seeded)."""
    if orders < 1:
        raise ValueError(f"orders = {orders} out of range [1, 26]")
    rng = np.random.default_rng(seed)
    out, turn = [], 0
    for problem, right in examples:
        n = len(problem.texts)
        if not 0 <= right < n:
            raise ValueError(f"right candidate {right} out of range [0, {n})")
        for _ in range(orders):
            others = [i for i in rng.permutation(n).tolist() if i != right]
            position = turn % n
            turn += 1
            order = others[:position] + [right] + others[position:]
            out.append((problem.reordered(order).prompt(), LABELS[position]))
    return out


def judge_pairs(examples: Sequence[tuple[ChoiceProblem, Sequence[tuple[int, bool]]]], seed: int
                ) -> list[tuple[list[dict[str, str]], str]]:
    """(judging prompt, "GOOD" | "BAD") pairs from the simulator's verdicts on candidates (position in the problem,
    accepted); the more frequent answer is subsampled (seeded) to the count of the other, so that no answer can be
    learnt as a constant, unless one of them is missing altogether."""
    rng = np.random.default_rng(seed)
    good = [(p, k) for p, verdicts in examples for k, ok in verdicts if ok]
    bad = [(p, k) for p, verdicts in examples for k, ok in verdicts if not ok]
    if good and bad:
        n = min(len(good), len(bad))
        good, bad = ([side[i] for i in sorted(rng.choice(len(side), n, replace=False))] for side in (good, bad))
    pairs = [(p.judge_prompt(k), VERDICTS[0]) for p, k in good] + [(p.judge_prompt(k), VERDICTS[1]) for p, k in bad]
    return [pairs[i] for i in rng.permutation(len(pairs))]


@dataclass
class ProbeProblem:
    """A bad transition kept for measuring the LLM (its snapshot stays alive; not saved in checkpoints)."""

    snapshot: Any
    obs: Any
    rl_action: int
    q_values: np.ndarray | None
    order_seed: int = 0
    """Seed of the order its candidates are shown in (the same before and after a round)."""


class CoEvolution:
    """Collects refinements, fine-tunes the backend on schedule and measures it on the probe and the exam.

    Parameters
    ----------
    backend : LLMBackend
        Must have ``supports_finetune`` (else :meth:`due` is always False and the reason is in :attr:`disabled`).
    every : int
        Accepted refinements between fine-tuning rounds.
    n_pairs : int
        Accepted refinements per round.
    orders : int
        Orders each refinement is shown under (:func:`content_pairs`).
    target : {"letter", "judge"}
        What the pairs teach (:data:`TARGETS`): the ranker's own question.
    seed : int
        Seed of those orders.
    adapter_dir : Path
        Where each round's adapter is written.
    probe_size : int
        Probe problems to collect (0: no probe).
    exam : Exam, optional
        Labelled held-out problems scored before the first round and after each one.
    """

    def __init__(self, backend: LLMBackend, *, every: int, n_pairs: int, adapter_dir: Path, probe_size: int,
                 orders: int = 2, seed: int = 0, target: str = "letter", exam: Exam | None = None) -> None:
        if target not in TARGETS:
            raise ValueError(f"target = {target!r} is invalid; valid: {' | '.join(TARGETS)}")
        if every < 1 or n_pairs < 1 or probe_size < 0 or orders < 1:
            raise ValueError(f"every = {every}, n_pairs = {n_pairs}, probe_size = {probe_size}, orders = {orders}: "
                             "need every >= 1, n_pairs >= 1, probe_size >= 0, orders >= 1")
        self.backend, self.every, self.n_pairs = backend, int(every), int(n_pairs)
        self.orders, self.seed, self.target = int(orders), int(seed), target
        self.adapter_dir, self.probe_size = Path(adapter_dir), int(probe_size)
        self.exam = exam
        self.disabled = None if getattr(backend, "supports_finetune", False) else (
            f"backend {getattr(backend, 'name', '?')!r} cannot fine-tune")
        self.records: list[dict[str, Any]] = []
        """Accepted refinements: problem (:meth:`ChoiceProblem.to_dict`), choice (the accepted candidate's position
        in it), improvement, handle (in the validated partition)."""
        self.since_last = 0
        self.history: list[dict[str, Any]] = []
        """One entry per fine-tuning round (saved with checkpoints)."""
        self.adapter: str | None = None
        self.probes: list[ProbeProblem] = []

    # ------------------------------------------------------------------ collecting

    def wants_probe(self) -> bool:
        return len(self.probes) < self.probe_size

    def add_probe(self, problem: ProbeProblem) -> None:
        problem.order_seed = self.seed * 1000 + len(self.probes)
        self.probes.append(problem)

    @staticmethod
    def as_record(refinement: Refinement, handle: int = -1) -> dict[str, Any]:
        """What :meth:`record` keeps of a refinement (plain values, for checkpoints): an accepted one with its
        problem, choice and ``handle``, or (the judge's pairs) one that was not accepted, its verdicts only."""
        first = refinement.first_problem or refinement.problem
        if first is None or not refinement.verdicts:
            raise ValueError("only refinements the ranker took part in (with their problem and verdicts) can be "
                             "recorded")
        if refinement.accepted:
            if refinement.problem is None or refinement.choice is None:
                raise ValueError("an accepted refinement is recorded with its problem and choice")
            problem, choice = refinement.problem.to_dict(), int(refinement.choice)
        else:
            problem, choice = None, None
        return {"problem": problem, "choice": choice, "first_problem": first.to_dict(),
                "verdicts": [[int(k), bool(ok)] for k, ok in refinement.verdicts],
                "improvement": float(refinement.improvement if refinement.accepted else 0.0), "handle": int(handle)}

    def keeps(self, refinement: Refinement) -> bool:
        """Whether :meth:`record` keeps ``refinement``: one the ranker took part in (doing nothing accepted before
        any round has no problem), accepted, or with verdicts for the judge."""
        if (refinement.first_problem or refinement.problem) is None or not refinement.verdicts:
            return False
        return refinement.accepted or self.target == "judge"

    def record(self, refinement: Refinement, handle: int = -1) -> None:
        """Keep a refinement (:meth:`keeps`): an accepted one is stored in the validated partition under ``handle``;
        one that was not accepted is kept for its verdicts (the judge's pairs). Each kept one counts towards the
        next round (with the "llm" and "lac" rankers only accepted ones are kept)."""
        if self.keeps(refinement):
            self.records.append(self.as_record(refinement, handle))
            self.since_last += int(refinement.accepted or self.target == "judge")

    def due(self) -> bool:
        return self.disabled is None and self.since_last >= self.every

    # ------------------------------------------------------------------ one round

    def best_pairs(self, replay: Any) -> list[tuple[list[dict[str, str]], str]]:
        """A round's pairs. "judge": the verdicts of the refinements recorded since the last round (the most recent
        ``n_pairs``; each is trained on once, as the offline curve trained on a stream of new problems).
        "letter": the content pairs (:func:`content_pairs`) of the ``n_pairs`` live records with the largest
        improvement (records whose transition left the buffer are dropped for good)."""
        seed = self.seed + len(self.history)
        if self.target == "judge":
            fresh, self.records = self.records[-self.n_pairs:], []
            return judge_pairs([(ChoiceProblem.from_dict(r["first_problem"]), r["verdicts"]) for r in fresh], seed)
        live = []
        for rec in self.records:
            try:
                replay.get(np.array([rec["handle"]], dtype=np.int64))
            except IndexError:
                continue
            live.append(rec)
        self.records = live
        best = sorted(live, key=lambda r: -r["improvement"])[: self.n_pairs]
        return content_pairs([(ChoiceProblem.from_dict(r["problem"]), r["choice"]) for r in best], self.orders, seed)

    def probe(self, actor: PolicyActor, may_call: Callable[[], bool]) -> dict[str, float]:
        """The LLM's first choice on every probe problem, validated: acceptance rate, mean improvement, and the
        share of the most chosen position (1.0: it answers by position).

        The actor's counters are left as they were (a probe is a measurement, not training)."""
        saved = actor.stats
        actor.stats = type(saved)()
        accepted, gains, positions, asked = 0, [], [], 0
        try:
            for p in self.probes:
                if not may_call():
                    break
                r = actor.refine(p.snapshot, p.obs, p.rl_action, q_values=p.q_values, max_rounds=1,
                                 order_seed=p.order_seed)
                asked += 1
                accepted += int(r.accepted)
                positions += r.positions[:1]
                if r.baseline is not None and r.rounds:
                    gains.append(r.improvement if r.accepted else 0.0)
        finally:
            actor.stats = saved
        top = max(np.bincount(positions)) / len(positions) if positions else float("nan")
        return {"asked": asked, "acceptance": accepted / asked if asked else float("nan"),
                "mean_improvement": float(np.mean(gains)) if gains else float("nan"),
                "top_position_share": float(top)}

    def finetune(self, replay: Any, actor: PolicyActor, may_call: Callable[[], bool], env_steps: int,
                 lora: dict[str, Any] | None = None) -> dict[str, Any]:
        """One round: probe, fine-tune on the best pairs, save the adapter, probe again. Never raises LLMError."""
        self.since_last = 0
        entry: dict[str, Any] = {"round": len(self.history) + 1, "env_steps": env_steps}
        started = time.perf_counter()
        records = len(self.records)
        pairs = self.best_pairs(replay)
        entry["pairs"], entry["refinements"] = len(pairs), min(records, self.n_pairs)
        if self.probes:
            entry["probe_before"] = self.probe(actor, may_call)
        if self.exam is not None and not self.history:
            self._sit_exam(entry, actor, "exam_before")
        try:
            stats = self.backend.finetune(pairs, **(lora or {}))
            directory = self.adapter_dir / f"round-{entry['round']:03d}"
            self.backend.save_adapter(directory)
            self.adapter = str(directory)
            entry.update(steps=stats.steps, loss_first=stats.losses[0], loss_last=stats.losses[-1],
                         adapter=self.adapter)
        except LLMError as exc:
            entry["error"] = str(exc)
        if self.probes and "error" not in entry:
            entry["probe_after"] = self.probe(actor, may_call)
        if self.exam is not None and "error" not in entry:
            self._sit_exam(entry, actor)
        entry["seconds"] = time.perf_counter() - started
        self.history.append(entry)
        return entry

    def _sit_exam(self, entry: dict[str, Any], actor: PolicyActor, key: str = "exam_after") -> None:
        """The exam with the model as it is now, into ``entry[key]`` (after a round: paired with the untrained
        model's answers, which the first round's entry holds); an LLM error is recorded, not raised."""
        started = time.perf_counter()
        first = self.history[0] if self.history else entry
        untrained = first.get("exam_before", {}).get("per_problem") if key == "exam_after" else None
        try:
            entry[key] = self.exam.sit(actor.ranker, untrained=untrained)
        except LLMError as exc:
            entry[f"{key}_error"] = str(exc)
        entry[f"{key}_seconds"] = time.perf_counter() - started

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {"records": self.records, "since_last": self.since_last, "history": self.history,
                "adapter": self.adapter}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the counters and reload the last adapter into the backend (probe problems start over).

        The adapter is looked for by its name in ``adapter_dir`` only, wherever the state says it was written: a
        checkpoint cannot point the backend at other files, and a run directory can be moved."""
        self.records, self.since_last = list(state["records"]), int(state["since_last"])
        self.history, self.adapter = list(state["history"]), state["adapter"]
        if self.adapter is not None:
            self.adapter = str(self.adapter_dir / Path(self.adapter).name)
            if not Path(self.adapter).is_dir():
                raise FileNotFoundError(f"the checkpoint names the LoRA adapter {self.adapter}, which is missing")
            self.backend.load_adapter(self.adapter)
