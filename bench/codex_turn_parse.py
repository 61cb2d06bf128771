"""Where a ``codex exec`` turn spends its time, read from Codex's own log lines (pure, no CLI).

``omray bench agent-turn --agent codex`` runs a few extra turns of each configuration with
``RUST_LOG`` set to :data:`CODEX_LOG_FILTER`, which makes Codex (0.171) write timestamped lines to
stderr; :func:`codex_phases` turns them, with the moments the benchmark itself saw the process
start and exit, into :class:`CodexPhases`, one figure per moment of the turn omray can add to.

Codex spawns its ``notify`` program and never waits for it, so no figure here is the hook's: the
benchmark times it alone, and how long it ran on after the turn. A figure is ``None`` when its
lines are missing. The lines hold paths and prompts' lengths, never read here: only times.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from bench.agent_turn_parse import timestamped_lines

CODEX_LOG_FILTER = "warn,codex_core::session=debug,codex_otel=info,codex_exec=info,rmcp=trace"
"""``RUST_LOG`` of an instrumented turn: the lines :func:`codex_phases` reads, little else."""

_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z\s+[A-Z]+\s+(.*)$")
_API_REQUEST = re.compile(r'event\.name="codex\.api_request" duration_ms=(\d+)')
_TURN_INPUT = 'operation="turn_input"'
_SHUTDOWN = 'operation="shutdown"'
_MCP_READY = "rmcp::service: Service initialized as client"
_MCP_TOOLS = "ListToolsResult(ListToolsResult"
_MCP_ANSWER = "PeerMessage(Response"
_RESPONSE_DONE = "event.kind=response.completed"
_MCP_GONE = "rmcp::service: serve finished"


@dataclass(frozen=True)
class CodexPhases:
    """Milliseconds of one turn's moments (``None``: not seen in the logs)."""

    to_turn_ms: float | None = None
    """Process start to the turn submitted (``operation="turn_input"``): the launcher, the
    configuration, the thread started (MCP servers are started then, in the background)."""
    mcp_ready_ms: float | None = None
    """Process start to the MCP server's ``initialize`` answered ("Service initialized as client"):
    spawning the server and its start-up."""
    mcp_tools_ms: float | None = None
    """From then to its ``tools/list`` answer (the ``ListToolsResult`` response)."""
    turn_to_request_ms: float | None = None
    """The turn submitted to the model request sent (the request's line minus the ``duration_ms`` it
    reports): what the turn waited for, the MCP tool list included."""
    to_request_ms: float | None = None
    """Process start to the model request sent."""
    after_response_ms: float | None = None
    """The ``response.completed`` event to the process gone (the turn's end, the ``notify`` program
    started, MCP servers dropped, Codex's shutdown)."""
    mcp_stop_ms: float | None = None
    """The ``shutdown`` submission to the MCP client's "serve finished"."""


def _moment(stamp: str) -> float:
    # Codex writes microseconds (six digits); fromisoformat on 3.11 takes three or six.
    whole, _, fraction = stamp.partition(".")
    fraction = (fraction + "000000")[:6]
    return datetime.fromisoformat(f"{whole}.{fraction}+00:00").timestamp() * 1000


def codex_lines(text: str) -> list[tuple[float, str]]:
    """The timestamped lines of Codex's stderr (its banner, the answer and other untimestamped lines
    are dropped), as :func:`bench.agent_turn_parse.timestamped_lines`."""
    return timestamped_lines(text, _LINE, _moment)


def _first(lines: Sequence[tuple[float, str]], *needles: str, start: int = 0) -> int | None:
    for index in range(start, len(lines)):
        if all(needle in lines[index][1] for needle in needles):
            return index
    return None


def codex_phases(stderr: str, started_ms: float, exited_ms: float) -> CodexPhases:
    """The phases of one turn from its stderr and the process's start and exit (ms since the epoch)."""
    lines = codex_lines(stderr)
    if not lines:
        return CodexPhases()

    def since_start(index: int | None) -> float | None:
        return round(lines[index][0] - started_ms, 1) if index is not None else None

    turn = _first(lines, _TURN_INPUT)
    ready = _first(lines, _MCP_READY)
    tools = _first(lines, _MCP_ANSWER, _MCP_TOOLS, start=ready) if ready is not None else None
    request_at: float | None = None
    for moment, rest in lines:
        found = _API_REQUEST.search(rest)
        if found:
            request_at = moment - float(found.group(1))
            break
    done = _first(lines, _RESPONSE_DONE)
    shutdown = _first(lines, _SHUTDOWN)
    gone = _first(lines, _MCP_GONE, start=shutdown) if shutdown is not None else None
    return CodexPhases(
        to_turn_ms=since_start(turn),
        mcp_ready_ms=since_start(ready),
        mcp_tools_ms=round(lines[tools][0] - lines[ready][0], 1)
        if tools is not None and ready is not None
        else None,
        turn_to_request_ms=round(request_at - lines[turn][0], 1)
        if request_at is not None and turn is not None
        else None,
        to_request_ms=round(request_at - started_ms, 1) if request_at is not None else None,
        after_response_ms=round(exited_ms - lines[done][0], 1) if done is not None else None,
        mcp_stop_ms=round(lines[gone][0] - lines[shutdown][0], 1)
        if gone is not None and shutdown is not None
        else None,
    )
