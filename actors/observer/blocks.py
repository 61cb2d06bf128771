"""Render session events as source-addressed blocks for the Observer (reference §7.3 step 7, §7.4).

Pure: no I/O, no clock. Every block starts with a ``[Source entry id: <run_id>:<seq>]`` label that the
Observer cites back; a tool call and its result are kept together in one atomic ``tool_group`` block so a
chunk boundary never separates them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from protocol.canonical import canonical_json
from protocol.errors import OmrayError
from protocol.events import SessionEvent, php_truthy
from protocol.identities import normalize_source_refs
from protocol.ids import SessionId
from protocol.records import SourceRef

BlockKind = Literal[
    "message", "user", "assistant", "tool_group", "tool_result", "tool_call", "outcome", "empty"
]
"""What a block renders: a ``run_started`` message, a user command, an assistant step, a tool call and/or
result, an outcome line, or the synthetic placeholder for a range with nothing to render."""

SKIPPED_RUN_STARTED_ROLES: frozenset[str] = frozenset({"system", "developer", "user-context"})
"""Roles of ``run_started`` messages that are immutable prompt context, never observed."""

TOOL_OUTPUT_MAX_TOKENS = 5000
"""Tool output up to this many tokens is shown whole; longer output is digested."""
TOOL_OUTPUT_PREFIX_CHARS = 400
"""Code points of a digested tool output that are kept verbatim."""

FALLBACK_EVENT_TIMESTAMP = "1970-01-01 00:00"
"""Timestamp shown when an event's stored time cannot be read (reference §5.4)."""

_TIMESTAMP_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}\Z")
# PHP rtrim's default character set: the original trims only these, not every Unicode space.
_RTRIM_CHARS = " \t\n\r\0\x0b"
_ROLE_LABELS = {"user": "User", "assistant": "Assistant", "tool": "Tool"}


class MalformedEventError(OmrayError):
    """An event in the observed range cannot be rendered; the observe job fails (and is retried).

    The message names the session, seq and event type only, never payload content.
    """

    def __init__(self, session_id: str, seq: int, event_type: str, reason: str) -> None:
        self.session_id = session_id
        self.seq = seq
        self.event_type = event_type
        super().__init__(f"malformed {event_type!r} event at seq {seq} of run {session_id!r}: {reason}")


