"""``omray mcp``: the read side as an MCP server, over stdio (default) or streamable HTTP.

Tools: ``memory_search``, ``recall``, ``memory_status`` and ``memory_view``, and ``forget`` only when
started with ``--allow-forget`` (it writes, through the running runtime). Every call goes to
``actors.read.service.call_tool``, so arguments are validated there, once, and a bad argument
is the same typed answer an in-process agent gets (``{"ok": false, "error": <code>, "message"}``),
returned as a tool result with ``isError`` set and the answer as structured content. The server
reads durable memory on read-only connections: it needs no Ray runtime and no running agent.

Start-up is lazy, because the agent waits for the tool list before its first model request: the
stdio transport (``cluster.servers.mcp_stdio``, standard library) answers ``initialize`` at once, the tool
list at once too when the record of an earlier settings load says whether hybrid search is on
(``cluster.settings_cache``; else once the settings are read), and tool calls once the read
service has loaded in the background. Settings that cannot be read do not kill the server:
every tool call answers ``settings_invalid`` with the reason, so the agent and its user see it.
The streamable HTTP transport runs on the official ``mcp`` SDK (``build_server``).

The project comes from ``--project``, else ``$CLAUDE_PROJECT_DIR`` (Claude Code sets it), else
the working directory; the settings file and the database are resolved from it as for every
``omray`` command (``--db`` overrides the database).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cluster import settings_cache
from cluster.project_dirs import SESSIONS_DIR, project_dir

if TYPE_CHECKING:
    from actors.read.service import CountTokens, HybridSearch
    from protocol.settings import OmSettings

SERVER_NAME = "omray"
"""Name the server reports to MCP clients."""
SERVER_VERSION = "0.1.0"
"""Version the server reports."""
DEFAULT_HTTP_PORT = 8766
"""Port of the streamable HTTP transport (on 127.0.0.1)."""

TRANSPORTS = ("stdio", "http")
"""``--transport`` values."""
SETTINGS_INVALID = "settings_invalid"
"""Error code of every tool call while the project's settings cannot be read."""


class MemoryTools:
    """The four tools over one project's memory; :meth:`call` always returns an answer dict.

    A plain class, not a dataclass: ``dataclasses`` imports ``inspect``, 5 ms of the MCP server's
    start, which the agent waits for.
    """

    def __init__(
        self,
        project: Path,
        db: Path | None = None,
        *,
        session_id: str = "",
        settings: OmSettings | None = None,
        allow_forget: bool = False,
    ) -> None:
        """The tools of ``project``: its settings file (unless ``settings`` is given), its database
        (unless ``db`` is given). Raises an ``OmrayError`` (e.g. ``SettingsError`` for settings that cannot
        be read, or the hybrid search's own errors)."""
        from actors.models.tokens import token_counter

        self.project = project
        """The project directory (its settings file names the runtime's jobs' settings)."""
        self.settings = settings if settings is not None else load_settings_for(project)
        """Settings in effect (status thresholds, hybrid search)."""
        self.db_path = db.resolve() if db is not None else Path(self.settings.database_path(str(project)))
        """The memory database."""
        self.events_root = project / SESSIONS_DIR
        """Folder holding ``<session>/events.jsonl`` (recall reads source events there)."""
        self.count_tokens: CountTokens = token_counter(self.settings.token_encoding).count
        """Token counter of the settings' encoding (``memory_status``)."""
        self.session_id = session_id
        """The caller's session, when known (``scope: "session"``, recall without ``session_id``)."""
        self.hybrid_search: HybridSearch | None = None
        """Hybrid ``memory_search``, when ``semantic`` is configured."""
        if self.settings.semantic is not None:
            from actors.read.hybrid import hybrid_search_for

            self.hybrid_search = hybrid_search_for(str(self.db_path), self.settings.semantic)
        self.allow_forget = allow_forget
        """Serve the ``forget`` tool (``omray mcp --allow-forget``); it writes through the runtime."""

    def specs(self) -> list[dict[str, Any]]:
        """OpenAI-style function specs of the tools, in listing order."""
        return tool_specs(hybrid=self.hybrid_search is not None, allow_forget=self.allow_forget)

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, object]:
        """Run one tool through the read service (``forget`` through the runtime, when allowed)."""
        from actors.read.service import call_tool
        from protocol.tool_specs import FORGET

        if name == FORGET and self.allow_forget:
            return forget_tool(self.project, arguments)

        return call_tool(
            name,
            arguments,
            self.session_id,
            db_path=self.db_path,
            events_path_for=lambda session: self.events_root / session / "events.jsonl",
            hybrid_search=self.hybrid_search,
            status_settings=(self.settings, self.count_tokens),
        )


