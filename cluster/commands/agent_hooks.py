"""``omray hook ...``: the background side of observing a running Claude Code or Codex session.

The hook calls themselves (``omray hook claude-code``, ``omray hook codex``) run in
``cluster.commands.hook_fast``, with the standard library only: they append a mark and start the project's
dispatcher. This module is the dispatcher, ``omray hook dispatch``: a detached process that
converts the new transcript lines into each session's ``events.jsonl`` (``sync_session``: the
importers, append-only, under the session's lock), calls ``after_turn_commit`` for every turn that
ended until the queue accepted it, and then watches the jobs it sent for a while. One dispatcher
runs per project at a time; it loops while marks keep arriving, and a hook that finds one running
leaves its mark for it.

What stops a project's memory becomes a *notice* in ``.hatfield/omray-hook.status.json``, keyed
by its cause, which the hooks show once (``cluster.commands.hook_notices.take_notices``): no runtime, settings
the client cannot load, a transcript line that does not parse, and observe jobs that gave up
(their category explained by ``protocol.outcomes.explain_failure``). A cause that goes away (the
runtime answers again, the line is repaired) takes its notice with it. Nothing prints or logs
memory text: notices name sessions, files, lines and categories.

The typer commands here are the full CLI's view of the hooks (``--help``); ``cluster.commands.entry``
sends the hook calls themselves to ``cluster.commands.hook_fast`` without loading this module.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from filelock import FileLock, Timeout

from cluster import project_dirs, settings_cache
from cluster.commands import hook_fast, hook_notices
from persistence.importers import validate_session_id
from persistence.importers.live import (
    MARKS_FILE,
    SYNC_ERRORS,
    mark_dispatched,
    read_marks,
    settle_mark,
    sync_session,
)
from protocol.errors import OmrayError, clause

logger = logging.getLogger("omray.hook")

hook_app = typer.Typer(
    name="hook",
    help="Agent hooks: observe Claude Code and Codex sessions as they run.",
    no_args_is_help=True,
    add_completion=False,
)

SESSIONS_SUBDIR = Path(project_dirs.SESSIONS_DIR)
"""Session folders under the project (the layout ``OmrayClient.events_path`` reads)."""
PREFIX_ENV = "OMRAY_PREFIX"
"""Actor name prefix of the runtime the dispatcher joins (default ``omray``)."""
ACCEPT_TIMEOUT_S = 60.0
"""How long the dispatcher waits for the queue to accept a batch before leaving it for later."""
WATCH_S = 60.0
"""How long after sending a session's jobs the dispatcher watches for their failures (a job gives
up after 4 attempts, 1 + 2 + 4 s apart, plus the model calls)."""
POLL_S = 1.0
"""Pause between two looks while watching."""
DISPATCHER_NICENESS = 10
"""Added to the dispatcher's nice value: it yields the CPU to the agent, yet still runs on a busy
machine (a nice-10 process gets about a tenth of a core next to one busy nice-0 process)."""

NOTICE_PROJECT = "project"
"""Notice key of what stops every session of the project (no runtime, settings)."""

RUNTIME_MISSING_MESSAGE = (
    "omray: this project's sessions are not observed: no memory runtime is running. Start it with "
    "`omray up` (with the same OMRAY_HOME as this agent); the waiting turns are observed then."
)


def project_dir(explicit: Path | None, hook_cwd: str | None) -> Path:
    """The project of a hook call: ``--project``, else ``$CLAUDE_PROJECT_DIR``, else the hook's cwd."""
    return Path(project_dirs.project_dir(str(explicit) if explicit is not None else None, hook_cwd))


def session_dir(project: Path, session_id: str) -> Path:
    """``<project>/.hatfield/sessions/<session>``: the session's events and live-import state."""
    return project / SESSIONS_SUBDIR / validate_session_id(session_id)


# ------------------------------------------------------------------------------ the dispatcher


def live_sessions(project: Path) -> list[Path]:
    """Session folders of ``project`` that a hook has marked."""
    root = project / SESSIONS_SUBDIR
    try:
        return sorted(path.parent for path in root.glob(f"*/{MARKS_FILE}"))
    except OSError:
        return []