class SourceBlock(BaseModel):
    """One rendered unit of source text; the chunk packer never splits a block unless it alone is too big."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: SessionId
    """Session the block comes from."""
    seq: int = Field(ge=1)
    """Seq the block is filed under (for a tool group: the call event's seq)."""
    kind: BlockKind
    """What the block renders."""
    rendered_text: str
    """``[Source entry id: <run_id>:<seq>]`` line, then the rendered body."""
    source_refs: tuple[SourceRef, ...]
    """Events the block renders (normalized); the Observer may cite exactly these."""

    def digest_entry(self) -> dict[str, Any]:
        """The ``{run_id, seq, kind, rendered_text}`` object this block contributes to a source digest."""
        return {
            "run_id": self.session_id,
            "seq": self.seq,
            "kind": self.kind,
            "rendered_text": self.rendered_text,
        }


def source_label(session_id: str, seq: int) -> str:
    """The citation label the Observer sees and cites: ``[Source entry id: <run_id>:<seq>]``."""
    return f"[Source entry id: {session_id}:{seq}]"


def event_timestamp(created_at: str, now_local: str) -> str:
    """Minute-precision time of an event: its stored time's wall-clock digits, or ``now_local`` if unset."""
    if created_at == "":
        return now_local
    candidate = created_at.replace("T", " ")[:16]
    return candidate if _TIMESTAMP_RE.match(candidate) else FALLBACK_EVENT_TIMESTAMP


def role_label(role: str) -> str:
    """``User``/``Assistant``/``Tool`` for those roles (any case); otherwise the role with its first letter
    upper-cased (ASCII only, like the original)."""
    known = _ROLE_LABELS.get(role.lower())
    if known is not None:
        return known
    if role[:1].isascii():
        return role[:1].upper() + role[1:]
    return role


def message_text(message: Mapping[str, Any]) -> str:
    """Text of a message or tool result: string content, text parts joined by newlines, ``text``, or the
    whole object as compact JSON (so ``content: null`` with tool calls renders as JSON)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list | dict):
        items = content.values() if isinstance(content, dict) else content
        texts: list[str] = []
        for item in items:
            if isinstance(item, str):
                texts.append(item)
            elif isinstance(item, Mapping) and isinstance(item.get("text"), str):
                texts.append(item["text"])
        return "\n".join(texts)
    text = message.get("text")
    if isinstance(text, str):
        return text
    return canonical_json(dict(message))


def digest_tool_output(text: str, count_tokens: Callable[[str], int]) -> str:
    """Tool output as shown to the Observer: whole up to 5000 tokens, else a 400-code-point prefix plus a
    marker giving the original size."""
    tokens = count_tokens(text)
    if tokens <= TOOL_OUTPUT_MAX_TOKENS:
        return text
    return (
        text[:TOOL_OUTPUT_PREFIX_CHARS]
        + f"\n...[tool output shortened: first {TOOL_OUTPUT_PREFIX_CHARS} of {len(text)} characters shown,"
        f" about {tokens} tokens in full]"
    )


def empty_source_block(session_id: str, seq: int) -> SourceBlock:
    """The synthetic block used when a range renders nothing, so its coverage is still committed."""
    body = "(nothing to observe in this range: only control events, no conversation content)"
    return SourceBlock(
        session_id=session_id,
        seq=seq,
        kind="empty",
        rendered_text=f"{source_label(session_id, seq)}\n{body}",
        source_refs=(SourceRef(run_id=session_id, seq=seq),),
    )


def _rtrim(text: str) -> str:
    return text.rstrip(_RTRIM_CHARS)


def _as_str(value: object, default: str) -> str:
    """PHP-like ``(string)(value ?? default)`` for scalar JSON values."""
    if value is None:
        return default
    if isinstance(value, bool):
        return "1" if value else ""
    if isinstance(value, str | int | float):
        return str(value)
    return default


def _first_present(*values: object) -> object:
    """PHP's ``a ?? b ?? c``: the first value that is not null."""
    for value in values:
        if value is not None:
            return value
    return None


@dataclass
class _PendingCall:
    event: SessionEvent
    parts: list[str]


@dataclass
class _Builder:
    now_local: str
    count_tokens: Callable[[str], int]
    blocks: list[SourceBlock] = field(default_factory=list)
    pending: dict[str, _PendingCall] = field(default_factory=dict)

    def emit(self, event: SessionEvent, kind: BlockKind, body: str) -> None:
        self.blocks.append(
            SourceBlock(
                session_id=event.run_id,
                seq=event.seq,
                kind=kind,
                rendered_text=_rtrim(f"{source_label(event.run_id, event.seq)}\n{body}"),
                source_refs=(SourceRef(run_id=event.run_id, seq=event.seq),),
            )
        )

    def timestamp(self, event: SessionEvent) -> str:
        return event_timestamp(event.ts, self.now_local)

    def add(self, event: SessionEvent) -> None:
        handler = _HANDLERS.get(event.type)
        if handler is not None:
            handler(self, event)

    def run_started(self, event: SessionEvent) -> None:
        inner = event.payload.get("payload")
        messages = _first_present(
            inner.get("messages") if isinstance(inner, Mapping) else None, event.payload.get("messages")
        )
        if not isinstance(messages, list):
            return
        ts = self.timestamp(event)
        for message in messages:
            if not isinstance(message, Mapping):
                continue
            role = _as_str(message.get("role"), "user")
            if role.lower() in SKIPPED_RUN_STARTED_ROLES:
                continue
            self.emit(event, "message", f"[{role_label(role)} @ {ts}]: {message_text(message)}")

    def agent_command_applied(self, event: SessionEvent) -> None:
        text = event.payload.get("text")
        text = text if isinstance(text, str) else ""
        message = event.payload.get("message")
        if text == "" and isinstance(message, Mapping):
            text = message_text(message)
        self.emit(event, "user", f"[User @ {self.timestamp(event)}]: {text}")

    def llm_step_completed(self, event: SessionEvent) -> None:
        ts = self.timestamp(event)
        assistant = event.payload.get("assistant_message")
        parts: list[str] = []
        if isinstance(assistant, Mapping):
            parts.append(f"[Assistant @ {ts}]: {message_text(assistant)}")
            tool_calls = assistant.get("tool_calls")
            for call in tool_calls if isinstance(tool_calls, list) else []:
                if not isinstance(call, Mapping):
                    continue
                function = call.get("function")
                function = function if isinstance(function, Mapping) else {}
                call_id = _as_str(_first_present(call.get("id"), call.get("tool_call_id")), "")
                name = _as_str(_first_present(call.get("name"), function.get("name")), "tool")
                args = _first_present(call.get("arguments"), function.get("arguments"), [])
                parts.append(f"[Tool call {call_id} name={name} args={canonical_json(args)}]")
                if call_id != "":
                    # The step's assistant text travels with its first identified call.
                    self.pending[call_id] = _PendingCall(event=event, parts=parts)
                    parts = []
        elif isinstance(event.payload.get("text"), str):
            parts.append(f"[Assistant @ {ts}]: {event.payload['text']}")
        if parts:
            self.emit(event, "assistant", "\n".join(parts))

    def tool_execution_end(self, event: SessionEvent) -> None:
        tool_result = event.payload.get("tool_result")
        if not isinstance(tool_result, Mapping):
            raise MalformedEventError(
                event.run_id, event.seq, event.type, "tool_result must be a JSON object"
            )
        call_id = _as_str(tool_result.get("tool_call_id"), "")
        result = tool_result.get("result")
        result = result if isinstance(result, Mapping) else {}
        name = _as_str(result.get("tool_name"), "tool")
        text = digest_tool_output(message_text(result), self.count_tokens)
        flag = " (error)" if tool_result.get("is_error") is True else ""
        result_line = f"[Tool result for {name} @ {self.timestamp(event)}]{flag}: {text}"
        call = self.pending.pop(call_id, None) if call_id != "" else None
        if call is None:
            self.emit(event, "tool_result", result_line)
            return
        call_event = call.event
        rendered = "\n".join(
            [
                source_label(call_event.run_id, call_event.seq),
                *call.parts,
                source_label(event.run_id, event.seq),
                result_line,
            ]
        )
        self.blocks.append(
            SourceBlock(
                session_id=call_event.run_id,
                seq=call_event.seq,
                kind="tool_group",
                rendered_text=_rtrim(rendered),
                source_refs=tuple(
                    normalize_source_refs(
                        [
                            SourceRef(run_id=call_event.run_id, seq=call_event.seq),
                            SourceRef(run_id=event.run_id, seq=event.seq),
                        ]
                    )
                ),
            )
        )

    def llm_step_failed(self, event: SessionEvent) -> None:
        retryable = "true" if php_truthy(event.payload.get("retryable")) else "false"
        self.emit(
            event, "outcome", f"[Outcome @ {self.timestamp(event)}]: llm_step_failed retryable={retryable}"
        )

    def agent_end(self, event: SessionEvent) -> None:
        reason = _as_str(event.payload.get("reason"), "completed")
        self.emit(event, "outcome", f"[Outcome @ {self.timestamp(event)}]: agent_end reason={reason}")

    def finish(self) -> list[SourceBlock]:
        # Calls whose result is not in this range go last, in the order they were made.
        for call in self.pending.values():
            self.emit(call.event, "tool_call", "\n".join(call.parts))
        self.pending.clear()
        return self.blocks


_HANDLERS: dict[str, Callable[[_Builder, SessionEvent], None]] = {
    "run_started": _Builder.run_started,
    "agent_command_applied": _Builder.agent_command_applied,
    "llm_step_completed": _Builder.llm_step_completed,
    "tool_execution_end": _Builder.tool_execution_end,
    "llm_step_failed": _Builder.llm_step_failed,
    "agent_end": _Builder.agent_end,
}
"""The only event types the Observer sees; every other type is skipped."""


def build_source_blocks(
    events: Sequence[SessionEvent], now_local: str, count_tokens: Callable[[str], int]
) -> list[SourceBlock]:
    """Blocks for ``events`` (sorted by seq, stable) in the order the Observer reads them.

    ``now_local`` (``YYYY-MM-DD HH:MM``) stands in for events with no stored time. Raises
    :class:`MalformedEventError` for a ``tool_execution_end`` whose ``tool_result`` is not an object.
    """
    builder = _Builder(now_local=now_local, count_tokens=count_tokens)
    for event in sorted(events, key=lambda e: e.seq):
        builder.add(event)
    return builder.finish()
