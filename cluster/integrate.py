"""``omray integrate claude-code|codex``: write omray's hook and MCP entries into an agent's settings.

Claude Code (per project): hooks in ``<project>/.claude/settings.json`` (``Stop``, ``SubagentStop``,
``PreCompact``, ``SessionEnd`` and ``SessionStart`` for ``compact|resume`` run ``omray hook
claude-code``) and the MCP server in ``<project>/.mcp.json`` (``mcpServers.omray``). Codex: in
``$CODEX_HOME/config.toml`` (default ``~/.codex``), ``[mcp_servers.omray]`` and ``notify``; a
``notify`` program already there keeps running, chained after omray's hook.

The merges are pure functions on the parsed documents: other hooks, matchers and servers are
kept as they are, running twice changes nothing, and ``--remove`` takes out exactly what was
added. ``--dry-run`` prints the unified diff and writes nothing; otherwise each changed file is
replaced atomically. A file that does not parse is an error and is left untouched.
"""

from __future__ import annotations

import copy
import difflib
import enum
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from protocol.errors import OmrayError

MCP_SERVER_NAME = "omray"
"""Name of omray's entry among the agent's MCP servers."""
HOOK_TIMEOUT_S = 10
"""Claude Code's timeout for omray's hook commands (they return in well under a second)."""
CLAUDE_CODE_HOOKS: tuple[tuple[str, str | None], ...] = (
    ("Stop", None),
    ("SubagentStop", None),
    ("PreCompact", None),
    ("SessionEnd", None),
    ("SessionStart", "compact|resume"),
)
"""``(event, matcher)`` of every hook omray installs in Claude Code."""


class Agent(enum.StrEnum):
    """Agents ``omray integrate`` knows."""

    CLAUDE_CODE = "claude-code"
    CODEX = "codex"


class SettingsFileError(OmrayError):
    """An agent settings file that cannot be read or parsed (nothing is written)."""


# ----------------------------------------------------------------------------- pure: Claude Code


def is_omray_command(words: Sequence[str], subcommand: str) -> bool:
    """Whether ``words`` start an ``omray hook <subcommand>`` (``omray`` by name or by any path)."""
    return len(words) >= 3 and Path(words[0]).name == "omray" and list(words[1:3]) == ["hook", subcommand]


def _is_ours(hook: object) -> bool:
    if not isinstance(hook, dict) or hook.get("type") != "command":
        return False
    try:
        words = shlex.split(str(hook.get("command", "")))
    except ValueError:  # unbalanced quotes: somebody else's command
        return False
    return is_omray_command(words, "claude-code")


def merge_claude_hooks(settings: dict[str, Any], command: str) -> dict[str, Any]:
    """``settings`` with omray's hook on each of its events; everything else untouched.

    An omray hook already there (also one written with another path to ``omray``) is updated in
    place, so running again never adds a second one.
    """
    merged = copy.deepcopy(settings)
    hooks = merged.setdefault("hooks", {})
    ours = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S}
    for event, matcher in CLAUDE_CODE_HOOKS:
        groups = hooks.setdefault(event, [])
        found = False
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            for index, hook in enumerate(inner if isinstance(inner, list) else []):
                if _is_ours(hook):
                    inner[index] = {**hook, "command": command}  # type: ignore[index]
                    found = True
        if not found:
            group = {"hooks": [ours]} if matcher is None else {"matcher": matcher, "hooks": [ours]}
            groups.append(group)
    return merged