Connect = Callable[[Path], Any]
"""``connect(project) -> OmrayClient``; raises :class:`RuntimeNotRunningError` without a runtime."""


def _connect(project: Path) -> Any:
    from cluster.client import connect

    return connect(cwd=project, prefix=os.environ.get(PREFIX_ENV) or "omray")


@dataclass
class Pass:
    """What one dispatcher pass found."""

    runtime_up: bool = True
    """False when no runtime answered (or the settings could not be loaded): stop until the next hook."""
    watching: bool = False
    """Some session's jobs are still watched for failures."""
    clients: list[Any] = field(default_factory=list)
    """The client of this dispatcher, once connected (kept across passes)."""


def _missing_transcript(exc: OmrayError) -> bool:
    """A transcript that does not exist (any more): nothing to observe, nothing to report."""
    return getattr(exc, "reason", None) == "FileNotFoundError"


def _client(project: Path, connect: Connect, state: Pass) -> Any:
    if not state.clients:
        state.clients.append(connect(project))
    return state.clients[0]


def dispatch_project(
    project: Path, connect: Connect = _connect, state: Pass | None = None, now: float | None = None
) -> Pass:
    """Sync every marked session of ``project``, dispatch its ended turns, look for failed jobs.

    Turns stay in their session's cursor until the queue accepted them, so a failed or partial run
    loses nothing: the next run sends them again (job ids are deterministic; the queue accepts an id
    once). With no ``state`` the client is closed at the end.
    """
    from protocol.errors import RuntimeNotRunningError

    owned = state is None
    state = state or Pass()
    state.runtime_up, state.watching = True, False
    moment = time.time() if now is None else now
    project_str = str(project)
    try:
        for directory in live_sessions(project):
            try:
                settle_mark(directory)  # a turn whose transcript lagged at Stop ends where it is now
                cursor = sync_session(directory, directory.name)
            except SYNC_ERRORS as exc:  # this session waits for a fix; the others go on
                if _missing_transcript(exc):
                    continue
                logger.warning(
                    "live import failed",
                    extra={"session_id": directory.name, "error_class": type(exc).__name__},
                )
                hook_notices.set_notice(
                    project_str,
                    f"sync:{directory.name}",
                    f"omray: session {directory.name!r} is not observed: {clause(exc)}.",
                )
                continue
            if cursor.problems:  # what could be converted was; these marks wait for a fix
                logger.warning(
                    "live import incomplete", extra={"session_id": directory.name, "error_class": "-"}
                )
                hook_notices.set_notice(
                    project_str,
                    f"sync:{directory.name}",
                    f"omray: session {directory.name!r} is not fully observed: {'; '.join(cursor.problems)}",
                )
            else:
                hook_notices.clear_notices(project_str, f"sync:{directory.name}")
            if not cursor.pending and cursor.flush is None:
                continue
            try:
                client = _client(project, connect, state)
            except RuntimeNotRunningError as exc:
                # A token problem is a RuntimeNotRunningError too (RuntimeAuthError): say which.
                message = (
                    RUNTIME_MISSING_MESSAGE
                    if type(exc) is RuntimeNotRunningError
                    else f"omray: this project's sessions are not observed: {clause(exc)}."
                )
                hook_notices.set_notice(project_str, NOTICE_PROJECT, message)
                state.runtime_up = False
                return state
            except OmrayError as exc:  # bad settings, a rejected token: say which
                hook_notices.set_notice(
                    project_str,
                    NOTICE_PROJECT,
                    f"omray: this project's sessions are not observed: {clause(exc)}. Fix it, then the "
                    "waiting turns are observed at the next turn.",
                )
                state.runtime_up = False
                return state
            hook_notices.clear_notices(project_str, NOTICE_PROJECT)
            _note_where_the_database_lives(project_str, client)
            _send(client, directory, cursor)
            _watch(project_str, directory.name, moment + WATCH_S)
            _refresh_database(project)
        state.watching = _look_for_failures(project_str, connect, state, moment)
        hook_notices.clear_notices(project_str, "dispatcher")
    finally:
        if owned:
            _close(state)
    return state


