"""A small OpenAI-compatible HTTP server on 127.0.0.1 for the litellm tests.

It serves ``POST /v1/chat/completions`` and ``POST /v1/embeddings`` from a thread. By default it
answers each role's prompt sensibly (the judge says ``entails`` for a claim found verbatim in
the source); ``script`` queues misbehaviours for the next requests, ``fallback`` is the
behaviour once the script is empty (``"ok"`` by default) and ``fail_every`` = (n, mode) makes
every n-th request misbehave:

- ``"429"``, ``"500"``, ``"401"``: that status with an OpenAI-style error body;
- ``"slow"``: sleeps past the client's timeout;
- ``"malformed"``: a reply whose content is not JSON;
- ``"wrong_fields"``: a JSON reply without the fields the role asked for;
- ``"no_choices"``: a 200 completion with an empty ``choices`` list;
- ``"not_json"``: a 200 whose HTTP body is not JSON at all;
- ``"echo_key"``: a 500 whose error body echoes the request's ``Authorization``, ``api-key`` and
  ``x-api-key`` headers (as careless proxies do);
- ``"echo_key_401"``: the same with status 401;
- ``"drip"``: a well-formed reply whose body comes one byte every ``drip_s`` seconds (litellm's
  per-read timeout never trips on it);
- ``"huge"``: a 200 whose reply content is ``huge_bytes`` (50 MB) long, sent in 1 MiB pieces;
- ``"gzip"``: a well-formed reply sent gzip-compressed although ``identity`` was asked for;
- ``"negative_usage"``, ``"nan_usage"``: a well-formed reply claiming -1,000,000 prompt tokens, or
  NaN tokens (JSON's non-standard ``NaN``, which Python's parser accepts);
- ``"many_claims"``: a decomposer reply with 20,000 claims (other roles answer sensibly).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from grace_core.models.litellm_roles import (
    ANSWERER_PROMPT,
    CHOICE_PROMPT,
    DECOMPOSER_PROMPT,
    JUDGE_PROMPT,
    RESPONDER_PROMPT,
    VERIFIER_PROMPT,
)

EMBED_DIM = 8
MANY_CLAIMS = 20_000


def role_reply(body: dict[str, Any]) -> str:
    """A well-formed reply for the role whose system prompt opens the conversation."""
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    if system == JUDGE_PROMPT:
        source = user.split("Source:\n", 1)[1].split("\n\nClaims:\n", 1)[0]
        claims = re.findall(r"^(\d+)\. (.*)$", user.split("\n\nClaims:\n", 1)[1], re.MULTILINE)
        return json.dumps({"judgements": [{"id": int(i), "label": "entails" if c in source else "neutral"} for i, c in claims]})
    if system == DECOMPOSER_PROMPT:
        text = user.split("Text:\n", 1)[1]
        return json.dumps({"claims": [s.strip() + "." for s in text.split(".") if s.strip()]})
    if system == RESPONDER_PROMPT:
        context = user.split("Context:\n", 1)[1].split("\n\nQuestion:", 1)[0]
        return json.dumps({"answer": context.split(".")[0] + "."})
    if system == VERIFIER_PROMPT:
        document, claim = user.split("Document:\n", 1)[1].split("\n\nClaim: ", 1)
        return json.dumps({"verdict": "confirm" if claim in document else "reject", "reason": "checked"})
    if system == ANSWERER_PROMPT:
        return json.dumps({"answer": None if "unanswerable" in user else "an answer"})
    if system == CHOICE_PROMPT:
        return json.dumps({"option": 1})
    return json.dumps({"answer": "?"})


class OpenAICompatibleServer:
    """Start with :meth:`start`, stop with :meth:`stop`; ``url`` is the ``api_base``."""

    def __init__(self, *, slow_s: float = 1.5, drip_s: float = 0.5, huge_bytes: int = 50 * 2**20) -> None:
        self.script: list[str] = []
        self.fallback = "ok"
        self.fail_every: tuple[int, str] | None = None
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.authorizations: list[str | None] = []
        self.delay_s = 0.0
        self.slow_s = slow_s
        self.drip_s = drip_s
        self.huge_bytes = huge_bytes
        self.in_flight = 0
        self.max_in_flight = 0
        self._generation = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> OpenAICompatibleServer:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Shut the server down."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def reset(self) -> None:
        """Forget requests, script and concurrency counters (requests still running from an
        earlier test no longer count as in flight)."""
        with self._lock:
            self.script.clear()
            self.fallback = "ok"
            self.fail_every = None
            self.requests.clear()
            self.authorizations.clear()
            self.delay_s = 0.0
            self.in_flight = 0
            self.max_in_flight = 0
            self._generation += 1

    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of the chat completion requests received so far."""
        return [b for p, b in self.requests if p.endswith("/chat/completions")]

    def _next(self, path: str, body: dict[str, Any], authorization: str | None) -> tuple[str, int]:
        with self._lock:
            self.requests.append((path, body))
            self.authorizations.append(authorization)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self.script:
                mode = self.script.pop(0)
            elif self.fail_every is not None and len(self.requests) % self.fail_every[0] == 0:
                mode = self.fail_every[1]
            else:
                mode = self.fallback
            return mode, self._generation

    def _done(self, generation: int) -> None:
        with self._lock:
            if generation == self._generation:
                self.in_flight -= 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, payload: dict[str, Any] | bytes, *, drip_s: float = 0.0, encoding: str | None = None) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                if encoding == "gzip":
                    data = gzip.compress(data)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    if encoding:
                        self.send_header("Content-Encoding", encoding)
                    self.end_headers()
                    if not drip_s:
                        self.wfile.write(data)
                    for i in range(len(data) if drip_s else 0):
                        self.wfile.write(data[i:i + 1])
                        self.wfile.flush()
                        time.sleep(drip_s)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and hung up

            def _send_huge(self, body: dict[str, Any]) -> None:
                """A completion whose content is ``huge_bytes`` of "a", written piece by piece
                (the server never holds it whole)."""
                head, tail = json.dumps(self._completion(body, "\0")).encode().split(b"\\u0000")
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(head) + server.huge_bytes + len(tail)))
                    self.end_headers()
                    self.wfile.write(head)
                    piece = b"a" * 2**20
                    for start in range(0, server.huge_bytes, len(piece)):
                        self.wfile.write(piece[: server.huge_bytes - start])
                    self.wfile.write(tail)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client refused the reply and hung up

            @staticmethod
            def _completion(body: dict[str, Any], content: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
                prompt_words = sum(len(m["content"].split()) for m in body["messages"])
                return {
                    "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                    "usage": usage or {"prompt_tokens": prompt_words, "completion_tokens": len(content.split()),
                                       "total_tokens": prompt_words + len(content.split())},
                }

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                mode, generation = server._next(self.path, body, self.headers.get("Authorization"))
                try:
                    time.sleep(server.delay_s)
                    if mode == "slow":
                        time.sleep(server.slow_s)
                    if mode in ("429", "500", "401"):
                        self._send(int(mode), {"error": {"message": f"scripted {mode}", "type": "test", "code": mode}})
                        return
                    if mode.startswith("echo_key"):
                        echoed = {h: self.headers.get(h) for h in ("Authorization", "api-key", "x-api-key")}
                        message = f"upstream refused the request; headers were {echoed}; Authorization: {echoed['Authorization']}"
                        self._send(401 if mode == "echo_key_401" else 500, {"error": {"message": message, "type": "test"}})
                        return
                    if mode == "not_json":
                        self._send(200, b"<html><body>502 Bad Gateway</body></html>")
                        return
                    if self.path.endswith("/embeddings"):
                        self._embeddings(body)
                        return
                    if mode == "no_choices":
                        self._send(200, {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
                                         "model": body["model"], "choices": []})
                        return
                    if mode == "huge":
                        self._send_huge(body)
                        return
                    content = {"malformed": "this is not JSON at all", "wrong_fields": json.dumps({"result": [1, 2, 3]})}.get(mode) or role_reply(body)
                    if mode == "many_claims" and body["messages"][0]["content"] == DECOMPOSER_PROMPT:
                        content = json.dumps({"claims": [f"Claim number {i} holds." for i in range(MANY_CLAIMS)]})
                    usage = {"negative_usage": {"prompt_tokens": -1_000_000, "completion_tokens": -1_000_000, "total_tokens": -2_000_000},
                             "nan_usage": {"prompt_tokens": float("nan"), "completion_tokens": float("nan"), "total_tokens": float("nan")},
                             }.get(mode)
                    self._send(200, self._completion(body, content, usage), drip_s=server.drip_s if mode == "drip" else 0.0,
                               encoding="gzip" if mode == "gzip" else None)
                finally:
                    server._done(generation)

            def _embeddings(self, body: dict[str, Any]) -> None:
                data = []
                for i, text in enumerate(body["input"]):
                    digest = hashlib.sha256(text.encode()).digest()
                    data.append({"object": "embedding", "index": i, "embedding": [b - 128.0 for b in digest[:EMBED_DIM]]})
                tokens = sum(len(t.split()) for t in body["input"])
                self._send(200, {"object": "list", "data": data, "model": body["model"],
                                 "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

        return Handler
