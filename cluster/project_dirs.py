"""Where a project keeps its agent sessions, and which project a call is for (standard library only).

The agent hooks' hot path (:mod:`cluster.commands.hook_fast`), the MCP server's fast start and the
memory viewer (:mod:`cluster.servers`) all import this; it must stay free of pydantic, SQLAlchemy,
typer, Ray and every other omray module.
"""

from __future__ import annotations

import contextlib
import os

SESSIONS_DIR = ".hatfield/sessions"
"""Session folders under the project (``cluster.commands.agent_hooks.SESSIONS_SUBDIR``)."""


def project_dir(explicit: str | None, hook_cwd: object) -> str:
    """The project of a hook call: ``--project``, else ``$CLAUDE_PROJECT_DIR``, else the hook's cwd."""
    if explicit:
        return os.path.realpath(explicit)
    from_env = os.environ.get("CLAUDE_PROJECT_DIR", "").strip()
    if from_env:
        return os.path.realpath(from_env)
    return os.path.realpath(hook_cwd if isinstance(hook_cwd, str) and hook_cwd else os.getcwd())


def private_dir(project: str, *parts: str) -> str:
    """``project/parts...``, each folder created 0700 when missing (the project itself as it is)."""
    os.makedirs(project, exist_ok=True)
    path = project
    for part in parts:
        path = os.path.join(path, part)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    return path