def _note_where_the_database_lives(project: str, client: Any) -> None:
    """Tell the hooks whether the database lives on another node (asked once per client), so a
    compacted session's memory is asked of the runtime there (:mod:`cluster.commands.hook_fast`)."""
    local = client.database_is_local()
    if local is not None:
        settings_cache.remember_remote(project, os.path.abspath(client.db_path), remote=not local)


def _send(client: Any, directory: Path, cursor: Any) -> None:
    from protocol.events import AfterTurnCommit, EventSummary

    events_path = directory / "events.jsonl"
    for boundary in cursor.pending:
        context = AfterTurnCommit(
            session_id=directory.name,
            turn_no=boundary.turn_no,
            status="completed",
            events=(EventSummary(seq=boundary.end_seq, type="agent_end", payload={"reason": "completed"}),),
        )
        client.after_turn_commit(context, events_path=events_path)
    accepted = client.outbox.wait_empty(ACCEPT_TIMEOUT_S)
    if accepted and cursor.flush is not None and cursor.last_seq > 0:
        # After the turns (their lane order): everything so far is observed now, however little
        # is new, so a coming compaction or the session's end finds it in memory.
        try:
            client.observe(directory.name, cursor.last_seq, events_path=events_path, signal=cursor.flush)
        except OmrayError as exc:  # the runtime went away: the flush waits for the next pass
            logger.warning("live flush not accepted", extra={"error_class": type(exc).__name__})
            accepted = False
    if accepted:
        mark_dispatched(
            directory,
            cursor.pending[-1].end_seq if cursor.pending else 0,
            cursor.flush_mark if cursor.flush is not None else None,
        )


def _refresh_database(project: Path) -> None:
    """Keep the record of the settings current for the hooks (database path) and ``omray mcp``
    (hybrid or not); the client loaded these settings already, so they are in the page cache."""
    if settings_cache.cached_hybrid(str(project)) is None:
        try:
            settings_cache.resolve(str(project))
        except OmrayError as exc:
            logger.info("settings not resolved", extra={"error_class": type(exc).__name__})


def _watch(project: str, session: str, until: float) -> None:
    def change(status: dict[str, object]) -> tuple[bool, None]:
        watched = status.setdefault("watch", {})
        if isinstance(watched, dict):
            watched[session] = until
            return True, None
        status["watch"] = {session: until}
        return True, None

    hook_notices.update_status(project, change)


def _look_for_failures(project: str, connect: Connect, state: Pass, now: float) -> bool:
    """Turn the job failures of the watched sessions into notices; True while any is watched."""
    from protocol.outcomes import JOB_FAILED_EVENT_TYPE, JOB_HELD_EVENT_TYPE, explain_failure, last_failure

    status = hook_notices.read_status(project)
    watched = status.get("watch")
    seen = status.get("events_seen")
    if not isinstance(watched, dict) or not watched:
        return False
    seen = dict(seen) if isinstance(seen, dict) else {}
    live = {session: until for session, until in watched.items() if isinstance(until, int | float)}
    try:
        client = _client(Path(project), connect, state)
        found: dict[str, list[dict[str, Any]]] = {
            session: client.runtime_events(session, int(seen.get(session, 0))) for session in live
        }
        idle = bool(client.queue_is_idle())
    except OmrayError as exc:  # the runtime went away: look again at the next pass
        logger.info("failures not read", extra={"error_class": type(exc).__name__})
        return False
    for session, events in found.items():
        for event in events:
            seen[session] = max(int(seen.get(session, 0)), int(event.get("event_seq", 0)))
            payload = event.get("payload")
            payload = payload if isinstance(payload, dict) else event
            if event.get("event_type") == JOB_HELD_EVENT_TYPE:
                _budget_notice(project, payload)
                continue
            if event.get("event_type", JOB_FAILED_EVENT_TYPE) != JOB_FAILED_EVENT_TYPE:
                continue
            category = last_failure(payload)
            cause, fix = explain_failure(category, _key_variable(Path(project), category))
            # One notice per cause, not per session: a lasting outage fails every new session's job,
            # and the user needs to hear about it once. It names the first session; `omray status`
            # names them all.
            hook_notices.add_notice(
                project,
                f"job:{category}",
                f"omray: session {session!r} is not observed: {cause}. Fix: {fix}. Its turns wait, not "
                "lost: they are observed once the cause is fixed (at the next turn under changed settings, "
                "or once a later turn succeeds), or at once with `omray retry`. Other "
                "sessions failing the same way are not announced again: `omray status` names them all.",
            )
    keep = {} if idle else {session: until for session, until in live.items() if until > now}

    def change(current: dict[str, object]) -> tuple[bool, None]:
        current["events_seen"] = seen
        current["watch"] = keep
        return True, None

    hook_notices.update_status(project, change)
    return bool(keep)


