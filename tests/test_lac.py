"""LAC arithmetic (Q_LLM, pi_new ∝ pi_LLM exp(alpha Q)) checked exactly, and its use of real backends."""

from __future__ import annotations

import math
import os
import pathlib

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest
from ace_hybrid.llm import LACRanker, LLMError, lac_policy, lac_q_values
from ace_hybrid.llm.backend import CandidateScores
from ace_hybrid.llm.lac import lac_judge_prompt, lac_policy_prompt
from hypothesis import given, settings
from hypothesis import strategies as st


import llm_fixtures as fixtures  # noqa: E402 (tests/ is on sys.path: see conftest.py)


# ------------------------------------------------------------------------------------- lac_policy
def test_policy_matches_a_hand_computed_case() -> None:
    prior = np.log([0.5, 0.3, 0.2])
    q = np.array([1.0, 0.0, -1.0])
    e = math.e
    z = 0.5 * e + 0.3 + 0.2 / e
    np.testing.assert_allclose(lac_policy(prior, q, 1.0), [0.5 * e / z, 0.3 / z, 0.2 / e / z], rtol=1e-14)
    # alpha = 2 with a uniform prior: softmax(2 q)
    z2 = e**2 + 1 + e**-2
    np.testing.assert_allclose(lac_policy(np.zeros(3), q, 2.0), [e**2 / z2, 1 / z2, e**-2 / z2], rtol=1e-14)


def test_alpha_zero_gives_the_normalised_prior() -> None:
    prior = np.array([-1.0, -2.0, -4.0])  # unnormalised log-probs
    expected = np.exp(prior) / np.exp(prior).sum()
    np.testing.assert_allclose(lac_policy(prior, [50.0, -3.0, 7.0], 0.0), expected, rtol=1e-14)


def test_policy_is_stable_with_large_values() -> None:
    p = lac_policy([0.0, 0.0, 0.0], [1000.0, 999.0, -1000.0], 1.0)
    np.testing.assert_allclose(p, [1 / (1 + math.exp(-1)), math.exp(-1) / (1 + math.exp(-1)), 0.0], atol=1e-15)
    p = lac_policy([-1e6, -1e6 - 1.0], [0.0, 0.0], 3.0)
    np.testing.assert_allclose(p, [1 / (1 + math.exp(-1)), math.exp(-1) / (1 + math.exp(-1))], rtol=1e-12)
    p = lac_policy([0.0, 0.0], [1e300, 0.0], 1.0)
    np.testing.assert_array_equal(p, [1.0, 0.0])


def test_impossible_candidates_get_zero_probability() -> None:
    p = lac_policy([-np.inf, np.log(0.25), np.log(0.75)], [5.0, 0.0, 0.0], 1.0)
    np.testing.assert_allclose(p, [0.0, 0.25, 0.75], rtol=1e-14)


@pytest.mark.parametrize(
    ("prior", "q", "alpha", "match"),
    [
        ([[0.0]], [[0.0]], 1.0, "prior_logprobs has shape"),
        ([], [], 1.0, "prior_logprobs has shape"),
        ([0.0, 0.0], [0.0], 1.0, "q has shape"),
        ([np.nan, 0.0], [0.0, 0.0], 1.0, "prior_logprobs"),
        ([np.inf, 0.0], [0.0, 0.0], 1.0, "prior_logprobs"),
        ([-np.inf, -np.inf], [0.0, 0.0], 1.0, "no finite entry"),
        ([0.0, 0.0], [np.nan, 0.0], 1.0, "q = "),
        ([0.0, 0.0], [0.0, 0.0], -0.5, "alpha"),
        ([0.0, 0.0], [0.0, 0.0], np.inf, "alpha"),
        ([0.0, 0.0], [1e308, 0.0], 10.0, "overflows"),
    ],
)
def test_bad_policy_inputs_raise_value_error(prior, q, alpha, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        lac_policy(prior, q, alpha)


finite = st.floats(-50.0, 50.0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(finite, finite), min_size=1, max_size=12),
    st.floats(0.0, 20.0, allow_nan=False),
    st.floats(-1e3, 1e3, allow_nan=False),
)
def test_policy_is_a_distribution_invariant_to_prior_shifts(pairs, alpha: float, shift: float) -> None:
    prior = np.array([p for p, _ in pairs])
    q = np.array([v for _, v in pairs])
    p = lac_policy(prior, q, alpha)
    assert p.shape == prior.shape and np.all(p >= 0) and abs(p.sum() - 1.0) < 1e-12
    np.testing.assert_allclose(lac_policy(prior + shift, q, alpha), p, rtol=1e-9, atol=1e-12)
    reference = np.exp(prior + alpha * q - np.max(prior + alpha * q))
    np.testing.assert_allclose(p, reference / reference.sum(), rtol=1e-12, atol=1e-300)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-40, 40), min_size=2, max_size=8, unique=True), st.floats(0.01, 5.0))
def test_with_a_flat_prior_the_critic_decides_the_order(steps: list[int], alpha: float) -> None:
    q = np.array(steps) * 0.5  # distinct critic values, far apart compared with float resolution
    p = lac_policy(np.zeros(len(q)), q, alpha)
    assert int(np.argmax(p)) == int(np.argmax(q))
    assert np.all(np.diff(p[np.argsort(q)]) >= 0)


