"""The LLM-only LAC agent: legal catalog actions from a real tiny model, the choice a backend prefers, the
do-nothing fallback on model failures, and the factory from a run configuration."""

from __future__ import annotations

import os
import pathlib
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest

pytest.importorskip("grid2op")
from ace_hybrid.config import Config
from ace_hybrid.grid.evaluation import evaluate
from ace_hybrid.grid.catalog import ActionCatalog
from ace_hybrid.grid.env import reset_episode
from ace_hybrid.llm.backend import CandidateScores, LLMConfig, LLMError
from ace_hybrid.llm.lac_agent import LACAgent, make_lac_agent

pytestmark = pytest.mark.grid2op
ENV = "l2rpn_case14_sandbox"


import llm_fixtures as fixtures  # noqa: E402 (tests/ is on sys.path: see conftest.py)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return fixtures.build_tiny_model(tmp_path_factory.mktemp("tiny"))


class PreferringBackend:
    """A test backend whose prior puts almost all mass on one action text and whose critic is indifferent."""

    name = "preferring"

    def __init__(self, favourite: str) -> None:
        self.favourite = favourite
        self.seen: list[list[str]] = []

    def score_candidates(self, prompt, candidates, *, reduction="sum"):
        self.seen.append(list(candidates))
        lp = np.array([-0.01 if c == self.favourite else -9.0 for c in candidates])
        return CandidateScores(lp, np.ones(len(candidates), np.int64), "scripted", reduction)

    def next_token_logprobs_many(self, prompts, tokens):
        return np.full((len(prompts), len(tokens)), -1.0)


class FailingBackend(PreferringBackend):
    name = "failing"

    def score_candidates(self, prompt, candidates, *, reduction="sum"):
        raise LLMError("the server is down", backend=self.name, kind="connection")


class RecordingLACAgent(LACAgent):
    """Records each decision's catalog index, whether it was legal, and whether the action played is that index."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[tuple[int, bool, bool]] = []

    def decide(self, observation: Any) -> Any:
        action = super().decide(observation)
        legal = bool(self.catalog.legal_mask(observation)[self.last_choice])
        self.log.append((self.last_choice, legal, self.catalog.index_of(action) == self.last_choice))
        return action


def test_a_tiny_real_model_plays_only_legal_catalog_actions(make_grid_env, tiny_model: pathlib.Path) -> None:
    from ace_hybrid.llm.transformers_backend import TransformersBackend

    env = make_grid_env(ENV)
    backend = TransformersBackend(tiny_model)
    # Threshold 0: every step is a decision. The length-neutral prior keeps the random model from always
    # preferring the shortest text ("do nothing"), so the legality check covers topology changes too.
    agent = RecordingLACAgent(env, backend, ActionCatalog.for_env(env), threshold=0.0, candidates=4, alpha=1.0,
                              reduction="mean")
    report = evaluate(env, agent, [(0, 0)], max_steps=4, progress=False)
    episode = report.episodes[0]
    assert report.agent_name == "lac"
    assert len(agent.log) == episode.decisions == agent.decisions >= 1
    assert all(legal and played for _, legal, played in agent.log), agent.log
    assert any(index != 0 for index, _, _ in agent.log), f"the model only did nothing: {agent.log}"
    assert agent.llm_errors == 0 and 1 <= agent.llm_calls <= agent.decisions and agent.llm_seconds > 0
    assert backend.stats["calls"] >= 2 * agent.llm_calls  # a prior pass and a judging pass per ranking


def test_the_agent_plays_the_candidate_the_model_prefers(make_grid_env) -> None:
    env = make_grid_env(ENV)
    catalog = ActionCatalog.for_env(env)
    obs = reset_episode(env, 0, 0)
    shortlist = [int(i) for i in catalog.shortlist(obs, 5)]
    assert len(shortlist) >= 3
    target = shortlist[2]
    backend = PreferringBackend(catalog.describe(target))
    agent = LACAgent(env, backend, catalog, threshold=0.0, candidates=6, alpha=1.0)
    action = agent.act(obs, 0.0)
    assert agent.last_choice == target and catalog.index_of(action) == target
    # Do nothing and the shortlist, in a shuffled order (the shortlist's own order puts do nothing first).
    assert sorted(backend.seen[0]) == sorted(catalog.describe(i) for i in [0, *shortlist])
    assert (agent.decisions, agent.llm_calls, agent.llm_errors) == (1, 1, 0)


def test_the_candidates_are_shown_in_a_seeded_shuffled_order(make_grid_env) -> None:
    env = make_grid_env(ENV)
    catalog = ActionCatalog.for_env(env)
    obs = reset_episode(env, 0, 0)
    orders = []
    for seed in (0, 0, 1, 2, 3):
        backend = PreferringBackend("nothing in particular")
        LACAgent(env, backend, catalog, threshold=0.0, candidates=6, seed=seed).act(obs, 0.0)
        orders.append(tuple(backend.seen[0]))
    assert orders[0] == orders[1] and len(set(orders)) >= 3
    assert {o[0] for o in orders} != {"do nothing"}


def test_a_failing_model_makes_the_agent_do_nothing(make_grid_env) -> None:
    env = make_grid_env(ENV)
    catalog = ActionCatalog.for_env(env)
    obs = reset_episode(env, 0, 0)
    agent = LACAgent(env, FailingBackend("x"), catalog, threshold=0.0, candidates=4)
    for _ in range(2):
        action = agent.act(obs, 0.0)
        assert agent.last_choice == 0 and catalog.index_of(action) == 0
    assert (agent.decisions, agent.llm_calls, agent.llm_errors) == (2, 2, 2)


def test_outside_danger_the_model_is_not_asked(make_grid_env) -> None:
    env = make_grid_env(ENV)
    obs = reset_episode(env, 0, 0)
    agent = LACAgent(env, FailingBackend("x"), ActionCatalog.for_env(env), threshold=float(np.max(obs.rho)) + 0.1)
    agent.act(obs, 0.0)
    assert (agent.decisions, agent.llm_calls, agent.last_choice) == (0, 0, -1)
    with pytest.raises(ValueError, match="candidates"):
        LACAgent(env, FailingBackend("x"), ActionCatalog.for_env(env), candidates=1)


def test_the_factory_reads_the_run_configuration(make_grid_env, tiny_model: pathlib.Path) -> None:
    env = make_grid_env(ENV)
    cfg = Config()
    with pytest.raises(ValueError, match="llm.backend"):
        make_lac_agent(env, cfg)
    cfg.llm = LLMConfig(backend="transformers", model_path=str(tiny_model), reduction="mean")
    cfg.env.threshold, cfg.ace.candidates, cfg.ace.lac_alpha = 0.75, 5, 2.5
    agent = make_lac_agent(env, cfg)
    assert isinstance(agent, LACAgent) and agent.backend.name == "transformers"
    assert (agent.threshold, agent.candidates, agent.ranker.alpha, agent.ranker.reduction) == (0.75, 5, 2.5, "mean")
    assert agent.catalog is ActionCatalog.for_env(env)
