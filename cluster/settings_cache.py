"""What a project's settings resolved to, remembered for the agent's hot paths (standard library only).

Loading the settings takes YAML and pydantic, about 0.1 s of CPU, longer than a hook call or the
MCP server's tool list may take. So whoever loads them the slow way (:func:`resolve`: a hook's
first ``SessionStart`` memory read, the dispatcher, ``omray mcp``) records what the hot paths need
in ``.hatfield/omray-hook.resolved.json``: the database path and whether hybrid search is on,
keyed by which settings file was in effect and its stat (:func:`settings_identity`). A record whose
key no longer matches is ignored, so an edited, added or removed settings file is read again.

Imported by :mod:`cluster.commands.hook_fast` and :mod:`cluster.servers.mcp_server`, so it must
stay free of pydantic, SQLAlchemy, Ray and every omray module but :mod:`cluster.project_dirs`.
"""

from __future__ import annotations

import contextlib
import json
import os

from cluster.project_dirs import private_dir

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing: the agent hook loads this
if TYPE_CHECKING:
    from protocol.settings import OmSettings

REMOTE_FILE = ".hatfield/omray-hook.remote-database"
"""The database path the hook dispatcher found living on another node (issue 43); absent otherwise."""
RESOLVED_FILE = ".hatfield/omray-hook.resolved.json"
"""Which settings file was in effect (and its stat), the database path and the hybrid flag it gave."""
SETTINGS_ENV = "OMRAY_SETTINGS"
"""``persistence.settings.file.SETTINGS_ENV``."""
SETTINGS_FILES = ("omray.yaml", ".hatfield/settings.yaml")
"""``persistence.settings.file.DEFAULT_SETTINGS_FILES``."""


def settings_identity(project: str) -> list[object]:
    """Which settings file is in effect for ``project`` and its stat: what the resolution depends on."""
    env = os.environ.get(SETTINGS_ENV)
    candidates = [env] if env else [os.path.join(project, name) for name in SETTINGS_FILES]
    for path in candidates:
        try:
            stat = os.stat(path)
        except OSError:
            if env:
                return [path, None]
            continue
        return [path, stat.st_mtime_ns, stat.st_size, stat.st_ino]
    return [None]


def cached(project: str) -> dict[str, object] | None:
    """The record for the settings in effect now, or ``None`` when stale, absent or unreadable."""
    try:
        with open(os.path.join(project, RESOLVED_FILE), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("settings") != settings_identity(project):
        return None
    return data


def cached_database(project: str) -> str | None:
    """The database path recorded for the settings in effect now (``None``: stale or absent)."""
    database = (cached(project) or {}).get("database")
    return database if isinstance(database, str) else None


def cached_hybrid(project: str) -> bool | None:
    """Whether the settings in effect now turn hybrid search on (``None``: stale, absent, or recorded
    by an omray that did not note it)."""
    hybrid = (cached(project) or {}).get("hybrid")
    return hybrid if isinstance(hybrid, bool) else None


def remember(project: str, identity: list[object], database: str, hybrid: bool) -> None:
    """Record what the settings ``identity`` gave (atomically; folder 0700, file 0600)."""
    path = os.path.join(private_dir(project, ".hatfield"), os.path.basename(RESOLVED_FILE))
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"settings": identity, "database": database, "hybrid": hybrid}, handle)
    os.replace(tmp, path)


def remember_settings(project: str, identity: list[object], settings: OmSettings) -> str:
    """Record what ``settings`` (loaded under ``identity``) give for ``project``; returns the
    database path. A failed write is ignored: the record only saves time."""
    database = os.path.abspath(settings.database_path(project))
    with contextlib.suppress(OSError):
        remember(project, identity, database, settings.semantic is not None)
    return database


def resolve(project: str) -> str:
    """The project's memory database from its settings (the slow way: YAML and pydantic), remembered.

    The identity is taken before the settings are read, so a file edited meanwhile leaves a record
    that no longer matches, never a stale one that does.
    """
    from persistence.settings.file import load_settings

    identity = settings_identity(project)
    return remember_settings(project, identity, load_settings(cwd=project))


def remember_remote(project: str, database: str, remote: bool) -> None:
    """Note whether ``database`` lives on another node than this one (the dispatcher asked the
    runtime), so that a hook needing its memory asks the runtime instead of reading a file that is
    not on this node's disk. A failed write is ignored (the hook then finds no memory)."""
    path = os.path.join(project, REMOTE_FILE)
    with contextlib.suppress(OSError):
        if not remote:
            os.unlink(path)
            return
        if remote_database(project) == database:
            return
        tmp = os.path.join(private_dir(project, ".hatfield"), f"{os.path.basename(path)}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(database)
        os.replace(tmp, path)


def remote_database(project: str) -> str | None:
    """The database path noted as living on another node (``None``: none noted)."""
    try:
        with open(os.path.join(project, REMOTE_FILE), encoding="utf-8") as handle:
            return handle.read() or None
    except OSError:
        return None