# ----------------------------------------------------------------------------------- lac_q_values
class ScriptedJudge:
    """A test backend whose judgement log-probs depend on the action text only."""

    name = "scripted"

    def __init__(self, table: dict[str, tuple[float, float]]) -> None:
        self.table = table
        self.seen: list[list[str]] = []

    def next_token_logprobs(self, prompt, tokens):
        self.seen.append(list(tokens))
        text = prompt[-1]["content"]
        action = text.split("Proposed action:\n")[1].split("\n")[0]
        return np.array(self.table[action])

    def score_candidates(self, prompt, candidates, *, reduction="sum"):
        values = np.array([-float(len(c)) for c in candidates])
        return CandidateScores(values, np.ones(len(candidates), dtype=np.int64), "scripted", reduction)


def test_q_is_good_minus_bad_log_probability() -> None:
    judge = ScriptedJudge({"a": (-0.1, -2.4), "b": (-3.0, -0.05), "c": (-1.0, -1.0)})
    q = lac_q_values(judge, "state", ["a", "b", "c"])
    np.testing.assert_allclose(q, [2.3, -2.95, 0.0], rtol=1e-14)
    assert judge.seen == [["GOOD", "BAD"]] * 3


def test_non_finite_judgements_are_malformed() -> None:
    judge = ScriptedJudge({"a": (np.nan, -1.0)})
    with pytest.raises(LLMError) as info:
        lac_q_values(judge, "state", ["a"])
    assert info.value.kind == "malformed" and info.value.backend == "scripted"
    with pytest.raises(ValueError, match="action_texts"):
        lac_q_values(judge, "state", [])


def test_ranker_combines_prior_and_critic() -> None:
    judge = ScriptedJudge({"aa": (-0.1, -3.1), "b": (-2.0, -0.5), "cccc": (-1.0, -1.0)})
    actions = ["aa", "b", "cccc"]
    ranking = LACRanker(judge, alpha=0.5).rank("state", actions)
    prior = np.array([-2.0, -1.0, -4.0])
    prior = prior - np.log(np.exp(prior).sum())
    q = np.array([3.0, -1.5, 0.0])
    expected = np.exp(prior + 0.5 * q) / np.exp(prior + 0.5 * q).sum()
    np.testing.assert_allclose(ranking.prior_logprobs, prior, rtol=1e-12)
    np.testing.assert_allclose(ranking.q, q, rtol=1e-12)
    np.testing.assert_allclose(ranking.probs, expected, rtol=1e-12)
    assert list(ranking.order) == list(np.argsort(-expected)) and ranking.method == "scripted"
    assert LACRanker(judge, alpha=0.0).best("state", actions) == 1  # the prior alone prefers "b"
    with pytest.raises(ValueError, match="alpha"):
        LACRanker(judge, alpha=-1.0)


# ----------------------------------------------------------------------------------- real backends
def test_q_values_from_a_local_model_are_its_token_logits(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from ace_hybrid.llm.transformers_backend import TransformersBackend

    backend = TransformersBackend(fixtures.build_tiny_model(tmp_path / "tiny"))
    actions = ["do nothing", "reconnect line 3", "set bus 2 at substation 4"]
    q = lac_q_values(backend, "line 3 is overloaded", actions)
    expected = []
    for a in actions:
        lp = backend.next_token_logprobs(lac_judge_prompt("line 3 is overloaded", a), ["GOOD", "BAD"])
        expected.append(lp[0] - lp[1])
    np.testing.assert_allclose(q, expected, atol=1e-5)

    ranking = LACRanker(backend, alpha=1.0).rank("line 3 is overloaded", actions)
    scores = backend.score_candidates(lac_policy_prompt("line 3 is overloaded"), actions).logprobs
    np.testing.assert_allclose(ranking.probs, lac_policy(scores, q, 1.0), atol=1e-6)
    assert ranking.method == "teacher_forcing"


def test_q_values_through_a_server_use_top_logprobs(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openai")
    from ace_hybrid.llm import LLMConfig, make_backend

    monkeypatch.setenv("ACE_TEST_OPENAI_KEY", "sk-test")
    top = [("GOOD", -0.4), (" GOOD", -2.0), ("Yes", -2.5), ("BAD", -6.0)]
    with fixtures.FakeOpenAIServer(top=top, lifetime_s=30) as server:
        backend = make_backend(LLMConfig(backend="openai", base_url=server.base_url, model="m",
                                         api_key_env="ACE_TEST_OPENAI_KEY", top_logprobs=4))
        q = lac_q_values(backend, "state", ["a", "b"])
        server.top = [("GOOD", -0.4), ("Yes", -2.5)]  # BAD unlisted: it cannot be scored
        with pytest.raises(LLMError) as info:
            lac_q_values(backend, "state", ["a"])
    good = math.log(math.exp(-0.4) + math.exp(-2.0))
    np.testing.assert_allclose(q, [good - (-6.0)] * 2, rtol=1e-12)
    assert info.value.kind == "malformed"
