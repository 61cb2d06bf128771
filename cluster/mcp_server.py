"""``omray mcp``: the read side as an MCP server (official ``mcp`` SDK), over stdio or streamable HTTP.

Tools: ``memory_search``, ``recall``, ``memory_status`` and ``memory_view``. Every call goes to
``actors.read.service.call_tool``, so arguments are validated there, once, and a bad argument
is the same typed answer an in-process agent gets (``{"ok": false, "error": <code>, "message"}``),
returned as a tool result with ``isError`` set and the answer as structured content. The server
reads durable memory on read-only connections: it needs no Ray runtime and no running agent.

The project comes from ``--project``, else ``$CLAUDE_PROJECT_DIR`` (Claude Code sets it), else
the working directory; the settings file and the database are resolved from it as for every
``omray`` command (``--db`` overrides the database).
"""

from __future__ import annotations

import enum
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from actors.read.service import CountTokens, HybridSearch, call_tool
from cluster.agent_hooks import SESSIONS_SUBDIR, project_dir
from protocol.errors import OmrayError
from protocol.settings import OmSettings
from protocol.tool_specs import memory_search_spec, memory_status_spec, memory_view_spec, recall_spec

logger = logging.getLogger("omray.mcp")

SERVER_NAME = "omray"
"""Name the server reports to MCP clients."""
DEFAULT_HTTP_PORT = 8766
"""Port of the streamable HTTP transport (on 127.0.0.1)."""
HTTP_PATH = "/mcp"
"""Path of the streamable HTTP endpoint."""


class Transport(enum.StrEnum):
    """``--transport`` of ``omray mcp``."""

    STDIO = "stdio"
    HTTP = "http"


@dataclass
class MemoryTools:
    """The four tools over one project's memory; :meth:`call` always returns an answer dict."""

    db_path: Path
    """The memory database."""
    events_root: Path
    """Folder holding ``<session>/events.jsonl`` (recall reads source events there)."""
    settings: OmSettings
    """Settings in effect (status thresholds, hybrid search)."""
    count_tokens: CountTokens
    """Token counter of the settings' encoding (``memory_status``)."""
    session_id: str = ""
    """The caller's session, when known (``scope: "session"``, recall without ``session_id``)."""
    hybrid_search: HybridSearch | None = None
    """Hybrid ``memory_search``, when ``semantic`` is configured."""

    def specs(self) -> list[dict[str, Any]]:
        """OpenAI-style function specs of the tools, in listing order."""
        return [
            memory_search_spec(hybrid=self.hybrid_search is not None),
            recall_spec(),
            memory_status_spec(),
            memory_view_spec(),
        ]

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, object]:
        """Run one tool through the read service."""
        return call_tool(
            name,
            arguments,
            self.session_id,
            db_path=self.db_path,
            events_path_for=lambda session: self.events_root / session / "events.jsonl",
            hybrid_search=self.hybrid_search,
            status_settings=(self.settings, self.count_tokens),
        )


def memory_tools(project: Path, db: Path | None = None, session_id: str = "") -> MemoryTools:
    """The tools of ``project`` (its settings file, its database unless ``db`` is given)."""
    from actors.models.tokens import token_counter
    from persistence.settings_file import load_settings

    settings = load_settings(cwd=project)
    db_path = db.resolve() if db is not None else Path(settings.database_path(str(project)))
    hybrid: HybridSearch | None = None
    if settings.semantic is not None:
        from actors.read.hybrid import hybrid_search_for

        hybrid = hybrid_search_for(str(db_path), settings.semantic)
    return MemoryTools(
        db_path=db_path,
        events_root=project / SESSIONS_SUBDIR,
        settings=settings,
        count_tokens=token_counter(settings.token_encoding).count,
        session_id=session_id,
        hybrid_search=hybrid,
    )


def build_server(tools: MemoryTools) -> Any:
    """A low-level MCP server whose tools are ``tools``; the SDK does no argument validation of its own."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server

    listed = [
        types.Tool(
            name=spec["function"]["name"],
            description=spec["function"]["description"],
            input_schema=spec["function"]["parameters"],
        )
        for spec in tools.specs()
    ]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        # SQLite reads block: run them off the event loop.
        answer = await anyio.to_thread.run_sync(tools.call, params.name, dict(params.arguments or {}))
        text = json.dumps(answer, ensure_ascii=False, allow_nan=False)
        return types.CallToolResult(
            content=[types.TextContent(text=text)],
            structured_content=answer,
            is_error=answer.get("ok") is False,
        )

    return Server(SERVER_NAME, on_list_tools=list_tools, on_call_tool=call)


async def serve_stdio(server: Any) -> None:
    """Serve ``server`` on this process's stdin/stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_http(server: Any, port: int) -> None:
    """Serve ``server`` over streamable HTTP on ``127.0.0.1:port`` (path ``/mcp``)."""
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=HTTP_PATH, host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


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
) -> None:
    """Serve memory_search, recall, memory_status and memory_view to MCP clients (no Ray needed)."""
    import anyio

    try:
        tools = memory_tools(project_dir(project, None), db, session.strip())
    except OmrayError as exc:
        typer.echo(f"omray mcp: {exc}", err=True)
        raise typer.Exit(code=2) from None
    server = build_server(tools)
    if transport is Transport.HTTP:
        serve_http(server, port)
    else:
        anyio.run(serve_stdio, server)
