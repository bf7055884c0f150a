"""What the LLM does inside a training run (ACE): the policy actor, the value critic and co-evolution.

The roles themselves live in :mod:`ace_hybrid.llm` and take only the values they need; this module wires them to a
:class:`~ace_hybrid.training.run.Run`. The training loop (:mod:`ace_hybrid.training.loop`) calls three hooks:

* :meth:`LLMInLoop.wants_snapshot` at each decision: whether to keep ``env.copy()`` of the state before the RL action
  (only while the actor is on and the call budget is not spent);
* :meth:`LLMInLoop.after_store` after each stored transition: a bad one (:func:`is_bad`) goes to the actor (or,
  first, to co-evolution's probe set); an accepted proposal goes to the LLM partition, and co-evolution fine-tunes when
  enough have been accepted;
* :meth:`LLMInLoop.after_episode` after each training episode: the value critic, on its schedule.

One budget (``ace.max_llm_calls``) caps the LLM calls of the actor and the critic: the critic has a reserved share
(``ace.critic_share``), the actor the rest, paced over the run (``ace.pace_budget``). Co-evolution's probe calls are a measurement, counted apart (``probe_calls``) and
never refused. Nothing here lets an LLM failure stop
training: backends raise :class:`~ace_hybrid.llm.backend.LLMError` only, and each role counts and skips it.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from typing import Any

import numpy as np

from ace_hybrid.config import ACEConfig
from ace_hybrid.grid.text import LineEndpoints
from ace_hybrid.llm import make_backend
from ace_hybrid.llm.actor import ActorStats, PolicyActor, Refinement
from ace_hybrid.llm.coevolution import CoEvolution, ProbeProblem
from ace_hybrid.llm.critic import ValueCritic
from ace_hybrid.training.run import Pending, Run

__all__ = ["REFINEMENTS_LOG", "LLMInLoop", "attach_llm"]

REFINEMENTS_LOG = "refinements.jsonl"
"""One line per transition the LLM actor looked at (ACE runs)."""

log = logging.getLogger(__name__)


def is_bad(p: Pending, ace: ACEConfig) -> bool:
    """A transition that really went wrong: an overload (max rho >= ``ace.bad_rho``) or a blackout inside it, or a
    reward below ``ace.r_bar`` (see :class:`~ace_hybrid.config.ACEConfig`)."""
    return p.blackout or p.max_rho >= ace.bad_rho or p.reward < ace.r_bar


def attach_llm(run: Run) -> None:
    """Give ``run`` its LLM part (``run.llm``) when ``llm.backend`` is not "none"."""
    if run.cfg.llm.backend != "none":
        run.llm = LLMInLoop(run)


class LLMInLoop:
    """The LLM side of a run (built only when ``llm.backend`` is not "none")."""

    def __init__(self, run: Run) -> None:
        cfg, ace = run.cfg, run.cfg.ace
        started = time.perf_counter()
        self.backend = make_backend(cfg.llm)
        self.load_seconds = time.perf_counter() - started
        self.ace = ace
        # Read at call time: restore() replaces run.counters, and --resume may change the budget.
        self._progress = lambda: (run.counters.env_steps, run.cfg.train.total_env_steps)
        self.calls = 0
        self.role_calls = {"actor": 0, "critic": 0}
        self.probe_calls = 0
        self.seconds = 0.0
        self.actor = None
        if ace.actor:
            self.actor = PolicyActor(
                self.backend, run.actions, LineEndpoints.from_env(run.env), reward_fn=run.step_reward,
                threshold=cfg.env.threshold, candidates=ace.candidates, max_rounds=ace.max_rounds,
                validation_steps=ace.validation_steps, min_improvement=ace.min_improvement,
                min_rho_drop=ace.min_rho_drop, ranker=ace.ranker,
                lac_alpha=ace.lac_alpha, seed=cfg.train.seed)
        self.critic = None
        if ace.critic:
            n_line = int(run.env.n_line)
            self.critic = ValueCritic(self.backend, ace, describe_action=run.actions.describe,
                                      max_rho=lambda raw: np.asarray(raw)[:, :n_line].max(axis=1))
        self.critic_totals = {"rounds": 0, "trajectories": 0, "calls": 0, "malformed": 0, "errors": 0,
                              "adjusted_steps": 0, "total_abs_adjustment": 0.0}
        self.coevo = None
        if ace.coevolve and self.actor is not None:
            self.coevo = CoEvolution(self.backend, every=ace.finetune_every, n_pairs=ace.finetune_pairs,
                                     adapter_dir=run.dir / "adapters", probe_size=ace.probe_size)
        if self.coevo is not None and self.coevo.disabled:
            log.warning("co-evolution is off for this run: %s", self.coevo.disabled)
        self.lora = {"rank": cfg.llm.lora_rank, "alpha": cfg.llm.lora_alpha, "lr": cfg.llm.lora_lr,
                     "epochs": cfg.llm.lora_epochs, "batch_size": cfg.llm.lora_batch_size}

    # ------------------------------------------------------------------ budget

    def _limit(self, role: str) -> int:
        """Calls ``role`` ("actor" or "critic") may have made by now: the critic's share of the budget is reserved
        for it (``ace.critic_share``) and unpaced (it runs on a schedule); the actor's paced rest."""
        total = self.ace.max_llm_calls
        critic = int(total * self.ace.critic_share) if self.critic is not None else 0
        if role == "critic":
            return critic
        limit = total - critic
        if self.ace.pace_budget:
            t, steps = self._progress()
            limit = limit * (steps + 9 * min(t, steps)) // (10 * steps)  # limit * (0.1 + 0.9 t / T), in integers
        return limit

    def budget_left(self, role: str = "actor") -> bool:
        """Whether ``role`` may make a call now (see ``ace.max_llm_calls``, ``ace.critic_share``, ``ace.pace_budget``)."""
        return self.ace.max_llm_calls == 0 or self.role_calls[role] < self._limit(role)

    def may_call(self, role: str = "actor") -> bool:
        """Take one call from ``role``'s budget; False when it is spent."""
        if not self.budget_left(role):
            return False
        self.role_calls[role] += 1
        self.calls += 1
        return True

    def may_call_critic(self) -> bool:
        return self.may_call("critic")

    def count_probe_call(self) -> bool:
        """Probe calls measure the LLM (2 x probe_size per fine-tuning round): counted apart and never refused, so
        this only counts and always allows (True)."""
        self.probe_calls += 1
        return True

    # ------------------------------------------------------------------ hooks

    def wants_snapshot(self) -> bool:
        return self.actor is not None and (not self.actor.ranker.uses_llm or self.budget_left())

    def after_store(self, run: Run, p: Pending) -> dict[str, float] | None:
        """Hand a bad transition to the probe set or the actor; returns metrics to log when something happened."""
        snapshot, p.snapshot = p.snapshot, None
        if snapshot is None:
            return None
        keep = False
        try:
            if not is_bad(p, self.ace) or self.actor is None or (self.actor.ranker.uses_llm and not self.budget_left()):
                return None
            started = time.perf_counter()
            x = run.normalizer(p.obs)
            q = run.sac.q_values(x, run.actions.legal_mask(p.grid_obs))
            if self.coevo is not None and self.coevo.wants_probe():
                self.coevo.add_probe(ProbeProblem(snapshot, p.grid_obs, p.action, q))
                keep = True
                return None
            # One call of the budget per LLM round; a ranker without the LLM (e.g. "sim") is not budgeted: a
            # refinement costs only its validation rollouts (about 0.2 s).
            ref = self.actor.refine(snapshot, p.grid_obs, p.action, q_values=q, may_call=self.may_call)
            self._log_refinement(run, p, ref)
            if ref.accepted:
                r = ref.rollout
                handle = run.replay.add_llm(p.obs, ref.action, r.reward, run.features(r.obs), r.blackout, r.ended,
                                            p.episode, p.decision, ref.improvement, True)
                if self.coevo is not None:
                    self.coevo.record(ref, handle)
                    if self.coevo.due():
                        entry = self.coevo.finetune(run.replay, self.actor, self.count_probe_call, run.counters.env_steps,
                                                    self.lora)
                        run.logger.write(run.counters.env_steps, _coevo_metrics(entry))
            self.seconds += time.perf_counter() - started
            return self.metrics()
        finally:
            if not keep:
                snapshot.close()

    def _log_refinement(self, run: Run, p: Pending, ref: Refinement) -> None:
        describe = run.actions.describe
        line = {"env_steps": run.counters.env_steps, "episode": p.episode, "decision": p.decision,
                "reward": p.reward, "max_rho": p.max_rho, "blackout": p.blackout, "ranker": self.ace.ranker,
                "rl_action": describe(p.action), "rounds": ref.rounds, "calls": ref.calls,
                "accepted": ref.accepted, "error": ref.error,
                "baseline_reward": ref.baseline.reward if ref.baseline is not None else None}
        if ref.accepted:
            line.update(action=describe(ref.action), r_hat=ref.rollout.reward, improvement=ref.improvement)
        with (run.dir / REFINEMENTS_LOG).open("a") as f:
            f.write(json.dumps(line) + "\n")

    def after_episode(self, run: Run) -> dict[str, float] | None:
        """The value critic's round, when it is on and due."""
        c = run.counters
        if (self.critic is None or c.env_steps < self.ace.critic_start or c.episodes % self.ace.critic_every
                or not self.budget_left("critic")):
            return None
        started = time.perf_counter()
        report = self.critic.run(run.replay, may_call=self.may_call_critic)
        self.seconds += time.perf_counter() - started
        self.critic_totals["rounds"] += 1
        for key in ("trajectories", "calls", "malformed", "errors", "adjusted_steps", "total_abs_adjustment"):
            self.critic_totals[key] += getattr(report, key)
        return {**self.metrics(), **{f"critic/{k}": float(v) for k, v in self.critic_totals.items()}}

    def close(self) -> None:
        """Release the probe snapshots (grid2op environments)."""
        if self.coevo is not None:
            for p in self.coevo.probes:
                p.snapshot.close()
            self.coevo.probes.clear()

    # ------------------------------------------------------------------ reporting and checkpoints

    def metrics(self) -> dict[str, float]:
        s = self.actor.stats if self.actor is not None else ActorStats()
        return {"llm/calls": self.calls, "llm/probe_calls": self.probe_calls, "llm/bad_transitions": s.bad_transitions, "llm/accepted": s.accepted,
                "llm/rounds": s.rounds, "llm/acceptance_rate": s.acceptance_rate,
                "llm/first_choice_accepted": s.first_choice_accepted, "llm/errors": s.errors + self.critic_totals[
                    "errors"], "llm/seconds": self.seconds}

    def summary(self) -> dict[str, Any]:
        s = self.actor.stats if self.actor is not None else ActorStats()
        history = self.coevo.history if self.coevo is not None else []
        return {"calls": self.calls, "actor_calls": s.calls, "critic_calls": self.critic_totals["calls"],
                "probe_calls": self.probe_calls,
                "bad_transitions": s.bad_transitions, "accepted": s.accepted, "rounds": s.rounds,
                "first_choice_accepted": s.first_choice_accepted, "acceptance_rate": s.acceptance_rate,
                "errors": s.errors + self.critic_totals["errors"], "error_kinds": dict(s.error_kinds),
                "finetunes": len(history), "coevolution": history,
                "coevolution_off": self._coevolution_off(), "critic": dict(self.critic_totals),
                "seconds": self.seconds, "llm_seconds": s.llm_seconds, "validate_seconds": s.validate_seconds,
                "load_seconds": self.load_seconds, "backend": getattr(self.backend, "stats", {})}

    def _coevolution_off(self) -> str | None:
        """Why co-evolution does not run (None when it does)."""
        if self.coevo is not None:
            return self.coevo.disabled
        return "ace.coevolve is false" if not self.ace.coevolve else "it needs the actor (ace.actor is false)"

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "role_calls": dict(self.role_calls), "probe_calls": self.probe_calls,
                "seconds": self.seconds,
                "actor": asdict(self.actor.stats) if self.actor is not None else None,
                "critic": self.critic.state_dict() if self.critic is not None else None,
                "critic_totals": dict(self.critic_totals),
                "coevo": self.coevo.state_dict() if self.coevo is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls, self.seconds = int(state["calls"]), float(state["seconds"])
        self.role_calls.update(state["role_calls"])
        self.probe_calls = int(state["probe_calls"])
        if self.actor is not None and state["actor"] is not None:
            self.actor.stats = ActorStats(**state["actor"])
        if self.critic is not None and state["critic"] is not None:
            self.critic.load_state_dict(state["critic"])
        self.critic_totals.update(state["critic_totals"])
        if self.coevo is not None and state["coevo"] is not None:
            self.coevo.load_state_dict(state["coevo"])


def _coevo_metrics(entry: dict[str, Any]) -> dict[str, float]:
    out = {"coevo/round": float(entry["round"]), "coevo/pairs": float(entry["pairs"]),
           "coevo/seconds": float(entry["seconds"])}
    for key in ("loss_first", "loss_last"):
        if key in entry:
            out[f"coevo/{key}"] = float(entry[key])
    for when in ("probe_before", "probe_after"):
        if when in entry:
            out[f"coevo/{when}_acceptance"] = float(entry[when]["acceptance"])
    return out