def tool_specs(hybrid: bool, allow_forget: bool = False) -> list[dict[str, Any]]:
    """OpenAI-style function specs of the four tools (and ``forget`` when allowed), in listing order."""
    from protocol.tool_specs import (
        forget_spec,
        memory_search_spec,
        memory_status_spec,
        memory_view_spec,
        recall_spec,
    )

    specs = [memory_search_spec(hybrid=hybrid), recall_spec(), memory_status_spec(), memory_view_spec()]
    return [*specs, forget_spec()] if allow_forget else specs


def forget_tool(project: Path, arguments: dict[str, Any]) -> dict[str, object]:
    """The ``forget`` tool: ``OmrayClient.forget`` on the project's runtime; always an answer dict.
    Its arguments are checked first (:func:`protocol.forget.forget_arguments`): bad ones change nothing."""
    from cluster.client import connect
    from protocol.errors import OmrayError
    from protocol.forget import ForgetArgumentsError, forget_arguments

    try:
        checked = forget_arguments(arguments)
    except ForgetArgumentsError as exc:
        return {"ok": False, "error": "invalid_arguments", "message": str(exc)}
    try:
        client = connect(cwd=project)
    except OmrayError as exc:
        return {
            "ok": False,
            "error": "runtime_unavailable",
            "message": f"forget needs `omray up` ({type(exc).__name__})",
        }
    try:
        return dict(client.forget(arguments=checked))
    except OmrayError as exc:
        return {
            "ok": False,
            "error": "runtime_unavailable",
            "message": f"forget failed ({type(exc).__name__})",
        }
    finally:
        client.close()


def mcp_tool(spec: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-style function spec as an MCP tool (``name``, ``description``, ``inputSchema``)."""
    function = spec["function"]
    return {
        "name": function["name"],
        "description": function["description"],
        "inputSchema": function["parameters"],
    }


def load_settings_for(project: Path) -> OmSettings:
    """The project's settings (raises ``SettingsError``)."""
    from persistence.settings.file import load_settings

    return load_settings(cwd=project)


WARM_AFTER_S = 3.0
"""Seconds after start at which the read service loads when no call asked for it sooner: a short
``claude -p`` run never pays for it (the embedder alone costs about a second of CPU, taken from the
agent on a small machine), a longer session finds it warm."""


class LazyTools:
    """Loads the settings at once, then the read service at the first call (or after a while).

    :meth:`list_tools` waits for the settings only; :meth:`call` for everything. A settings error
    is kept and answered by every call (and printed once on stderr, which MCP clients log).
    """

    def __init__(
        self,
        project: Path,
        db: Path | None,
        session_id: str,
        warm_after_s: float = WARM_AFTER_S,
        allow_forget: bool = False,
    ) -> None:
        self.project, self.db, self.session_id = project, db, session_id
        self.allow_forget = allow_forget
        self.warm_after_s = warm_after_s
        self._settings_ready = threading.Event()
        self._wanted = threading.Event()
        self._tools_ready = threading.Event()
        self.settings: OmSettings | None = None
        self.tools: MemoryTools | None = None
        self.error: str | None = None
        # What the settings say about hybrid search, from the record a settings load left (the
        # hooks', the dispatcher's or an earlier server's): the tool list need not wait for YAML
        # and pydantic. None: not recorded for these settings, so the list waits for the load.
        self._hybrid = settings_cache.cached_hybrid(str(project))
        threading.Thread(target=self._load, name="omray-mcp-load", daemon=True).start()

    def _load(self) -> None:
        from protocol.errors import OmrayError

        warm_at = time.monotonic() + self.warm_after_s
        if self._hybrid is not None:
            # The tool list needs nothing more: load nothing (about 0.1 s of CPU for the settings)
            # while the agent is still starting, only for a call or at the warm-up time.
            self._wanted.wait(self.warm_after_s)
        try:
            identity = settings_cache.settings_identity(str(self.project))
            self.settings = load_settings_for(self.project)
            self._hybrid = self.settings.semantic is not None
            settings_cache.remember_settings(str(self.project), identity, self.settings)
        except OmrayError as exc:
            self.error = str(exc)
            self._hybrid = None
            print(f"omray mcp: {exc}", file=sys.stderr, flush=True)
        finally:
            self._settings_ready.set()
        self._wanted.wait(max(0.0, warm_at - time.monotonic()))
        try:
            if self.settings is not None:
                self.tools = MemoryTools(
                    self.project,
                    self.db,
                    session_id=self.session_id,
                    settings=self.settings,
                    allow_forget=self.allow_forget,
                )
        except OmrayError as exc:
            self.error = str(exc)
            print(f"omray mcp: {exc}", file=sys.stderr, flush=True)
        finally:
            self._tools_ready.set()

    def list_tools(self) -> list[dict[str, Any]]:
        """The MCP tool list (hybrid search as the settings say; exact only when they cannot be read).

        Answered at once when the settings' record says whether hybrid search is on, else once
        the settings are loaded.
        """
        hybrid = self._hybrid
        if hybrid is None:
            self._settings_ready.wait()
            hybrid = self._hybrid is True
        return [mcp_tool(spec) for spec in tool_specs(hybrid=hybrid, allow_forget=self.allow_forget)]

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, object]:
        """One tool call (a ``settings_invalid`` answer while the settings cannot be read)."""
        self._wanted.set()
        self._tools_ready.wait()
        if self.tools is None:
            return {
                "ok": False,
                "error": SETTINGS_INVALID,
                "message": f"omray cannot serve memory: {self.error}",
            }
        return self.tools.call(name, arguments)


