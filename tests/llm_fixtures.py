"""Test helpers for the LLM backends: a tiny random causal LM built on the spot, and a scripted
OpenAI-compatible HTTP server. Nothing here downloads anything."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "GOOD BAD action state line bus substation reconnect disconnect do nothing",
    "State: line 3 is overloaded at rho 1.05. Proposed action: set bus 2 at substation 4.",
    "system user assistant 0 1 2 3 4 5 6 7 8 9 yes no red green blue",
]


def build_tiny_model(directory: Path, *, seed: int = 0, vocab_size: int = 400) -> Path:
    """Write a randomly initialised 2-layer Qwen2-style causal LM and a trained byte-level BPE tokenizer
    (with a ChatML template) to ``directory``; return it. About a second on a laptop CPU."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    directory.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    config = Qwen2Config(
        vocab_size=len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        initializer_range=0.2,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.save_pretrained(directory)
    return directory


# --------------------------------------------------------------------------------------- fake server
_WORD = re.compile(r"\s*\S+")


def echo_tokens(text: str) -> list[tuple[str, int]]:
    """The fake server's tokenisation for echo: whitespace-led words with their character offsets."""
    return [(m.group(0), m.start()) for m in _WORD.finditer(text)]


def echo_logprob(token: str) -> float:
    """The fake server's log-probability of an echoed token (a fixed function of its text)."""
    return -0.25 * len(token.strip()) - 0.01 * (sum(map(ord, token.strip())) % 7)


