"""The openai backend against a scripted OpenAI-compatible HTTP server on 127.0.0.1 (started by each test)."""

from __future__ import annotations

import itertools
import logging
import math
import socket
import threading
import time
from typing import Any

import numpy as np
import pytest

pytest.importorskip("openai")

from ace_hybrid.llm import LLMConfig, LLMError, make_backend
from ace_hybrid.llm.backend import LLMBackend
from ace_hybrid.llm.openai_backend import OpenAIBackend


import llm_fixtures as fixtures  # noqa: E402 (tests/ is on sys.path: see conftest.py)
FakeOpenAIServer = fixtures.FakeOpenAIServer

KEY = "sk-test-DO-NOT-LEAK-4f1c9a"
KEY_ENV = "ACE_TEST_OPENAI_KEY"


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def _backend(server, **changes) -> OpenAIBackend:
    cfg = LLMConfig(
        backend="openai", base_url=server.base_url, model="fake-model", api_key_env=KEY_ENV, timeout_s=2.0,
        max_retries=2, retry_backoff_s=0.01, top_logprobs=5,
    )
    return OpenAIBackend(cfg.replace(**changes) if changes else cfg)


def _lse(*values: float) -> float:
    return math.log(sum(math.exp(v) for v in values))


# ---------------------------------------------------------------------------------------- answers
def test_generate_returns_the_answer_and_counts_usage() -> None:
    with FakeOpenAIServer(reply="Reconnect line 3.", lifetime_s=30) as server:
        b = _backend(server)
        assert isinstance(b, LLMBackend) and not b.supports_finetune
        gen = b.generate([{"role": "system", "content": "operator"}, {"role": "user", "content": "hi"}],
                         max_new_tokens=9, temperature=0.5, seed=3)
        path, body, headers = server.requests[0]
    assert gen.text == "Reconnect line 3." and gen.finish_reason == "stop"
    assert (gen.tokens_in, gen.tokens_out, gen.top_logprobs) == (11, 7, None)
    assert path == "/v1/chat/completions"
    assert body["model"] == "fake-model" and body["max_tokens"] == 9 and body["seed"] == 3
    assert body["temperature"] == 0.5 and body["messages"][0] == {"role": "system", "content": "operator"}
    assert "logprobs" not in body
    assert {k.lower(): v for k, v in headers.items()}["authorization"] == f"Bearer {KEY}"
    assert b.stats["calls"] == 1 and b.stats["tokens_in"] == 11 and b.stats["tokens_out"] == 7


def test_generate_reads_top_logprobs_when_asked() -> None:
    top = [("GOOD", -0.3), (" BAD", -1.5), ("The", -2.5)]
    with FakeOpenAIServer(top=top, lifetime_s=30) as server:
        gen = _backend(server).generate("judge", top_logprobs=2)
        body = server.requests[0][1]
    assert body["logprobs"] is True and body["top_logprobs"] == 2
    assert gen.top_logprobs == ({"GOOD": -0.3, " BAD": -1.5},)


def test_next_token_logprobs_merge_listed_variants() -> None:
    top = [("GOOD", -0.5), (" GOOD", -1.25), ("The", -2.0), ("GO", -3.0), (" BAD", -4.5)]
    with FakeOpenAIServer(top=top, lifetime_s=30) as server:
        lp = _backend(server).next_token_logprobs("Is it good?", ["GOOD", "BAD"])
        body = server.requests[0][1]
    assert body["max_tokens"] == 1 and body["logprobs"] is True and body["top_logprobs"] == 5
    # GOOD: "GOOD", " GOOD" and its prefix "GO"; BAD: " BAD".
    np.testing.assert_allclose(lp, [_lse(-0.5, -1.25, -3.0), -4.5], rtol=1e-12)


def test_a_word_missing_from_the_top_log_probabilities_is_malformed_not_floored() -> None:
    """Giving every unlisted label the same floor made them tie, and the tie went to the first (label A)."""
    top = [("GOOD", -0.5), ("The", -2.0), ("Hmm", -4.5)]
    with FakeOpenAIServer(top=top, lifetime_s=30) as server:
        backend = _backend(server)
        with pytest.raises(LLMError) as info:
            backend.next_token_logprobs("Which?", ["GOOD", "BAD", "UGLY"])
    assert info.value.kind == "malformed" and "['BAD', 'UGLY']" in str(info.value)
    assert backend.stats["errors"] == 1


