"""``omray hook claude-code|codex``: observe a running Claude Code or Codex session.

A hook runs in a fresh process on the agent's hot path, and joining Ray takes seconds, so a hook
call only records a mark (``persistence.importers.live.append_mark``: how far the transcript was
complete, and whether a turn ended there), then starts a detached background process,
``omray hook dispatch``, and exits 0 at once. The background process converts the new transcript
lines into the session's ``events.jsonl`` (``sync_session``: the importers, append-only, under the
session's lock) and calls ``after_turn_commit`` for every turn that ended, until the queue
accepted it. One dispatcher runs per project at a time; it loops while marks keep arriving, and
a hook that finds one running leaves its mark for it.

Nothing here ever fails the agent: every hook exits 0. A runtime that is not running is reported
once (a ``systemMessage`` Claude Code shows the user) until it answers again; the turns wait in
the cursor and are dispatched by the next hook call after ``omray up``. Nothing prints or logs
memory text: errors name files, classes and counts.

``SessionStart`` with source ``compact`` or ``resume`` prints the session's projection as
Claude Code's ``additionalContext``, read from durable memory in this process (no Ray).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from filelock import FileLock, Timeout
from pydantic import ValidationError

from persistence.importers import validate_session_id
from persistence.importers.live import (
    MARKS_FILE,
    SYNC_ERRORS,
    FlushSignal,
    LiveFormat,
    Mark,
    append_mark,
    complete_length,
    mark_dispatched,
    read_marks,
    sync_session,
)
from protocol.agent_hooks import (
    FLUSH_EVENTS,
    ClaudeCodeHookInput,
    CodexNotification,
    HookAction,
    claude_code_action,
    codex_action,
    session_start_output,
    system_message_output,
)
from protocol.errors import OmrayError

logger = logging.getLogger("omray.hook")

hook_app = typer.Typer(
    name="hook",
    help="Agent hooks: observe Claude Code and Codex sessions as they run.",
    no_args_is_help=True,
    add_completion=False,
)

SESSIONS_SUBDIR = Path(".hatfield") / "sessions"
"""Session folders under the project (the layout ``OmrayClient.events_path`` reads)."""
STATUS_FILE = "omray-hook.status.json"
"""Under ``<project>/.hatfield``: the dispatcher's last problem (if any) and whether it was shown."""
DISPATCH_LOCK = "omray-hook.dispatch.lock"
"""Under ``<project>/.hatfield``: held by the one dispatcher of the project."""
PREFIX_ENV = "OMRAY_PREFIX"
"""Actor name prefix of the runtime the dispatcher joins (default ``omray``)."""
MAX_INPUT_BYTES = 1024 * 1024
"""Largest hook input read from stdin."""
ACCEPT_TIMEOUT_S = 60.0
"""How long the dispatcher waits for the queue to accept a batch before leaving it for later."""

RUNTIME_MISSING_MESSAGE = (
    "omray: no memory runtime is running, so this session's turns are not observed yet. They are "
    "kept and will be observed after `omray up` (this message is shown once)."
)


def project_dir(explicit: Path | None, hook_cwd: str | None) -> Path:
    """The project of a hook call: ``--project``, else ``$CLAUDE_PROJECT_DIR``, else the hook's cwd."""
    if explicit is not None:
        return explicit.resolve()
    from_env = os.environ.get("CLAUDE_PROJECT_DIR", "").strip()
    if from_env:
        return Path(from_env).resolve()
    return Path(hook_cwd or os.getcwd()).resolve()


def session_dir(project: Path, session_id: str) -> Path:
    """``<project>/.hatfield/sessions/<session>``: the session's events and live-import state."""
    return project / SESSIONS_SUBDIR / validate_session_id(session_id)


# --------------------------------------------------------------------------------- status file


def _status_path(project: Path) -> Path:
    return project / ".hatfield" / STATUS_FILE


def _read_status(project: Path) -> dict[str, Any]:
    try:
        data = json.loads(_status_path(project).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_status(project: Path, status: dict[str, Any]) -> None:
    path = _status_path(project)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(status), encoding="utf-8")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except OSError as exc:  # the status is advisory; the turns are in the cursor either way
        logger.info("hook status not written", extra={"error_class": type(exc).__name__})


