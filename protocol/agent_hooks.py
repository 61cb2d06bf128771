"""What agent hooks send omray and what omray answers: Claude Code hooks and Codex's ``notify``.

Claude Code runs a hook command with one JSON object on stdin: ``session_id``, ``transcript_path``,
``cwd``, ``hook_event_name`` and per-event fields (``source`` for ``SessionStart``: ``startup``,
``resume``, ``clear`` or ``compact``). A hook that prints JSON on stdout and exits 0 can add
context to a starting session (``hookSpecificOutput.additionalContext``) or show the user a
message (``systemMessage``). Codex runs its ``notify`` program with one JSON argument, last on the
command line: ``{"type": "agent-turn-complete", "thread-id", "turn-id", "cwd", ...}``.

:func:`claude_code_action` and :func:`codex_action` decide, with no I/O, what one call does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

HookAction = Literal["close", "sync", "inject", "ignore"]
"""``close``: record the transcript so far and end the turn there (observe it); ``sync``: record the
transcript so far, the turn goes on; ``inject``: print the session's memory as context; ``ignore``."""

CLOSING_EVENTS = frozenset({"Stop", "PreCompact", "SessionEnd"})
"""Claude Code events after which the turn so far is observed."""
SYNC_EVENTS = frozenset({"SubagentStop"})
"""Events after which the transcript is converted, but the main agent's turn continues."""
FLUSH_EVENTS: dict[str, Literal["compaction", "session_end"]] = {
    "PreCompact": "compaction",
    "SessionEnd": "session_end",
}
"""Claude Code events after which everything so far is observed at once, however little is new:
the host is about to compact (the memory it gets back at ``SessionStart`` must hold the range), or
the session ended."""
INJECT_SOURCES = frozenset({"compact", "resume"})
"""``SessionStart`` sources after which the session's memory is added to the context."""

CODEX_TURN_COMPLETE = "agent-turn-complete"
"""The Codex notification type sent when a turn ends."""


class ClaudeCodeHookInput(BaseModel):
    """The fields of a Claude Code hook input omray reads (others are ignored)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    session_id: str = Field(min_length=1)
    """Claude Code's session id (omray's session id too)."""
    transcript_path: str | None = None
    """The session's JSONL transcript."""
    cwd: str | None = None
    """Working directory when the hook fired."""
    hook_event_name: str
    """``Stop``, ``PreCompact``, ``SessionStart``, ..."""
    source: str | None = None
    """``SessionStart`` only: ``startup``, ``resume``, ``clear`` or ``compact``."""


class CodexNotification(BaseModel):
    """The fields of a Codex ``notify`` payload omray reads (keys are kebab-case)."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    type: str
    """Notification type; only ``agent-turn-complete`` is observed."""
    thread_id: str = Field(alias="thread-id", min_length=1)
    """Codex's thread (session) id, also in the rollout's file name."""
    turn_id: str | int | None = Field(default=None, alias="turn-id")
    """The turn that completed."""
    cwd: str | None = None
    """Codex's working directory."""


def claude_code_action(event: ClaudeCodeHookInput) -> HookAction:
    """What one Claude Code hook call does."""
    if event.hook_event_name in CLOSING_EVENTS:
        return "close"
    if event.hook_event_name in SYNC_EVENTS:
        return "sync"
    if event.hook_event_name == "SessionStart" and event.source in INJECT_SOURCES:
        return "inject"
    return "ignore"


def codex_action(notification: CodexNotification) -> HookAction:
    """What one Codex notification does: a completed turn is observed, anything else ignored."""
    return "close" if notification.type == CODEX_TURN_COMPLETE else "ignore"


MEMORY_CONTEXT_HEADER = (
    "Observational memory of this session (omray), recorded from the conversation before it was "
    "compacted. Use recall(id) for the source of an entry and memory_search for other sessions."
)
"""First paragraph of the context omray adds after compaction or resume."""


def session_start_output(projection: str) -> dict[str, Any]:
    """Claude Code's hook output that adds ``projection`` to a starting session's context."""
    return {
        "hookSpecificOutput": {
            "hookEventName": "SessionStart",
            "additionalContext": f"{MEMORY_CONTEXT_HEADER}\n\n{projection}",
        }
    }


def system_message_output(message: str) -> dict[str, Any]:
    """Claude Code's hook output that shows ``message`` to the user (it never reaches the model)."""
    return {"systemMessage": message}
