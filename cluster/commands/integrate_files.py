"""The agent settings files ``omray integrate`` edits: read strictly, checked for shape, written in place.

A settings file is the user's: omray edits only what it adds and refuses, in one line and without
writing anything, a file it cannot edit safely:

* not UTF-8, not a regular file (a FIFO is never opened for a blocking read), a dangling symlink;
* JSON that is not strict JSON (``NaN``, ``Infinity``), repeats a key, or is nested too deeply;
* valid JSON or TOML of another shape than the agent's (``{"hooks": []}``, ``{"hooks": null}``,
  ``{"hooks": {"Stop": {}}}``, ``mcpServers`` as a list or a string, a Codex ``notify`` that is a
  string, ``mcp_servers`` that is not a table): rewriting those would silently drop the user's
  data, so the error names the key to fix.

A symlinked settings file is followed: its target is replaced atomically and the link stays.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from persistence.files.atomic_file import replace_file
from persistence.settings.file import decode_bounded
from protocol.errors import OmrayError

MAX_SETTINGS_FILE_BYTES = 16 * 1024 * 1024
"""Largest agent settings file read (a real one is a few kilobytes)."""


class SettingsFileError(OmrayError):
    """An agent settings file that cannot be read, parsed or safely edited (nothing is written)."""


def _shown(path: Path) -> str:
    return repr(str(path))


def read_settings_text(path: Path) -> str:
    """The file's text ('' when it does not exist); typed errors for anything omray will not edit."""
    if path.is_symlink() and not path.exists():
        raise SettingsFileError(
            f"{_shown(path)} is a symlink to a missing file; fix or remove the link (nothing was written)"
        )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise SettingsFileError(f"cannot read {_shown(path)} ({type(exc).__name__})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a folder cannot even be wrapped in a file object
        os.close(fd)
        raise SettingsFileError(f"{_shown(path)} is not a regular file (nothing was written)")
    with os.fdopen(fd, "rb") as handle:
        try:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise SettingsFileError(f"{_shown(path)} is not a regular file (nothing was written)")
            raw = handle.read(MAX_SETTINGS_FILE_BYTES + 1)
        except OSError as exc:
            raise SettingsFileError(f"cannot read {_shown(path)} ({type(exc).__name__})") from None
    hint = "; fix it first (nothing was written)"
    return decode_bounded(raw, MAX_SETTINGS_FILE_BYTES, _shown(path), SettingsFileError, hint)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"key {key[:80]!r} appears twice in one object")
        result[key] = value
    return result


def parse_json_object(path: Path, text: str) -> dict[str, Any]:
    """``text`` as a JSON object ({} when blank): strict JSON only (no ``NaN``/``Infinity``, no key
    twice in one object), else :class:`SettingsFileError`."""
    if not text.strip():
        return {}
    try:
        data = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise SettingsFileError(f"{_shown(path)} is nested too deeply (nothing was written)") from None
    except ValueError as exc:
        detail = str(exc) if "JSON" in str(exc) or "twice" in str(exc) else "invalid JSON"
        if isinstance(exc, json.JSONDecodeError):
            detail = f"invalid JSON at line {exc.lineno}"
        raise SettingsFileError(
            f"{_shown(path)} is not valid JSON ({detail}); fix it first (nothing was written)"
        ) from None
    if not isinstance(data, dict):
        raise SettingsFileError(f"{_shown(path)} does not hold a JSON object (nothing was written)")
    return data


# ------------------------------------------------------------------------------------- shapes


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict | Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return "a number" if isinstance(value, int | float) else type(value).__name__


def claude_settings_problem(settings: Mapping[str, Any], events: Iterable[str]) -> str | None:
    """What keeps omray from editing Claude Code ``settings`` (its ``events``), or ``None``."""
    if "hooks" in settings:
        hooks = settings["hooks"]
        if not isinstance(hooks, dict):
            return f"'hooks' is {_kind(hooks)}, Claude Code expects an object of event names"
        for event in events:
            if event not in hooks:
                continue
            groups = hooks[event]
            if not isinstance(groups, list):
                return f"'hooks.{event}' is {_kind(groups)}, Claude Code expects a list of hook groups"
            for index, group in enumerate(groups):
                if not isinstance(group, dict):
                    return f"'hooks.{event}[{index}]' is {_kind(group)}, Claude Code expects an object"
                if "hooks" in group and not isinstance(group["hooks"], list):
                    inner = _kind(group["hooks"])
                    return f"'hooks.{event}[{index}].hooks' is {inner}, Claude Code expects a list"
    if "enabledMcpjsonServers" in settings and not isinstance(settings["enabledMcpjsonServers"], list):
        shape = _kind(settings["enabledMcpjsonServers"])
        return f"'enabledMcpjsonServers' is {shape}, Claude Code expects a list"
    if "permissions" in settings:
        permissions = settings["permissions"]
        if not isinstance(permissions, dict):
            return f"'permissions' is {_kind(permissions)}, Claude Code expects an object"
        if "allow" in permissions and not isinstance(permissions["allow"], list):
            return f"'permissions.allow' is {_kind(permissions['allow'])}, Claude Code expects a list"
    return None


def mcp_config_problem(config: Mapping[str, Any], key: str = "mcpServers") -> str | None:
    """What keeps omray from editing an MCP config (``key`` must hold an object), or ``None``."""
    if key in config and not isinstance(config[key], dict):
        return f"{key!r} is {_kind(config[key])}, an object of server names is expected"
    return None


def codex_config_problem(document: Mapping[str, Any], server_name: str) -> str | None:
    """What keeps omray from editing Codex's parsed ``config.toml``, or ``None``.

    A ``notify`` that is not a list of words is refused rather than replaced: omray chains the
    program that is there, which it can do only with its words.
    """
    if "notify" in document:
        notify = document["notify"]
        if not isinstance(notify, list):
            return (
                f"'notify' is {_kind(notify)}; Codex expects a list of words (notify = [\"program\", "
                '"arg"]): make it one and omray keeps running it after its own hook'
            )
        if not all(isinstance(word, str) for word in notify):
            return "'notify' holds something other than strings; Codex expects a list of words"
    if "mcp_servers" in document:
        servers = document["mcp_servers"]
        if not isinstance(servers, dict):
            return f"'mcp_servers' is {_kind(servers)}, Codex expects a table of servers"
        if server_name in servers and not isinstance(servers[server_name], dict):
            return f"'mcp_servers.{server_name}' is {_kind(servers[server_name])}, Codex expects a table"
    return None


def refuse(path: Path, problem: str | None) -> None:
    """Raise the one-line error for ``problem`` in ``path`` (nothing changes); no problem, no error."""
    if problem is not None:
        raise SettingsFileError(f"{_shown(path)}: {problem}; fix it first (nothing was written)")


# ------------------------------------------------------------------------------------- writing


def write_settings(path: Path, text: str, emptied: str = "", mode: int | None = None) -> None:
    """Replace the file (a symlink's target, the link kept) atomically, with ``mode`` (default: its
    mode kept; a new file 0600).

    ``''`` removes a regular file; a symlinked one keeps its link and its target gets ``emptied``
    (``{}`` for JSON), so a settings file kept elsewhere (a dotfiles repository) is never orphaned.
    """
    if text == "" and not path.is_symlink():
        path.unlink(missing_ok=True)
        return
    text = text or emptied
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    target.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        mode = target.stat().st_mode & 0o777 if target.exists() else 0o600
    replace_file(target, text.encode("utf-8"), mode)
