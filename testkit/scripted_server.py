"""A small OpenAI-compatible HTTP server for tests, bound to 127.0.0.1 on a free port.

It answers ``POST .../chat/completions``, ``POST .../embeddings``, ``POST .../rerank`` and the
Anthropic ``POST .../v1/messages`` (:mod:`testkit.anthropic_messages`, for the ``claude`` CLI) from
queues of programmed :class:`Reply` values (tool calls, text, invalid JSON arguments, HTTP errors,
slow replies), falling back to default responders when a queue is empty, and records every
request body it receives so a test can assert what the client sent::

    with ScriptedServer() as server:
        server.push_chat(chat_tool_calls(("record_observations", {"observations": []})), chat_text("done"))
        client = OpenAIChatModel(server.base_url, "sk-test", timeout_s=5, max_retries=0)
        ...
        assert server.chat_requests[1].body["messages"][-1]["role"] == "tool"

The server runs in a background thread and stops when the ``with`` block exits (slow replies are
cut short then). It never listens beyond the loopback interface.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from testkit.anthropic_stream import event_stream

Route = str
"""``chat``, ``embeddings``, ``rerank`` or ``messages``."""


@dataclass(frozen=True)
class Reply:
    """One programmed HTTP answer."""

    status: int = 200
    """HTTP status code."""
    body: Any = None
    """JSON-serialisable value, or ``bytes`` sent as they are (e.g. a malformed body)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers."""
    delay_s: float = 0.0
    """Seconds to wait before answering (cut short when the server stops)."""
    content_type: str = "application/json"
    """``Content-Type`` of the answer."""


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    method: str
    """HTTP method."""
    path: str
    """Request path, e.g. ``/v1/chat/completions``."""
    headers: Mapping[str, str]
    """Request headers (lower-cased names)."""
    body: Any
    """Parsed JSON body, or the raw text when it was not JSON."""


# --- reply builders --------------------------------------------------------------------------------

_call_ids = itertools.count(1)


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chat_completion(
    message: Mapping[str, Any], finish_reason: str, usage: tuple[int, int] = (10, 5)
) -> dict[str, Any]:
    """A ``chat.completion`` body with one choice."""
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "message": dict(message), "finish_reason": finish_reason}],
        "usage": _usage(*usage),
    }


def chat_tool_calls(
    *calls: tuple[str, object] | tuple[str, object, str],
    text: str | None = None,
    usage: tuple[int, int] = (10, 5),
    delay_s: float = 0.0,
) -> Reply:
    """A reply asking for tool calls ``(name, arguments[, call_id])``.

    ``arguments`` that are a ``str`` are sent as they are (so invalid JSON can be scripted);
    anything else is JSON-encoded. Call ids default to unique ``call_<n>`` values.
    """
    tool_calls = []
    for call in calls:
        name, arguments = call[0], call[1]
        call_id = call[2] if len(call) == 3 else f"call_{next(_call_ids)}"
        encoded = arguments if isinstance(arguments, str) else json.dumps(arguments)
        tool_calls.append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": encoded}}
        )
    message = {"role": "assistant", "content": text, "tool_calls": tool_calls}
    return Reply(body=chat_completion(message, "tool_calls", usage), delay_s=delay_s)


def chat_text(text: str, usage: tuple[int, int] = (10, 5), delay_s: float = 0.0) -> Reply:
    """A final assistant reply without tool calls."""
    return Reply(body=chat_completion({"role": "assistant", "content": text}, "stop", usage), delay_s=delay_s)


def http_error(status: int, *, retry_after_ms: int | None = 1, should_retry: bool | None = None) -> Reply:
    """An HTTP error in the OpenAI error shape.

    ``retry_after_ms`` keeps the client's retry backoff short (1 ms by default) so tests stay fast;
    ``should_retry`` sets ``x-should-retry``, which the ``openai`` client obeys.
    """
    headers: dict[str, str] = {}
    if retry_after_ms is not None:
        headers["retry-after-ms"] = str(retry_after_ms)
    if should_retry is not None:
        headers["x-should-retry"] = "true" if should_retry else "false"
    body = {"error": {"message": f"scripted error {status}", "type": "scripted", "code": str(status)}}
    return Reply(status=status, body=body, headers=headers)


def embeddings_reply(vectors: Sequence[Sequence[float]]) -> Reply:
    """An ``/embeddings`` reply with these vectors, in order."""
    data = [
        {"object": "embedding", "index": index, "embedding": list(vector)}
        for index, vector in enumerate(vectors)
    ]
    return Reply(body={"object": "list", "data": data, "model": "scripted", "usage": _usage(len(data), 0)})


def rerank_reply(results: Sequence[tuple[int, float]]) -> Reply:
    """A ``/rerank`` reply with ``(index, relevance_score)`` results, in the given order."""
    return Reply(body={"results": [{"index": index, "relevance_score": score} for index, score in results]})


# --- default responders ----------------------------------------------------------------------------


def hash_vector(text: str, dimensions: int = 8) -> list[float]:
    """A deterministic, non-zero vector for ``text`` (no meaning: equal texts, equal vectors)."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    values = [(digest[i % len(digest)] - 127.5) / 127.5 for i in range(dimensions)]
    return values if any(values) else [1.0, *values[1:]]


