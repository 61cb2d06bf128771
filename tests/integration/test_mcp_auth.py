"""``omray mcp --transport http`` refuses whoever lacks the token (issue 33): the real server as a
subprocess, the real ``mcp`` client with the token, plain HTTP without it, and another local OS
user (``nobody``) who can neither call it nor read the token file."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.integration.conftest import free_port
from tests.integration.test_mcp import _exercise, _server_env, _wait_listening, project  # noqa: F401

pytestmark = pytest.mark.integration

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@pytest.fixture
def omray_home() -> Iterator[Path]:
    """An OMRAY_HOME other users may traverse up to (so only the token's own modes protect it)."""
    folder = Path(tempfile.mkdtemp(prefix="omray-auth-", dir="/tmp"))
    os.chmod(folder, 0o755)
    yield folder / "home"
    shutil.rmtree(folder, ignore_errors=True)


def _start(folder: Path, home: Path, port: int, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cluster.commands.cli",
            "mcp",
            "--transport",
            "http",
            "--port",
            str(port),
            *extra,
        ],
        cwd=folder,
        env={**os.environ, **_server_env(), "OMRAY_HOME": str(home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _stop(process: subprocess.Popen[bytes]) -> bytes:
    process.terminate()
    process.wait(timeout=10)
    assert process.stderr is not None
    return process.stderr.read()


def _auth_header(home: Path) -> dict[str, str]:
    """What Claude Code's ``headersHelper`` gets: ``omray mcp --auth-header`` (the console-script path)."""
    printed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from cluster.commands.entry import main; main()",
            "mcp",
            "--auth-header",
        ],
        env={**os.environ, **_server_env(), "OMRAY_HOME": str(home)},
        capture_output=True,
        check=True,
    )
    headers: dict[str, str] = json.loads(printed.stdout)
    return headers


def test_the_token_opens_the_server_and_nothing_else_does(project: Path, omray_home: Path) -> None:  # noqa: F811
    port = free_port()
    process = _start(project, omray_home, port)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        _wait_listening(port, process)
        token_file = omray_home / "auth" / "web.token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        token = token_file.read_text().strip()
        headers = _auth_header(omray_home)
        assert headers == {"Authorization": f"Bearer {token}"}

        async def main() -> None:
            async with (
                create_mcp_http_client(headers=headers) as http,
                streamable_http_client(url, http_client=http) as (read, write),
                ClientSession(read, write) as session,
            ):
                await _exercise(session, project)

        anyio.run(main)

        for extra, status in [
            ({}, 401),
            ({"authorization": f"Bearer {token[:-1]}"}, 401),
            ({"authorization": f"Basic {token}"}, 401),
            ({**headers, "origin": "http://localhost:3000"}, 403),
            ({**headers, "origin": f"http://127.0.0.1:{port}"}, 403),  # no browser talks to MCP
            ({**headers, "host": f"attacker.example:{port}"}, 421),  # DNS rebinding
        ]:
            answer = httpx.post(url, json=INITIALIZE, headers={**ACCEPT, **extra}, timeout=10)
            assert answer.status_code == status, extra
            assert "parser" not in answer.text and token not in answer.text

        # the real client without the token gets no session at all
        statuses: list[int] = []

        async def record(response: httpx2.Response) -> None:
            statuses.append(response.status_code)

        async def without_token() -> None:
            async with (
                httpx2.AsyncClient(event_hooks={"response": [record]}) as http,
                streamable_http_client(url, http_client=http) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()

        with pytest.raises(BaseException):  # noqa: B017 (the SDK raises an exception group)
            anyio.run(without_token)
        assert statuses and set(statuses) == {401}

        # malformed JSON-RPC over HTTP: an error answer each, never silence
        for body, code in [
            ({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": [1]}, -32602),
            ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}, -32600),
            ({"jsonrpc": "2.0", "id": 8}, -32600),
        ]:
            answer = httpx.post(url, json=body, headers={**ACCEPT, **headers}, timeout=10)
            assert answer.status_code == 400 and answer.json()["error"]["code"] == code, body
    finally:
        stderr = _stop(process)
    assert b"Traceback" not in stderr and token.encode() not in stderr


NOBODY_CLIENT = r"""
import json, sys, urllib.error, urllib.request
path, url = sys.argv[1], sys.argv[2]
try:
    open(path).read()
    print("read-token")
except PermissionError:
    print("token-unreadable")
for auth in ({}, {"Authorization": "Bearer " + "A" * 43}):
    request = urllib.request.Request(url, data=sys.stdin.buffer.read() or b"{}", method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **auth})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            print("status", answer.status, answer.read()[:200])
    except urllib.error.HTTPError as error:
        print("status", error.code)
"""


def _as_nobody() -> list[str] | None:
    """The command prefix running a program as ``nobody``, or None where this user cannot."""
    if os.geteuid() != 0:
        return None
    for prefix in (
        ["runuser", "-u", "nobody", "--"],
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"],
    ):
        if shutil.which(prefix[0]):
            return prefix
    return None


def test_another_local_user_gets_401_and_cannot_read_the_token(project: Path, omray_home: Path) -> None:  # noqa: F811
    prefix = _as_nobody()
    if prefix is None:
        pytest.skip("switching to the user nobody needs root (runuser or setpriv)")
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 the user nobody can run")
    port = free_port()
    process = _start(project, omray_home, port)
    try:
        _wait_listening(port, process)
        token_file = omray_home / "auth" / "web.token"
        assert token_file.exists()
        ran = subprocess.run(
            [*prefix, python, "-c", NOBODY_CLIENT, str(token_file), f"http://127.0.0.1:{port}/mcp"],
            input=json.dumps(INITIALIZE).encode(),
            capture_output=True,
            timeout=60,
            cwd="/",
        )
        lines = ran.stdout.decode().splitlines()
        assert ran.returncode == 0, ran.stderr.decode()
        assert lines == ["token-unreadable", "status 401", "status 401"]
    finally:
        _stop(process)


def test_no_auth_warns_and_still_checks_origin(project: Path, omray_home: Path) -> None:  # noqa: F811
    port = free_port()
    process = _start(project, omray_home, port, "--no-auth")
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        _wait_listening(port, process)
        assert httpx.post(url, json=INITIALIZE, headers=ACCEPT, timeout=10).status_code == 200
        foreign = {**ACCEPT, "origin": "http://localhost:3000"}
        assert httpx.post(url, json=INITIALIZE, headers=foreign, timeout=10).status_code == 403
    finally:
        stderr = _stop(process).decode()
    assert "WARNING: --no-auth" in stderr and "every local user" in stderr
    assert not (omray_home / "auth").exists()  # no token made when none is used


def test_integrate_wires_the_token_and_checks_the_running_server(project: Path, omray_home: Path) -> None:  # noqa: F811
    port = free_port()
    process = _start(project, omray_home, port)
    env = {**os.environ, **_server_env(), "OMRAY_HOME": str(omray_home)}
    integrate = [
        sys.executable,
        "-m",
        "cluster.commands.cli",
        "integrate",
        "claude-code",
        "--project",
        str(project),
    ]
    http = ["--mcp-transport", "http", "--mcp-port", str(port)]
    try:
        _wait_listening(port, process)
        wired = subprocess.run([*integrate, *http], env=env, capture_output=True, text=True, timeout=120)
        assert wired.returncode == 0, wired.stderr
        assert f"ok    mcp server: http://127.0.0.1:{port}/mcp answers and takes the token" in wired.stdout
        entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["omray"]
        # what Claude Code does with the entry: run the helper in a shell, send its headers
        helper = subprocess.run(entry["headersHelper"], shell=True, env=env, capture_output=True, timeout=60)
        headers = json.loads(helper.stdout)
        answer = httpx.post(entry["url"], json=INITIALIZE, headers={**ACCEPT, **headers}, timeout=10)
        assert answer.status_code == 200 and '"serverInfo"' in answer.text
        # a server started with another OMRAY_HOME has another token: integrate says so
        elsewhere = {**env, "OMRAY_HOME": str(omray_home.parent / "other-home")}
        wrong = subprocess.run(
            [*integrate, *http], env=elsewhere, capture_output=True, text=True, timeout=120
        )
        assert "todo  mcp server" in wrong.stdout and "refuses the token" in wrong.stdout
        # --check says whether the server answers for this project (issue 40 items 3 and 6)
        checked = subprocess.run(
            [*integrate, "--check", *http], env=env, capture_output=True, text=True, timeout=120
        )
        assert f"serves {project.resolve()}" in checked.stdout, checked.stdout
    finally:
        _stop(process)
    other_folder = project.parent / "another-project"
    other_folder.mkdir()
    other_port = free_port()
    other = _start(other_folder, omray_home, other_port)
    try:
        _wait_listening(other_port, other)
        there = ["--mcp-transport", "http", "--mcp-port", str(other_port)]
        checked = subprocess.run(
            [*integrate, "--check", *there], env=env, capture_output=True, text=True, timeout=120
        )
        assert "todo  mcp server" in checked.stdout and f"not {project.resolve()}" in checked.stdout
        assert f"--project {project.resolve()}" in checked.stdout  # how to start the right one
    finally:
        _stop(other)
