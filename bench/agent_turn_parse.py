"""Where a ``claude -p`` turn spends its time, read from Claude Code's own logs (pure, no CLI).

``omray bench agent-turn`` runs a few extra turns of each configuration with
``--debug-file`` (``CLAUDE_CODE_DEBUG_LOG_LEVEL=verbose``) and ``CLAUDE_CODE_DIAGNOSTICS_FILE``;
:func:`turn_phases` turns the two files into :class:`TurnPhases`, one figure per moment of the turn
that omray can add to.

A figure is ``None`` when its lines are missing (a configuration without hooks or MCP, or a Claude
Code that logs differently). The logs hold paths and hook output, never shown here: only times.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING

from bench.measure import percentile

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) \[[A-Z]+\] (.*)$")
"""A debug file's line: its UTC time, its level, its message."""
_CONNECTED = re.compile(r'^MCP server "[^"]+": Successfully connected \(transport: [a-z-]+\) in (\d+)ms')
"""The line reporting an MCP server's ``initialize`` answered, and how long that took."""
_HOOK_OUTPUT = (
    "Hook output does not start with {",
    "Successfully parsed and validated hook JSON output",
    "Failed to parse hook output as JSON",
    "Hook JSON output validation failed",
)
"""The lines Claude Code writes as it reads a hook's output: where the ``Stop`` hook's time ends."""
_MCP_NOTES = ("MCP server ", "[MCP]", "[3P telemetry]")
"""Lines Claude Code writes about a server as it connects, before it goes on with the tool list."""
_MCP_GONE = ("MCP server process exited cleanly", "Cleanup timeout reached", "SIGTERM failed", "SIGKILL")
"""The lines saying a stopped MCP server's process is gone (or given up on)."""


@dataclass(frozen=True)
class TurnPhases:
    """Milliseconds of one turn's moments (``None``: not seen in the logs)."""

    to_request_ms: float | None = None
    """From the first log line to the model request (start-up: settings, the ``SessionStart`` hooks,
    MCP servers connected and listed)."""
    after_response_ms: float | None = None
    """From the first byte of the answer to the last log line (the ``Stop`` hooks, MCP servers
    stopped, the ``SessionEnd`` hooks)."""
    session_start_hook_ms: float | None = None
    """The ``SessionStart`` hook processes from spawn to end, as the diagnostics file stamps them
    (``hook_spawn_started``, ``hook_spawn_completed``), summed over the event's hooks."""
    stop_hook_ms: float | None = None
    """From the verbose "Getting matching hook commands for Stop" line to the line that reads the
    hook's output (Claude Code logs no duration for it)."""
    session_end_hook_ms: float | None = None
    """The ``SessionEnd`` hook processes, as ``session_start_hook_ms``."""
    mcp_connect_ms: float | None = None
    """Start to ``initialize`` answered, as Claude Code reports it ("Successfully connected ... in
    N ms")."""
    mcp_listed_ms: float | None = None
    """From then to the next log line, which Claude Code writes once it has the tool list and goes
    on (an upper bound of the ``tools/list`` wait)."""
    mcp_stop_ms: float | None = None
    """From "Sending SIGINT" to the line saying the process is gone."""


def _moment(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000


def timestamped_lines(
    text: str, pattern: re.Pattern[str], moment: Callable[[str], float]
) -> list[tuple[float, str]]:
    """``(ms since the epoch, message)`` of every line of ``text`` that ``pattern`` matches (its
    groups: the timestamp, read by ``moment``, and the message); other lines are dropped."""
    found = (pattern.match(line) for line in text.splitlines())
    return [(moment(match.group(1)), match.group(2)) for match in found if match]


def debug_lines(text: str) -> list[tuple[float, str]]:
    """The timestamped lines of a debug file (continuation lines of a multi-line message are
    dropped), as :func:`timestamped_lines`."""
    return timestamped_lines(text, _LINE, _moment)


def _hook_durations(diagnostics: str) -> dict[str, float]:
    """Per event, the ms from each hook process's spawn to its end (``hook_spawn_started`` to
    ``hook_spawn_completed``; the ``duration_ms`` Claude Code logs also holds its own work before
    the spawn), summed over the event's hooks."""
    spawned: dict[tuple[str, object], float] = {}
    durations: dict[str, float] = {}
    for line in diagnostics.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        data = record.get("data") if isinstance(record, dict) else None
        stamp = record.get("timestamp") if isinstance(record, dict) else None
        if not isinstance(data, dict) or not isinstance(stamp, str):
            continue
        event = data.get("hook_event_name")
        if not isinstance(event, str):
            continue
        key = (event, data.get("index"))
        if record.get("event") == "hook_spawn_started":
            spawned[key] = _moment(stamp)
        elif record.get("event") == "hook_spawn_completed" and key in spawned:
            durations[event] = durations.get(event, 0.0) + _moment(stamp) - spawned.pop(key)
    return durations


def _first(lines: Sequence[tuple[float, str]], start: int, wanted: Iterable[str]) -> int | None:
    needles = tuple(wanted)
    for index in range(start, len(lines)):
        if any(needle in lines[index][1] for needle in needles):
            return index
    return None


def _span(lines: Sequence[tuple[float, str]], opened: str, closed: Iterable[str]) -> float | None:
    """Milliseconds from the first line holding ``opened`` to the next line holding one of ``closed``
    (``None`` when either is missing)."""
    start = _first(lines, 0, [opened])
    if start is None:
        return None
    end = _first(lines, start + 1, closed)
    return lines[end][0] - lines[start][0] if end is not None else None


def turn_phases(debug: str, diagnostics: str = "") -> TurnPhases:
    """The phases of one turn from its debug file and diagnostics file (see the module)."""
    lines = debug_lines(debug)
    if not lines:
        return TurnPhases()
    request = _first(lines, 0, ["[API REQUEST] /v1/messages"])
    answered = None
    for index in range(len(lines) - 1, -1, -1):
        if "Stream started - received first chunk" in lines[index][1]:
            answered = index
            break
    connect = listed = None
    for index, (moment, message) in enumerate(lines):
        found = _CONNECTED.match(message)
        if found:
            connect = float(found.group(1))
            onward = next(
                (i for i in range(index + 1, len(lines)) if not lines[i][1].startswith(_MCP_NOTES)), None
            )
            listed = lines[onward][0] - moment if onward is not None else None
            break
    hooks = _hook_durations(diagnostics)
    return TurnPhases(
        to_request_ms=lines[request][0] - lines[0][0] if request is not None else None,
        after_response_ms=lines[-1][0] - lines[answered][0] if answered is not None else None,
        session_start_hook_ms=hooks.get("SessionStart"),
        stop_hook_ms=_span(lines, "Getting matching hook commands for Stop ", _HOOK_OUTPUT),
        session_end_hook_ms=hooks.get("SessionEnd"),
        mcp_connect_ms=connect,
        mcp_listed_ms=listed,
        mcp_stop_ms=_span(lines, "Sending SIGINT to MCP server process", _MCP_GONE),
    )


def median_phases(phases: type[DataclassInstance], turns: Sequence[object]) -> dict[str, float | None]:
    """The median of every field of ``phases`` (:class:`TurnPhases`, :class:`bench.codex_turn_parse.
    CodexPhases`) over ``turns`` (``None`` where no turn saw it)."""
    medians: dict[str, float | None] = {}
    for field in fields(phases):
        seen = [value for turn in turns if (value := getattr(turn, field.name)) is not None]
        medians[field.name] = round(percentile(seen, 0.5), 1) if seen else None
    return medians