def record_problem(project: Path, message: str | None) -> None:
    """The dispatcher's finding (``None``: all well). A new problem is shown once by the next hook.

    ``message`` names files, lines and error classes only, never transcript or memory text.
    """
    previous = _read_status(project)
    if previous.get("message") == message:
        return
    now = datetime.now(UTC).isoformat(timespec="seconds")
    _write_status(project, {"message": message, "since": now, "shown": False})


def problem_notice(project: Path) -> str | None:
    """The problem to show the user now, once per problem (marks it shown)."""
    status = _read_status(project)
    message = status.get("message")
    if not isinstance(message, str) or status.get("shown"):
        return None
    _write_status(project, {**status, "shown": True})
    return message


# ------------------------------------------------------------------------------ the dispatcher


def start_dispatcher(project: Path) -> None:
    """Start ``omray hook dispatch`` for ``project``, detached: its own session, no stdio."""
    subprocess.Popen(
        [sys.executable, "-m", "cluster.cli", "hook", "dispatch", "--project", str(project)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=project,
        start_new_session=True,
        close_fds=True,
    )


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


def dispatch_project(project: Path, connect: Connect = _connect) -> bool:
    """Sync every marked session of ``project`` and dispatch its ended turns; False when no runtime.

    Turns stay in their session's cursor until the queue accepted them, so a failed or partial run
    loses nothing: the next run sends them again (job ids are deterministic; the queue accepts an id
    once).
    """
    from protocol.errors import RuntimeNotRunningError
    from protocol.events import AfterTurnCommit, EventSummary

    client: Any = None
    problem: str | None = None
    try:
        for directory in live_sessions(project):
            try:
                cursor = sync_session(directory, directory.name)
            except SYNC_ERRORS as exc:  # this session waits for a fix; the others go on
                logger.warning(
                    "live import failed", extra={"run_id": directory.name, "error_class": type(exc).__name__}
                )
                problem = f"omray: session {directory.name!r} is not observed: {exc}"
                continue
            if not cursor.pending and cursor.flush is None:
                continue
            if client is None:
                try:
                    client = connect(project)
                except RuntimeNotRunningError:
                    record_problem(project, RUNTIME_MISSING_MESSAGE)
                    return False
                except OmrayError as exc:  # bad settings, a rejected token: say which
                    record_problem(project, f"omray: cannot observe this project's sessions: {exc}")
                    return False
            events_path = directory / "events.jsonl"
            for boundary in cursor.pending:
                context = AfterTurnCommit(
                    run_id=directory.name,
                    turn_no=boundary.turn_no,
                    status="completed",
                    events=(
                        EventSummary(seq=boundary.end_seq, type="agent_end", payload={"reason": "completed"}),
                    ),
                )
                client.after_turn_commit(context, events_path=events_path)
            accepted = client.outbox.wait_empty(ACCEPT_TIMEOUT_S)
            if accepted and cursor.flush is not None and cursor.last_seq > 0:
                # After the turns (their lane order): everything so far is observed now, however
                # little is new, so a coming compaction or the session's end finds it in memory.
                try:
                    client.observe(
                        directory.name, cursor.last_seq, events_path=events_path, signal=cursor.flush
                    )
                except OmrayError as exc:  # the runtime went away: the flush waits for the next pass
                    logger.warning("live flush not accepted", extra={"error_class": type(exc).__name__})
                    accepted = False
            if accepted:
                mark_dispatched(
                    directory,
                    cursor.pending[-1].end_seq if cursor.pending else 0,
                    cursor.flush_mark if cursor.flush is not None else None,
                )
    finally:
        if client is not None:
            client.close()
    record_problem(project, problem)
    return True


def run_dispatcher(project: Path, connect: Connect = _connect) -> None:
    """Be the project's one dispatcher while marks keep arriving (exits at once when another runs).

    After releasing the lock it looks once more for marks that arrived during its pass: a hook
    that wrote one then, and found the lock still held, relies on it. Work it could not finish
    (no runtime, a transcript line that does not parse) waits for the next hook call.
    """
    lock = FileLock(str(project / ".hatfield" / DISPATCH_LOCK), timeout=0, mode=0o600)
    while True:
        try:
            lock.acquire()
        except Timeout:
            return
        try:
            seen = _mark_counts(project)
            runtime_up = dispatch_project(project, connect)
        finally:
            lock.release()
        if not runtime_up or _mark_counts(project) == seen:
            return


def _mark_counts(project: Path) -> dict[Path, int]:
    return {directory: len(read_marks(directory)) for directory in live_sessions(project)}


# ---------------------------------------------------------------------------------- hook calls


def _emit(output: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(output, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _read_stdin() -> str:
    return sys.stdin.buffer.read(MAX_INPUT_BYTES + 1).decode("utf-8", errors="replace")


def observe_mark(
    project: Path,
    session_id: str,
    transcript: Path,
    transcript_format: LiveFormat,
    close: bool,
    flush: FlushSignal | None = None,
) -> None:
    """Record how far ``transcript`` is complete (ending the turn there if ``close``; observing all of
    it at once if ``flush``); start a dispatcher."""
    mark = Mark(
        transcript=str(transcript.resolve()),
        format=transcript_format,
        offset=complete_length(transcript),
        close=close,
        flush=flush,
    )
    append_mark(session_dir(project, session_id), mark)
    start_dispatcher(project)


def memory_context(project: Path, session_id: str) -> str:
    """The session's projection ('' when it has no memory yet), read from durable memory."""
    from actors.read.service import project as project_memory
    from persistence.settings_file import load_settings

    settings = load_settings(cwd=project)
    return project_memory(settings.database_path(str(project)), validate_session_id(session_id))


def claude_code_hook(raw: str, explicit_project: Path | None) -> dict[str, Any] | None:
    """Handle one Claude Code hook input; returns the JSON to print, if any. Raises typed errors."""
    event = ClaudeCodeHookInput.model_validate_json(raw)
    action: HookAction = claude_code_action(event)
    project = project_dir(explicit_project, event.cwd)
    if action == "inject":
        text = memory_context(project, event.session_id)
        return session_start_output(text) if text else None
    if action == "ignore":
        return None
    if not event.transcript_path:
        return None
    observe_mark(
        project,
        event.session_id,
        Path(event.transcript_path),
        "claude-code",
        action == "close",
        FLUSH_EVENTS.get(event.hook_event_name),
    )
    notice = problem_notice(project)
    return system_message_output(notice) if notice else None


def codex_rollout(thread_id: str, codex_home: Path | None = None) -> Path | None:
    """The newest rollout file of a Codex thread under ``$CODEX_HOME/sessions`` (default ``~/.codex``)."""
    home = codex_home or Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")
    matches = sorted((home / "sessions").glob(f"**/rollout-*{thread_id}.jsonl"))
    return matches[-1] if matches else None


def codex_hook(raw: str, explicit_project: Path | None) -> None:
    """Handle one Codex notification (its JSON argument). Raises typed errors."""
    notification = CodexNotification.model_validate_json(raw)
    if codex_action(notification) != "close":
        return
    rollout = codex_rollout(validate_session_id(notification.thread_id))  # no path or glob tricks
    if rollout is None:
        logger.info("codex rollout not found", extra={"run_id": notification.thread_id})
        return
    project = project_dir(explicit_project, notification.cwd)
    observe_mark(project, notification.thread_id, rollout, "codex", close=True)


_HOOK_ERRORS = (OmrayError, ValidationError, ValueError, OSError)


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

    def run() -> None:
        output = claude_code_hook(_read_stdin(), project)
        if output is not None:
            _emit(output)

    _never_fail(run)


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
    words = list(args or [])

    def run() -> None:
        if len(words) > 1:
            subprocess.Popen(
                words,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        if words:
            codex_hook(words[-1], project)

    _never_fail(run)


@hook_app.command("dispatch", hidden=True)
def dispatch_command(
    project: Annotated[Path, typer.Option("--project", help="Project directory.")],
) -> None:
    """Background: sync marked sessions and dispatch their turns (started by the hooks)."""
    _never_fail(lambda: run_dispatcher(project.resolve()))
