"""``omray mcp`` as a command of the full CLI (its help); the server is ``cluster.mcp_server``."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from cluster.mcp_server import DEFAULT_HTTP_PORT, serve


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
    allow_forget: Annotated[
        bool,
        typer.Option(
            "--allow-forget", help="Also serve the forget tool (removes memory for good; needs `omray up`)."
        ),
    ] = False,
) -> None:
    """Serve memory_search, recall, memory_status and memory_view to MCP clients (no Ray needed);
    with --allow-forget, also forget."""
    raise typer.Exit(code=serve(transport.value, port, project, db, session, allow_forget))
