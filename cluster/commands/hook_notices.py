"""The notices of a project's agent hooks: what stops its memory, recorded by the dispatcher, shown
once per cause by the hooks (standard library only: :mod:`.hook_fast` imports it on every call).

The status file (:data:`STATUS_FILE`) holds a list of notices, each ``{"key", "message", "shown",
"told"}``; every change runs under :data:`STATUS_LOCK` and replaces the file atomically.
"""

from __future__ import annotations

import json
import os

from cluster.project_dirs import private_dir

STATUS_FILE = ".hatfield/omray-hook.status.json"
"""The dispatcher's notices: what stops this project's memory, and whether each was shown."""
STATUS_LOCK = ".hatfield/omray-hook.status.lock"
"""Held while the status file is read and written back."""
NOTICE_FOR_MODEL = (
    "omray, the memory tool of this project, reports a problem the user should know about. "
    "Tell the user, briefly and once, at the start of your reply:"
)
"""Opens a notice given to the model (the only channel to a ``claude -p`` user)."""


def _locked_status(project: str) -> tuple[int, dict[str, object]]:
    import fcntl

    private_dir(project, ".hatfield")
    lock = os.open(os.path.join(project, STATUS_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock, read_status(project)


def read_status(project: str) -> dict[str, object]:
    """The status file (``{}`` when there is none or it cannot be read)."""
    try:
        with open(os.path.join(project, STATUS_FILE), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_status(project: str, status: dict[str, object]) -> None:
    """Replace the status file atomically (0600)."""
    path = os.path.join(project, STATUS_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(status, handle)
    os.replace(tmp, path)


def update_status(project: str, change: object) -> object:
    """Run ``change(status) -> (changed, result)`` under the status lock; write back when changed."""
    lock, status = _locked_status(project)
    try:
        changed, result = change(status)  # type: ignore[operator]
        if changed:
            write_status(project, status)
        return result
    finally:
        os.close(lock)


def notices(status: dict[str, object]) -> list[dict[str, object]]:
    """The status file's notices (each ``{"key", "message", "shown", "told", ...}``)."""
    found = status.get("notices")
    return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []


MAX_NOTICES = 64
"""Notices kept in the status file (the oldest go first); a kept one is never shown twice."""


def set_notice(project: str, key: str, message: str) -> None:
    """Record ``message`` for the cause ``key``; a new or changed message will be shown once."""

    def change(status: dict[str, object]) -> tuple[bool, None]:
        items = notices(status)
        for item in items:
            if item.get("key") == key:
                if item.get("message") == message:
                    return False, None
                item.update(message=message, shown=False, told=False)
                status["notices"] = items
                return True, None
        items.append({"key": key, "message": message, "shown": False, "told": False})
        status["notices"] = items[-MAX_NOTICES:]
        return True, None

    update_status(project, change)


def add_notice(project: str, key: str, message: str) -> None:
    """Record ``message`` for the cause ``key`` unless that cause has a notice already (shown or not):
    one notice per cause, whatever its later messages say."""

    def change(status: dict[str, object]) -> tuple[bool, None]:
        items = notices(status)
        if any(item.get("key") == key for item in items):
            return False, None
        items.append({"key": key, "message": message, "shown": False, "told": False})
        status["notices"] = items[-MAX_NOTICES:]
        return True, None

    update_status(project, change)


def clear_notices(project: str, prefix: str) -> None:
    """Forget the notices whose key starts with ``prefix`` (their cause is gone)."""
    if not os.path.exists(os.path.join(project, STATUS_FILE)):
        return

    def change(status: dict[str, object]) -> tuple[bool, None]:
        items = notices(status)
        kept = [item for item in items if not str(item.get("key", "")).startswith(prefix)]
        status["notices"] = kept
        return len(kept) != len(items), None

    update_status(project, change)


def take_notices(project: str, event: str, interactive: bool) -> tuple[str | None, str | None]:
    """``(systemMessage, model context)`` of notices not shown yet; marks them shown (once per cause).

    ``SessionStart`` also tells the model what it has not been told (``claude -p`` shows the user
    nothing else); in the interactive UI the user has seen the message, so the model is not told.
    """
    if not os.path.exists(os.path.join(project, STATUS_FILE)):
        return None, None  # the common case: nothing to report, no lock taken

    def change(status: dict[str, object]) -> tuple[bool, tuple[str | None, str | None]]:
        show: list[str] = []
        tell: list[str] = []
        for notice in notices(status):
            message = notice.get("message")
            if not isinstance(message, str):
                continue
            if not notice.get("shown"):
                show.append(message)
                notice["shown"] = True
                if interactive:
                    notice["told"] = True
            if event == "SessionStart" and not notice.get("told"):
                tell.append(message)
                notice["told"] = True
        context = f"{NOTICE_FOR_MODEL}\n" + "\n".join(f"- {m}" for m in tell) if tell else None
        return bool(show or tell), ("\n".join(show) or None, context)

    result = update_status(project, change)
    return result  # type: ignore[return-value]
