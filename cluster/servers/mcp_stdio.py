"""MCP's stdio transport with the standard library: JSON-RPC 2.0 messages, one per line.

``omray mcp`` is started by the agent when a session starts, and the agent's first model request
waits for its tool list. The official SDK takes longer to import (over half a second on a 2-core
machine) than that list should take to arrive, so the stdio transport is served here: it answers
``initialize`` at once and ``tools/list`` as soon as the settings are read, while the read service
loads in the background. The streamable HTTP transport stays on the SDK (``cluster.servers.mcp_server``).

What is served: ``initialize`` (the client's protocol version when it is one of
:data:`HANDSHAKE_VERSIONS`, else the newest), ``ping``, ``tools/list``, ``tools/call`` (each in a
worker thread, so a slow search never holds up a ping), notifications (ignored), and JSON-RPC
errors for the rest. The integration tests drive it with the official SDK client, and with the
real Claude Code and Codex by hand.

It stops cleanly, exit status 0 and no traceback, when stdin closes, on SIGTERM and on SIGINT.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""MCP revisions negotiated with ``initialize`` (oldest to newest)."""
MAX_LINE_BYTES = 16 * 1024 * 1024
"""Longest message read."""

DRAIN_TIMEOUT_S = 30.0
"""Longest wait, once stdin closes, for the answers to requests already read."""

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


def check_message(message: object) -> tuple[object, int, str] | None:
    """Why ``message`` is not a JSON-RPC 2.0 message MCP accepts, as ``(id, code, text)`` of the
    error answer, or ``None`` when it is one (a request, a notification, or a response).

    The id answered is the message's own when it is a valid id, else ``null``. MCP's ``params`` are
    an object (JSON-RPC's by-position list is not used; ``null`` counts as omitted, as the SDK takes
    it), ids are strings or integers, and
    batches are not part of MCP since 2025-06-18. Pure: the HTTP transport checks with it too.
    """
    if not isinstance(message, dict):
        if isinstance(message, list):
            return None, INVALID_REQUEST, "invalid request: batches are not supported; send one message"
        return None, INVALID_REQUEST, "invalid request: a message is a JSON object"
    has_id = "id" in message
    request_id = message.get("id")
    if has_id and (not isinstance(request_id, (str, int)) or isinstance(request_id, bool)):
        return None, INVALID_REQUEST, "invalid request: id must be a string or an integer"
    if message.get("jsonrpc") != "2.0":
        return request_id, INVALID_REQUEST, 'invalid request: jsonrpc must be "2.0"'
    if "method" not in message:
        if has_id and ("result" in message) != ("error" in message):
            return None  # a client's answer to a server request
        return request_id, INVALID_REQUEST, "invalid request: no method"
    if not isinstance(message["method"], str) or not message["method"]:
        return request_id, INVALID_REQUEST, "invalid request: method must be a non-empty string"
    if message.get("params") is not None and not isinstance(message["params"], dict):
        return request_id, INVALID_PARAMS, "invalid params: params must be an object"
    return None


ListTools = Callable[[], list[dict[str, Any]]]
"""The tools as MCP lists them (``name``, ``description``, ``inputSchema``); may wait for settings."""
CallTool = Callable[[str, dict[str, Any]], dict[str, object]]
"""``call(name, arguments) -> answer``: always an answer dict (``{"ok": false, ...}`` for errors)."""


class _Stop(Exception):
    """Raised in the main thread by SIGTERM or SIGINT."""


class _Workers:
    """At most ``size`` requests at a time, each on a daemon thread (``threading`` only:
    ``concurrent.futures`` would add ``logging`` to the start the agent waits for).

    :meth:`drain` waits for the requests submitted so far; after :meth:`stop` a request that has
    not started yet is dropped, as a cancelled future would be.
    """

    def __init__(self, size: int) -> None:
        self._slots = threading.BoundedSemaphore(size)
        self._idle = threading.Condition()
        self._pending = 0
        self._stopped = False

    def submit(self, work: Callable[..., None], *args: Any) -> None:
        with self._idle:
            self._pending += 1
        threading.Thread(target=self._run, args=(work, args), name="omray-mcp", daemon=True).start()

    def _run(self, work: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            with self._slots:
                if not self._stopped:
                    work(*args)
        finally:
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def drain(self, timeout_s: float) -> None:
        """Wait until every submitted request has ended, or ``timeout_s`` passed."""
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0, timeout=timeout_s)

    def stop(self) -> None:
        """Drop the requests still waiting for a slot (the running ones finish on their own)."""
        self._stopped = True