class FakeOpenAIServer:
    """An OpenAI-compatible server on 127.0.0.1 (port 0) serving /v1/chat/completions and /v1/completions.

    Each request consumes the next behaviour of ``script`` (then ``default``):

    * "ok": a normal answer. Chat: ``reply`` as content (or the first guided choice), with top
      log-probabilities ``top`` when asked. Completions with echo: the prompt's words with
      :func:`echo_logprob` log-probabilities and character offsets.
    * "sleep": wait ``sleep_s`` (in short slices, stopping early when the server stops), then answer.
    * "500" / "400" / "404": that HTTP status with an error body.
    * "garbage": HTTP 200 with a non-JSON body.
    * "malformed": HTTP 200 with JSON that is not a completion.
    * "no_logprobs": a normal chat answer without log-probabilities.
    * "auth_in_error": HTTP 401 whose error message repeats the request's Authorization header (a leaky
      server, to check that the client scrubs the key from its errors).

    The serving thread stops by itself after ``lifetime_s`` even if :meth:`stop` is never called.
    ``requests`` records (path, JSON body, headers) of every request.
    """

    def __init__(
        self,
        script: Sequence[str] = (),
        *,
        default: str = "ok",
        reply: str = "Hello from the fake server.",
        top: Sequence[tuple[str, float]] = (("GOOD", -0.2), (" BAD", -1.9), ("The", -3.0)),
        sleep_s: float = 2.0,
        lifetime_s: float = 60.0,
        responder: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.script = list(script)
        self.default = default
        self.reply = reply
        self.top = list(top)
        self.sleep_s = sleep_s
        self.lifetime_s = lifetime_s
        self.responder = responder
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                with server._lock:
                    server.requests.append((self.path, body, dict(self.headers)))
                    behaviour = server.script.pop(0) if server.script else server.default
                server._serve(self, behaviour, body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.timeout = 0.05
        self._thread = threading.Thread(target=self._loop, name="fake-openai", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._httpd.server_close()

    def _loop(self) -> None:
        deadline = time.monotonic() + self.lifetime_s
        while not self._stop.is_set() and time.monotonic() < deadline:
            self._httpd.handle_request()

    # ------------------------------------------------------------------------------------ answers
    def _send(self, handler: BaseHTTPRequestHandler, status: int, payload: bytes, ctype: str) -> None:
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", ctype)
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test)

    def _serve(self, handler: BaseHTTPRequestHandler, behaviour: str, body: dict[str, Any]) -> None:
        if behaviour == "sleep":
            until = time.monotonic() + self.sleep_s
            while time.monotonic() < until and not self._stop.is_set():
                time.sleep(0.02)
            behaviour = "ok"
        if behaviour in ("500", "400", "404"):
            error = {"error": {"message": f"scripted {behaviour}", "type": "server_error", "code": int(behaviour)}}
            self._send(handler, int(behaviour), json.dumps(error).encode(), "application/json")
            return
        if behaviour == "auth_in_error":
            leaked = {"error": {"message": f"bad credentials: {handler.headers.get('Authorization')}"}}
            self._send(handler, 401, json.dumps(leaked).encode(), "application/json")
            return
        if behaviour == "garbage":
            self._send(handler, 200, b"<html>this is not json {", "application/json")
            return
        if behaviour == "malformed":
            self._send(handler, 200, json.dumps({"id": "x", "choices": "nope"}).encode(), "application/json")
            return
        path = handler.path
        if self.responder is not None:
            answer = self.responder(path, body)
        elif path.endswith("/chat/completions"):
            answer = self._chat(body, with_logprobs=behaviour != "no_logprobs")
        elif path.endswith("/completions"):
            answer = self._completion(body)
        else:
            self._send(handler, 404, b'{"error": {"message": "no such endpoint"}}', "application/json")
            return
        self._send(handler, 200, json.dumps(answer).encode(), "application/json")

    def _chat(self, body: dict[str, Any], *, with_logprobs: bool) -> dict[str, Any]:
        guided = body.get("guided_choice")
        content = guided[0] if guided else self.reply
        k = int(body.get("top_logprobs") or 0)
        logprobs = None
        if with_logprobs and body.get("logprobs"):
            top = [{"token": t, "logprob": v, "bytes": None} for t, v in self.top[:k]]
            first = self.top[0][0] if self.top else content
            logprobs = {"content": [{"token": first, "logprob": self.top[0][1] if self.top else 0.0,
                                     "bytes": None, "top_logprobs": top}]}
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop", "logprobs": logprobs}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        prompts = body.get("prompt")
        prompts = [prompts] if isinstance(prompts, str) else list(prompts or [])
        choices = []
        for i, text in enumerate(prompts):
            toks = echo_tokens(text) if body.get("echo") else []
            generated = " ok"
            all_tokens = [t for t, _ in toks] + [generated]
            offsets = [o for _, o in toks] + [len(text)]
            values: list[float | None] = [echo_logprob(t) for t, _ in toks] + [-0.5]
            if values:
                values[0] = None  # no context for the very first token, as real servers do
            choices.append({
                "index": i,
                "text": (text if body.get("echo") else "") + generated,
                "finish_reason": "length",
                "logprobs": {"tokens": all_tokens, "token_logprobs": values, "text_offset": offsets,
                             "top_logprobs": None},
            })
        return {
            "id": "cmpl-fake",
            "object": "text_completion",
            "created": 0,
            "model": body.get("model", "fake"),
            "choices": choices,
            "usage": {"prompt_tokens": 5 * len(prompts), "completion_tokens": len(prompts), "total_tokens": 6 * len(prompts)},
        }


def track_in_flight(server: FakeOpenAIServer) -> dict[str, Any]:
    """Wrap the server's request handling to record how many requests it was serving at once, and when."""
    seen: dict[str, Any] = {"now": 0, "max": 0, "spans": []}
    lock = threading.Lock()
    serve = server._serve

    def tracked(handler, behaviour, body):
        started = time.monotonic()
        with lock:
            seen["now"] += 1
            seen["max"] = max(seen["max"], seen["now"])
        try:
            serve(handler, behaviour, body)
        finally:
            with lock:
                seen["now"] -= 1
                seen["spans"].append((started, time.monotonic()))

    server._serve = tracked
    return seen
