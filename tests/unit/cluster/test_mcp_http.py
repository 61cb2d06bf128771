"""``cluster.mcp_http.JsonRpcCheck``: a malformed JSON-RPC POST is answered before the SDK sees it
(the real server and client are in tests/integration/test_mcp_auth.py)."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from cluster.mcp_http import JsonRpcCheck
from tests.unit.cluster.test_mcp_stdio import MALFORMED


def _client(max_body_bytes: int = 4096) -> TestClient:
    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({"sdk_saw": await request.json()})

    app = Starlette(routes=[Route("/mcp", echo, methods=["GET", "POST"])])
    return TestClient(JsonRpcCheck(app, max_body_bytes), base_url="http://127.0.0.1:8766")


@pytest.mark.parametrize(("line", "answered_id", "code"), MALFORMED)
def test_a_malformed_post_gets_a_json_rpc_error_with_400(line: bytes, answered_id: object, code: int) -> None:
    answer = _client().post("/mcp", content=line, headers={"content-type": "application/json"})
    assert answer.status_code == 400
    assert answer.json() == {"jsonrpc": "2.0", "id": answered_id, "error": answer.json()["error"]}
    assert answer.json()["error"]["code"] == code


def test_a_valid_message_reaches_the_app_whole() -> None:
    client = _client()
    for message in [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "x", "result": {}},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "memory_search", "arguments": {}},
        },
    ]:
        answer = client.post("/mcp", json=message)
        assert answer.status_code == 200 and answer.json() == {"sdk_saw": message}


def test_an_oversized_body_is_413() -> None:
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * 5000 + b'"}}'
    answer = _client(max_body_bytes=4096).post("/mcp", content=body)
    assert answer.status_code == 413 and answer.json()["error"]["message"] == "request body too large"
