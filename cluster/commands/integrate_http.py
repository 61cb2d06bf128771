"""``omray integrate ... --mcp-transport http``: the agent reaches a running ``omray mcp --transport
http`` with the bearer token of ``cluster.servers.web_auth`` instead of starting a stdio server.

Claude Code's ``.mcp.json`` entry names the URL and a ``headersHelper``, a command Claude Code runs
at each connection (``omray mcp --auth-header --token-file ...``, printing the ``Authorization``
header), so the project file, often committed, never holds the token. Codex runs no such helper:
its entry in ``~/.codex/config.toml`` holds the header itself (``http_headers``), and the file is
written 0600.
"""

from __future__ import annotations

import enum
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.errors import OmrayError


class McpPortError(OmrayError):
    """``--mcp-port`` is not a TCP port."""


class McpTransport(enum.StrEnum):
    """``--mcp-transport`` of ``omray integrate``."""

    STDIO = "stdio"
    HTTP = "http"


def mcp_http_for(transport: McpTransport, port: int, remove: bool) -> tuple[McpHttp | None, str]:
    """The HTTP entry to write and its token (made now when missing), or ``(None, "")`` for stdio."""
    if transport is McpTransport.STDIO or remove:
        return None, ""
    from cluster.servers.web_auth import default_token_path, load_or_create_token

    if not 0 < port < 65536:
        raise McpPortError(f"--mcp-port must be a TCP port (1-65535), not {port}")
    path = default_token_path()
    return McpHttp(port, path.absolute()), load_or_create_token(path)


@dataclass(frozen=True)
class McpHttp:
    """Where the agent reaches ``omray mcp --transport http``, and the token file it proves itself with."""

    port: int
    """Port on 127.0.0.1."""
    token_file: Path
    """The bearer token file (``$OMRAY_HOME/auth/web.token``)."""

    @property
    def url(self) -> str:
        """The MCP endpoint."""
        from cluster.servers.mcp_http import HTTP_HOST, HTTP_PATH

        return f"http://{HTTP_HOST}:{self.port}{HTTP_PATH}"


def claude_mcp_entry(command: str, http: McpHttp | None) -> dict[str, Any]:
    """omray's ``.mcp.json`` entry: stdio, or HTTP whose token Claude Code asks ``omray mcp
    --auth-header`` for at each connection (its ``headersHelper``), so the project file never holds it."""
    if http is None:
        return {"command": command, "args": ["mcp"]}
    helper = f"{shlex.quote(command)} mcp --auth-header --token-file {shlex.quote(str(http.token_file))}"
    return {"type": "http", "url": http.url, "headersHelper": helper}


def check_mcp_http(
    http: McpHttp, token: str, project: Path | None = None, timeout_s: float = 3.0
) -> tuple[bool, str]:
    """Whether ``omray mcp --transport http`` answers at ``http.url``, takes ``token`` and (with
    ``project``) serves that project: ``(ok, what was found, or what to do)``."""
    import json
    import urllib.error
    import urllib.request
    from urllib.parse import unquote

    from cluster.servers.mcp_http import PROJECT_HEADER

    hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    request = urllib.request.Request(
        http.url,
        data=json.dumps(hello).encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    home = http.token_file.parent.parent
    start = f"start it: `{start_command(http, project)}` (OMRAY_HOME={home})"
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            served = answer.headers.get(PROJECT_HEADER)
    except urllib.error.HTTPError as error:
        if error.code == 401:
            return (
                False,
                f"{http.url} refuses the token: it runs with another OMRAY_HOME or --token-file; {start}",
            )
        served = error.headers.get(PROJECT_HEADER)  # a session-less ping: 400 after the token check
    except (urllib.error.URLError, OSError, ValueError):
        return False, f"nothing answers at {http.url}; {start}"
    if project is None:
        return True, f"{http.url} answers and takes the token"
    if served is None:  # every omray mcp since the header names its project; an older one cannot tell
        return (
            False,
            f"{http.url} takes the token but does not say which project it serves (an older omray mcp?): "
            f"stop it and {start}",
        )
    if Path(unquote(served)) != project:
        return (
            False,
            f"{http.url} serves {unquote(served)}, not {project}: one HTTP server answers for one project "
            f"(stop it, or give this project its own port); {start}",
        )
    return True, f"{http.url} answers and takes the token; it serves {project}"


CODEX_HTTP_SCOPE = (
    "Codex's HTTP entry is global: in every folder Codex runs in, memory tools read {project}'s memory; "
    "for several projects use stdio (the default: each session starts its own server in its folder), or "
    "a port per project, each with its own Codex config (CODEX_HOME)"
)
"""The ``note`` of ``omray integrate codex --mcp-transport http`` (``{project}``: the project served)."""


def start_command(http: McpHttp, project: Path | None) -> str:
    """The command that starts the HTTP server the agent is pointed at, for ``project``."""
    pinned = f" --project {shlex.quote(str(project))}" if project is not None else ""
    return f"omray mcp --transport http --port {http.port}{pinned}"
