"""Source grounding of hybrid search: the searchable text of the events a memory cites (pure).

An observation is a lossy summary of the events it cites (``source_refs``). Hybrid search also
indexes those events' text, chunked with the same rules as memory text (reference §14.3), as
*source chunks* of the citing observation: a query that matches a detail the observation left out
still finds the observation, and the hit carries the matching excerpt and its seq range. One id
space is kept: every hit is a memory id that ``recall`` resolves.

Only the cited events of the memory's own session are used, so an excerpt never crosses
sessions. An event whose text the memory already holds verbatim adds nothing and is skipped, so
a memory that keeps a short message whole costs no extra chunk.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from protocol.canonical import condense, sha256_hex
from protocol.events import SessionEvent

MAX_SOURCE_CHARS: Final[int] = 8000
"""Characters of one event's text that are indexed (a huge tool output is cut, not skipped)."""

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


def _body(text: str) -> str:
    """The text without its role label, condensed and lowercased (for containment checks)."""
    _label, colon, rest = text.partition(": ")
    return condense(rest if colon else text).lower()


def already_held(memory_content: str, source_text: str) -> bool:
    """Whether the memory already holds the source text verbatim (whitespace and case aside)."""
    body = _body(source_text)
    return body == "" or body in condense(memory_content).lower()


def source_chunk_id(parent_key: str, seq: int, position: int, chunk_text: str) -> str:
    """Id of one source chunk: 32 hex chars, distinct from memory-text chunk ids by its ``source`` tag."""
    return sha256_hex("\\0".join((parent_key, "source", str(seq), str(position), chunk_text)))[:32]


def cited_seqs(refs: Sequence[Mapping[str, Any]], session_id: str) -> tuple[int, ...]:
    """Seqs of ``refs`` in ``session_id`` (refs to other sessions are left out), sorted, unique."""
    seqs: set[int] = set()
    for ref in refs:
        run_id = ref.get("run_id", ref.get("runId"))
        seq = ref.get("seq")
        if run_id == session_id and isinstance(seq, int) and not isinstance(seq, bool) and seq >= 1:
            seqs.add(seq)
    return tuple(sorted(seqs))
