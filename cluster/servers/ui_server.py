"""``omray ui``: a local page to see what each agent remembers, why, and what it cost.

A Starlette app on 127.0.0.1 (uvicorn), behind :class:`cluster.servers.web_auth.WebGuard` (exact Host and
Origin, the token from a 0600 file; a one-time link ticket in the printed URL, then an ``HttpOnly``
``SameSite=Strict`` cookie). The page (``cluster/servers/ui_static``: plain JS, no CDN) polls small JSON
endpoints:

* ``GET /api/projects``: every project with its sessions (last activity, coverage, memory size,
  jobs in the queue, failures with their cause and fix);
* ``GET /api/session?project=P&session=S``: one session's timeline (:mod:`actors.read.ui_views`);
* ``POST /api/search`` and ``POST /api/recall``: the ``memory_search`` and ``recall`` tools (the
  query travels in the body, never in a URL or a log line);
* ``GET /api/cost?project=P``: token usage (and money) per session and model, by hour;
* ``GET /api/queue``: depth, runs in flight, lanes and each pool's workers and waits, from a
  background poll of the queue, so no page waits on Ray;
* ``POST /api/observe``: dispatch an observe job of a session through a seq (the runtime does the
  work, as for any client);
* ``POST /api/forget``: forget memories or a whole session through the runtime (the page asks for a
  confirmation first), by the client's ``forget``, the path ``omray memory forget`` takes.

Reads run on read-only SQLite connections in worker threads; the only writes are jobs sent to the
runtime through the client's link. Uvicorn's access log is off and nothing here logs a request's
content, so no memory text, query or id reaches a log line.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from actors.read import ui_views
from actors.read.answers import json_safe
from persistence.reads.viewer import UiReader
from protocol.canonical import php_trim
from protocol.errors import InvalidPayloadError, OmrayError
from protocol.events import MAX_SEQ
from protocol.forget import ForgetArgumentsError, forget_arguments
from protocol.settings import OmSettings

if TYPE_CHECKING:
    from cluster.client import OmrayClient
    from cluster.servers.web_auth import LinkTickets

logger = logging.getLogger("omray.ui")

STATIC_DIR: Final[Path] = Path(__file__).resolve().parent / "ui_static"
"""The page and its vendored assets (shipped in the package)."""
STATIC_FILES: Final[dict[str, str]] = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
"""Files served under ``/static/`` (nothing else is)."""
MAX_BODY_BYTES: Final[int] = 64 * 1024
"""Largest JSON body an action accepts."""
SECURITY_HEADERS: Final[dict[str, str]] = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
    "x-frame-options": "DENY",
}
"""Headers of every answer: no framing, no foreign script, nothing cached or referred."""


class UiRequestError(OmrayError):
    """A request the viewer cannot answer (unknown project or session, bad body): a 4xx answer."""

    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error, self.message = status, error, message


@dataclass
class UiProject:
    """One project the viewer shows: its settings, database and events folder."""

    name: str
    """Label in the page (the folder's name, made unique)."""
    root: Path
    """The project folder."""
    settings: OmSettings
    """Settings in effect."""
    db_path: Path
    """The memory database (read-only here)."""
    events_root: Path
    """Folder of ``<session>/events.jsonl``."""
    client: OmrayClient | None = None
    """An :class:`cluster.client.OmrayClient` for actions through the runtime; ``None``: read-only."""
    reader: UiReader = field(init=False)
    _hybrid: Any = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.reader = UiReader(self.db_path)

    def events_path(self, session_id: str) -> Path:
        """The session's ``events.jsonl`` (a session id that cannot name a folder is refused)."""
        if session_id in ("", ".", "..") or Path(session_id).name != session_id:
            raise UiRequestError(400, "invalid_session_id", "this session id cannot name an events folder")
        return self.events_root / session_id / "events.jsonl"

    def hybrid_search(self) -> Any:
        """Hybrid search of this database (read-only: no index write), when ``semantic`` is set."""
        if self.settings.semantic is None:
            return None
        if self._hybrid is None:
            from actors.read.hybrid import hybrid_search_for

            self._hybrid = hybrid_search_for(str(self.db_path), self.settings.semantic, None)
        return self._hybrid


QueueStatus = Callable[[], tuple[Mapping[str, Any] | None, float | None]]
"""The queue's latest status and its age in seconds (``(None, None)`` when it has not answered)."""


def no_queue() -> tuple[Mapping[str, Any] | None, float | None]:
    """The queue reader of a viewer without a runtime."""
    return None, None


@dataclass
class UiBackend:
    """Everything the endpoints read or do, without HTTP (unit-testable with real SQLite files)."""

    projects: dict[str, UiProject]
    """Projects by name."""
    queue_status: QueueStatus = no_queue
    """The latest queue status (never blocks)."""

    def project(self, name: str | None) -> UiProject:
        """The project named ``name`` (the only one when ``name`` is empty)."""
        if not name and len(self.projects) == 1:
            return next(iter(self.projects.values()))
        found = self.projects.get(name or "")
        if found is None:
            raise UiRequestError(404, "unknown_project", "no such project in this viewer")
        return found

    def _failures(self, status: Mapping[str, Any] | None, session_id: str) -> list[dict[str, Any]]:
        from cluster.status import explain

        if status is None:
            return []
        recent = [f for f in status.get("recent_failures", []) if f.get("session_id") == session_id]
        return [explain(f) for f in reversed(recent)]

    def projects_json(self) -> dict[str, Any]:
        """Every project with its sessions, and whether actions can run."""
        status, _ = self.queue_status()
        projects = []
        for project in self.projects.values():
            rows = project.reader.sessions(
                project.settings.renderer_version, project.settings.observer_schema_version
            )
            projects.append(
                {
                    "name": project.name,
                    "root": str(project.root),
                    "database": str(project.db_path),
                    "hybrid": project.settings.semantic is not None,
                    "actions": project.client is not None,
                    "forget": project.client is not None,
                    "sessions": [
                        ui_views.session_json(row, status, self._failures(status, row.session_id))
                        for row in rows
                    ],
                }
            )
        return {"projects": projects, "runtime": status is not None}

    def session_json(self, project_name: str | None, session_id: str) -> dict[str, Any]:
        """One session's timeline, its compaction text and its jobs and failures now."""
        from actors.read.service import project as projection

        project = self.project(project_name)
        rows = project.reader.timeline(session_id)
        if not rows.parts and not rows.observations and not rows.generations:
            raise UiRequestError(404, "unknown_session", "no memory of this session in this project")
        versions = (project.settings.renderer_version, project.settings.observer_schema_version)
        text = php_trim(projection(project.db_path, session_id))
        status, _ = self.queue_status()
        answer = ui_views.timeline_json(session_id, rows, text, versions)
        answer["project"] = project.name
        answer["jobs"] = ui_views.job_state(session_id, status)
        answer["failures"] = self._failures(status, session_id)
        answer["last_seq"] = project.reader.last_seq(session_id)
        answer["actions"] = project.client is not None
        return answer

    def search(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``memory_search`` over one project, each hit with a source excerpt."""
        from actors.read.service import memory_search

        project = self.project(_text(body, "project", required=False))
        arguments: dict[str, object] = {"query": body.get("query"), "mode": body.get("mode") or "exact"}
        for key in ("scope", "limit", "after", "before"):
            if body.get(key) not in (None, ""):
                arguments[key] = body[key]
        hybrid = project.hybrid_search() if arguments["mode"] != "exact" else None
        answer = memory_search(project.db_path, arguments, hybrid)
        results = answer.get("results")
        if isinstance(results, list):
            wanted = [str(r["id"]) for r in results if isinstance(r, dict) and "source" not in r]
            excerpts = project.reader.source_excerpts([i for i in wanted if len(i) == 64])
            for result in results:
                if isinstance(result, dict) and "source" not in result and result.get("id") in excerpts:
                    seq, excerpt = excerpts[str(result["id"])]
                    result["source"] = {"seq_start": seq, "seq_end": seq, "excerpt": excerpt}
        return {**answer, "project": project.name}

    def recall(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``recall`` of one memory (or event) id of a session, with its source events."""
        from actors.read.service import recall
        from protocol.redact import redactor_for

        project = self.project(_text(body, "project", required=False))
        session_id = _text(body, "session_id")
        arguments = {"id": body.get("id"), "session_id": session_id}
        # the project's own privacy.redact_patterns, as `omray memory recall` and the tools apply them
        redactor = redactor_for(project.settings.redact_patterns)
        answer = recall(project.db_path, project.events_path, session_id, arguments, redactor=redactor)
        return {**answer, "project": project.name}

    def cost_json(self, project_name: str | None, session_id: str | None) -> dict[str, Any]:
        """Token usage (and money with a price table) by session, model and hour; spend per UTC day,
        session and model; the project's daily budget today, and whether the queue holds its jobs."""
        from actors.models.budget import project_budget, report_since, usage_by_day_json
        from persistence.reads.memory_reader import MemoryReader

        project = self.project(project_name)
        rows = project.reader.usage_over_time(session_id or None)
        reader, now = MemoryReader(project.db_path), time.time()
        by_day = reader.token_usage_by_day(report_since(now), session_id or None)
        status, _ = self.queue_status()
        held = [
            {key: hold.get(key) for key in ("reason", "until", "spent", "cap", "jobs")}
            for hold in (status or {}).get("held_by_project") or ()
            if Path(str(hold.get("db_path"))).resolve() == project.db_path.resolve()
        ]
        return {
            **ui_views.usage_json(rows, project.settings.prices),
            "by_day": usage_by_day_json(by_day, project.settings.prices),
            "budget": project_budget(reader.spend_since, project.settings, now),
            "held": held,
            "project": project.name,
        }

    def queue_json(self) -> dict[str, Any]:
        """The queue and its pools now."""
        status, age = self.queue_status()
        return ui_views.queue_json(status, age)

    def observe(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Dispatch an observe job of a session through ``end_seq`` (default: its last known seq)."""
        project = self.project(_text(body, "project", required=False))
        session_id = _text(body, "session_id")
        events = project.events_path(session_id)
        client = _client(project)
        end_seq = body.get("end_seq") or project.reader.last_seq(session_id)
        if not isinstance(end_seq, int) or isinstance(end_seq, bool) or not 1 <= end_seq <= MAX_SEQ:
            raise UiRequestError(400, "invalid_seq", f"end_seq must be an event seq from 1 to {MAX_SEQ}")
        if not events.is_file():
            raise UiRequestError(404, "events_missing", "this session has no events.jsonl to observe")
        try:
            job_id = client.observe(session_id, end_seq, events_path=events)
        except InvalidPayloadError as exc:  # names fields, never values
            raise UiRequestError(400, "invalid_observe", str(exc)) from None
        return {"ok": True, "job_id": job_id, "session_id": session_id, "end_seq": end_seq}

    def forget(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Forget memories by id, or a whole session, through the runtime (``omray memory forget``'s path).

        ``ids`` (observation or reflection ids) and/or ``whole_session: true`` with ``session_id``.
        Waits for the runtime's forget jobs, so search and the compaction text no longer show the
        memories when this answers.
        """
        project = self.project(_text(body, "project", required=False))
        session_id = _text(body, "session_id")
        project.events_path(session_id)  # refuses an id that cannot name a session
        whole = body.get("whole_session") is True
        try:  # the one check of forget arguments (the MCP tool's and the CLI's too)
            checked = forget_arguments({"session_id": session_id} if whole else {"ids": body.get("ids")})
        except ForgetArgumentsError as exc:
            raise UiRequestError(400, "invalid_forget", str(exc)) from None
        client = _client(project)
        try:
            report = client.forget(arguments=checked)
        except InvalidPayloadError as exc:
            raise UiRequestError(400, "invalid_forget", str(exc)) from None
        return {"ok": True, **dict(report), "session_id": session_id}


def _client(project: UiProject) -> OmrayClient:
    if project.client is None:
        raise UiRequestError(
            503, "runtime_not_running", "no omray runtime was reachable when the viewer started (`omray up`)"
        )
    return project.client


def _text(body: Mapping[str, Any], key: str, *, required: bool = True) -> str:
    value = body.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()) or len(value) > 512:
        raise UiRequestError(400, f"invalid_{key}", f"{key} must be a non-empty string")
    return value.strip()


# ------------------------------------------------------------------------------------------- HTTP


def _json(data: Any, status: int = 200) -> Response:
    body = json.dumps(json_safe(data), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return Response(body, status_code=status, media_type="application/json", headers=SECURITY_HEADERS)


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise UiRequestError(413, "body_too_large", "the request body is too large")
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise UiRequestError(415, "json_required", "send the request body as application/json")
    try:
        decoded = json.loads(raw)
    except (ValueError, RecursionError):
        raise UiRequestError(400, "invalid_json", "the request body is not JSON") from None
    if not isinstance(decoded, dict):
        raise UiRequestError(400, "invalid_json", "the request body must be a JSON object")
    return decoded


Handler = Callable[[Request], Awaitable[Any]]


def _endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def run(request: Request) -> Response:
        started = time.perf_counter()
        try:
            return _json(await handler(request))
        except UiRequestError as exc:
            return _json({"ok": False, "error": exc.error, "message": exc.message}, exc.status)
        except OmrayError as exc:  # a damaged database, an unreachable runtime: the class, never text
            logger.warning(
                "om.ui.request_failed", extra={"path": request.url.path, "error_class": type(exc).__name__}
            )
            return _json({"ok": False, "error": "unavailable", "message": type(exc).__name__}, 503)
        except Exception as exc:  # never a traceback in the log: its message may quote memory text
            logger.warning(
                "om.ui.request_crashed", extra={"path": request.url.path, "error_class": type(exc).__name__}
            )
            return _json({"ok": False, "error": "internal_error", "message": type(exc).__name__}, 500)
        finally:
            logger.debug(
                "om.ui.request",
                extra={"path": request.url.path, "ms": round((time.perf_counter() - started) * 1000, 2)},
            )

    return run


def build_app(backend: UiBackend) -> Starlette:
    """The viewer's ASGI app, without authentication (:func:`guarded_app` adds it)."""
    from anyio import to_thread

    def threaded(call: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        # SQLite reads and Ray calls block: run them off the event loop.
        return to_thread.run_sync(call, *args)

    async def projects(request: Request) -> Any:
        return await threaded(backend.projects_json)

    async def session(request: Request) -> Any:
        params = request.query_params
        session_id = params.get("session", "").strip()
        if not session_id:
            raise UiRequestError(400, "invalid_session_id", "session is required")
        return await threaded(backend.session_json, params.get("project"), session_id)

    async def search(request: Request) -> Any:
        return await threaded(backend.search, await _body(request))

    async def recall(request: Request) -> Any:
        return await threaded(backend.recall, await _body(request))

    async def cost(request: Request) -> Any:
        params = request.query_params
        return await threaded(backend.cost_json, params.get("project"), params.get("session"))

    async def queue(request: Request) -> Any:
        return backend.queue_json()

    async def observe(request: Request) -> Any:
        return await threaded(backend.observe, await _body(request))

    async def forget(request: Request) -> Any:
        return await threaded(backend.forget, await _body(request))

    async def index(request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers=SECURITY_HEADERS)

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC_FILES:
            return _json({"ok": False, "error": "not_found", "message": "no such file"}, 404)
        return FileResponse(STATIC_DIR / name, media_type=STATIC_FILES[name], headers=SECURITY_HEADERS)

    routes = [
        Route("/", index),
        Route("/static/{name}", static),
        Route("/api/projects", _endpoint(projects)),
        Route("/api/session", _endpoint(session)),
        Route("/api/search", _endpoint(search), methods=["POST"]),
        Route("/api/recall", _endpoint(recall), methods=["POST"]),
        Route("/api/cost", _endpoint(cost)),
        Route("/api/queue", _endpoint(queue)),
        Route("/api/observe", _endpoint(observe), methods=["POST"]),
        Route("/api/forget", _endpoint(forget), methods=["POST"]),
    ]
    return Starlette(routes=routes)


def guarded_app(
    backend: UiBackend, host: str, port: int, token: str, links: LinkTickets | None = None
) -> Any:
    """:func:`build_app` behind the web guard: the one place authentication plugs in. ``links`` are
    the one-time link tickets it redeems (issue the printed link's from it; default: none yet)."""
    from cluster.servers.web_auth import GuardPolicy, WebGuard

    return WebGuard(build_app(backend), GuardPolicy.for_bind(host, port, token, browser=True), links)


# ------------------------------------------------------------------------------------ projects


def load_project(root: Path, name: str, client: OmrayClient | None = None) -> UiProject:
    """The project in ``root`` with its settings (raises ``SettingsError``)."""
    from cluster.project_dirs import SESSIONS_DIR
    from persistence.settings.file import load_settings

    settings = load_settings(cwd=root)
    return UiProject(
        name=name,
        root=root,
        settings=settings,
        db_path=Path(settings.database_path(str(root))),
        events_root=root / SESSIONS_DIR,
        client=client,
    )


def unique_names(roots: Sequence[Path]) -> list[str]:
    """A label per project folder: its name, with ``-2``, ``-3``... for repeats."""
    names: list[str] = []
    for root in roots:
        base = root.name or "project"
        name, n = base, 1
        while name in names:
            n += 1
            name = f"{base}-{n}"
        names.append(name)
    return names
