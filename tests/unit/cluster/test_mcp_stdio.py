"""The stdio MCP transport without a process: messages in, messages out (the real client drives it in
tests/integration/test_mcp.py)."""

from __future__ import annotations

import io
import json
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.mcp_stdio import (
    HANDSHAKE_VERSIONS,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    StdioServer,
)

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


MALFORMED: list[tuple[bytes, object, int]] = [
    # (line, id answered, error code): issue 33, a request with list params got no answer at all
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[1]}', 1, INVALID_PARAMS),
    (b'{"jsonrpc":"2.0","id":2,"method":"ping","params":[]}', 2, INVALID_PARAMS),
    (b'{"jsonrpc":"2.0","id":3,"method":"initialize","params":"x"}', 3, INVALID_PARAMS),
    (b'{"jsonrpc":"2.0","id":5}', 5, INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":6,"method":5}', 6, INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":7,"method":""}', 7, INVALID_REQUEST),
    (b'{"id":8,"method":"ping"}', 8, INVALID_REQUEST),
    (b'{"jsonrpc":"1.0","id":9,"method":"ping"}', 9, INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', None, INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', None, INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', None, INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', None, INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","params":{}}', None, INVALID_REQUEST),
    (b'[{"jsonrpc":"2.0","id":10,"method":"ping"}]', None, INVALID_REQUEST),
    (b"[]", None, INVALID_REQUEST),
    (b'"ping"', None, INVALID_REQUEST),
    (b"null", None, INVALID_REQUEST),
    (b"{broken", None, PARSE_ERROR),
]


@pytest.mark.parametrize(("line", "answered_id", "code"), MALFORMED)
def test_every_malformed_request_gets_one_error_answer(line: bytes, answered_id: object, code: int) -> None:
    server, out = _server()
    assert server.serve(io.BytesIO(line + b"\n")) == 0
    (answer,) = _answers(out, 1)
    assert answer["jsonrpc"] == "2.0" and answer["id"] == answered_id
    assert answer["error"]["code"] == code and answer["error"]["message"]
    assert "result" not in answer


def test_null_params_count_as_omitted() -> None:
    server, out = _server()
    stream = io.BytesIO(
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":null}\n'
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":null}\n'
    )
    assert server.serve(stream) == 0
    ping, call = (json.loads(line) for line in out.getvalue().splitlines())
    assert ping == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert call["id"] == 2 and call["error"]["code"] == INVALID_PARAMS  # a call names its tool


def test_a_notification_with_bad_params_gets_no_answer_and_valid_ones_still_work() -> None:
    server, out = _server()
    stream = io.BytesIO(
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":[1]}\n'
        b'{"jsonrpc":"2.0","id":1,"result":{}}\n'  # an answer from the client: ignored
        b'{"jsonrpc":"2.0","id":"a","method":"ping"}\n'
    )
    assert server.serve(stream) == 0
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [
        {"jsonrpc": "2.0", "id": "a", "result": {}}
    ]


def test_requests_read_before_stdin_closes_are_still_answered() -> None:
    """``printf '<request>' | omray mcp``: a tools/list waiting for the settings was dropped at EOF."""
    release = threading.Event()

    def slow_list() -> list[dict[str, Any]]:
        release.wait(5)
        return TOOLS

    out = io.BytesIO()
    server = StdioServer("omray", "0", slow_list, lambda name, args: {"ok": True}, out)
    threading.Timer(0.2, release.set).start()
    stream = io.BytesIO(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n'
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","arguments":{}}}\n'
    )
    assert server.serve(stream) == 0
    by_id = {answer["id"]: answer for answer in (json.loads(line) for line in out.getvalue().splitlines())}
    assert by_id[1]["result"]["tools"] == TOOLS
    assert by_id[2]["result"]["isError"] is False


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
_MESSAGES = st.one_of(
    _JSON,
    st.fixed_dictionaries(
        {},
        optional={
            "jsonrpc": st.sampled_from(["2.0", "1.0", 2]) | _JSON,
            "id": st.integers() | st.text(max_size=4) | _JSON,
            "method": st.sampled_from(["ping", "tools/list", "initialize", "nope", ""]) | _JSON,
            "params": st.just({}) | _JSON,
            "result": _JSON,
        },
    ),
)


@given(_MESSAGES)
@settings(max_examples=300, deadline=None)
def test_every_request_gets_exactly_one_answer_and_nothing_else_does(message: object) -> None:
    """A message with an ``id`` (or one that is no valid notification) is answered exactly once."""
    server, out = _server()
    assert server.serve(io.BytesIO(json.dumps(message).encode() + b"\n")) == 0
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    valid_id = (
        isinstance(message, dict)
        and isinstance(message.get("id"), (str, int))
        and not isinstance(message.get("id"), bool)
    )
    is_notification = (
        isinstance(message, dict)
        and "id" not in message
        and message.get("jsonrpc") == "2.0"
        and isinstance(message.get("method"), str)
        and message["method"] != ""
    )
    is_response = (
        valid_id
        and isinstance(message, dict)
        and "method" not in message
        and (("result" in message) != ("error" in message))
        and message.get("jsonrpc") == "2.0"
    )
    if is_notification or is_response:
        assert answers == []
    else:
        assert len(answers) == 1
        (answer,) = answers
        assert answer["jsonrpc"] == "2.0" and ("result" in answer) != ("error" in answer)
        assert answer["id"] == (message["id"] if valid_id and isinstance(message, dict) else None)
