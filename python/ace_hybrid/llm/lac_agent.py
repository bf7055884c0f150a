"""LAC as an LLM-only agent (the "lac" row of the experiment table).

In a danger state the agent shows the language model a short list of legal candidates -- do nothing (catalog
index 0) and the catalog's heuristic shortlist (:meth:`ActionCatalog.shortlist`), in a seeded shuffled order so
that neither the shortlist's order nor a tie can decide for the model -- ranks them with LAC
(:class:`~ace_hybrid.llm.lac.LACRanker`: pi_new ∝ pi_LLM exp(alpha Q_LLM), arXiv 2506.06376) over the state text
T_s (:func:`~ace_hybrid.grid.text.describe_state`) and plays the best one, without simulating anything. Outside
danger the safe rule acts, as for every agent (:class:`~ace_hybrid.grid.agents.RuleAgent`). When the model fails
(:class:`LLMError`) the agent does nothing and counts the failure.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ace_hybrid.grid.agents import RuleAgent
from ace_hybrid.grid.text import LineEndpoints, describe_state
from ace_hybrid.llm.backend import LLMBackend, LLMError
from ace_hybrid.llm.lac import LACRanker
from ace_hybrid.llm.rankers import neutral_order

if TYPE_CHECKING:
    from ace_hybrid.config import Config
    from ace_hybrid.grid.catalog import ActionCatalog

__all__ = ["LACAgent", "make_lac_agent"]


class LACAgent(RuleAgent):
    """Plays, in danger, the LAC-ranked best of do nothing and the catalog's shortlist.

    Parameters
    ----------
    env
        The Grid2Op environment (action space and layout).
    backend : LLMBackend
    catalog : ActionCatalog
        The environment's catalog.
    threshold : float
        Danger threshold on max rho.
    candidates : int
        Candidates shown to the model, do nothing included (>= 2).
    alpha : float
        LAC's critic weight (finite, >= 0).
    reduction : {"sum", "mean"}
        How the prior pi_LLM reads a candidate's token log-probabilities: "sum" (sequence probability, which
        favours short texts such as "do nothing") or "mean" (per token, length-neutral).
    seed : int
        Seed of the order the candidates are shown in.

    Attributes
    ----------
    llm_calls : int
        LAC rankings asked for (each is one candidate-scoring pass and one batched GOOD/BAD judging pass).
    llm_errors : int
        Rankings that failed with :class:`LLMError` (the agent then did nothing).
    llm_seconds : float
        Wall-clock time spent in the model.
    last_choice : int
        Catalog index of the latest decision (-1 before the first).
    """

    name = "lac"

    def __init__(
        self,
        env: Any,
        backend: LLMBackend,
        catalog: ActionCatalog,
        *,
        threshold: float = 0.9,
        candidates: int = 8,
        alpha: float = 1.0,
        reduction: str = "sum",
        seed: int = 0,
    ) -> None:
        if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 2:
            raise ValueError(f"candidates = {candidates!r} out of range [2, inf): do nothing and at least one other")
        super().__init__(env.action_space, threshold)
        self.backend = backend
        self.catalog = catalog
        self.candidates = candidates
        self.ranker = LACRanker(backend, alpha=alpha, reduction=reduction)
        self.layout = LineEndpoints.from_env(env)
        self.llm_calls = 0
        self.llm_errors = 0
        self.llm_seconds = 0.0
        self.last_choice = -1
        self.rng = np.random.default_rng(seed)

    def choose(self, observation: Any) -> int:
        """Catalog index of the action LAC picks in ``observation`` (0, do nothing, when the model fails)."""
        shortlist = [int(i) for i in self.catalog.shortlist(observation, self.candidates - 1)]
        if not shortlist:
            return 0  # nothing legal to change: no question worth asking
        indices = [0, *shortlist]
        indices = [indices[i] for i in neutral_order(len(indices), self.rng)]
        texts = [self.catalog.describe(i) for i in indices]
        state = describe_state(observation, self.layout)
        self.llm_calls += 1
        started = time.perf_counter()
        try:
            best = self.ranker.best(state, texts)
        except LLMError:
            self.llm_errors += 1
            return 0
        finally:
            self.llm_seconds += time.perf_counter() - started
        return indices[best]

    def decide(self, observation: Any) -> Any:
        self.last_choice = self.choose(observation)
        return self.catalog.action(self.last_choice)


def make_lac_agent(env: Any, cfg: Config) -> LACAgent:
    """The LLM-only LAC agent of a run configuration.

    Uses ``cfg.llm`` for the backend (:func:`ace_hybrid.llm.make_backend`) and the prior's reduction
    (``llm.reduction``), ``cfg.env.threshold``, ``cfg.ace.candidates`` and ``cfg.ace.lac_alpha``.

    Raises
    ------
    ValueError
        When ``llm.backend`` is "none" (this agent is the language model).
    LLMError
        When the backend cannot start.
    """
    from ace_hybrid.grid.catalog import ActionCatalog
    from ace_hybrid.llm import make_backend

    if cfg.llm.backend == "none":
        raise ValueError("llm.backend = 'none' is invalid for the LLM-only LAC agent: set llm.backend to "
                         "'smollm2', 'transformers' or 'openai'")
    backend = cast(LLMBackend, make_backend(cfg.llm))  # not None: "none" was refused above
    return LACAgent(env, backend, ActionCatalog.for_env(env), threshold=cfg.env.threshold,
                    candidates=cfg.ace.candidates, alpha=cfg.ace.lac_alpha, reduction=cfg.llm.reduction,
                    seed=cfg.train.seed)
