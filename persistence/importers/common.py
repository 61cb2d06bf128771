"""Shared machinery of the transcript importers: streaming reader, event builder, atomic output.

An importer turns another agent's transcript into omray's ``events.jsonl`` envelope (reference
§2.3) using only the event types the Observer renders (§7.4):

* ``agent_command_applied`` ``{text}`` for each user turn,
* ``llm_step_completed`` ``{assistant_message: {role, content, tool_calls: [{id, name, arguments}]}}``,
* ``tool_execution_end`` ``{tool_result: {tool_call_id, result: {tool_name, content: [{type, text}]},
  is_error}}``,
* ``agent_end`` ``{reason: "completed"}`` closing every user turn that got an assistant answer.

The source is read one line at a time and events are written as they are produced; the only
state kept is one pending assistant step, the names of tool calls still waiting for their
results and a few counters. Error messages name the file and line, never the content.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, Literal, TextIO

from pydantic import BaseModel, ConfigDict

from persistence.files.private_dirs import make_private_dirs
from protocol.errors import OmrayError

SCHEMA_VERSION = "1.0"
"""``schema_version`` written on every imported event."""

TranscriptFormat = Literal["pi", "claude-code", "codex"]
"""Transcript formats the importers read."""

TYPE_NAME_LIMIT = 64
"""Longest record type name kept in the skip counts (names come from the source file)."""

MAX_LINE_BYTES = 64 * 1024 * 1024
"""Longest source line read (64 MiB); a longer one (a file without newlines) is an error."""

_SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


class TranscriptImportError(OmrayError):
    """Base class of the transcript importer errors."""


class ImportFormatError(TranscriptImportError):
    """A source line is not valid JSON or a known record lacks the structure its format requires.

    The message names the file and the 1-based line number and the kind of problem, never content.
    """

    def __init__(self, path: str, line_no: int, reason: str) -> None:
        self.path = path
        self.line_no = line_no
        self.reason = reason
        super().__init__(f"malformed transcript line {line_no} in {path!r}: {reason}")


class TranscriptSourceError(TranscriptImportError):
    """The transcript file cannot be opened or read."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot read transcript {path!r}: {reason}")


class ImportTargetError(TranscriptImportError):
    """The output path cannot be used (it exists and overwriting was not allowed, or it is unwritable)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot write events file {path!r}: {reason}")


class ImportFormatMismatchError(TranscriptImportError):
    """The source holds records but none of the requested format: the wrong ``--format``."""

    def __init__(self, path: str, requested: str, detected: str | None = None) -> None:
        self.path = path
        self.requested = requested
        self.detected = detected
        hint = (
            f"it looks like a {detected} transcript (use --format {detected})"
            if detected is not None
            else "check --format"
        )
        super().__init__(f"no {requested} records found in {path!r}: {hint}; nothing was written")


class InvalidImportSessionIdError(TranscriptImportError, ValueError):
    """The session id is empty, too long or holds characters unsafe in a path."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"invalid session id {session_id!r}: use letters, digits, '.', '_' or '-' (at most 128)"
        )


def validate_session_id(session_id: str) -> str:
    """Return ``session_id`` when it is safe as a run id and as a path component, else raise."""
    if not _SESSION_ID_RE.match(session_id) or session_id in {".", ".."}:
        raise InvalidImportSessionIdError(session_id)
    return session_id


class ImportSummary(BaseModel):
    """What one import wrote; the CLI prints it (``--json`` prints it as an object)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: str
    """Run id written on every event."""
    events_path: str
    """Path of the ``events.jsonl`` written."""
    events: int
    """Number of events written."""
    turns: int
    """Number of user turns."""
    last_seq: int
    """Seq of the last event written (0 when none)."""
    skipped: dict[str, int]
    """Unknown record types skipped, by type name, with their counts."""
    ignored: dict[str, int]
    """Known records that are not observed (metadata, reasoning, sidechains, ...), by kind."""
    records: int
    """Source records read (non-blank lines)."""


@dataclass
class ImportStats:
    """Live counters of an import, handed to the progress callback after every record."""

    records: int = 0
    """Source records read."""
    events: int = 0
    """Events written so far."""
    turns: int = 0
    """User turns started so far."""
    last_seq: int = 0
    """Seq of the last event written."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Unknown record types skipped, by name."""
    ignored: Counter[str] = field(default_factory=Counter)
    """Known, unobserved records, by kind."""


ProgressCallback = Callable[[ImportStats], None]
"""Called after every source record with the live counters (drives the CLI's progress bar)."""