def test_a_prefix_shared_by_two_words_counts_for_neither() -> None:
    top = [("B", -0.1), ("BAD", -1.0), ("BA", -2.0), ("BAG", -6.0)]
    with FakeOpenAIServer(top=top, lifetime_s=30) as server:
        lp = _backend(server).next_token_logprobs("q", ["BAD", "BAG"])
    np.testing.assert_allclose(lp, [-1.0, -6.0])


def test_echo_scoring_sums_the_candidate_tokens() -> None:
    candidates = ["reconnect line 3", "do nothing"]
    with FakeOpenAIServer(lifetime_s=30) as server:
        b = _backend(server)
        total = b.score_candidates("State: overload.", candidates)
        mean = b.score_candidates("State: overload.", candidates, reduction="mean")
        path, body, _ = server.requests[0]
    assert path == "/v1/completions" and body["echo"] is True and body["logprobs"] == 1
    assert body["prompt"][0] == "user: State: overload.\nassistant: reconnect line 3"
    expected = [sum(fixtures.echo_logprob(" " + w) for w in c.split()) for c in candidates]
    assert total.method == "echo"
    np.testing.assert_allclose(total.logprobs, expected, rtol=1e-12)
    assert list(total.n_tokens) == [3, 2]
    np.testing.assert_allclose(mean.logprobs, np.array(expected) / [3, 2], rtol=1e-12)


def test_scoring_falls_back_to_numbered_choices_when_echo_is_refused() -> None:
    top = [("2", -0.1), ("1", -2.5), (" 2", -3.0), ("3", -4.0)]
    candidates = ["do nothing", "reconnect line 3", "set bus 2"]
    with FakeOpenAIServer(["404"], top=top, lifetime_s=30) as server:
        b = _backend(server)
        first = b.score_candidates("State: overload.", candidates)
        second = b.score_candidates("State: overload.", candidates)
        paths = [r[0] for r in server.requests]
        ask = server.requests[1][1]["messages"][-1]["content"]
    assert first.method == second.method == "choice"
    np.testing.assert_allclose(first.logprobs, [-2.5, _lse(-0.1, -3.0), -4.0], rtol=1e-12)
    assert list(first.n_tokens) == [1, 1, 1]
    assert "1. do nothing\n2. reconnect line 3\n3. set bus 2" in ask and ask.startswith("State: overload.")
    # echo was refused once (404): the backend remembers and goes straight to the chat endpoint.
    assert paths == ["/v1/completions", "/v1/chat/completions", "/v1/chat/completions"]


@pytest.mark.parametrize("top", [[("Well", -0.2), ("I", -1.0)], [("1", -0.2), ("I", -1.0)]])
def test_choice_scoring_with_a_candidate_number_missing_is_malformed(top) -> None:
    with FakeOpenAIServer(top=top, lifetime_s=30) as server:
        b = _backend(server, openai_scoring="choice")
        with pytest.raises(LLMError) as info:
            b.score_candidates("q", ["a", "b"])
    assert info.value.kind == "malformed" and "'2'" in str(info.value)


def test_forced_echo_scoring_reports_unsupported_servers() -> None:
    with FakeOpenAIServer(["400"], lifetime_s=30) as server, pytest.raises(LLMError) as info:
        _backend(server, openai_scoring="echo").score_candidates("q", ["a", "b"])
    assert info.value.kind == "unsupported"


def test_guided_choice_is_passed_through_when_enabled() -> None:
    with FakeOpenAIServer(lifetime_s=30) as server:
        gen = _backend(server, guided_choice=True).generate("pick", choices=["B", "A"])
        body = server.requests[0][1]
    assert body["guided_choice"] == ["B", "A"] and gen.text == "B"


def test_a_guided_answer_outside_the_choices_is_malformed() -> None:
    def ignores_guidance(path, body):
        message = {"role": "assistant", "content": "C"}
        return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}]}

    with FakeOpenAIServer(responder=ignores_guidance, lifetime_s=30) as server:
        with pytest.raises(LLMError) as info:
            _backend(server, guided_choice=True).generate("pick", choices=["A", "B"])
    assert info.value.kind == "malformed"


def test_choices_without_guidance_pick_the_best_scored_candidate() -> None:
    with FakeOpenAIServer(lifetime_s=30) as server:
        gen = _backend(server).generate("pick", choices=["a much longer answer here", "ok"])
    assert gen.finish_reason == "choice" and gen.text == "ok"  # fewer, shorter words: higher echo log-prob