def _budget_notice(project: str, payload: dict[str, Any]) -> None:
    """The daily budget of the project is used up: one notice per cause and day (the event's message
    is built from codes and counts only, and says until when and how to raise the cap)."""
    reason, until = str(payload.get("reason", "budget")), str(payload.get("until", ""))[:10]
    message = str(payload.get("message", "")) or "Observing paused: the daily model budget is used up."
    hook_notices.add_notice(project, f"budget:{reason}:{until}", f"omray: {message}")


def _key_variable(project: Path, category: str) -> str | None:
    """The variable the project's model reads its API key from, for the categories that are about
    the key (``None`` for the others, or when the settings do not say)."""
    from protocol.outcomes import REASON_MODEL_API_KEY_MISSING, REASON_MODEL_AUTH

    if category not in (REASON_MODEL_API_KEY_MISSING, REASON_MODEL_AUTH):
        return None
    from persistence.settings.file import load_settings

    try:
        return load_settings(cwd=project).model_provider().api_key_env
    except OmrayError as exc:  # the settings changed since: the notice stays generic
        logger.info("settings not resolved", extra={"error_class": type(exc).__name__})
        return None


def _close(state: Pass) -> None:
    for client in state.clients:
        client.close()
    state.clients.clear()


def run_dispatcher(
    project: Path, connect: Connect = _connect, poll_s: float = POLL_S, clock: Callable[[], float] = time.time
) -> None:
    """Be the project's one dispatcher while marks keep arriving or jobs are watched.

    The lock is held for the whole run, so a hook that finds it held leaves its mark to this
    process, which compares the mark counts after every pass and goes on while they changed.
    Work it could not finish (no runtime, a transcript line that does not parse) waits for the next
    hook call.
    """
    lock = FileLock(str(project / hook_fast.DISPATCH_LOCK), timeout=0, mode=0o600)
    try:
        lock.acquire()
    except Timeout:
        return
    state = Pass()
    try:
        while True:
            seen = _mark_counts(project)
            dispatch_project(project, connect, state, clock())
            if not state.runtime_up:
                return
            if _mark_counts(project) != seen:
                continue
            if not state.watching:
                return
            time.sleep(poll_s)
    finally:
        _close(state)
        lock.release()


def _mark_counts(project: Path) -> dict[Path, int]:
    return {directory: len(read_marks(directory)) for directory in live_sessions(project)}


# ---------------------------------------------------------------------------------- commands

_HOOK_ERRORS = (OmrayError, ValueError, OSError)


def _never_fail(call: Callable[[], None]) -> None:
    # A hook must never fail the agent's turn: whatever happens, log the class only and exit 0.
    try:
        call()
    except _HOOK_ERRORS as exc:
        logger.warning("hook call failed", extra={"error_class": type(exc).__name__})
    raise typer.Exit(code=0)


ProjectOption = Annotated[
    Path | None,
    typer.Option("--project", help="Project directory (default: $CLAUDE_PROJECT_DIR, else the hook's cwd)."),
]


@hook_app.command("claude-code")
def claude_code_command(project: ProjectOption = None) -> None:
    """Claude Code hook (Stop, SubagentStop, PreCompact, SessionEnd, SessionStart); JSON on stdin."""
    words = ["claude-code", *(["--project", str(project)] if project is not None else [])]
    _never_fail(lambda: _run_fast(words))


