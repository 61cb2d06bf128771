"""``omray mcp`` as a command of the full CLI (its help); the server is ``cluster.servers.mcp_server``."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from cluster.servers.mcp_server import DEFAULT_HTTP_PORT, auth_header, serve


class Transport(StrEnum):
    """``--transport`` of ``omray mcp``."""

    STDIO = "stdio"
    HTTP = "http"


def mcp_command(
    transport: Annotated[
        Transport, typer.Option(help="stdio (default) or streamable HTTP.")
    ] = Transport.STDIO,
    port: Annotated[int, typer.Option(help="HTTP port on 127.0.0.1.")] = DEFAULT_HTTP_PORT,
    project: Annotated[
        Path | None,
        typer.Option(help="Project directory (default: $CLAUDE_PROJECT_DIR, else the working directory)."),
    ] = None,
    db: Annotated[Path | None, typer.Option(help="Memory database (default: from the settings).")] = None,
    session: Annotated[
        str, typer.Option(envvar="OMRAY_SESSION", help="The caller's session id (scope 'session', recall).")
    ] = "",
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth",
            help="HTTP without the bearer token: every local user can read this memory (warns on stderr).",
        ),
    ] = False,
    token_file: Annotated[
        Path | None,
        typer.Option(help="HTTP bearer token file (default: $OMRAY_HOME/auth/web.token, made on first use)."),
    ] = None,
    print_auth_header: Annotated[
        bool,
        typer.Option(
            "--auth-header",
            help='Print {"Authorization": "Bearer <token>"} and exit (Claude Code\'s headersHelper).',
        ),
    ] = False,
    allow_forget: Annotated[
        bool,
        typer.Option(
            "--allow-forget", help="Also serve the forget tool (removes memory for good; needs `omray up`)."
        ),
    ] = False,
) -> None:
    """Serve memory_search, recall, memory_status and memory_view to MCP clients (no Ray needed).

    Over HTTP every request needs the bearer token from the token file (`omray integrate ...
    --mcp-transport http` wires it into the agent), names the server's own address as Host, and
    carries no browser Origin. With --allow-forget, also forget.
    """
    if print_auth_header:
        raise typer.Exit(code=auth_header(token_file))
    code = serve(
        transport.value,
        port,
        project,
        db,
        session,
        no_auth=no_auth,
        token_file=token_file,
        allow_forget=allow_forget,
    )
    raise typer.Exit(code=code)
