"""``omray memory ...``: the read side on the command line (no Ray needed, read-only).

* ``status|view|project --session S [--db PATH] [--json]``: markdown (or JSON) of one session.
* ``search QUERY [--session S ...] [--mode exact|hybrid] [--after D] [--before D] [--limit N] [--db PATH]``:
  ``memory_search`` (default: every session; exact, or hybrid when ``semantic`` is configured), JSON.
* ``recall ID [--session S] [--db PATH] [--events-dir DIR]``: ``recall``, JSON.
* ``forget ID... | --session S [--events A-B ...] [--wait SECONDS]``: forget memory through the running
  runtime (the one command here that writes, and needs ``omray up``), JSON.

The database defaults to the settings' ``storage.database`` joined to the working directory; the
events of a session are read from ``<events-dir>/<session>/events.jsonl`` (default events dir:
``<cwd>/.hatfield/sessions``). Any error prints one line to stderr and exits with status 2.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from actors.models.tokens import token_counter
from actors.read.answers import json_safe
from actors.read.service import memory_search, memory_status, memory_view, project, recall
from persistence.settings.file import load_settings
from protocol.errors import OmrayError
from protocol.redact import redactor_for
from protocol.settings import OmSettings

memory_app = typer.Typer(
    name="memory",
    help="Read observational memory: status, view, projection, search and recall.",
    no_args_is_help=True,
    add_completion=False,
)

SESSION_ENV = "OMRAY_SESSION"
"""Environment variable used when ``--session`` is not given."""

EVENTS_SUBDIR = Path(".hatfield") / "sessions"
"""Default location of session folders, relative to the working directory."""

EXIT_ERROR = 2
"""Exit status of every failed command."""

_SESSION_HELP = f"Session (run) id; defaults to ${SESSION_ENV}."
_DB_HELP = "Memory database file; defaults to the settings' storage.database."
_JSON_HELP = "Print JSON instead of markdown."
SessionOption = Annotated[str | None, typer.Option("--session", envvar=SESSION_ENV, help=_SESSION_HELP)]
DbOption = Annotated[Path | None, typer.Option("--db", help=_DB_HELP)]
JsonOption = Annotated[bool, typer.Option("--json", help=_JSON_HELP)]


class SearchModeOption(enum.StrEnum):
    """``--mode`` of ``omray memory search``."""

    EXACT = "exact"
    HYBRID = "hybrid"


class UnsafeSessionIdError(OmrayError):
    """A session id that cannot name a folder under the events directory."""


def _fail(message: str) -> NoReturn:
    typer.echo(f"omray memory: {message}", err=True)
    raise typer.Exit(code=EXIT_ERROR)


@contextmanager
def _failing(what: str) -> Iterator[None]:
    """An :class:`OmrayError` in the block fails the command: ``what (ErrorClass: message)``."""
    try:
        yield
    except OmrayError as exc:
        _fail(f"{what} ({type(exc).__name__}: {exc})")


def _print_json(value: object) -> None:
    # json_safe: NaN/Infinity and lone surrogates from event payloads must not make invalid JSON
    # or crash the terminal's UTF-8 encoder.
    typer.echo(json.dumps(json_safe(value), ensure_ascii=False, indent=2, allow_nan=False))


def _show(text: str, data: object, as_json: bool) -> None:
    """Print the JSON form or the text form of one answer."""
    if as_json:
        _print_json(data)
    else:
        typer.echo(text)


def _settings() -> OmSettings:
    try:
        return load_settings(cwd=Path.cwd())
    except OmrayError as exc:
        _fail(str(exc))


def _db_path(db: Path | None, settings: OmSettings | None = None) -> Path:
    if db is not None:
        return db
    return Path((settings or _settings()).database_path(Path.cwd()))


def _session(session: str | None) -> str:
    value = (session or "").strip()
    if not value:
        _fail(f"a session id is required: pass --session or set ${SESSION_ENV}")
    return value


def _events_path_for(events_dir: Path | None) -> Callable[[str], Path]:
    root = events_dir if events_dir is not None else Path.cwd() / EVENTS_SUBDIR

    def events_path(session_id: str) -> Path:
        if session_id in ("", ".", "..") or Path(session_id).name != session_id:
            raise UnsafeSessionIdError(f"session id {session_id!r} cannot name an events folder")
        return root / session_id / "events.jsonl"

    return events_path


def _answer(result: dict[str, object]) -> None:
    if result.get("ok") is False:
        _fail(f"{result.get('error')}: {result.get('message')}")
    _print_json(result)


@memory_app.command("status")
def status_command(session: SessionOption = None, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Counts, coverage and thresholds of one session's memory."""
    session_id = _session(session)
    settings = _settings()
    with _failing("status unavailable"):
        text, data = memory_status(
            _db_path(db, settings), session_id, settings, token_counter(settings.token_encoding)
        )
    _show(text, data, as_json)


