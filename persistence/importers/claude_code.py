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

Claude Code's own blocks are not conversation either: the output of a local command
(``<local-command-stdout>``, ``-stderr``, ``-caveat``), its interruption notes (``[Request
interrupted by user]``) and the assistant messages it writes itself (model ``<synthetic>``, such as
"No response requested.", and API error notices). A slash command (``<command-name>`` with its
``<command-message>`` and ``<command-args>``) is held back: when the model answers it (a prompt
command such as ``/review``), it opens the turn as ``/name args``, followed by the prompt it
expanded to when that comes next; a local command (``/compact``, ``/model``: answered by local
output, or by nothing) is dropped. The decision depends only on the records that follow, so a
conversion of more of the file always extends a conversion of less.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from persistence.importers.common import RecordConverter, text_of_parts

_IGNORED_TYPES = frozenset({"summary", "system", "file-history-snapshot"})
_SYNTHETIC_MODEL = "<synthetic>"
"""``message.model`` of the assistant messages Claude Code writes itself (no model call)."""
_LOCAL_OUTPUT_RE = re.compile(
    r"^\s*(?:<(local-command-stdout|local-command-stderr|local-command-caveat)>.*?</\1>\s*)+$", re.DOTALL
)
_COMMAND_TAG_RE = re.compile(r"<(command-name|command-message|command-args)>(.*?)</\1>", re.DOTALL)
_INTERRUPTED_RE = re.compile(r"^\s*\[Request interrupted by user[^\]]*\]\s*$")


def _command_line(text: str) -> str | None:
    """``/name args`` when ``text`` is only a slash command's tags, else ``None``."""
    tags = {name: value.strip() for name, value in _COMMAND_TAG_RE.findall(text)}
    if "command-name" not in tags or _COMMAND_TAG_RE.sub("", text).strip():
        return None
    name = tags["command-name"]
    line = name if name.startswith("/") else f"/{name}"
    return f"{line} {tags['command-args']}".rstrip() if tags.get("command-args") else line


def host_block_kind(text: str) -> str | None:
    """What Claude Code block a user text is (``local_command``, ``interrupted``), or ``None``."""
    if _LOCAL_OUTPUT_RE.match(text):
        return "local_command"
    if _INTERRUPTED_RE.match(text):
        return "interrupted"
    return None


class ClaudeCodeConverter(RecordConverter):
    """Converts Claude Code records of the main chain."""

    format_name = "claude-code"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A slash command waiting for what follows it: (``/name args``, its timestamp).
        self._command: tuple[str, object] | None = None

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
            if message.get("model") == _SYNTHETIC_MODEL or record.get("isApiErrorMessage") is True:
                self.builder.ignore("assistant(synthetic)")
                return
            self._open_command_turn(None)
            self._assistant(message, content, ts, line_no)
        elif record.get("isMeta") is True:
            expanded = text_of_parts(content)
            if self._command is not None and expanded.strip():
                self._open_command_turn(expanded)  # the prompt a slash command expanded to
            else:
                self.builder.ignore("user(meta)")
        elif record.get("isCompactSummary") is True:
            self.builder.ignore("user(compact_summary)")
        else:
            self._user(content, ts, line_no)

    def _open_command_turn(self, expanded: str | None) -> None:
        """Open the turn of the slash command held back (the model answers it), if there is one."""
        if self._command is None:
            return
        line, ts = self._command
        self._command = None
        self.builder.user_turn(f"{line}\n\n{expanded}" if expanded else line, ts)

    def _user_text(self, text: str, ts: object) -> None:
        command = _command_line(text)
        if command is not None:
            self._drop_command()
            self._command = (command, ts)
            return
        kind = host_block_kind(text)
        if kind is not None:
            self._drop_command()
            self.builder.ignore(f"user({kind})")
            return
        self._drop_command()
        self.builder.user_turn(text, ts)

    def _drop_command(self) -> None:
        if self._command is not None:
            self._command = None
            self.builder.ignore("user(local_command)")

    def _user(self, content: str | list[Any], ts: object, line_no: int) -> None:
        if isinstance(content, str):
            self._user_text(content, ts)
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
            self._user_text(text_of_parts(content), ts)

    def _assistant(
        self, message: Mapping[str, Any], content: str | list[Any], ts: object, line_no: int
    ) -> None:
        message_id = message.get("id")
        step_key = message_id if isinstance(message_id, str) else f"line:{line_no}"
        if isinstance(content, str):
            self.builder.assistant(ts, [content], key=step_key)
            return
        texts, calls = self.assistant_parts(content, line_no, call_type="tool_use", arguments_key="input")
        if not texts and not calls:
            self.builder.ignore("assistant(no text)")
            return
        self.builder.assistant(ts, texts, calls, key=step_key)