# ---------------------------------------------------------------------------------------- failures
def test_a_timeout_is_retried_then_raised_as_llm_error() -> None:
    with FakeOpenAIServer(["sleep", "sleep"], sleep_s=3.0, lifetime_s=30) as server:
        b = _backend(server, timeout_s=0.2, max_retries=1)
        started = time.monotonic()
        with pytest.raises(LLMError) as info:
            b.generate("hi")
        elapsed = time.monotonic() - started
        recovered = b.generate("hi")  # the script is used up: the server answers again
    assert info.value.kind == "timeout"
    assert 0.4 <= elapsed < 2.5
    assert recovered.text == "Hello from the fake server."
    assert b.stats["retries"] == 1 and b.stats["errors"] == 1 and b.stats["calls"] == 2


def test_a_slow_first_answer_is_retried_successfully() -> None:
    with FakeOpenAIServer(["sleep"], sleep_s=3.0, lifetime_s=30) as server:
        b = _backend(server, timeout_s=0.2)
        assert b.next_token_logprobs("q", ["GOOD", "BAD"]).shape == (2,)
    assert b.stats["retries"] == 1 and b.stats["errors"] == 0


def test_http_500s_are_retried_with_backoff_then_raised() -> None:
    with FakeOpenAIServer(["500"] * 3, lifetime_s=30) as server:
        b = _backend(server, max_retries=2, retry_backoff_s=0.1)
        started = time.monotonic()
        with pytest.raises(LLMError) as info:
            b.generate("hi")
        elapsed = time.monotonic() - started
        n_requests = len(server.requests)
    assert info.value.kind == "http" and "HTTP 500" in str(info.value)
    assert n_requests == 3 and elapsed >= 0.1 + 0.2  # backoff 0.1 s, then 0.2 s
    assert b.stats["retries"] == 2 and b.stats["errors"] == 1


def test_a_transient_500_recovers() -> None:
    with FakeOpenAIServer(["500"], lifetime_s=30) as server:
        b = _backend(server)
        assert b.generate("hi").text == "Hello from the fake server."
    assert b.stats["retries"] == 1 and b.stats["errors"] == 0


def test_client_errors_are_not_retried() -> None:
    with FakeOpenAIServer(["400", "ok"], lifetime_s=30) as server:
        b = _backend(server)
        with pytest.raises(LLMError) as info:
            b.generate("hi")
        assert len(server.requests) == 1
    assert info.value.kind == "unsupported" and b.stats["retries"] == 0


@pytest.mark.parametrize("behaviour", ["garbage", "malformed"])
@pytest.mark.parametrize(
    "call",
    [
        lambda b: b.generate("hi"),
        lambda b: b.next_token_logprobs("hi", ["GOOD", "BAD"]),
        lambda b: b.score_candidates("hi", ["a", "b"]),
    ],
    ids=["generate", "next_token_logprobs", "score_candidates"],
)
def test_garbage_answers_raise_llm_error(behaviour: str, call) -> None:
    with FakeOpenAIServer([behaviour, behaviour], lifetime_s=30) as server:
        b = _backend(server)
        with pytest.raises(LLMError) as info:
            call(b)
    assert info.value.kind == "malformed"
    assert b.stats["errors"] >= 1


def test_missing_logprobs_are_reported_as_unsupported() -> None:
    with FakeOpenAIServer(["no_logprobs"], lifetime_s=30) as server, pytest.raises(LLMError) as info:
        _backend(server).next_token_logprobs("q", ["GOOD", "BAD"])
    assert info.value.kind == "unsupported"


def test_a_closed_port_raises_a_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = LLMConfig(backend="openai", base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key_env=KEY_ENV,
                    max_retries=1, retry_backoff_s=0.01, timeout_s=1.0)
    b = make_backend(cfg)
    with pytest.raises(LLMError) as info:
        b.generate("hi")
    assert info.value.kind == "connection" and b.stats["retries"] == 1


def test_finetuning_is_unsupported() -> None:
    with FakeOpenAIServer(lifetime_s=30) as server:
        b = _backend(server)
        for call in (lambda: b.finetune([("q", "a")]), lambda: b.save_adapter("x"), lambda: b.load_adapter("x")):
            with pytest.raises(LLMError) as info:
                call()
            assert info.value.kind == "unsupported"
        assert server.requests == []


def test_bad_arguments_raise_value_error() -> None:
    with FakeOpenAIServer(lifetime_s=30) as server:
        b = _backend(server)
        with pytest.raises(ValueError, match="candidates"):
            b.score_candidates("q", [])
        with pytest.raises(ValueError, match="top_logprobs"):
            b.generate("q", top_logprobs=21)
        with pytest.raises(ValueError, match="duplicates"):
            b.next_token_logprobs("q", ["GOOD", "GOOD"])
        assert server.requests == []


