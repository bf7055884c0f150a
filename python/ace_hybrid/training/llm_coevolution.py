"""Co-evolution inside a training run: who owns :class:`~ace_hybrid.llm.coevolution.CoEvolution` when.

Co-evolution is the loop's, except during a fine-tuning round, when the LLM worker has it (probe, LoRA fine-tuning,
probe: :class:`~ace_hybrid.training.llm_jobs.Finetune`). Meanwhile the accepted refinements and probe problems the
loop commits wait here and join it when the round is committed; a checkpoint taken during the round saves the state
from before it plus what waits, so the round runs again after a resume (its probe calls stay spent).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ace_hybrid.config import ACEConfig
from ace_hybrid.llm.actor import Refinement
from ace_hybrid.llm.backend import LLMBackend
from ace_hybrid.llm.coevolution import CoEvolution, ProbeProblem
from ace_hybrid.llm.exam import Exam

__all__ = ["CoEvolutionInLoop", "coevolution_metrics"]


class CoEvolutionInLoop:
    """:class:`CoEvolution` (``core``) with the loop's side of a fine-tuning round in flight on the worker.

    Parameters
    ----------
    backend : LLMBackend
        The run's backend (one that cannot fine-tune leaves co-evolution off: :attr:`disabled` says why).
    ace : ACEConfig
        ``finetune_every``, ``finetune_pairs``, ``probe_size``, ``sft_orders``.
    adapter_dir : Path
        Where each round's adapter is written.
    seed : int
    """

    def __init__(self, backend: LLMBackend, ace: ACEConfig, adapter_dir: Path, seed: int) -> None:
        exam = Exam.load(ace.exam, size=ace.exam_size, show_effects=ace.show_effects,
                         vs_played=ace.effects_vs_played, seed=seed) if ace.exam else None
        self.core = CoEvolution(backend, every=ace.finetune_every, n_pairs=ace.finetune_pairs, adapter_dir=adapter_dir,
                                probe_size=ace.probe_size, orders=ace.sft_orders, seed=seed,
                                target="judge" if ace.ranker == "judge" else "letter", exam=exam)
        self.exam_controls = exam.controls() if exam is not None else {}
        """Each control's accuracy on the exam (the same at every round)."""
        self._before: dict[str, Any] | None = None
        """The state from before the round in flight (None: no round in flight)."""
        self._held_records: list[tuple[Refinement, int]] = []
        self._held_probes: list[ProbeProblem] = []

    @property
    def disabled(self) -> str | None:
        """Why co-evolution cannot run with this backend (None when it can)."""
        return self.core.disabled

    @property
    def history(self) -> list[dict[str, Any]]:
        """One entry per fine-tuning round."""
        return self.core.history

    def wants_probe(self) -> bool:
        """The probe set is not full yet: the next bad transition goes there, not to the actor."""
        return len(self.core.probes) + len(self._held_probes) < self.core.probe_size

    def add_probe(self, probe: ProbeProblem) -> None:
        if self._before is None:
            self.core.add_probe(probe)
        else:
            self._held_probes.append(probe)

    def record(self, ref: Refinement, handle: int = -1) -> None:
        """A refinement (:meth:`CoEvolution.record`): an accepted one is stored in the validated partition under
        ``handle``."""
        if self._before is None:
            self.core.record(ref, handle)
        else:
            self._held_records.append((ref, handle))

    def begin_round(self) -> bool:
        """Whether a fine-tuning round is due now (none in flight); if so it is in flight from here on."""
        if self._before is not None or not self.core.due():
            return False
        c = self.core
        self._before = {"records": list(c.records), "since_last": c.since_last, "history": list(c.history),
                        "adapter": c.adapter}
        return True

    def end_round(self) -> None:
        """The round in flight is committed: what waited joins co-evolution (probes first, then records)."""
        self._before = None
        held_probes, self._held_probes = self._held_probes, []
        for probe in held_probes:
            self.core.add_probe(probe)
        held, self._held_records = self._held_records, []
        for ref, handle in held:
            self.core.record(ref, handle)

    def state_dict(self) -> dict[str, Any]:
        if self._before is None:
            return self.core.state_dict()
        # A fine-tuning round is in flight on the worker: the state from before it, plus what waits for it.
        state = dict(self._before)
        kept = [(ref, handle) for ref, handle in self._held_records if self.core.keeps(ref)]
        state["records"] = [*state["records"], *(CoEvolution.as_record(ref, handle) for ref, handle in kept)]
        state["since_last"] += len(kept)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.core.load_state_dict(state)

    def close(self) -> None:
        """Release the probe problems' snapshots (grid2op environments)."""
        for p in [*self.core.probes, *self._held_probes]:
            p.snapshot.close()
        self.core.probes.clear()
        self._held_probes.clear()


def _control_key(name: str) -> str:
    """A metric name for an exam control (:meth:`~ace_hybrid.llm.exam.Exam.controls`' names are sentences)."""
    for start, key in (("first candidate", "first_candidate"), ("best fixed position", "best_fixed_position"),
                       ("any fixed letter", "random"), ("simulation", "simulation"),
                       ("one-line rule", "below_played")):
        if name.startswith(start):
            return key
    raise ValueError(f"unknown exam control {name!r}")


def coevolution_metrics(entry: dict[str, Any], exam_controls: dict[str, dict[str, float]] | None = None
                        ) -> dict[str, float]:
    """The ``coevo/*`` metrics of one fine-tuning round (an entry of :attr:`CoEvolutionInLoop.history`), with the
    exam's (``coevo/exam_*``: accuracy and interval after the round, its paired differences from the untrained model,
    the best position-only control, the simulation ranker and the one-line rule; the controls' accuracies beside
    them)."""
    out = {"coevo/round": float(entry["round"]), "coevo/pairs": float(entry["pairs"]),
           "coevo/seconds": float(entry["seconds"])}
    for key in ("loss_first", "loss_last"):
        if key in entry:
            out[f"coevo/{key}"] = float(entry[key])
    for when in ("probe_before", "probe_after"):
        if when in entry:
            out[f"coevo/{when}_acceptance"] = float(entry[when]["acceptance"])
            out[f"coevo/{when}_top_position_share"] = float(entry[when]["top_position_share"])
    if "exam_before" in entry:
        out["coevo/exam_untrained_accuracy"] = float(entry["exam_before"]["accuracy"])
    exam = entry.get("exam_after")
    if exam is not None:
        out.update({"coevo/exam_accuracy": exam["accuracy"], "coevo/exam_low": exam["low"],
                    "coevo/exam_high": exam["high"], "coevo/exam_top_position_share": exam["top_position_share"]})
        for name in ("minus_untrained", "minus_best_control", "minus_simulation", "minus_below_played"):
            if name in exam:
                out.update({f"coevo/exam_{name}": exam[name]["mean"], f"coevo/exam_{name}_low": exam[name]["low"],
                            f"coevo/exam_{name}_high": exam[name]["high"]})
    for name, value in (exam_controls or {}).items():
        out[f"coevo/exam_control_{_control_key(name)}"] = float(value["mean"])
    return {k: float(v) for k, v in out.items()}
