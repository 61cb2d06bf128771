"""``omray integrate claude-code|codex``: write omray's hook and MCP entries into an agent's settings.

Claude Code (per project): in ``<project>/.claude/settings.json`` the hooks (``Stop``,
``SubagentStop``, ``PreCompact``, ``SessionEnd`` and ``SessionStart`` run ``omray hook
claude-code``), the approval of omray's MCP server (``enabledMcpjsonServers``) and of its read-only
tools (``permissions.allow``: ``mcp__omray``); the server itself in ``<project>/.mcp.json``
(``mcpServers.omray``). Codex: in ``$CODEX_HOME/config.toml`` (default ``~/.codex``),
``[mcp_servers.omray]`` with its tools approved (``default_tools_approval_mode``) and
``notify``; a ``notify`` program already there keeps running, chained after omray's hook. Every
entry names the ``omray`` program this command runs from by its absolute path, so an agent
started without the virtual environment on ``PATH`` still finds it.

The merges are pure functions on the parsed documents: other hooks, matchers, permissions and
servers are kept as they are, running twice changes nothing, and ``--remove`` takes out what was
added. ``--dry-run`` prints the unified diff and writes nothing; otherwise each changed file is
replaced atomically. A file that does not parse is an error and is left untouched.

After writing (and with ``--check`` alone) the command checks what the agent will need: the
settings of the project (model, provider, API key variable, the model in the endpoint's
``/models`` list), a running memory runtime, and for
Claude Code a trusted workspace (it ignores a project's permissions until the user accepts its
trust dialog once); each finding says what to do. ``--mcp-transport http`` points the agent at a
running ``omray mcp --transport http`` instead (``cluster.commands.integrate_http``). ``--observer``
also sets the project's model (``cluster.commands.integrate_observer``).
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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from cluster.commands.integrate_checks import (
    Finding,
    check_claude_trust,
    check_runtime,
    check_settings,
    print_findings,
)
from cluster.commands.integrate_files import (
    SettingsFileError,
    claude_settings_problem,
    codex_config_problem,
    mcp_config_problem,
    parse_json_object,
    read_settings_text,
    refuse,
    write_settings,
)
from cluster.commands.integrate_http import (
    CODEX_HTTP_SCOPE,
    McpHttp,
    McpTransport,
    check_mcp_http,
    claude_mcp_entry,
    mcp_http_for,
)
from cluster.commands.integrate_observer import Observer, observer_edit, observer_preview
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
    ("SessionStart", None),
)
"""``(event, matcher)`` of every hook omray installs in Claude Code (``SessionStart`` for every
source: memory after ``compact`` and ``resume``, a pending notice at any start)."""
CLAUDE_CODE_TOOL_PERMISSION = f"mcp__{MCP_SERVER_NAME}"
"""The ``permissions.allow`` rule that lets Claude Code call omray's (read-only) tools without asking."""
CODEX_APPROVAL_MODE = "approve"
"""``default_tools_approval_mode`` of omray's server in Codex: its tools only read memory."""


