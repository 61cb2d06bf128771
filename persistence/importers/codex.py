"""Importer for Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Records are ``{timestamp, type, payload}``:

* ``response_item`` with ``payload.type``: ``message`` (``role`` user / assistant; developer and
  system messages are prompt context, not observed; user messages that are environment context or
  user instructions, marked by their opening tag, are not observed either), ``function_call``
  ``{name, arguments (JSON text), call_id}``, ``custom_tool_call`` ``{name, input, call_id}``,
  ``function_call_output`` / ``custom_tool_call_output`` ``{call_id, output}``, ``reasoning`` (not
  observed);
* ``event_msg`` with ``payload.type``: ``user_message`` / ``agent_message`` ``{message}``; the
  rest (``token_count``, ``agent_reasoning``, ``task_started``, ...) are not observed;
* ``session_meta``, ``turn_context``, ``compacted``: metadata, not observed.

The same user and assistant text arrives twice, as a ``response_item`` message and as an
``event_msg``, in either order: the first copy is written, and a later copy from the *other*
source with the same role and text is dropped. Copies waiting for their twin are forgotten when
a new user turn starts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from persistence.importers.common import RecordConverter, ToolCall, text_of_parts

_IGNORED_TYPES = frozenset({"session_meta", "turn_context", "compacted"})
_CONTEXT_PREFIXES = ("<environment_context>", "<user_instructions>")
_MESSAGE_TEXT_TYPES = frozenset({"input_text", "output_text", "text"})
_MAX_UNMATCHED = 64

Role = Literal["user", "assistant"]
Source = Literal["response_item", "event_msg"]


class CodexConverter(RecordConverter):
    """Converts Codex rollout records; consecutive assistant items form one step."""

    format_name = "codex"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Texts written from one source whose copy from the other source has not arrived yet.
        self._unmatched: list[tuple[Role, Source, str]] = []

    def handle(self, record: Mapping[str, Any], line_no: int) -> None:
        """Convert one rollout record."""
        record_type = record.get("type")
        if record_type == "response_item":
            payload = self.require_mapping(record, "payload", line_no)
            self._response_item(payload, record.get("timestamp"), line_no)
        elif record_type == "event_msg":
            payload = self.require_mapping(record, "payload", line_no)
            self._event_msg(payload, record.get("timestamp"), line_no)
        elif isinstance(record_type, str) and record_type in _IGNORED_TYPES:
            self.builder.ignore(record_type)
        else:
            self.builder.skip(record_type if isinstance(record_type, str) else "<missing>")

    def _response_item(self, payload: Mapping[str, Any], ts: object, line_no: int) -> None:
        kind = payload.get("type")
        if kind == "message":
            self._message(payload, ts, line_no)
        elif kind in ("function_call", "custom_tool_call"):
            call_id, name = payload.get("call_id"), payload.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise self.fail(line_no, f"{kind!r} lacks a string 'call_id' or 'name'")
            if kind == "function_call":
                arguments = _decode_arguments(payload.get("arguments"))
            else:
                arguments = {"input": payload.get("input")}
            self.builder.assistant(
                ts, (), [ToolCall(call_id=call_id, name=name, arguments=arguments)], key=None
            )
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = payload.get("call_id")
            if not isinstance(call_id, str):
                raise self.fail(line_no, f"{kind!r} lacks a string 'call_id'")
            text, is_error = _decode_output(payload.get("output"))
            self.builder.tool_result(call_id, text, is_error, ts)
        elif kind == "reasoning":
            self.builder.ignore("response_item:reasoning")
        else:
            self.builder.skip(f"response_item:{kind}" if isinstance(kind, str) else "response_item:<missing>")

    def _message(self, payload: Mapping[str, Any], ts: object, line_no: int) -> None:
        role = payload.get("role")
        content = payload.get("content")
        if not isinstance(content, str | list):
            raise self.fail(line_no, "'payload.content' is neither a string nor a list")
        if role not in ("user", "assistant"):
            self.builder.ignore(f"response_item:message({role})" if isinstance(role, str) else "message")
            return
        text = text_of_parts(content, _MESSAGE_TEXT_TYPES)
        if role == "user" and text.lstrip().startswith(_CONTEXT_PREFIXES):
            self.builder.ignore("response_item:message(context)")
            return
        self._text("user" if role == "user" else "assistant", "response_item", text, ts)

    def _event_msg(self, payload: Mapping[str, Any], ts: object, line_no: int) -> None:
        kind = payload.get("type")
        if kind not in ("user_message", "agent_message"):
            self.builder.ignore(f"event_msg:{kind}" if isinstance(kind, str) else "event_msg:<missing>")
            return
        message = payload.get("message")
        if not isinstance(message, str):
            raise self.fail(line_no, f"{kind!r} lacks a string 'message'")
        self._text("user" if kind == "user_message" else "assistant", "event_msg", message, ts)

    def _text(self, role: Role, source: Source, text: str, ts: object) -> None:
        key = text.strip()
        for index, (seen_role, seen_source, seen_text) in enumerate(self._unmatched):
            if seen_role == role and seen_source != source and seen_text == key:
                del self._unmatched[index]
                return  # the twin of a text already written
        if role == "user":
            self._unmatched.clear()
            self.builder.user_turn(text, ts)
        else:
            self.builder.assistant(ts, [text], key=None)
        self._unmatched.append((role, source, key))
        del self._unmatched[:-_MAX_UNMATCHED]


def _decode_arguments(arguments: object) -> object:
    """Function-call arguments are JSON text; decode them when they are a JSON object."""
    if isinstance(arguments, str):
        try:
            decoded = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
        return decoded if isinstance(decoded, dict) else arguments
    return arguments if arguments is not None else {}


def _decode_output(output: object) -> tuple[str, bool]:
    """A tool output's text and error flag.

    Shell outputs are JSON text ``{output, metadata: {exit_code}}`` (a non-zero exit code is an
    error); older rollouts store ``{content, success}``; anything else is kept as text.
    """
    if isinstance(output, Mapping):
        content = output.get("content")
        return (content if isinstance(content, str) else json.dumps(output)), output.get("success") is False
    if not isinstance(output, str):
        return "", False
    try:
        decoded = json.loads(output)
    except json.JSONDecodeError:
        return output, False
    if isinstance(decoded, dict) and isinstance(decoded.get("output"), str):
        metadata = decoded.get("metadata")
        exit_code = metadata.get("exit_code") if isinstance(metadata, dict) else None
        return decoded["output"], isinstance(exit_code, int) and exit_code != 0
    return output, False