def remove_claude_hooks(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` without omray's hooks; groups and events left empty by that are dropped."""
    merged = copy.deepcopy(settings)
    hooks = merged.get("hooks")
    if not isinstance(hooks, dict):
        return merged
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept = []
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list) or not any(_is_ours(hook) for hook in inner):
                kept.append(group)
                continue
            remaining = [hook for hook in inner if not _is_ours(hook)]
            if remaining:
                kept.append({**group, "hooks": remaining})
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    if not hooks:
        del merged["hooks"]
    return merged


def merge_mcp_server(
    config: dict[str, Any], entry: dict[str, Any], key: str = "mcpServers"
) -> dict[str, Any]:
    """``config`` with ``config[key]["omray"] = entry``; other servers untouched."""
    merged = copy.deepcopy(config)
    merged.setdefault(key, {})[MCP_SERVER_NAME] = entry
    return merged


def remove_mcp_server(config: dict[str, Any], key: str = "mcpServers") -> dict[str, Any]:
    """``config`` without omray's server (and without ``key`` when nothing else was in it)."""
    merged = copy.deepcopy(config)
    servers = merged.get(key)
    if isinstance(servers, dict) and MCP_SERVER_NAME in servers:
        del servers[MCP_SERVER_NAME]
        if not servers:
            del merged[key]
    return merged


# ------------------------------------------------------------------------------------ pure: Codex


def _chained(words: Sequence[str]) -> list[str]:
    """The program an omray ``notify`` runs after itself (the words after ``--``), if any."""
    return list(words[list(words).index("--") + 1 :]) if "--" in words else []


def merge_codex_notify(current: Sequence[str] | None, hook: Sequence[str]) -> list[str]:
    """The ``notify`` command running omray's ``hook``, then the program that was there (if any)."""
    words = list(current or [])
    theirs = _chained(words) if is_omray_command(words, "codex") else words
    return [*hook, "--", *theirs] if theirs else list(hook)


def remove_codex_notify(current: Sequence[str] | None) -> list[str] | None:
    """The ``notify`` command without omray's hook: the chained program, or ``None`` for none."""
    words = list(current or [])
    theirs = _chained(words) if is_omray_command(words, "codex") else words
    return theirs or None


# -------------------------------------------------------------------------------------- the files


@dataclass(frozen=True)
class Change:
    """One settings file before and after."""

    path: Path
    before: str
    after: str

    @property
    def changed(self) -> bool:
        """Whether writing it would change anything."""
        return self.before != self.after

    def diff(self) -> str:
        """Unified diff of the change ('' when unchanged)."""
        return "".join(
            difflib.unified_diff(
                self.before.splitlines(keepends=True),
                self.after.splitlines(keepends=True),
                fromfile=str(self.path),
                tofile=str(self.path),
            )
        )


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise SettingsFileError(f"cannot read {str(path)!r} ({type(exc).__name__})") from None


def _json_change(path: Path, edit: Any) -> Change:
    before = _read_text(path)
    try:
        data = json.loads(before) if before.strip() else {}
    except ValueError:
        raise SettingsFileError(
            f"{str(path)!r} is not valid JSON; fix it first (nothing was written)"
        ) from None
    if not isinstance(data, dict):
        raise SettingsFileError(f"{str(path)!r} does not hold a JSON object (nothing was written)")
    updated = edit(data)
    if updated == data:
        return Change(path, before, before)
    after = json.dumps(updated, indent=2, ensure_ascii=False) + "\n" if updated else ""
    return Change(path, before, after)


def claude_code_changes(project: Path, command: str, remove: bool) -> list[Change]:
    """The changes to ``.claude/settings.json`` and ``.mcp.json`` of ``project``."""
    hook_command = f"{shlex.quote(command)} hook claude-code"
    server = {"command": command, "args": ["mcp"]}
    if remove:
        return [
            _json_change(project / ".claude" / "settings.json", remove_claude_hooks),
            _json_change(project / ".mcp.json", remove_mcp_server),
        ]
    return [
        _json_change(project / ".claude" / "settings.json", lambda d: merge_claude_hooks(d, hook_command)),
        _json_change(project / ".mcp.json", lambda d: merge_mcp_server(d, server)),
    ]


def codex_changes(config_path: Path, command: str, project: Path | None, remove: bool) -> list[Change]:
    """The change to Codex's ``config.toml`` (``[mcp_servers.omray]`` and ``notify``)."""
    import tomlkit

    before = _read_text(config_path)
    try:
        document = tomlkit.parse(before)
    except tomlkit.exceptions.ParseError:
        raise SettingsFileError(f"{str(config_path)!r} is not valid TOML (nothing was written)") from None
    pinned = ["--project", str(project)] if project is not None else []
    hook = [command, "hook", "codex", *pinned]
    current = document.get("notify")
    words = [str(word) for word in current] if isinstance(current, list) else None
    servers = document.get("mcp_servers")
    if remove:
        notify = remove_codex_notify(words)
        if isinstance(servers, dict) and MCP_SERVER_NAME in servers:
            del servers[MCP_SERVER_NAME]
            if not servers:
                del document["mcp_servers"]
    else:
        notify = merge_codex_notify(words, hook)
        server = tomlkit.table()
        server["command"] = command
        server["args"] = ["mcp", *pinned]
        if not isinstance(servers, dict):
            document["mcp_servers"] = tomlkit.table(is_super_table=True)
        if document["mcp_servers"].get(MCP_SERVER_NAME) != server:
            document["mcp_servers"][MCP_SERVER_NAME] = server
    if notify != words:
        if notify is None:
            del document["notify"]
        else:
            document["notify"] = notify  # tomlkit puts a new top-level key before the first table
    after = tomlkit.dumps(document)
    return [Change(config_path, before, after if after.strip() else "")]


def write_change(change: Change) -> None:
    """Replace the file atomically (its mode kept; new files 0600); an emptied file is removed."""
    if not change.changed:
        return
    if change.after == "":
        change.path.unlink(missing_ok=True)
        return
    change.path.parent.mkdir(parents=True, exist_ok=True)
    mode = change.path.stat().st_mode & 0o777 if change.path.exists() else 0o600
    fd, tmp = tempfile.mkstemp(prefix=f".{change.path.name}.", dir=change.path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(change.after)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, change.path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def omray_command() -> str:
    """How the agent should call omray: ``omray`` when that is this program on PATH, else its full path."""
    running = Path(sys.argv[0]).resolve()
    found = shutil.which("omray")
    if running.name != "omray" or (found is not None and Path(found).resolve() == running):
        return "omray"
    return str(running)


def integrate_command(
    agent: Annotated[Agent, typer.Argument(help="claude-code or codex.")],
    project: Annotated[
        Path | None, typer.Option(help="Project directory (Claude Code: default the working directory).")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the diff; write nothing.")] = False,
    remove: Annotated[bool, typer.Option("--remove", help="Take omray's entries out again.")] = False,
    codex_config: Annotated[
        Path | None, typer.Option(help="Codex config file (default: $CODEX_HOME/config.toml).")
    ] = None,
) -> None:
    """Add omray's hooks and MCP server to Claude Code or Codex settings (idempotent; --remove undoes)."""
    command = omray_command()
    try:
        if agent is Agent.CLAUDE_CODE:
            changes = claude_code_changes((project or Path.cwd()).resolve(), command, remove)
        else:
            home = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")
            pinned = project.resolve() if project is not None else None
            changes = codex_changes(codex_config or home / "config.toml", command, pinned, remove)
    except SettingsFileError as exc:
        typer.echo(f"omray integrate: {exc}", err=True)
        raise typer.Exit(code=2) from None
    for change in changes:
        if not change.changed:
            typer.echo(f"{change.path}: unchanged")
        elif dry_run:
            typer.echo(change.diff(), nl=False)
        else:
            write_change(change)
            typer.echo(f"{change.path}: {'updated' if change.after else 'removed (empty)'}")
