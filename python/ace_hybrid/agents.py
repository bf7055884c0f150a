"""``make_agent``: the one place agents are built, from the names the command line and experiment tables use.

============================  ======================================================================
name                          agent
============================  ======================================================================
``do-nothing``                does nothing in danger (:class:`~ace_hybrid.grid.agents.DoNothingAgent`)
``reco``                      reconnects the best line (:class:`~ace_hybrid.grid.agents.RecoPowerlineAgent`)
``greedy``                    simulates ``budget`` catalog actions (:class:`~ace_hybrid.grid.agents.GreedyExpertAgent`)
``checkpoint:PATH``           a trained SAC or ACE policy (:func:`ace_hybrid.training.policy.load_agent`)
``maskable-ppo:RUN_DIR``      a trained sb3-contrib MaskablePPO policy (:func:`ace_hybrid.training.ppo.load_ppo_agent`;
                              the ``rl`` extra)
``lac``                       the LLM-only LAC agent of ``cfg.llm`` (:mod:`ace_hybrid.llm.lac_agent`)
``random-candidate``          a random one of the LAC agent's candidates, its control
                              (:class:`~ace_hybrid.grid.agents.RandomCandidateAgent`)
============================  ======================================================================

The names are the experiment files' row kinds too (one spelling: lowercase, hyphenated). Every agent decides only
in danger (max rho >= ``threshold``); a fixed safe rule acts otherwise.
"""

from __future__ import annotations

import copy
from typing import Any

from ace_hybrid.config import Config, LLMConfig
from ace_hybrid.grid.agents import (DoNothingAgent, GreedyExpertAgent, RandomCandidateAgent, RecoPowerlineAgent,
                                    RuleAgent)

__all__ = ["AGENT_NAMES", "RENAMED_AGENTS", "make_agent"]

AGENT_NAMES = ("do-nothing", "reco", "greedy", "checkpoint:PATH", "maskable-ppo:RUN_DIR", "lac", "random-candidate")
"""The names :func:`make_agent` accepts (``checkpoint:`` followed by a path, ``maskable-ppo:`` by a run directory)."""
RENAMED_AGENTS = {"donothing": "do-nothing", "llm_lac": "lac"}
"""Spellings of the unreleased 0.1.0 -> the one name now; an old spelling is a ValueError that names the new one."""


def make_agent(spec: str, env: Any, *, threshold: float | None = None, budget: int = 30, topk: int | None = None,
               cfg: Config | None = None, shortlist: int | None = None, among: int | None = None,
               sure: float | None = None) -> RuleAgent:
    """An agent acting in ``env`` from its name (see the module table).

    Parameters
    ----------
    spec
        One of :data:`AGENT_NAMES`.
    env
        The grid2op environment the agent acts in.
    threshold
        Danger threshold on max rho; None: ``cfg.env.threshold`` (0.9 by default), and for a trained policy its run's
        own ``env.deploy_threshold`` (0: its ``env.threshold``).
    budget
        Simulations per decision of the greedy expert.
    topk
        A trained policy's top-k simulation check (None: the run's own ``env.deploy_topk``).
    shortlist
        How many of the check's k come from the heuristic shortlist (None: the run's own ``env.deploy_shortlist``).
    among
        A trained policy alone: it chooses among do nothing and ``among - 1`` of the heuristic shortlist (None: the
        run's own ``env.deploy_among``; 0: among every legal action).
    sure
        A trained policy alone: it does nothing where its most likely action's probability is below ``sure`` (None:
        the run's own ``env.deploy_sure``; 0: it always acts).
    cfg
        The configuration the LAC agent takes its LLM from (default: the embedded model).
    """
    given = threshold  # a trained policy's own run says how it is deployed where this is None
    if threshold is None:
        threshold = cfg.env.threshold if cfg is not None else 0.9
    if spec in RENAMED_AGENTS:
        raise ValueError(f"agent {spec!r} is now spelled {RENAMED_AGENTS[spec]!r}; valid: {', '.join(AGENT_NAMES)}")
    if spec == "do-nothing":
        return DoNothingAgent(env.action_space, threshold)
    if spec == "reco":
        return RecoPowerlineAgent(env.action_space, threshold)
    if spec == "greedy":
        from ace_hybrid.grid.catalog import ActionCatalog

        return GreedyExpertAgent(env.action_space, ActionCatalog.for_env(env), budget=budget, threshold=threshold)
    if spec == "random-candidate":
        from ace_hybrid.grid.catalog import ActionCatalog

        cfg = cfg or Config()
        return RandomCandidateAgent(env.action_space, ActionCatalog.for_env(env), candidates=cfg.ace.candidates,
                                    threshold=threshold, seed=cfg.train.seed)
    if spec.startswith("checkpoint:"):
        from ace_hybrid.training.policy import load_agent

        return load_agent(spec.split(":", 1)[1], env, topk, shortlist, among, sure, given)
    if spec.startswith("maskable-ppo:"):
        from ace_hybrid.training.ppo import load_ppo_agent

        return load_ppo_agent(spec.split(":", 1)[1], env, topk, shortlist, among, sure, given)
    if spec == "lac":
        from ace_hybrid.llm.lac_agent import make_lac_agent

        cfg = copy.deepcopy(cfg) if cfg is not None else Config(llm=LLMConfig(backend="smollm2"))
        cfg.env.threshold = threshold
        return make_lac_agent(env, cfg)
    raise ValueError(f"unknown agent {spec!r}; valid: {', '.join(AGENT_NAMES)}")