class Agent(enum.StrEnum):
    """Agents ``omray integrate`` knows."""

    CLAUDE_CODE = "claude-code"
    CODEX = "codex"


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
    place when its group has the matcher omray wants, so running again never adds a second one;
    one under another matcher (an older omray's ``compact|resume``) moves to a group of its own.
    """
    merged = copy.deepcopy(settings)
    hooks = merged.setdefault("hooks", {})
    ours = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S}
    for event, matcher in CLAUDE_CODE_HOOKS:
        groups = hooks.setdefault(event, [])
        found = False
        for group in list(groups):
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list):
                continue
            for index, hook in enumerate(list(inner)):
                if not _is_ours(hook):
                    continue
                if group.get("matcher") == matcher and not found:
                    inner[index] = {**hook, "command": command}
                    found = True
                else:
                    inner.remove(hook)
            if not inner:
                groups.remove(group)
        if not found:
            group = {"hooks": [ours]} if matcher is None else {"matcher": matcher, "hooks": [ours]}
            groups.append(group)
    return merged


def _add_to_list(container: dict[str, Any], key: str, value: str) -> None:
    current = container.get(key)
    if not isinstance(current, list):
        container[key] = [value]
    elif value not in current:
        current.append(value)


def _remove_from_list(container: dict[str, Any], key: str, value: str) -> None:
    current = container.get(key)
    if isinstance(current, list) and value in current:
        current.remove(value)
        if not current:
            del container[key]


def merge_claude_approvals(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` approving omray's project MCP server and allowing its tools (others untouched)."""
    merged = copy.deepcopy(settings)
    _add_to_list(merged, "enabledMcpjsonServers", MCP_SERVER_NAME)
    permissions = merged.setdefault("permissions", {})
    if isinstance(permissions, dict):
        _add_to_list(permissions, "allow", CLAUDE_CODE_TOOL_PERMISSION)
    return merged


def remove_claude_approvals(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` without omray's approvals (keys left empty by that are dropped)."""
    merged = copy.deepcopy(settings)
    _remove_from_list(merged, "enabledMcpjsonServers", MCP_SERVER_NAME)
    permissions = merged.get("permissions")
    allowed = permissions.get("allow") if isinstance(permissions, dict) else None
    if isinstance(permissions, dict) and isinstance(allowed, list) and CLAUDE_CODE_TOOL_PERMISSION in allowed:
        _remove_from_list(permissions, "allow", CLAUDE_CODE_TOOL_PERMISSION)
        if not permissions:  # emptied by taking omray's rule out: it was omray's
            del merged["permissions"]
    return merged


def _holds_ours(groups: object) -> bool:
    return isinstance(groups, list) and any(
        isinstance(group, dict)
        and isinstance(group.get("hooks"), list)
        and any(map(_is_ours, group["hooks"]))
        for group in groups
    )


def remove_claude_hooks(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` without omray's hooks; groups and events left empty by that are dropped.

    Only what taking omray's hooks out emptied is dropped: a user's empty ``hooks`` or
    ``hooks.Stop`` stays as it is.
    """
    merged = copy.deepcopy(settings)
    hooks = merged.get("hooks")
    if not isinstance(hooks, dict):
        return merged
    emptied = False
    for event in list(hooks):
        groups = hooks[event]
        if not _holds_ours(groups):
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
            emptied = True
    if not hooks and emptied:
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
    mode: int | None = None
    """Mode to write the file with (``None``: keep its mode; a new file is 0600)."""

    @property
    def changed(self) -> bool:
        """Whether writing it would change anything."""
        return self.before != self.after or (
            self.mode is not None and self.path.exists() and self.path.stat().st_mode & 0o777 != self.mode
        )

    @property
    def outcome(self) -> str:
        """What writing it does: ``created``, ``updated``, ``removed (empty)`` or ``unchanged``."""
        if not self.changed:
            return "unchanged"
        if not self.after:
            return "removed (empty)"
        return "created" if not self.before and not self.path.exists() else "updated"

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


def _json_change(path: Path, edit: Any, problem: Any) -> Change:
    before = read_settings_text(path)
    data = parse_json_object(path, before)
    refuse(path, problem(data))
    updated = edit(data)
    if updated == data:
        return Change(path, before, before)
    after = json.dumps(updated, indent=2, ensure_ascii=False) + "\n" if updated else ""
    return Change(path, before, after)


def claude_code_changes(
    project: Path, command: str, remove: bool, http: McpHttp | None = None
) -> list[Change]:
    """The changes to ``.claude/settings.json`` and ``.mcp.json`` of ``project``."""
    hook_command = f"{shlex.quote(command)} hook claude-code"
    server = claude_mcp_entry(command, http)
    settings_path, mcp_path = project / ".claude" / "settings.json", project / ".mcp.json"
    events = [event for event, _ in CLAUDE_CODE_HOOKS]

    def settings_problem(data: dict[str, Any]) -> str | None:
        # Removing looks at every event (an omray hook may sit anywhere); adding edits omray's.
        hooks = data.get("hooks")
        return claude_settings_problem(data, list(hooks) if remove and isinstance(hooks, dict) else events)

    if remove:
        return [
            _json_change(
                settings_path, lambda d: remove_claude_approvals(remove_claude_hooks(d)), settings_problem
            ),
            _json_change(mcp_path, remove_mcp_server, mcp_config_problem),
        ]
    return [
        _json_change(
            settings_path,
            lambda d: merge_claude_approvals(merge_claude_hooks(d, hook_command)),
            settings_problem,
        ),
        _json_change(mcp_path, lambda d: merge_mcp_server(d, server), mcp_config_problem),
    ]


def codex_changes(
    config_path: Path,
    command: str,
    project: Path | None,
    remove: bool,
    http: McpHttp | None = None,
    token: str = "",
) -> list[Change]:
    """The change to Codex's ``config.toml`` (``[mcp_servers.omray]`` and ``notify``).

    Over HTTP the entry carries the bearer ``token`` (Codex runs no helper for headers), so the file
    is written 0600, like the token file itself.
    """
    import tomlkit

    before = read_settings_text(config_path)
    try:
        document = tomlkit.parse(before)
    except tomlkit.exceptions.ParseError:
        raise SettingsFileError(f"{str(config_path)!r} is not valid TOML (nothing was written)") from None
    except RecursionError:
        raise SettingsFileError(f"{str(config_path)!r} is nested too deeply (nothing was written)") from None
    refuse(config_path, codex_config_problem(document, MCP_SERVER_NAME))
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
        if http is None:
            server["command"] = command
            server["args"] = ["mcp", *pinned]
        else:
            server["url"] = http.url
            server["http_headers"] = {"Authorization": f"Bearer {token}"}
        server["default_tools_approval_mode"] = CODEX_APPROVAL_MODE
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
    if remove and after != before:
        # A table taken off the end leaves the blank line that separated it: one newline ends the file.
        after = after.rstrip("\n") + "\n"
    private = http is not None and not remove
    return [Change(config_path, before, after if after.strip() else "", mode=0o600 if private else None)]


def write_change(change: Change) -> None:
    """Replace the file atomically (its mode kept; new files 0600; a symlink's target, the link
    kept); an emptied file is removed (a symlinked one is left holding an empty document)."""
    if change.changed:
        emptied = "{}\n" if change.path.suffix == ".json" else ""
        write_settings(change.path, change.after, emptied, change.mode)


def omray_command() -> str:
    """The absolute path of the ``omray`` program this command runs from.

    An agent started from another shell (no virtual environment on ``PATH``) must still find the
    same omray, so the entries never say a bare ``omray``. The path is kept as it was called (a
    ``bin/omray`` of a virtual environment, a pipx or ``~/.local/bin`` link), not resolved to a
    versioned target. Run as ``python -m cluster.commands.cli``, it is the ``omray`` next to the interpreter,
    else the one on ``PATH``.
    """
    running = Path(sys.argv[0])
    if running.name == "omray" and running.exists():
        return str(running.absolute())
    beside = Path(sys.executable).parent / "omray"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("omray")
    if found is not None:
        return str(Path(found).absolute())
    raise SettingsFileError(
        "cannot find the omray program to write into the agent's settings; install omray (pip install -e .) "
        "and run `omray integrate` itself"
    )


# ------------------------------------------------------------------------------------- the checks


def run_checks(agent: Agent, project: Path) -> list[Finding]:
    """Everything the agent needs for omray, checked now."""
    findings = [Finding(True, "omray", omray_command())]
    findings.extend(check_settings(project))
    findings.append(check_runtime(project))
    if agent is Agent.CLAUDE_CODE:
        findings.append(check_claude_trust(project))
    return findings


def mcp_http_findings(agent: Agent, http: McpHttp, token: str, project: Path) -> list[Finding]:
    """The HTTP server the agent is pointed at (it answers, takes the token, serves ``project``),
    and for Codex, whose entry is global, a note that it serves that one project everywhere."""
    ok, detail = check_mcp_http(http, token, project)
    findings = [Finding(ok, "mcp server", detail)]
    if agent is Agent.CODEX:
        findings.append(Finding(True, "mcp scope", CODEX_HTTP_SCOPE.format(project=project), note=True))
    return findings


def integrate_command(
    agent: Annotated[Agent, typer.Argument(help="claude-code or codex.")],
    project: Annotated[
        Path | None, typer.Option(help="Project directory (Claude Code: default the working directory).")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the diff; write nothing.")] = False,
    remove: Annotated[bool, typer.Option("--remove", help="Take omray's entries out again.")] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Only check settings, runtime and trust; write nothing.")
    ] = False,
    codex_config: Annotated[
        Path | None, typer.Option(help="Codex config file (default: $CODEX_HOME/config.toml).")
    ] = None,
    mcp_transport: Annotated[
        McpTransport,
        typer.Option(help="How the agent reaches omray's MCP server: stdio (it starts one) or http."),
    ] = McpTransport.STDIO,
    mcp_port: Annotated[
        int,
        typer.Option(help="Port of `omray mcp --transport http` on 127.0.0.1 (with --mcp-transport http)."),
    ] = 8766,
    observer: Annotated[
        Observer | None,
        typer.Option(
            help="Also set the project's model: claude (claude-code/haiku on your Claude Code login), "
            "codex (codex/gpt-5-mini on your Codex login) or builtin (back to the offline model)."
        ),
    ] = None,
) -> None:
    """Add omray's hooks, MCP server and approvals to Claude Code or Codex settings, then check what
    else the agent needs (idempotent; --remove undoes; --check only checks)."""
    root = (project or Path.cwd()).resolve()
    if observer is not None and remove:
        typer.echo(
            "omray integrate: --observer sets the project's model and --remove takes omray out; "
            "run them one at a time (nothing was changed)",
            err=True,
        )
        raise typer.Exit(code=2)
    if check:
        findings = run_checks(agent, root)
        if observer is not None:
            findings.extend(observer_preview(root, observer))
        if mcp_transport is McpTransport.HTTP:
            try:
                http, token = mcp_http_for(mcp_transport, mcp_port, False)
            except OmrayError as exc:
                findings.append(Finding(False, "mcp server", str(exc)))
            else:
                assert http is not None
                findings.extend(mcp_http_findings(agent, http, token, root))
        print_findings(findings)
        raise typer.Exit(code=0 if all(f.ok for f in findings) else 1)
    try:
        command = omray_command()
        http, token = mcp_http_for(mcp_transport, mcp_port, remove)
        if agent is Agent.CLAUDE_CODE:
            changes = claude_code_changes(root, command, remove, http)
        else:
            home = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")
            pinned = project.resolve() if project is not None else None
            changes = codex_changes(
                codex_config or home / "config.toml", command, pinned, remove, http, token
            )
        if observer is not None:
            path, before, after = observer_edit(root, observer)
            changes.append(Change(path, before, after, mode=None if path.exists() else 0o644))
    except OmrayError as exc:
        typer.echo(f"omray integrate: {exc}", err=True)
        raise typer.Exit(code=2) from None
    for change in changes:
        if not change.changed:
            typer.echo(f"{change.path}: unchanged")
        elif dry_run:
            diff = change.diff()
            typer.echo(diff.replace(token, "<token>") if token else diff, nl=False)
        else:
            outcome = change.outcome
            try:
                write_change(change)
            except OSError as exc:
                typer.echo(
                    f"omray integrate: cannot write {str(change.path)!r} ({type(exc).__name__})", err=True
                )
                raise typer.Exit(code=2) from None
            typer.echo(f"{change.path}: {outcome}")
    if dry_run or remove:
        return
    typer.echo("checks:")
    findings = run_checks(agent, root)
    if http is not None:
        findings.extend(mcp_http_findings(agent, http, token, root))
    print_findings(findings)
