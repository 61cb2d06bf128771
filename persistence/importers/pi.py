"""Importer for pi coding agent sessions (``~/.pi/agent/sessions/**.jsonl``).

Records are ``{type, timestamp, ...}``. ``message`` records carry ``message.role``:

* ``user``: content a string or parts (``text``, ``image``) -> a user turn;
* ``assistant``: parts ``text``, ``toolCall`` ``{id, name, arguments}``, ``thinking`` (not
  observed) -> one assistant step; an assistant message with neither text nor tool calls (an
  aborted request) writes nothing;
* ``toolResult``: ``{toolCallId, toolName, content, isError}`` -> a tool result;
* ``bashExecution``: a command the user ran from the prompt -> a tool result of tool ``bash``
  with no call id (the Observer renders it on its own).

``session``, ``model_change``, ``thinking_level_change`` and ``compaction`` (a summary of earlier
context, already in the transcript) are known and not observed; other types are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from persistence.importers.common import RecordConverter, text_of_parts

_IGNORED_TYPES = frozenset({"session", "model_change", "thinking_level_change", "compaction"})


class PiConverter(RecordConverter):
    """Converts pi session records; every assistant message is its own step."""

    format_name = "pi"

    def handle(self, record: Mapping[str, Any], line_no: int) -> None:
        """Convert one pi record."""
        record_type = record.get("type")
        if record_type == "message":
            self._message(record, line_no)
        elif isinstance(record_type, str) and record_type in _IGNORED_TYPES:
            self.builder.ignore(record_type)
        else:
            self.builder.skip(str(record_type) if isinstance(record_type, str) else "<missing>")

    def _message(self, record: Mapping[str, Any], line_no: int) -> None:
        message = self.require_mapping(record, "message", line_no)
        role = message.get("role")
        ts = record.get("timestamp") or message.get("timestamp")
        content = message.get("content")
        if role in ("user", "assistant", "toolResult") and not isinstance(content, str | list):
            raise self.fail(line_no, "'message.content' is neither a string nor a list")
        if role == "user":
            self.builder.user_turn(text_of_parts(content), ts)
        elif role == "assistant":
            self._assistant(content, ts, line_no)
        elif role == "toolResult":
            call_id = message.get("toolCallId")
            if not isinstance(call_id, str):
                raise self.fail(line_no, "'message.toolCallId' is not a string")
            name = message.get("toolName")
            self.builder.tool_result(
                call_id,
                text_of_parts(content),
                message.get("isError") is True,
                ts,
                tool_name=name if isinstance(name, str) else None,
            )
        elif role == "bashExecution":
            self._bash_execution(message, ts)
        elif isinstance(role, str):
            self.builder.skip(f"message:{role}")
        else:
            raise self.fail(line_no, "'message.role' is not a string")

    def _assistant(self, content: object, ts: object, line_no: int) -> None:
        if isinstance(content, str):
            self.builder.assistant(ts, [content], key=f"line:{line_no}")
            return
        parts = content if isinstance(content, list) else ()
        texts, calls = self.assistant_parts(parts, line_no, call_type="toolCall", arguments_key="arguments")
        if not texts and not calls:
            self.builder.ignore("message:assistant(empty)")
            return
        self.builder.assistant(ts, texts, calls, key=f"line:{line_no}")

    def _bash_execution(self, message: Mapping[str, Any], ts: object) -> None:
        command = message.get("command")
        output = message.get("output")
        lines = [f"$ {command}" if isinstance(command, str) else "$"]
        if isinstance(output, str) and output:
            lines.append(output)
        exit_code = message.get("exitCode")
        failed = message.get("cancelled") is True or (isinstance(exit_code, int) and exit_code != 0)
        self.builder.tool_result("", "\n".join(lines), failed, ts, tool_name="bash")