def type_name(value: object) -> str:
    """A record type as a short, printable counter key (``<missing>`` when absent or not a string)."""
    if not isinstance(value, str) or not value:
        return "<missing>"
    cleaned = "".join(ch if ch.isprintable() else "?" for ch in value)
    return cleaned[:TYPE_NAME_LIMIT]


def normalize_timestamp(value: object) -> str | None:
    """An ISO-8601 string or epoch number as ``YYYY-MM-DDTHH:MM:SS+00:00`` (UTC), or None.

    Naive times are taken as UTC; fractions of a second are dropped. Numbers above 1e11 are
    epoch milliseconds, smaller ones epoch seconds.
    """
    moment: datetime
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = value / 1000 if value > 1e11 else float(value)
        try:
            moment = datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    elif isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
    else:
        return None
    return moment.astimezone(UTC).replace(microsecond=0).isoformat()


def text_of_parts(content: object, text_types: frozenset[str] = frozenset({"text"})) -> str:
    """``content`` as text: a string as-is, a list joined with newlines over its text parts.

    Parts are plain strings or objects whose ``type`` is in ``text_types`` with a string ``text``;
    other parts (images, thinking, tool parts) are left out.
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts: list[str] = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif (
            isinstance(part, Mapping) and part.get("type") in text_types and isinstance(part.get("text"), str)
        ):
            texts.append(part["text"])
    return "\n".join(texts)


@dataclass(frozen=True)
class ToolCall:
    """One tool call of an assistant step."""

    call_id: str
    """Id the result refers to."""
    name: str
    """Tool name."""
    arguments: Any
    """Arguments as the source gave them (an object when it can be decoded)."""


@dataclass
class _PendingStep:
    key: str | None
    ts: str
    texts: list[str]
    tool_calls: list[ToolCall]


class TranscriptBuilder:
    """Turns neutral transcript items (user turn, assistant step, tool result) into envelope lines.

    Guarantees: seq counts 1, 2, ... with no holes; ``turn_no`` is the number of user turns
    started so far (0 before the first); consecutive assistant items with the same step key are
    merged into one ``llm_step_completed`` (a different key, a tool result, a user turn or the end
    flushes it); every turn with at least one assistant step ends with one ``agent_end``
    ``{reason: "completed"}`` written before the next user turn (or at the end of the file), after
    every event of that turn. Timestamps missing from a record repeat the previous one.
    """

    def __init__(self, session_id: str, write_line: Callable[[str], object], fallback_ts: str) -> None:
        self.session_id = session_id
        self.stats = ImportStats()
        self._write_line = write_line
        self._last_ts = fallback_ts
        self._pending: _PendingStep | None = None
        self._turn_has_assistant = False
        self._call_names: dict[str, str] = {}

    # -- items -------------------------------------------------------------------------------

    def user_turn(self, text: str, ts: object) -> None:
        """Close the current turn and start a new one with the user's ``text``."""
        self._close_turn()  # before stamping: the previous turn's agent_end keeps its own time
        stamp = self._stamp(ts)
        self.stats.turns += 1
        self._emit("agent_command_applied", {"text": text}, stamp)

    def assistant(
        self, ts: object, texts: Sequence[str] = (), tool_calls: Sequence[ToolCall] = (), *, key: str | None
    ) -> None:
        """Add assistant text and tool calls; merged with the pending step when ``key`` matches it."""
        stamp = self._stamp(ts)
        kept_texts = [text for text in texts if text.strip()]
        if not kept_texts and not tool_calls:
            return
        if self._pending is not None and self._pending.key != key:
            self._flush_step()
        if self._pending is None:
            self._pending = _PendingStep(key=key, ts=stamp, texts=[], tool_calls=[])
        self._pending.texts.extend(kept_texts)
        self._pending.tool_calls.extend(tool_calls)

    def tool_result(
        self, call_id: str, text: str, is_error: bool, ts: object, tool_name: str | None = None
    ) -> None:
        """Write a tool result; its tool name defaults to the name of the call with that id."""
        stamp = self._stamp(ts)
        self._flush_step()
        known_name = self._call_names.pop(call_id, None)
        name = tool_name or known_name or "tool"
        payload = {
            "tool_result": {
                "tool_call_id": call_id,
                "result": {"tool_name": name, "content": [{"type": "text", "text": text}]},
                "is_error": is_error,
            }
        }
        self._emit("tool_execution_end", payload, stamp)

    def skip(self, record_type: str) -> None:
        """Count a record of an unknown type (it is not converted)."""
        self.stats.skipped[type_name(record_type)] += 1

    def ignore(self, kind: str) -> None:
        """Count a known record that is deliberately not observed."""
        self.stats.ignored[type_name(kind)] += 1

    def finish(self) -> None:
        """Flush the pending step and close the last turn."""
        self._close_turn()

    # -- internals ---------------------------------------------------------------------------

    def _stamp(self, ts: object) -> str:
        stamp = normalize_timestamp(ts)
        if stamp is not None:
            self._last_ts = stamp
        return self._last_ts

    def _flush_step(self) -> None:
        step = self._pending
        if step is None:
            return
        self._pending = None
        calls = []
        for call in step.tool_calls:
            if call.call_id:
                self._call_names[call.call_id] = call.name
            calls.append({"id": call.call_id, "name": call.name, "arguments": call.arguments})
        message = {"role": "assistant", "content": "\n".join(step.texts), "tool_calls": calls}
        self._turn_has_assistant = True
        self._emit("llm_step_completed", {"assistant_message": message}, step.ts)

    def _close_turn(self) -> None:
        self._flush_step()
        if self._turn_has_assistant:
            self._emit("agent_end", {"reason": "completed"}, self._last_ts)
        self._turn_has_assistant = False

    def _emit(self, event_type: str, payload: dict[str, Any], ts: str) -> None:
        self.stats.last_seq += 1
        self.stats.events += 1
        event = {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.session_id,
            "seq": self.stats.last_seq,
            "turn_no": self.stats.turns,
            "type": event_type,
            "payload": payload,
            "ts": ts,
        }
        self._write_line(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")


class RecordConverter(ABC):
    """Converts the records of one transcript format; one instance per import, fed in file order."""

    format_name: TranscriptFormat

    def __init__(self, builder: TranscriptBuilder, source_path: str) -> None:
        self.builder = builder
        self.source_path = source_path

    @abstractmethod
    def handle(self, record: Mapping[str, Any], line_no: int) -> None:
        """Convert one decoded record (a JSON object) read from line ``line_no``."""

    def finish(self) -> None:
        """Called after the last record; converters holding state flush it here."""
        self.builder.finish()

    def fail(self, line_no: int, reason: str) -> ImportFormatError:
        """The error for a malformed record (``reason`` names fields, never values)."""
        return ImportFormatError(self.source_path, line_no, reason)

    def require_mapping(self, record: Mapping[str, Any], key: str, line_no: int) -> Mapping[str, Any]:
        """``record[key]`` when it is a JSON object, else an :class:`ImportFormatError`."""
        value = record.get(key)
        if not isinstance(value, Mapping):
            raise self.fail(line_no, f"{key!r} is not an object")
        return value

    def assistant_parts(
        self, parts: Iterable[object], line_no: int, *, call_type: str, arguments_key: str
    ) -> tuple[list[str], list[ToolCall]]:
        """The texts and tool calls of an assistant message's content parts, in order: ``text``
        parts, and ``call_type`` parts (an ``id``, a ``name`` and arguments at ``arguments_key``);
        parts of other types are passed over."""
        texts: list[str] = []
        calls: list[ToolCall] = []
        for part in parts:
            if not isinstance(part, Mapping):
                raise self.fail(line_no, "a 'message.content' part is not an object")
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind == call_type:
                call_id, name = part.get("id"), part.get("name")
                if not isinstance(call_id, str) or not isinstance(name, str):
                    raise self.fail(line_no, f"a {call_type!r} part lacks a string 'id' or 'name'")
                calls.append(ToolCall(call_id=call_id, name=name, arguments=part.get(arguments_key, {})))
        return texts, calls


def iter_records(path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """Yield ``(line_no, record)`` for every non-blank line, reading one line at a time.

    A line longer than :data:`MAX_LINE_BYTES`, a line that is not a JSON object (or is nested too
    deeply to decode) and a read error are typed errors naming the file and line.
    """
    for line_no, _end, record in iter_record_spans(path):
        yield line_no, record


NOT_REGULAR_REASON = "not a regular file (a FIFO, device or directory is never read)"
"""Reason of the :class:`TranscriptSourceError` for a transcript that is not a regular file."""


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading when it is a regular file, else :class:`TranscriptSourceError`.

    Opened without blocking and checked on the open descriptor, so a FIFO (or a file swapped for
    one after a check) never blocks the caller, and a device or directory is never read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise TranscriptSourceError(str(path), type(exc).__name__) from None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError as exc:
        os.close(fd)
        raise TranscriptSourceError(str(path), type(exc).__name__) from None
    if not regular:
        os.close(fd)
        raise TranscriptSourceError(str(path), NOT_REGULAR_REASON)
    return os.fdopen(fd, "rb")


def iter_record_spans(
    path: Path, end_offset: int | None = None, *, regular_only: bool = False
) -> Iterator[tuple[int, int, Mapping[str, Any]]]:
    """Yield ``(line_no, end_offset, record)`` for every non-blank line, as :func:`iter_records` does.

    ``end_offset`` is the byte offset just past the record's line. With ``end_offset`` given, reading
    stops there: a transcript that is still being written is read only up to what was complete then.
    With ``regular_only``, anything but a regular file is refused without blocking (:func:`open_regular`).
    """
    if regular_only:
        handle = open_regular(path)
    else:
        try:
            handle = path.open("rb")
        except OSError as exc:
            raise TranscriptSourceError(str(path), type(exc).__name__) from None
    with handle:
        line_no = 0
        offset = 0
        while end_offset is None or offset < end_offset:
            limit = MAX_LINE_BYTES + 1 if end_offset is None else min(MAX_LINE_BYTES + 1, end_offset - offset)
            try:
                raw = handle.readline(limit)
            except OSError as exc:
                raise TranscriptSourceError(str(path), type(exc).__name__) from None
            if not raw:
                return
            if end_offset is not None and not raw.endswith(b"\n") and len(raw) <= MAX_LINE_BYTES:
                return  # the line runs past end_offset: it was not complete then, so it is not read
            line_no += 1
            offset += len(raw)
            if len(raw) > MAX_LINE_BYTES:
                raise ImportFormatError(str(path), line_no, f"line longer than {MAX_LINE_BYTES} bytes")
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ImportFormatError(str(path), line_no, f"invalid JSON ({type(exc).__name__})") from None
            except RecursionError:
                raise ImportFormatError(str(path), line_no, "JSON nested too deeply") from None
            if not isinstance(record, dict):
                raise ImportFormatError(str(path), line_no, "not a JSON object")
            yield line_no, offset, record


def _file_mtime_ts(path: Path) -> str:
    try:
        stamp = normalize_timestamp(path.stat().st_mtime)
    except OSError as exc:
        raise TranscriptSourceError(str(path), type(exc).__name__) from None
    return stamp or "1970-01-01T00:00:00+00:00"


def convert_file(
    converter_class: type[RecordConverter],
    source: Path,
    session_id: str,
    out: Path,
    *,
    overwrite: bool = False,
    progress: ProgressCallback | None = None,
) -> ImportSummary:
    """Convert ``source`` into ``out`` atomically: a temp file next to ``out``, renamed at the end.

    On any error the temp file is removed and ``out`` is left as it was. A source with records but
    none of this format raises :class:`ImportFormatMismatchError` (nothing is written).
    """
    validate_session_id(session_id)
    if out.is_dir():
        raise ImportTargetError(str(out), "it is a directory; name the events file itself")
    if out.exists() and not overwrite:
        raise ImportTargetError(str(out), "it already exists (pass overwrite to replace it)")
    fallback_ts = _file_mtime_ts(source)
    try:
        make_private_dirs(out.parent)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".importing", dir=out.parent)
    except OSError as exc:
        raise ImportTargetError(str(out), type(exc).__name__) from None
    tmp_path = Path(tmp_name)
    try:
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
                stats = _convert_into(converter_class, source, session_id, handle, fallback_ts, progress)
                handle.flush()
                os.fsync(handle.fileno())
            if stats.records > 0 and stats.events == 0 and not stats.ignored:
                raise ImportFormatMismatchError(str(source), converter_class.format_name)
            os.replace(tmp_path, out)
        except OSError as exc:  # reads raise TranscriptSourceError, so this is the output side
            raise ImportTargetError(str(out), type(exc).__name__) from None
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return ImportSummary(
        session_id=session_id,
        events_path=str(out),
        events=stats.events,
        turns=stats.turns,
        last_seq=stats.last_seq,
        skipped=dict(sorted(stats.skipped.items())),
        ignored=dict(sorted(stats.ignored.items())),
        records=stats.records,
    )


def _convert_into(
    converter_class: type[RecordConverter],
    source: Path,
    session_id: str,
    handle: TextIO,
    fallback_ts: str,
    progress: ProgressCallback | None,
) -> ImportStats:
    builder = TranscriptBuilder(session_id, handle.write, fallback_ts)
    converter = converter_class(builder, str(source))
    for line_no, record in iter_records(source):
        builder.stats.records += 1
        try:
            converter.handle(record, line_no)
        except RecursionError:  # a field the converter decodes or re-encodes is nested too deeply
            raise ImportFormatError(str(source), line_no, "JSON nested too deeply") from None
        if progress is not None:
            progress(builder.stats)
    converter.finish()
    if progress is not None:
        progress(builder.stats)
    return builder.stats
