"""`omray mcp` as a subprocess, driven by the official `mcp` SDK client (stdio and streamable HTTP)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from actors.models.tokens import token_counter
from actors.read.service import call_tool
from persistence.settings.parse import settings_from_mapping
from persistence.writers.store import Store
from tests.integration.conftest import free_port
from tests.unit.persistence.builders import make_observation, make_part

pytestmark = pytest.mark.integration

SESSION = "mcp-session"
TOOLS = ["memory_search", "recall", "memory_status", "memory_view"]
BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("memory_search", {"query": 5}, "invalid_query"),
    ("memory_search", {"query": "parser", "colour": "red"}, "unknown_arguments"),
    ("memory_search", {"query": "parser", "mode": "hybrid"}, "hybrid_unavailable"),
    ("recall", {"id": "not-hex"}, "invalid_id"),
    ("recall", {}, "invalid_id"),
    ("memory_status", {}, "invalid_session_id"),
    ("memory_view", {"session_id": "  "}, "invalid_session_id"),
    ("memory_view", {"session_id": SESSION, "extra": 1}, "unknown_arguments"),
    ("no_such_tool", {}, "unknown_tool"),
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose database holds two observations of one session."""
    store = Store(tmp_path / "om.sqlite")
    store.commit_observer_part(
        make_part(SESSION, 1, 2),
        [
            make_observation(SESSION, "The parser rejects dates before 1970", seq=1),
            make_observation(SESSION, "Fixed the parser with a new date rule", seq=2),
        ],
    )
    # Exact search only (semantic: null), so the hybrid-mode call below is hybrid_unavailable.
    (tmp_path / "omray.yaml").write_text(
        "observational_memory:\n  storage:\n    database: om.sqlite\n  semantic: null\n"
    )
    return tmp_path


def _server_env() -> dict[str, str]:
    return {"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PATH": os.environ.get("PATH", "")}


async def _exercise(session: ClientSession, project: Path) -> None:
    await session.initialize()
    listed = await session.list_tools()
    assert [tool.name for tool in listed.tools] == TOOLS
    assert all(tool.input_schema["type"] == "object" for tool in listed.tools)

    found = await session.call_tool("memory_search", {"query": "parser"})
    assert found.is_error is False
    answer = found.structured_content
    assert answer["ok"] is True and answer["count"] == 2
    memory_id = answer["results"][0]["id"]

    recalled = await session.call_tool("recall", {"id": memory_id, "session_id": SESSION})
    assert recalled.is_error is False and recalled.structured_content["ok"] is True
    status = await session.call_tool("memory_status", {"session_id": SESSION})
    assert status.is_error is False and "markdown" in status.structured_content
    view = await session.call_tool("memory_view", {"session_id": SESSION})
    assert view.is_error is False and "parser" in view.structured_content["markdown"]

    settings = settings_from_mapping({"storage": {"database": str(project / "om.sqlite")}, "semantic": None})
    for name, arguments, code in BAD_CALLS:
        result = await session.call_tool(name, arguments)
        assert result.is_error is True, name
        assert result.structured_content["error"] == code, (name, arguments)
        direct = call_tool(
            name,
            arguments,
            SESSION,
            db_path=project / "om.sqlite",
            events_path_for=lambda s: project / s / "events.jsonl",
            status_settings=(settings, token_counter(settings.token_encoding).count),
        )
        assert result.structured_content == direct  # the same validation as in-process call_tool


def test_stdio_server_lists_and_calls_every_tool(project: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "cluster.commands.cli", "mcp", "--project", str(project), "--session", SESSION],
        env=_server_env(),
        cwd=str(project),
    )

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await _exercise(session, project)

    anyio.run(main)


def _wait_listening(port: int, process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "omray mcp --transport http exited"
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1.0)
            return
        except httpx.TransportError:
            time.sleep(0.2)
    raise AssertionError("omray mcp --transport http did not listen")


def test_streamable_http_server_on_localhost(project: Path) -> None:
    port = free_port()
    home = project / "omray-home"
    process = subprocess.Popen(
        [sys.executable, "-m", "cluster.commands.cli", "mcp", "--transport", "http", "--port", str(port)],
        cwd=project,
        env={**os.environ, **_server_env(), "OMRAY_HOME": str(home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port, process)
        token = (home / "auth" / "web.token").read_text().strip()

        async def main() -> None:
            async with (
                create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
                streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (read, write),
                ClientSession(read, write) as session,
            ):
                await _exercise(session, project)

        run: Callable[[], Awaitable[None]] = main
        anyio.run(run)
    finally:
        process.terminate()
        process.wait(timeout=10)


def _omray_mcp(project: Path, *args: str) -> subprocess.Popen[bytes]:
    """``omray mcp`` started as the console script starts it (``cluster.commands.entry``)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from cluster.commands.entry import main; sys.argv[0] = 'omray'; main()",
            "mcp",
            *args,
        ],
        cwd=project,
        env={**os.environ, **_server_env()},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _rpc(process: subprocess.Popen[bytes], message: dict[str, Any]) -> dict[str, Any]:
    import json

    assert process.stdin is not None and process.stdout is not None
    process.stdin.write((json.dumps(message) + "\n").encode())
    process.stdin.flush()
    answer: dict[str, Any] = json.loads(process.stdout.readline())
    return answer


_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


@pytest.mark.parametrize("stop", ["stdin", "SIGTERM", "SIGINT"])
def test_stdio_server_exits_cleanly(project: Path, stop: str) -> None:
    import signal

    process = _omray_mcp(project)
    assert _rpc(process, _INITIALIZE)["result"]["protocolVersion"] == "2025-06-18"
    assert [
        t["name"]
        for t in _rpc(process, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})["result"]["tools"]
    ] == TOOLS
    assert process.stdin is not None and process.stderr is not None
    if stop == "stdin":
        process.stdin.close()
    else:
        process.send_signal(getattr(signal, stop))
    assert process.wait(timeout=10) == 0
    assert process.stderr.read() == b""  # no traceback


def test_stdio_server_with_broken_settings_says_why_in_every_answer(project: Path) -> None:
    (project / "omray.yaml").write_text("observational_memory:\n  storage: [not, a, mapping\n")
    process = _omray_mcp(project)
    try:
        _rpc(process, _INITIALIZE)
        listed = _rpc(process, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})["result"]["tools"]
        assert [tool["name"] for tool in listed] == TOOLS
        call = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "memory_search", "arguments": {"query": "x"}},
        }
        result = _rpc(process, call)["result"]
        assert result["isError"] is True
        assert result["structuredContent"]["error"] == "settings_invalid"
        assert "omray.yaml" in result["structuredContent"]["message"]
        unknown = _rpc(process, {"jsonrpc": "2.0", "id": 4, "method": "resources/list"})
        assert unknown["error"]["code"] == -32601
    finally:
        process.terminate()
        process.wait(timeout=10)
