"""The searchable text of session events (pure): what the transcript keeps findable.

An observation is a lossy summary of the events it was shown. Every covered event that carries text
(user and assistant messages, tool calls and results) is kept as a transcript row
(``omray_transcript``) with the text rendered here, so ``memory_search`` finds it (exact or hybrid)
whatever the Observer wrote down; a hit carries the matching excerpt and its seq range
(:class:`SourceExcerpt`) and leads to the memory that covers the event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from protocol.canonical import condense
from protocol.events import SessionEvent

MAX_SOURCE_CHARS: Final[int] = 65536
"""Characters of one event's text that are kept for search (a huge tool output is cut, not skipped)."""

_ROLE_NAMES: Final[dict[str, str]] = {"user": "User", "assistant": "Assistant", "tool": "Tool"}


@dataclass(frozen=True, slots=True)
class SourceExcerpt:
    """The source text that matched a query, with the seq range of the events it comes from."""

    seq_start: int
    """First seq of the excerpt's events."""
    seq_end: int
    """Last seq of the excerpt's events."""
    text: str
    """The matching chunk of event text (whitespace condensed)."""

    def as_dict(self) -> dict[str, object]:
        """``{"seq_start", "seq_end", "excerpt"}``: the ``source`` field of a hybrid search hit."""
        return {"seq_start": self.seq_start, "seq_end": self.seq_end, "excerpt": self.text}


def _message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            item if isinstance(item, str) else item.get("text")
            for item in content
            if isinstance(item, str | Mapping)
        ]
        return "\n".join(part for part in parts if isinstance(part, str))
    text = message.get("text")
    return text if isinstance(text, str) else ""


def _tool_calls(message: Mapping[str, Any]) -> list[str]:
    calls = message.get("tool_calls")
    lines: list[str] = []
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, Mapping):
            continue
        raw_function = call.get("function")
        function: Mapping[str, Any] = raw_function if isinstance(raw_function, Mapping) else {}
        name = call.get("name") or function.get("name") or "tool"
        arguments = call.get("arguments", function.get("arguments", ""))
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
        lines.append(f"Tool call {name}: {arguments}")
    return lines


def event_search_text(event: SessionEvent) -> str:
    """The searchable text of one event: user and assistant text, tool calls and tool results.

    Other events (run outcomes, model failures, status) have no text to search: ``""``.
    """
    payload = event.payload
    text = ""
    if event.type == "agent_command_applied":
        value = payload.get("text")
        message = payload.get("message")
        if not (isinstance(value, str) and value) and isinstance(message, Mapping):
            value = _message_text(message)
        text = f"User: {value}" if isinstance(value, str) and value.strip() else ""
    elif event.type == "llm_step_completed":
        assistant = payload.get("assistant_message")
        lines: list[str] = []
        if isinstance(assistant, Mapping):
            said = _message_text(assistant)
            if said.strip():
                lines.append(f"Assistant: {said}")
            lines.extend(_tool_calls(assistant))
        elif isinstance(payload.get("text"), str) and payload["text"].strip():
            lines.append(f"Assistant: {payload['text']}")
        text = "\n".join(lines)
    elif event.type == "tool_execution_end":
        tool_result = payload.get("tool_result")
        if isinstance(tool_result, Mapping):
            result = tool_result.get("result")
            result = result if isinstance(result, Mapping) else {}
            output = _message_text(result)
            if output.strip():
                text = f"Tool result {result.get('tool_name') or 'tool'}: {output}"
    elif event.type == "run_started":
        inner = payload.get("payload")
        messages = inner.get("messages") if isinstance(inner, Mapping) else payload.get("messages")
        lines = []
        for message in messages if isinstance(messages, list) else []:
            if isinstance(message, Mapping) and str(message.get("role", "")).lower() in ("user", "assistant"):
                said = _message_text(message)
                if said.strip():
                    lines.append(f"{_ROLE_NAMES[str(message['role']).lower()]}: {said}")
        text = "\n".join(lines)
    return text[:MAX_SOURCE_CHARS]


_LABEL_CHARS: Final[int] = 40
"""Longest leading label (``User request``, ``Tool pytest failed``) taken off a memory before
comparing it with event text."""


def _unlabelled(text: str) -> str:
    """The text without a short leading ``Label: `` (a memory's or an event's role label)."""
    label, colon, rest = text.partition(": ")
    return rest if colon and len(label) <= _LABEL_CHARS and "\n" not in label else text


def quoted_in(memory_text: str, source_text: str) -> bool:
    """Whether ``memory_text`` (without its label, and without a closing ``…`` of a cut quote) is a
    verbatim quote of ``source_text`` (whitespace and case aside): the memory then adds no meaning to
    the event's own text."""
    body = condense(_unlabelled(memory_text)).lower().removesuffix("…").rstrip()
    return body != "" and body in condense(source_text).lower()


def cited_seqs(refs: Sequence[Mapping[str, Any]], session_id: str) -> tuple[int, ...]:
    """Seqs of ``refs`` in ``session_id`` (refs to other sessions are left out), sorted, unique."""
    seqs: set[int] = set()
    for ref in refs:
        ref_session = ref.get("run_id", ref.get("runId"))
        seq = ref.get("seq")
        if ref_session == session_id and isinstance(seq, int) and not isinstance(seq, bool) and seq >= 1:
            seqs.add(seq)
    return tuple(sorted(seqs))