@hook_app.command("codex", context_settings={"allow_interspersed_args": False})
def codex_command(
    args: Annotated[
        list[str] | None,
        typer.Argument(
            help="[PROGRAM ARGS...] NOTIFICATION_JSON: a notify program to run too, then the JSON."
        ),
    ] = None,
    project: ProjectOption = None,
) -> None:
    """Codex notify program: observe the rollout after each turn (the JSON is the last argument).

    Words before the JSON are another notify program, run with the same JSON (so an existing
    ``notify`` keeps working).
    """
    words = ["codex", *(["--project", str(project)] if project is not None else []), "--", *(args or [])]
    _never_fail(lambda: _run_fast(words))


def _run_fast(words: list[str]) -> None:
    hook_fast.run(words)


@hook_app.command("dispatch", hidden=True)
def dispatch_command(
    project: Annotated[Path, typer.Option("--project", help="Project directory.")],
) -> None:
    """Background: sync marked sessions and dispatch their turns (started by the hooks)."""
    _never_fail(lambda: run_dispatcher(project.resolve()))


LOG_FILE = ".hatfield/omray-hook.log"
"""The dispatcher's log (warnings: ids, counts, error classes; never memory or transcript text)."""
LOG_MAX_BYTES = 1024 * 1024
"""Size at which the log is rotated once (``.1``)."""


def _log_to_project(project: Path) -> None:
    """Send this process's omray warnings to the project's hook log (the dispatcher has no stdio)."""
    from logging.handlers import RotatingFileHandler

    path = project / LOG_FILE
    try:
        project_dirs.private_dir(str(project), ".hatfield")
        handler = RotatingFileHandler(path, maxBytes=LOG_MAX_BYTES, backupCount=1, encoding="utf-8")
        os.chmod(path, 0o600)
    except OSError:
        return
    handler.setFormatter(
        logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s session_id=%(session_id)s error=%(error_class)s"
        )
    )
    handler.addFilter(_fill_fields)
    root = logging.getLogger("omray")
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def _fill_fields(record: logging.LogRecord) -> bool:
    for name in ("session_id", "error_class"):
        if not hasattr(record, name):
            setattr(record, name, "-")
    return True


def print_context(project: Path, session_id: str, connect: Connect = _connect) -> None:
    """Print a session's memory lines as one JSON line (``reflections``, ``observations``), read
    where its database lives: what a hook on another node than the database's gives a compacted
    session (:func:`cluster.commands.hook_fast.remote_projection_lines`)."""
    client = connect(project)
    try:
        reflections, observations = client.projection_lines(session_id)
    finally:
        client.close()
    sys.stdout.write(json.dumps({"reflections": reflections, "observations": observations}) + "\n")


def main_dispatch(argv: list[str]) -> None:
    """``python -m cluster.commands.agent_hooks --project DIR``: the dispatcher without the whole CLI (what
    the hooks start: it imports only what dispatching needs). Whatever stops it is logged to the
    project's hook log and becomes a notice, so it never fails unseen. ``--context DIR SESSION``:
    :func:`print_context`."""
    if len(argv) == 3 and argv[0] == "--context":
        project = Path(argv[1]).resolve()
        _log_to_project(project)
        with contextlib.suppress(Exception):  # the hook reads no answer as "no memory"
            print_context(project, argv[2])
        return
    if len(argv) != 2 or argv[0] != "--project":
        return
    with contextlib.suppress(OSError):
        # Background work: the agent whose hook started this is still finishing its turn (its
        # SessionEnd hook, its MCP server, its exit) and must not wait for CPU behind Ray's import.
        os.nice(DISPATCHER_NICENESS)
    project = Path(argv[1]).resolve()
    _log_to_project(project)
    try:
        run_dispatcher(project)
    except Exception as exc:  # the last line of defence of a process nobody watches
        logger.error("dispatcher failed", extra={"error_class": type(exc).__name__})
        hook_notices.set_notice(
            str(project),
            "dispatcher",
            f"omray: the hook dispatcher of this project failed ({type(exc).__name__}); "
            f"see {project / LOG_FILE} and `omray status`",
        )


if __name__ == "__main__":
    main_dispatch(sys.argv[1:])
