"""A local stand-in for a coding agent's model API, for ``omray bench agent-turn``.

:class:`MockModelServer` answers, on a free loopback port, the requests the real CLIs make for one
turn, with a fixed one-line reply and no tool call, so a turn's time is the agent's own and
omray's, never a model's:

* Anthropic Messages (``POST /v1/messages``, what ``claude -p`` calls with ``ANTHROPIC_BASE_URL``):
  the server-sent event stream Claude Code reads (``message_start``, one text block,
  ``message_delta`` with ``end_turn``, ``message_stop``), or one JSON message when the request does
  not ask to stream; ``/v1/messages/count_tokens`` answers a small count.
* OpenAI Responses (``POST /v1/responses``, what ``codex exec`` calls through a custom provider):
  the ``response.*`` event stream with one output message and ``response.completed``.

Any other path answers an empty JSON object (the CLIs' optional look-ups must not fail a turn).
The server counts the model requests it answered, by API, so the benchmark can check that each
turn reached it. It logs nothing of what it is sent.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from testkit.anthropic_stream import event_stream
from testkit.codex_responses import response_message
from testkit.sse import sse_body

REPLY = "Done."
"""The model's answer to every turn."""


def anthropic_stream(model: str, text: str = REPLY) -> bytes:
    """A Messages API event stream holding one text block ``text``."""
    return event_stream(anthropic_message(model, text))


def anthropic_message(model: str, text: str = REPLY) -> dict[str, Any]:
    """The same answer as one JSON message (a request that does not stream)."""
    return {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 2},
    }


def responses_stream(model: str, text: str = REPLY) -> bytes:
    """An OpenAI Responses API event stream holding one output message ``text``, its text as one delta."""
    item, response, done = response_message(text, (12, 2), ids="bench", model=model)
    part = {"type": "output_text", "text": "", "annotations": []}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"type": "response.created", "response": response}),
        (
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
        ),
        (
            "response.content_part.added",
            {"type": "response.content_part.added", "item_id": item["id"], "output_index": 0, "part": part},
        ),
        (
            "response.output_text.delta",
            {
                "type": "response.output_text.delta",
                "item_id": item["id"],
                "output_index": 0,
                "content_index": 0,
                "delta": text,
            },
        ),
        ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed", "response": done}),
    ]
    return sse_body(events)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests carry prompts: nothing of them is printed

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, data: dict[str, Any]) -> None:
        self._send(200, json.dumps(data).encode(), "application/json")

    def do_GET(self) -> None:
        self._json({})

    def do_HEAD(self) -> None:
        self._send(200, b"", "application/json")

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            request = json.loads(raw) if raw else {}
        except ValueError:
            request = {}
        request = request if isinstance(request, dict) else {}
        model = str(request.get("model") or "bench-model")
        path = self.path.split("?", 1)[0]
        if path.endswith("/messages/count_tokens"):
            self._json({"input_tokens": 12})
        elif path.endswith("/messages"):
            self.server.count("anthropic")
            if request.get("stream"):
                self._send(200, anthropic_stream(model), "text/event-stream")
            else:
                self._json(anthropic_message(model))
        elif path.endswith("/responses"):
            self.server.count("responses")
            self._send(200, responses_stream(model), "text/event-stream")
        else:
            self._json({})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()

    def count(self, api: str) -> None:
        with self._lock:
            self.requests[api] += 1


class MockModelServer:
    """The mock on a free loopback port, served from a background thread while in a ``with``."""

    def __init__(self) -> None:
        self._server = _Server()
        self._thread = threading.Thread(target=self._server.serve_forever, name="bench-mock", daemon=True)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` (Claude Code adds ``/v1/messages`` itself)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def requests(self, api: str) -> int:
        """Model requests answered so far for ``api`` (``anthropic`` or ``responses``)."""
        return self._server.requests[api]

    def __enter__(self) -> MockModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def stream_events(body: bytes) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(event, data)`` of a server-sent event stream (what a client reads back; for tests)."""
    for block in body.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields and "data" in fields:
            yield fields["event"], json.loads(fields["data"])
