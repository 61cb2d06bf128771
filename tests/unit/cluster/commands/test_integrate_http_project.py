"""Which project the HTTP MCP server answers for, as ``omray integrate`` checks it (issue 40 item 3)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest
from typer.testing import CliRunner

from cluster.commands.cli import app
from cluster.commands.integrate_http import McpHttp, check_mcp_http, start_command
from cluster.servers.mcp_http import PROJECT_HEADER


class _Stub:
    """An HTTP endpoint answering every POST with ``status`` and, when set, the project header."""

    def __init__(self) -> None:
        self.status = 200
        self.project: str | None = None
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                """Quiet."""

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(stub.status)
                if stub.project is not None:
                    self.send_header(PROJECT_HEADER, quote(stub.project))
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.httpd.server_address[1])


@pytest.fixture
def stub() -> Iterator[_Stub]:
    server = _Stub()
    thread = threading.Thread(target=server.httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def _http(port: int, tmp_path: Path) -> McpHttp:
    return McpHttp(port, tmp_path / "home" / "auth" / "web.token")


def test_the_server_of_this_project_is_ok(stub: _Stub, tmp_path: Path) -> None:
    project = tmp_path / "my project"
    stub.project = str(project)
    ok, detail = check_mcp_http(_http(stub.port, tmp_path), "t", project)
    assert ok and f"serves {project}" in detail
    stub.status = 400  # a session-less ping after the token check: still named
    assert check_mcp_http(_http(stub.port, tmp_path), "t", project)[0]


def test_another_projects_server_is_a_todo_with_the_command_for_this_one(stub: _Stub, tmp_path: Path) -> None:
    project, other = tmp_path / "a", tmp_path / "b"
    stub.project = str(other)
    ok, detail = check_mcp_http(_http(stub.port, tmp_path), "t", project)
    assert not ok and f"serves {other}, not {project}" in detail
    assert f"--project {project}" in detail


def test_a_server_that_does_not_name_its_project_is_not_taken_for_this_one(
    stub: _Stub, tmp_path: Path
) -> None:
    """Before, a server that named no project passed as 'answers and takes the token'."""
    project = tmp_path / "a"
    ok, detail = check_mcp_http(_http(stub.port, tmp_path), "t", project)
    assert not ok and "which project" in detail and f"--project {project}" in detail


def test_the_start_command_pins_the_project_quoted(tmp_path: Path) -> None:
    project = tmp_path / "with space"
    command = start_command(_http(8766, tmp_path), project)
    assert command == f"omray mcp --transport http --port 8766 --project '{project}'"


def _integrate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["integrate", *args])
    return result.exit_code, result.output


def test_check_with_http_prints_the_mcp_line_and_codex_gets_the_scope_note(
    stub: _Stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMRAY_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("OMRAY_SETTINGS", raising=False)
    project = (tmp_path / "proj").resolve()
    project.mkdir()
    stub.project = str(project)
    http = ["--project", str(project), "--check", "--mcp-transport", "http", "--mcp-port", str(stub.port)]
    _, claude = _integrate("claude-code", *http)
    assert f"ok    mcp server: http://127.0.0.1:{stub.port}/mcp" in claude and f"serves {project}" in claude
    assert "mcp scope" not in claude  # Claude Code's entry is per project
    _, codex = _integrate("codex", *http)
    (note,) = [line for line in codex.splitlines() if "mcp scope" in line]
    assert note.split()[0] == "note" and "global" in note and "stdio" in note and str(project) in note


def test_integrate_with_http_prints_the_start_command_with_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMRAY_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("OMRAY_SETTINGS", raising=False)
    project = (tmp_path / "proj").resolve()
    project.mkdir()
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as closed:
        port = int(closed.server_address[1])  # bound, then closed: nothing answers there
    _, output = _integrate(
        "claude-code", "--project", str(project), "--mcp-transport", "http", "--mcp-port", str(port)
    )
    assert f"`omray mcp --transport http --port {port} --project {project}`" in output
