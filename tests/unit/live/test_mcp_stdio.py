"""The stdio MCP transport without a process: messages in, messages out (the real client drives it in
tests/integration/test_mcp.py)."""

from __future__ import annotations

import io
import json
import time
from typing import Any

from cluster.mcp_stdio import HANDSHAKE_VERSIONS, METHOD_NOT_FOUND, PARSE_ERROR, StdioServer

TOOLS = [{"name": "memory_search", "description": "d", "inputSchema": {"type": "object", "properties": {}}}]


def _server(call: Any = None) -> tuple[StdioServer, io.BytesIO]:
    out = io.BytesIO()
    server = StdioServer(
        "omray", "0", lambda: TOOLS, call or (lambda name, args: {"ok": True, "name": name}), out
    )
    return server, out


def _answers(out: io.BytesIO, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    while out.getvalue().count(b"\n") < count and time.monotonic() < deadline:
        time.sleep(0.01)  # list and call answer from worker threads
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_initialize_negotiates_the_version_and_notifications_get_no_answer() -> None:
    server, out = _server()
    for asked in ("2025-06-18", "1999-01-01"):
        server.handle_line(
            json.dumps(
                {"jsonrpc": "2.0", "id": asked, "method": "initialize", "params": {"protocolVersion": asked}}
            ).encode()
        )
    server.handle_line(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    server.handle_line(b'{"jsonrpc": "2.0", "id": 9, "method": "ping"}')
    first, second, ping = _answers(out, 3)
    assert first["result"]["protocolVersion"] == "2025-06-18"
    assert second["result"]["protocolVersion"] == HANDSHAKE_VERSIONS[-1]
    assert first["result"]["capabilities"] == {"tools": {"listChanged": False}}
    assert ping == {"jsonrpc": "2.0", "id": 9, "result": {}}


def test_tools_are_listed_and_called_and_errors_are_json_rpc_errors() -> None:
    def call(name: str, arguments: dict[str, Any]) -> dict[str, object]:
        if name == "boom":
            raise RuntimeError("memory text that must not leak")
        return {"ok": name != "bad", "echo": arguments}

    server, out = _server(call)
    server.handle_line(b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}')
    _answers(out, 1)
    server.handle_line(
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"memory_search","arguments":{"q":1}}}'
    )
    _answers(out, 2)
    server.handle_line(b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bad"}}')
    _answers(out, 3)
    server.handle_line(
        b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"boom","arguments":{}}}'
    )
    server.handle_line(b"{not json")
    server.handle_line(b'{"jsonrpc":"2.0","id":5,"method":"resources/list"}')
    server.handle_line(b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"arguments":[]}}')
    by_id = {answer.get("id"): answer for answer in _answers(out, 7)}
    assert by_id[1]["result"]["tools"] == TOOLS
    ok = by_id[2]["result"]
    assert ok["isError"] is False and ok["structuredContent"] == {"ok": True, "echo": {"q": 1}}
    assert json.loads(ok["content"][0]["text"]) == ok["structuredContent"]
    assert by_id[3]["result"]["isError"] is True
    assert by_id[4]["error"]["message"] == "tools/call failed (RuntimeError)"
    assert by_id[None]["error"]["code"] == PARSE_ERROR
    assert by_id[5]["error"]["code"] == METHOD_NOT_FOUND
    assert by_id[6]["error"]["code"] == -32602


def test_serve_returns_when_stdin_closes() -> None:
    server, out = _server()
    stream = io.BytesIO(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    assert server.serve(stream) == 0
    assert json.loads(out.getvalue()) == {"jsonrpc": "2.0", "id": 1, "result": {}}
