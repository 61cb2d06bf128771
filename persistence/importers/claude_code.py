"""Importer for Claude Code sessions (``~/.claude/projects/<project>/<session>.jsonl``).

Records of type ``user`` and ``assistant`` carry an Anthropic ``message``:

* ``user``: content a string or parts. ``tool_result`` parts ``{tool_use_id, content, is_error}``
  -> tool results; text parts (or a string) -> a user turn.
* ``assistant``: parts ``text`` and ``tool_use`` ``{id, name, input}`` (``thinking`` parts are not
  observed). Claude Code writes one record per content part; records sharing ``message.id`` are
  merged back into one assistant step.

Not observed: sidechain records (``isSidechain``: a sub-agent's own conversation; the main chain
keeps the sub-agent's final answer as a tool result), ``isMeta`` user records (expanded command
prompts and other injected context), compact summaries (``isCompactSummary``), and the record types
``summary``, ``system`` and ``file-history-snapshot``. Other record types are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from persistence.importers.common import RecordConverter, ToolCall, text_of_parts

_IGNORED_TYPES = frozenset({"summary", "system", "file-history-snapshot"})


class ClaudeCodeConverter(RecordConverter):
    """Converts Claude Code records of the main chain."""

    format_name = "claude-code"

    def handle(self, record: Mapping[str, Any], line_no: int) -> None:
        """Convert one Claude Code record."""
        record_type = record.get("type")
        if record_type not in ("user", "assistant"):
            if isinstance(record_type, str) and record_type in _IGNORED_TYPES:
                self.builder.ignore(record_type)
            else:
                self.builder.skip(record_type if isinstance(record_type, str) else "<missing>")
            return
        message = self.require_mapping(record, "message", line_no)
        if record.get("isSidechain") is True:
            self.builder.ignore(f"{record_type}(sidechain)")
            return
        content = message.get("content")
        if not isinstance(content, str | list):
            raise self.fail(line_no, "'message.content' is neither a string nor a list")
        ts = record.get("timestamp")
        if record_type == "assistant":
            self._assistant(message, content, ts, line_no)
        elif record.get("isMeta") is True:
            self.builder.ignore("user(meta)")
        elif record.get("isCompactSummary") is True:
            self.builder.ignore("user(compact_summary)")
        else:
            self._user(content, ts, line_no)

    def _user(self, content: str | list[Any], ts: object, line_no: int) -> None:
        if isinstance(content, str):
            self.builder.user_turn(content, ts)
            return
        has_text = False
        for part in content:
            if not isinstance(part, Mapping):
                raise self.fail(line_no, "a 'message.content' part is not an object")
            if part.get("type") == "tool_result":
                call_id = part.get("tool_use_id")
                if not isinstance(call_id, str):
                    raise self.fail(line_no, "a 'tool_result' part lacks a string 'tool_use_id'")
                result_content = part.get("content")
                self.builder.tool_result(
                    call_id, text_of_parts(result_content), part.get("is_error") is True, ts
                )
            elif part.get("type") == "text" and isinstance(part.get("text"), str):
                has_text = True
        if has_text:
            self.builder.user_turn(text_of_parts(content), ts)

    def _assistant(
        self, message: Mapping[str, Any], content: str | list[Any], ts: object, line_no: int
    ) -> None:
        message_id = message.get("id")
        step_key = message_id if isinstance(message_id, str) else f"line:{line_no}"
        if isinstance(content, str):
            self.builder.assistant(ts, [content], key=step_key)
            return
        texts: list[str] = []
        calls: list[ToolCall] = []
        for part in content:
            if not isinstance(part, Mapping):
                raise self.fail(line_no, "a 'message.content' part is not an object")
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind == "tool_use":
                call_id, name = part.get("id"), part.get("name")
                if not isinstance(call_id, str) or not isinstance(name, str):
                    raise self.fail(line_no, "a 'tool_use' part lacks a string 'id' or 'name'")
                calls.append(ToolCall(call_id=call_id, name=name, arguments=part.get("input", {})))
        if not texts and not calls:
            self.builder.ignore("assistant(no text)")
            return
        self.builder.assistant(ts, texts, calls, key=step_key)