def serve_stdio(project: Path, db: Path | None, session_id: str, allow_forget: bool = False) -> int:
    """Serve the tools on stdin/stdout until the client closes them or a stop signal arrives."""
    from cluster.servers.mcp_stdio import StdioServer

    tools = LazyTools(project, db, session_id, allow_forget=allow_forget)
    return StdioServer(SERVER_NAME, SERVER_VERSION, tools.list_tools, tools.call).serve(sys.stdin.buffer)


def build_server(tools: MemoryTools) -> Any:
    """A low-level MCP SDK server serving ``tools`` (the SDK does no argument validation of its own)."""
    import json

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

    return Server(SERVER_NAME, version=SERVER_VERSION, on_list_tools=list_tools, on_call_tool=call)


NO_AUTH_WARNING = (
    "omray mcp: WARNING: --no-auth: every local user (and any program they run) can read all of this "
    "project's memory through {url}"
)
"""Printed on stderr when the HTTP transport serves without a token."""


def auth_header(token_file: Path | None) -> int:
    """``omray mcp --auth-header``: print ``{"Authorization": "Bearer <token>"}`` (Claude Code's
    ``headersHelper``), creating the token on first use."""
    import json

    from cluster.servers.web_auth import load_or_create_token
    from protocol.errors import OmrayError

    try:
        token = load_or_create_token(token_file)
    except OmrayError as exc:
        print(f"omray mcp: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"Authorization": f"Bearer {token}"}))
    return 0


def serve(
    transport: str,
    port: int,
    project: Path | None,
    db: Path | None,
    session: str,
    *,
    no_auth: bool = False,
    token_file: Path | None = None,
    allow_forget: bool = False,
) -> int:
    """``omray mcp``: serve over ``transport``; returns the exit status. ``allow_forget`` lists the
    ``forget`` tool (``--allow-forget``), which writes through the runtime."""
    root = Path(project_dir(str(project) if project is not None else None, None))
    if transport == "http":
        from cluster.servers.mcp_http import HTTP_HOST, HTTP_PATH, serve_http
        from cluster.servers.web_auth import default_token_path, load_or_create_token
        from protocol.errors import OmrayError

        token_path = token_file if token_file is not None else default_token_path()
        try:
            token = None if no_auth else load_or_create_token(token_path)
            tools = MemoryTools(root, db, session_id=session.strip(), allow_forget=allow_forget)
        except OmrayError as exc:
            print(f"omray mcp: {exc}", file=sys.stderr)
            return 2
        url = f"http://{HTTP_HOST}:{port}{HTTP_PATH}"
        if token is None:
            print(NO_AUTH_WARNING.format(url=url), file=sys.stderr, flush=True)
        else:
            print(f"omray mcp: serving {url} (bearer token in {token_path})", file=sys.stderr, flush=True)
        serve_http(build_server(tools), port, token, root)
        return 0
    return serve_stdio(root, db, session.strip(), allow_forget)


def run_fast(args: list[str]) -> bool:
    """``omray mcp <args>`` without the full CLI (False for ``--help`` or anything unexpected).

    Exits the process when done: worker threads still running a call are not waited for.
    """
    options: dict[str, str] = {}
    words = list(args)
    names = {"--transport", "--port", "--project", "--db", "--session", "--token-file"}
    flags = {"--no-auth", "--auth-header", "--allow-forget"}
    while words:
        word = words.pop(0)
        if word in flags:
            options[word] = ""
            continue
        name, _, value = word.partition("=")
        if name not in names:
            return False
        if not _:
            if not words:
                return False
            value = words.pop(0)
        options[name] = value
    transport = options.get("--transport", "stdio")
    if transport not in TRANSPORTS or not options.get("--port", "1").isdigit():
        return False
    token_file = Path(options["--token-file"]) if "--token-file" in options else None
    if "--auth-header" in options:
        code = auth_header(token_file)
        sys.stdout.flush()
        os._exit(code)
    code = serve(
        transport,
        int(options.get("--port", DEFAULT_HTTP_PORT)),
        Path(options["--project"]) if "--project" in options else None,
        Path(options["--db"]) if "--db" in options else None,
        options.get("--session", os.environ.get("OMRAY_SESSION", "")),
        no_auth="--no-auth" in options,
        token_file=token_file,
        allow_forget="--allow-forget" in options,
    )
    sys.stdout.flush()
    os._exit(code)