@memory_app.command("view")
def view_command(session: SessionOption = None, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Active reflections and observations of one session."""
    session_id = _session(session)
    with _failing("view unavailable"):
        text, data = memory_view(_db_path(db), session_id)
    _show(text, data, as_json)


@memory_app.command("project")
def project_command(session: SessionOption = None, db: DbOption = None, as_json: JsonOption = False) -> None:
    """The compaction text the session's memory would replace its context with."""
    session_id = _session(session)
    with _failing("projection unavailable"):
        text = project(_db_path(db), session_id)
    if as_json:
        _print_json({"session_id": session_id, "empty": text == "", "summary_text": text})
    elif text:
        typer.echo(text)


@memory_app.command("search")
def search_command(
    query: Annotated[str, typer.Argument(help="Text to find (literal and case-insensitive in exact mode).")],
    session: Annotated[
        list[str] | None,
        typer.Option("--session", help="Search only this session; repeat for several (default: all)."),
    ] = None,
    mode: Annotated[
        SearchModeOption | None,
        typer.Option("--mode", help="exact or hybrid (default: hybrid when configured, else exact)."),
    ] = None,
    after: Annotated[
        str | None, typer.Option("--after", help="Inclusive lower date (YYYY-MM-DD[ HH:MM]).")
    ] = None,
    before: Annotated[
        str | None, typer.Option("--before", help="Inclusive upper date (YYYY-MM-DD[ HH:MM]).")
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", help="Results to return (default 20, at most 50).")
    ] = None,
    db: DbOption = None,
) -> None:
    """memory_search over every session or the --session ones; prints the JSON answer."""
    arguments: dict[str, object] = {"query": query, "after": after, "before": before, "limit": limit}
    if session:
        arguments["scope"] = list(session)
    if mode is not None:
        arguments["mode"] = mode.value
    with _failing("search unavailable"):
        settings = _settings()
        db_path = _db_path(db, settings)
        hybrid = None
        if settings.semantic is not None and mode is not SearchModeOption.EXACT:
            from actors.read.hybrid import hybrid_search_for

            hybrid = hybrid_search_for(str(db_path), settings.semantic)
        result = memory_search(db_path, arguments, hybrid_search=hybrid)
    _answer(result)


@memory_app.command("recall")
def recall_command(
    memory_id: Annotated[str, typer.Argument(metavar="ID", help="Memory id or unique prefix (12-64 hex).")],
    session: SessionOption = None,
    db: DbOption = None,
    events_dir: Annotated[
        Path | None,
        typer.Option(
            "--events-dir", help="Folder holding <session>/events.jsonl (default .hatfield/sessions)."
        ),
    ] = None,
) -> None:
    """One memory with its source events; prints the JSON answer."""
    session_id = _session(session)
    with _failing("recall unavailable"):
        settings = _settings()
        result = recall(
            _db_path(db, settings),
            _events_path_for(events_dir),
            session_id,
            {"id": memory_id},
            redactor=redactor_for(settings.redact_patterns),
        )
    _answer(result)


@memory_app.command("forget")
def forget_command(
    memory_ids: Annotated[
        list[str] | None,
        typer.Argument(metavar="ID...", help="Observation or reflection ids (full, or 12+ hex characters)."),
    ] = None,
    session: Annotated[
        str | None,
        typer.Option("--session", help="Forget everything of this session (or only --events of it)."),
    ] = None,
    events: Annotated[
        list[str] | None,
        typer.Option("--events", help="With --session: forget only these events' text (SEQ or A-B; repeat)."),
    ] = None,
    wait_s: Annotated[
        float, typer.Option("--wait", help="Seconds to wait for the forget to commit (0: do not wait).")
    ] = 60.0,
) -> None:
    """Forget memory through the running runtime (`omray up`): ids, a session, or a session's events.

    Removed at once from exact and hybrid search, the projection and the transcript; coverage stays,
    so nothing forgotten is observed again. Prints a JSON report (unknown ids are listed, not errors).
    """
    from cluster.client import connect
    from protocol.forget import ForgetArgumentsError, forget_arguments

    try:  # the one check of forget arguments (the MCP tool's and the viewer's too)
        checked = forget_arguments({"ids": memory_ids, "session_id": session, "event_ranges": events})
    except ForgetArgumentsError as exc:
        _fail(str(exc))
    with _failing("forget needs a running runtime"):
        client = connect()
    try:
        with _failing("forget refused"):
            result = client.forget(arguments=checked, wait_s=wait_s)
    finally:
        client.close()
    _print_json(result)
