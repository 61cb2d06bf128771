"""``omray mcp --transport http``: the SDK's streamable HTTP app, behind two checks of omray's own.

Outermost, :class:`cluster.servers.web_auth.WebGuard`: the exact Host, no browser Origin, the bearer
token. Then :class:`JsonRpcCheck`: a POST whose body is not one JSON-RPC message MCP accepts
(:func:`cluster.servers.mcp_stdio.check_message`, the same rules as the stdio transport) gets a JSON-RPC
error answer with HTTP 400, its own id when that id is valid, instead of the SDK's validation dump
or no answer at all (the SDK takes a request with an object id for a notification: ``202``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from cluster.servers.mcp_stdio import PARSE_ERROR, check_message
from cluster.servers.web_auth import ASGIApp, GuardPolicy, Message, Receive, Scope, Send, WebGuard

HTTP_HOST = "127.0.0.1"
"""Address the streamable HTTP transport binds (loopback only)."""
HTTP_PATH = "/mcp"
"""Path of the streamable HTTP endpoint."""
MAX_BODY_BYTES = 4 * 1024 * 1024
"""Largest request body read (the SDK's own limit)."""


class JsonRpcCheck:
    """ASGI middleware answering a malformed JSON-RPC POST itself (400 and a JSON-RPC error)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            if size > self.max_body_bytes:
                await _answer(send, 413, None, PARSE_ERROR, "request body too large")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            parsed = json.loads(body)
        except ValueError:
            await _answer(send, 400, None, PARSE_ERROR, "parse error: not JSON")
            return
        problem = check_message(parsed)
        if problem is not None:
            await _answer(send, 400, *problem)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _answer(send: Send, status: int, request_id: object, code: int, text: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": text}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


PROJECT_HEADER = "x-omray-project"
"""Response header naming the project folder the server serves (percent-encoded), on answers
that passed the token check only: ``omray integrate --check`` compares it with the project."""


class ProjectHeader:
    """Adds :data:`PROJECT_HEADER` to every response of the app it wraps."""

    def __init__(self, app: ASGIApp, project: Path) -> None:
        self._app = app
        self._value = quote(str(project)).encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {
                    **message,
                    "headers": [*message.get("headers", []), (PROJECT_HEADER.encode(), self._value)],
                }
            await send(message)

        await self._app(scope, receive, named)


def http_app(server: Any, port: int, token: str | None, project: Path | None = None) -> Any:
    """The streamable HTTP app of the SDK ``server`` on ``127.0.0.1:port``: :class:`WebGuard` (the
    bearer ``token``; ``None``: no authentication), then (with ``project``) :class:`ProjectHeader`,
    then :class:`JsonRpcCheck`, then the SDK."""
    from mcp.server.transport_security import TransportSecuritySettings

    policy = GuardPolicy.for_bind(HTTP_HOST, port, token)
    # The SDK's own check allows any localhost port as Origin; ours runs first, and the SDK's is
    # narrowed to the same exact lists.
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(policy.allowed_hosts),
        allowed_origins=list(policy.allowed_origins),
    )
    app = server.streamable_http_app(
        streamable_http_path=HTTP_PATH,
        host=HTTP_HOST,
        transport_security=security,
        max_request_body_size=MAX_BODY_BYTES,
    )
    inner: ASGIApp = JsonRpcCheck(app)
    if project is not None:
        inner = ProjectHeader(inner, project)
    return WebGuard(inner, policy)


def serve_http(server: Any, port: int, token: str | None, project: Path | None = None) -> None:
    """Serve the SDK ``server`` for ``project`` on ``127.0.0.1:port`` (path ``/mcp``) until stopped."""
    import uvicorn

    app = http_app(server, port, token, project)
    uvicorn.run(app, host=HTTP_HOST, port=port, log_level="warning", access_log=False)