# ---------------------------------------------------------------------------------------- the key
def test_the_api_key_never_appears_in_logs_reprs_or_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # everything: ours, openai's, httpx's
    errors = []
    with FakeOpenAIServer(["500", "ok", "auth_in_error", "garbage"], lifetime_s=30) as server:
        b = _backend(server, max_retries=1)
        b.generate("hi")
        for _ in range(2):
            try:
                b.generate("hi")
            except LLMError as exc:
                errors.append(exc)
        sent = {k.lower(): v for k, v in server.requests[0][2].items()}["authorization"]
    assert sent == f"Bearer {KEY}"  # the key is used ...
    assert [e.kind for e in errors] == ["http", "malformed"]
    assert "***" in str(errors[0])  # ... the leaky server's echo of it is scrubbed
    texts = [caplog.text, repr(b), repr(b.config), str(b.config), *map(str, errors), *map(repr, errors)]
    assert any("retry 1/1" in t for t in texts)  # the retry was logged
    assert not any(KEY in t for t in texts)


def test_a_missing_key_variable_sends_a_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    with FakeOpenAIServer(lifetime_s=30) as server:
        _backend(server).generate("hi")
        sent = {k.lower(): v for k, v in server.requests[0][2].items()}["authorization"]
    assert sent == "Bearer EMPTY"


def test_the_server_stops_by_itself() -> None:
    server = FakeOpenAIServer(lifetime_s=0.3)
    server.__enter__()
    server._thread.join(timeout=5)
    assert not server._thread.is_alive()
    server.stop()


# ---------------------------------------------------------------------------------------- concurrency


def _numbered_answers(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """A chat answer whose "GOOD" log-probability is -k/10 for the prompt that says "prompt k"."""
    k = int(body["messages"][-1]["content"].split()[-1])
    top = [{"token": "GOOD", "logprob": -k / 10, "bytes": None}, {"token": "BAD", "logprob": -5.0, "bytes": None}]
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "GOOD"}, "finish_reason": "stop",
                         "logprobs": {"content": [{"token": "GOOD", "logprob": -k / 10, "bytes": None,
                                                   "top_logprobs": top}]}}]}


def test_n_concurrent_requests_overlap_in_time_and_keep_their_order() -> None:
    prompts = [f"prompt {k}" for k in range(6)]
    with FakeOpenAIServer(default="sleep", sleep_s=0.4, responder=_numbered_answers, lifetime_s=30) as server:
        seen = fixtures.track_in_flight(server)
        b = _backend(server, concurrency=3)
        started = time.monotonic()
        lp = b.next_token_logprobs_many(prompts, ["GOOD", "BAD"])
        elapsed = time.monotonic() - started
        b.close()
    np.testing.assert_allclose(lp[:, 0], [-k / 10 for k in range(6)])  # row k answers prompt k
    assert seen["max"] == 3  # three in flight at once, never more
    assert elapsed < 6 * 0.4 * 0.75  # overlapped: two waves of three, not six requests one after the other
    spans = sorted(seen["spans"])
    assert any(s1 < e0 for (_, e0), (s1, _) in itertools.pairwise(spans))
    assert b.stats["calls"] == 6 and b.stats["errors"] == 0


def test_requests_from_many_threads_never_exceed_the_concurrency() -> None:
    with FakeOpenAIServer(default="sleep", sleep_s=0.25, lifetime_s=30) as server:
        seen = fixtures.track_in_flight(server)
        b = _backend(server, concurrency=2)
        threads = [threading.Thread(target=b.generate, args=("hi",)) for _ in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    assert seen["max"] == 2 and b.stats["calls"] == 5 and b.stats["tokens_in"] == 5 * 11


def test_one_failed_request_among_concurrent_ones_is_an_llm_error() -> None:
    with FakeOpenAIServer(["ok", "400", "ok"], lifetime_s=30) as server:
        b = _backend(server, concurrency=3)
        with pytest.raises(LLMError) as info:
            b.next_token_logprobs_many(["a", "b", "c"], ["GOOD", "BAD"])
        b.close()
    assert info.value.kind == "unsupported" and b.stats["calls"] == 3 and b.stats["errors"] == 1


def test_concurrency_above_one_needs_the_openai_backend() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        LLMConfig(backend="smollm2", concurrency=2).validate()
    with pytest.raises(ValueError, match="concurrency"):
        LLMConfig(backend="openai", base_url="http://127.0.0.1:1/v1", model="m", concurrency=0).validate()