def word_overlap_scores(query: str, documents: Sequence[str]) -> list[float]:
    """Rerank scores: how many distinct lower-cased query words each document contains."""
    words = set(query.lower().split())
    return [float(len(words & set(document.lower().split()))) for document in documents]


def _no_messages_reply(_body: Mapping[str, Any]) -> Reply:
    return Reply(
        status=500,
        body={"type": "error", "error": {"type": "api_error", "message": "scripted server: no reply queued"}},
        headers={"x-should-retry": "false"},
    )


def _no_chat_reply(_body: Mapping[str, Any]) -> Reply:
    # The client must not retry this: an empty queue is a test scripting mistake.
    return Reply(
        status=500,
        body={"error": {"message": "scripted server: no chat reply queued", "type": "scripted"}},
        headers={"x-should-retry": "false"},
    )


# --- the server ----------------------------------------------------------------------------------------


class ScriptedServer:
    """OpenAI-compatible endpoints answered from programmed replies; a context manager.

    Routes are matched on the path suffix, so ``/v1/embeddings`` and ``/embeddings`` (and
    ``/rerank``, ``/v1/rerank``) all work. Thread-safe: replies are popped and requests recorded
    under one lock.
    """

    def __init__(
        self,
        *,
        chat_default: Callable[[Mapping[str, Any]], Reply] = _no_chat_reply,
        embed: Callable[[str], Sequence[float]] = hash_vector,
        rerank: Callable[[str, Sequence[str]], Sequence[float]] = word_overlap_scores,
        models: Sequence[str] | None = None,
        messages_default: Callable[[Mapping[str, Any]], Reply] = _no_messages_reply,
        responses_default: Callable[[Mapping[str, Any]], Reply] = _no_chat_reply,
    ) -> None:
        self.responses_default = responses_default
        self.chat_default = chat_default
        self.messages_default = messages_default
        self.models = None if models is None else tuple(models)
        """Ids ``GET .../models`` lists; ``None``: that route answers 404, as on servers without it."""
        self.embed = embed
        self.rerank_scores = rerank
        self._queues: dict[Route, deque[Reply]] = {
            "chat": deque(),
            "embeddings": deque(),
            "rerank": deque(),
            "messages": deque(),
        }
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # programming ----------------------------------------------------------------------------------

    def push_chat(self, *replies: Reply) -> None:
        """Queue replies for ``/chat/completions``, answered in order."""
        self._push("chat", replies)

    def push_embeddings(self, *replies: Reply) -> None:
        """Queue replies for ``/embeddings`` (the default embeds with ``embed`` when empty)."""
        self._push("embeddings", replies)

    def push_rerank(self, *replies: Reply) -> None:
        """Queue replies for ``/rerank`` (the default scores with ``rerank`` when empty)."""
        self._push("rerank", replies)

    def push_messages(self, *replies: Reply) -> None:
        """Queue replies (bodies: Messages API ``message`` values) for ``/v1/messages``, in order."""
        self._push("messages", replies)

    def _push(self, route: Route, replies: Sequence[Reply]) -> None:
        with self._lock:
            self._queues[route].extend(replies)

    def pending(self, route: Route) -> int:
        """Replies still queued for a route."""
        with self._lock:
            return len(self._queues[route])

    # inspection -----------------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def requests_to(self, suffix: str) -> list[RecordedRequest]:
        """Requests whose path ends with ``suffix``."""
        return [request for request in self.requests if request.path.endswith(suffix)]

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """Requests to ``/chat/completions``."""
        return self.requests_to("/chat/completions")

    @property
    def messages_requests(self) -> list[RecordedRequest]:
        """Requests to the Anthropic ``/v1/messages`` (the query string, e.g. ``?beta=true``, ignored)."""
        return [r for r in self.requests if r.path.partition("?")[0].endswith("/v1/messages")]

    @property
    def responses_requests(self) -> list[RecordedRequest]:
        """Requests to the OpenAI ``/v1/responses`` (what ``codex exec`` calls)."""
        return self.requests_to("/v1/responses")

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        if self._httpd is None:
            raise RuntimeError("ScriptedServer is not running; use it as a context manager")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``, the base URL OpenAI clients expect."""
        return self.root_url + "/v1"

    # lifecycle ----------------------------------------------------------------------------------------

    def __enter__(self) -> ScriptedServer:
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, args=(0.05,), name="scripted-server", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # answering ----------------------------------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next(self, route: Route) -> Reply | None:
        with self._lock:
            queue = self._queues[route]
            return queue.popleft() if queue else None

    def reply_for(self, path: str, body: Any) -> Reply:
        """The reply to a request (queued first, else the route's default)."""
        payload = body if isinstance(body, Mapping) else {}
        path = path.partition("?")[0]
        if path.endswith("/v1/messages/count_tokens"):
            return Reply(body={"input_tokens": 10})
        if path.endswith("/v1/messages"):
            return self._messages_reply(payload)
        if path.endswith("/v1/responses"):
            return self.responses_default(payload)
        if path.endswith("/chat/completions"):
            return self._next("chat") or self.chat_default(payload)
        if path.endswith("/embeddings"):
            return self._next("embeddings") or self._default_embeddings(payload)
        if path.endswith("/rerank"):
            return self._next("rerank") or self._default_rerank(payload)
        return Reply(status=404, body={"error": {"message": "no such route", "type": "scripted"}})

    def _messages_reply(self, body: Mapping[str, Any]) -> Reply:
        reply = self._next("messages") or self.messages_default(body)
        if body.get("stream") and reply.status == 200 and isinstance(reply.body, Mapping):
            return Reply(
                body=event_stream(reply.body),
                headers=reply.headers,
                delay_s=reply.delay_s,
                content_type="text/event-stream",
            )
        return reply

    def _default_embeddings(self, body: Mapping[str, Any]) -> Reply:
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else inputs if isinstance(inputs, list) else []
        return embeddings_reply([self.embed(str(text)) for text in texts])

    def _default_rerank(self, body: Mapping[str, Any]) -> Reply:
        documents = [str(document) for document in body.get("documents") or []]
        scores = self.rerank_scores(str(body.get("query", "")), documents)
        ranked = sorted(enumerate(scores), key=lambda item: (-item[1], item[0]))
        top_n = body.get("top_n")
        if isinstance(top_n, int) and top_n >= 0:
            ranked = ranked[:top_n]
        return rerank_reply(ranked)

    def wait_or_stop(self, delay_s: float) -> bool:
        """Wait ``delay_s`` seconds; ``False`` when the server stopped meanwhile."""
        return not self._stopping.wait(delay_s)


def _handler_for(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Silence the default stderr access log."""

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode("utf-8", errors="replace")
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw
            headers = {key.lower(): value for key, value in self.headers.items()}
            server._record(RecordedRequest("POST", self.path, headers, body))
            reply = server.reply_for(self.path, body)
            if reply.delay_s > 0 and not server.wait_or_stop(reply.delay_s):
                return
            self._send(reply)

        def do_GET(self) -> None:
            headers = {key.lower(): value for key, value in self.headers.items()}
            server._record(RecordedRequest("GET", self.path, headers, None))
            if self.path.endswith("/models") and server.models is not None:
                listed = [{"id": name, "object": "model", "owned_by": "scripted"} for name in server.models]
                self._send(Reply(body={"object": "list", "data": listed}))
                return
            self._send(Reply(status=404, body={"error": {"message": "no such route", "type": "scripted"}}))

        def _send(self, reply: Reply) -> None:
            payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode("utf-8")
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(payload)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass  # the client gave up (e.g. its timeout fired); nothing to answer

    return Handler


def _serve_in_child(factory: Callable[..., Any], args: tuple[Any, ...], conn: Any) -> None:
    """Child process body of :class:`ScriptedServerProcess`: serve until told to stop."""
    with ScriptedServer(chat_default=factory(*args)) as server:
        conn.send(server.base_url)
        while True:
            command = conn.recv()
            if command == "count":
                conn.send(len(server.chat_requests))
            else:
                break


class ScriptedServerProcess:
    """A :class:`ScriptedServer` in a process of its own; a context manager.

    For benchmarks: a model is another machine, so its answers must not take the measuring
    process's GIL (in process, 32 concurrent requests' JSON would). ``factory(*args)`` builds the
    chat responder in the child (both picklable: a class or module-level function and plain
    values).
    """

    START_TIMEOUT_S = 60.0

    def __init__(self, factory: Callable[..., Any], *args: Any) -> None:
        self._factory, self._args = factory, args
        self._conn: Any = None
        self._process: Any = None
        self.base_url = ""

    def __enter__(self) -> ScriptedServerProcess:
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # never fork a process that holds Ray threads
        parent, child = context.Pipe()
        self._process = context.Process(
            target=_serve_in_child, args=(self._factory, self._args, child), daemon=True
        )
        self._process.start()
        self._conn = parent
        if not parent.poll(self.START_TIMEOUT_S):
            self._process.kill()
            raise RuntimeError("the scripted model server process did not start")
        self.base_url = str(parent.recv())
        return self

    def chat_request_count(self) -> int:
        """Requests to ``/chat/completions`` so far."""
        self._conn.send("count")
        return int(self._conn.recv())

    def __exit__(self, *exc_info: object) -> None:
        with contextlib.suppress(OSError, ValueError):  # the child is gone already
            self._conn.send("stop")
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()