class StdioServer:
    """Serves one MCP client on a pair of byte streams; :meth:`serve` returns when it should exit."""

    def __init__(
        self,
        name: str,
        version: str,
        list_tools: ListTools,
        call_tool: CallTool,
        output: BinaryIO | None = None,
        workers: int = 4,
    ) -> None:
        self.name = name
        self.version = version
        self.list_tools = list_tools
        self.call_tool = call_tool
        self.output = output if output is not None else sys.stdout.buffer
        self._write_lock = threading.Lock()
        self._pool = _Workers(workers)

    # -- messages ------------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        """Write one message as one line (safe from any thread)."""
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
        with self._write_lock:
            self.output.write(data + b"\n")
            self.output.flush()

    def _error(self, request_id: object, code: int, message: str) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})

    def _result(self, request_id: object, result: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def handle_line(self, line: bytes) -> None:
        """Handle one line from the client (a request, a notification, or garbage)."""
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError:
            self._error(None, PARSE_ERROR, "parse error: not JSON")
            return
        problem = check_message(message)
        if problem is not None:
            request_id, code, text = problem
            notification = isinstance(message, dict) and "id" not in message
            if not (notification and code == INVALID_PARAMS):  # a notification gets no answer
                self._error(request_id, code, text)
            return
        if "method" not in message:
            return  # an answer to a request we never send
        method: str = message["method"]
        if "id" not in message:
            return  # notifications (initialized, cancelled, ...) need no answer
        request_id = message["id"]
        params: dict[str, Any] = message.get("params") or {}
        if method == "initialize":
            self._result(request_id, self._initialize(params))
        elif method == "ping":
            self._result(request_id, {})
        elif method == "tools/list":
            self._submit(self._list, request_id)
        elif method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments") or {}
            if not isinstance(name, str) or not isinstance(arguments, dict):
                self._error(
                    request_id, INVALID_PARAMS, "tools/call needs a tool name and an arguments object"
                )
                return
            self._submit(self._call, request_id, name, arguments)
        else:
            self._error(request_id, METHOD_NOT_FOUND, f"method not found: {method}")

    def _submit(self, work: Callable[..., None], *args: Any) -> None:
        self._pool.submit(work, *args)

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        version = asked if asked in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
        return {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": self.name, "version": self.version},
        }

    def _list(self, request_id: object) -> None:
        try:
            self._result(request_id, {"tools": self.list_tools()})
        except Exception as exc:  # a worker must answer whatever happens; the class name only
            self._error(request_id, INTERNAL_ERROR, f"tools/list failed ({type(exc).__name__})")

    def _call(self, request_id: object, name: str, arguments: dict[str, Any]) -> None:
        try:
            answer = self.call_tool(name, arguments)
            text = json.dumps(answer, ensure_ascii=False, allow_nan=False)
        except Exception as exc:  # never memory text in an error: the class name only
            self._error(request_id, INTERNAL_ERROR, f"tools/call failed ({type(exc).__name__})")
            return
        result = {
            "content": [{"type": "text", "text": text}],
            "structuredContent": answer,
            "isError": answer.get("ok") is False,
        }
        self._result(request_id, result)

    # -- the loop ------------------------------------------------------------------------------

    def serve(self, stream: BinaryIO) -> int:
        """Read messages until stdin closes or a stop signal arrives; returns the exit status (0)."""

        def stop(signum: int, frame: object) -> None:
            raise _Stop

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            while True:
                line = stream.readline(MAX_LINE_BYTES + 1)
                if not line:
                    break
                self.handle_line(line)
            # stdin closed: the requests already read are still answered (a client may write its
            # last request and close its end at once), unless a stop signal comes first.
            self._pool.drain(DRAIN_TIMEOUT_S)
        except (_Stop, BrokenPipeError, KeyboardInterrupt):
            pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._pool.stop()
        return 0
