"""Live import: a transcript that is still being written, turned into ``events.jsonl`` as it grows.

An agent hook (``omray hook claude-code``, ``omray hook codex``) must return at once, so it only
records a *mark*: how many bytes of the transcript were complete when the hook ran and whether a
turn ended there (:func:`append_mark`, one short append). A background process then brings the
session's events up to date (:func:`sync_session`) and dispatches the turns that ended.

Files, next to the session's ``events.jsonl`` (``.hatfield/sessions/<session>/``):

* ``live.marks.jsonl``: the marks, appended by hooks (one ``write`` of one short line each);
* ``live.cursor.json``: what :func:`sync_session` did: marks applied, events appended, turns
  waiting for dispatch (written atomically);
* ``live.lock``: held while syncing or dispatching, so concurrent calls never append twice;
* ``live.uuids``: the ids of the transcript records read, so a forked transcript's copy of history
  the project already imported is not imported again (:mod:`persistence.importers.live_forks`).

Guarantees. A session may name several transcripts (spans, :mod:`persistence.importers.live_spans`):
each is converted from its own bytes and marks, a rewritten or truncated one starts a new span, and
a FIFO, device or directory is refused without blocking. Within a span, the conversion is a pure
function of the transcript bytes up to its last mark and the offsets of its closing marks
(:func:`convert_through`): the same importer
(``persistence.importers``) runs from the first record each time, closes the turn (``agent_end``)
at every closing mark, and stops at the last mark without flushing what is still open. So its
output for more marks always extends its output for fewer, and the events file only ever grows:
events already in the file (by seq) are never written again, a half-written last transcript line
is never read (a mark counts complete lines only), and a half-written last events line left by a
crash is cut before appending. A turn is waiting for dispatch from the moment its ``agent_end``
is appended until :func:`mark_dispatched` says the queue accepted it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from persistence.files.atomic_file import replace_file
from persistence.files.file_tail import TAIL_CHUNK, complete_length_of
from persistence.importers.claude_code import ClaudeCodeConverter
from persistence.importers.codex import CodexConverter
from persistence.importers.common import (
    NOT_REGULAR_REASON,
    RecordConverter,
    TranscriptBuilder,
    TranscriptImportError,
    TranscriptSourceError,
    iter_record_spans,
    open_regular,
)
from persistence.importers.live_forks import SOURCE_IDS_FILE, KnownIds, settle_inheritance, transcript_key
from persistence.importers.live_spans import (
    FileView,
    FlushSignal,
    LiveFormat,
    Mark,
    Span,
    assign_marks,
    fingerprint,
    fold_marks,
    open_span,
    renumber,
)
from protocol.errors import OmrayError

MARKS_FILE = "live.marks.jsonl"
CURSOR_FILE = "live.cursor.json"
LOCK_FILE = "live.lock"
EVENTS_FILE = "events.jsonl"

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600

LIVE_FALLBACK_TS = "1970-01-01T00:00:00+00:00"
"""Timestamp of records before the first dated one: fixed, so every re-conversion is identical."""

LOCK_TIMEOUT_S = 120.0
"""Longest wait for another process's sync of the same session."""


LIVE_CONVERTERS: dict[LiveFormat, type[RecordConverter]] = {
    "claude-code": ClaudeCodeConverter,
    "codex": CodexConverter,
}
"""Formats a live hook follows."""


class LiveImportError(OmrayError):
    """The session's live state cannot be read or written (names the file and the error class)."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"live import state {self.path!r} unusable: {reason}")


class Boundary(BaseModel):
    """A turn's terminal ``agent_end`` in the events file, waiting for dispatch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    end_seq: int = Field(ge=1)
    """Seq of the ``agent_end`` event."""
    turn_no: int = Field(ge=0)
    """Its turn number."""


class LiveCursor(BaseModel):
    """What :func:`sync_session` did for one session."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    marks_applied: int = 0
    """Marks the events file reflects."""
    last_seq: int = 0
    """Seq of the last event appended by a sync."""
    pending: tuple[Boundary, ...] = ()
    """Turns appended but not accepted by the queue yet, in seq order."""
    flush: FlushSignal | None = None
    """A flush a mark asked for that the queue has not accepted yet (observe through ``last_seq``)."""
    flush_mark: int = 0
    """``marks_applied`` when that flush was asked for: only its own dispatch clears it."""
    last_turn: int = 0
    """Turn number of the last event appended by a sync."""
    spans: tuple[Span, ...] = ()
    """The transcripts feeding the session, in the order they first did (``live_spans``)."""
    problems: tuple[str, ...] = ()
    """Why some marks could not be converted at the last sync (files and lines, never content)."""


@dataclass(frozen=True)
class Conversion:
    """Output of :func:`convert_through`: the events past ``after_seq`` and the turns they close."""

    lines: tuple[str, ...]
    """Events lines with ``seq > after_seq``, in order (newline-terminated)."""
    last_seq: int
    """Seq of the last event of the whole conversion (0 when none)."""
    boundaries: tuple[Boundary, ...]
    """``agent_end`` events with ``seq > after_seq``."""
    source_ids: tuple[str, ...] = ()
    """The ``uuid`` of each record read past ``ids_from`` bytes, in order (skipped ones included)."""


# ----------------------------------------------------------------------------------- pure parts


def close_points(marks: Sequence[Mark]) -> tuple[int, tuple[int, ...]]:
    """``(target, closes)``: read through the furthest mark, close turns at the closing marks' offsets.

    Offsets never move backwards: a mark below an earlier one (a transcript that was truncated or
    replaced) counts at the furthest offset seen before it.
    """
    furthest = 0
    closes: list[int] = []
    for mark in marks:
        furthest = max(furthest, mark.offset)
        if mark.close and (not closes or closes[-1] != furthest):
            closes.append(furthest)
    return furthest, tuple(closes)


def convert_through(
    transcript_format: LiveFormat,
    source: Path,
    session_id: str,
    target: int,
    closes: Sequence[int],
    after_seq: int,
    *,
    skip_to: int = 0,
    ids_from: int | None = None,
) -> Conversion:
    """Convert ``source[:target]`` with the importer, ending the open turn at each offset of ``closes``.

    Records that end within the first ``skip_to`` bytes (copied history, ``live_forks.inherited_prefix``)
    are not converted. With ``ids_from``, the ``uuid`` of every record ending past that many bytes
    is returned too. Deterministic in its inputs. Raises the importer's typed errors for a
    malformed record.
    """
    lines: list[str] = []
    boundaries: list[Boundary] = []
    source_ids: list[str] = []

    def keep(line: str) -> None:
        event = json.loads(line)
        if event["seq"] <= after_seq:
            return
        lines.append(line)
        if event["type"] == "agent_end":
            boundaries.append(Boundary(end_seq=event["seq"], turn_no=event["turn_no"]))

    builder = TranscriptBuilder(session_id, keep, LIVE_FALLBACK_TS)
    converter = LIVE_CONVERTERS[transcript_format](builder, str(source))
    pending_closes = list(closes)
    for line_no, end, record in iter_record_spans(source, target, regular_only=True):
        record_id = record.get("uuid")
        if ids_from is not None and end > ids_from and isinstance(record_id, str):
            source_ids.append(record_id)
        while pending_closes and pending_closes[0] < end:
            pending_closes.pop(0)
            builder.finish()
        if end > skip_to:
            converter.handle(record, line_no)
    if pending_closes:
        builder.finish()
    return Conversion(
        lines=tuple(lines),
        last_seq=builder.stats.last_seq,
        boundaries=tuple(boundaries),
        source_ids=tuple(source_ids),
    )


def pending_after_dispatch(pending: Iterable[Boundary], accepted_through: int) -> tuple[Boundary, ...]:
    """The boundaries still waiting once every turn through ``accepted_through`` was accepted."""
    return tuple(boundary for boundary in pending if boundary.end_seq > accepted_through)


# ------------------------------------------------------------------------------------------ files


def complete_length(path: Path) -> int:
    """Bytes of ``path`` through its last newline (0 when it has none, does not exist or is not a
    regular file: a FIFO is never opened for a blocking read)."""
    try:
        with open_regular(path) as handle:
            return complete_length_of(handle, handle.seek(0, os.SEEK_END))
    except (TranscriptSourceError, OSError):
        return 0


def _fingerprint_of(handle: BinaryIO, length: int) -> str:
    """SHA-256 of the first ``length`` bytes (read as the conversion reads them: once per sync)."""

    def chunks() -> Iterator[bytes]:
        handle.seek(0)
        left = length
        while left > 0:
            chunk = handle.read(min(TAIL_CHUNK, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk

    return fingerprint(chunks(), length)


def inspect_transcript(path: Path, span: Span | None) -> FileView:
    """What ``path`` is now (never blocks on a FIFO), and whether the bytes ``span`` converted are
    still its first bytes (a shorter file or another fingerprint: rewritten)."""
    try:
        handle = open_regular(path)
    except TranscriptSourceError as exc:
        if exc.reason == NOT_REGULAR_REASON:
            return FileView("not_regular", reason=str(exc))
        if exc.reason == "FileNotFoundError":
            return FileView("missing")
        return FileView("unreadable", reason=str(exc))
    try:
        with handle:
            size = os.fstat(handle.fileno()).st_size
            complete = complete_length_of(handle, size)
            if span is None or span.read_to == 0:
                return FileView("regular", complete)
            if size < span.read_to:
                return FileView("regular", complete, "shrunk")
            same = _fingerprint_of(handle, span.read_to) == span.fingerprint
            return FileView("regular", complete, "same" if same else "changed")
    except OSError as exc:
        return FileView("unreadable", reason=str(TranscriptSourceError(str(path), type(exc).__name__)))


def _fingerprint_now(path: Path, length: int) -> str:
    try:
        with open_regular(path) as handle:
            return _fingerprint_of(handle, length)
    except (TranscriptSourceError, OSError):
        return ""  # differs from any real fingerprint: the next sync starts a new span


def _ensure_dir(directory: Path) -> None:
    directory.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)


def append_mark(session_dir: Path, mark: Mark) -> None:
    """Append ``mark`` durably (one ``write`` of one line, then fsync); never takes the lock."""
    _ensure_dir(session_dir)
    path = session_dir / MARKS_FILE
    line = (mark.model_dump_json() + "\n").encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise LiveImportError(path, type(exc).__name__) from None


def settle_mark(session_dir: Path) -> Mark | None:
    """When the session's last mark waits to settle, append the close it stands for, at the
    transcript's complete length now (never before the mark's own offset); returns that mark."""
    marks = read_marks(session_dir)
    if not marks or not marks[-1].settle:
        return None
    last = marks[-1]
    closing = Mark(
        transcript=last.transcript,
        format=last.format,
        offset=max(last.offset, complete_length(Path(last.transcript))),
        close=True,
    )
    append_mark(session_dir, closing)
    return closing


def read_marks(session_dir: Path) -> list[Mark]:
    """The complete, valid marks of a session, in order (a half-written or foreign line is skipped)."""
    path = session_dir / MARKS_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise LiveImportError(path, type(exc).__name__) from None
    marks: list[Mark] = []
    for raw in data[: data.rfind(b"\n") + 1].splitlines():
        try:
            marks.append(Mark.model_validate_json(raw))
        except ValidationError:
            continue  # not a mark this version wrote: skip it rather than stop the session
    return marks


def read_cursor(session_dir: Path) -> LiveCursor:
    """The session's cursor (a fresh one when there is none yet)."""
    path = session_dir / CURSOR_FILE
    try:
        return LiveCursor.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return LiveCursor()
    except (OSError, ValidationError) as exc:
        raise LiveImportError(path, type(exc).__name__) from None


def _write_cursor(session_dir: Path, cursor: LiveCursor) -> None:
    try:
        replace_file(session_dir / CURSOR_FILE, cursor.model_dump_json().encode("utf-8"), FILE_MODE)
    except OSError as exc:
        raise LiveImportError(session_dir / CURSOR_FILE, type(exc).__name__) from None


def _last_seq_repairing_tail(events_path: Path) -> int:
    """Seq of the events file's last complete line; a half-written line after it is cut off."""
    length = complete_length(events_path)
    try:
        size = events_path.stat().st_size
    except FileNotFoundError:
        return 0
    if size > length:
        with events_path.open("r+b") as handle:
            handle.truncate(length)
            os.fsync(handle.fileno())
    if length == 0:
        return 0
    with events_path.open("rb") as handle:
        handle.seek(max(0, length - TAIL_CHUNK))
        tail = handle.read(length - max(0, length - TAIL_CHUNK))
    last_line = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        seq = json.loads(last_line)["seq"]
    except (ValueError, KeyError, TypeError):
        raise LiveImportError(events_path, "last line is not an omray event") from None
    if not isinstance(seq, int):
        raise LiveImportError(events_path, "last line is not an omray event")
    return seq


def _append_lines(events_path: Path, lines: Sequence[str]) -> None:
    fd = os.open(events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
        handle.writelines(lines)
        handle.flush()
        os.fsync(handle.fileno())


def session_lock(session_dir: Path, timeout_s: float = LOCK_TIMEOUT_S) -> FileLock:
    """The session's lock file (held by a sync or a dispatch bookkeeping step)."""
    _ensure_dir(session_dir)
    return FileLock(str(session_dir / LOCK_FILE), timeout=timeout_s, mode=FILE_MODE)


def sync_session(session_dir: Path, session_id: str) -> LiveCursor:
    """Bring ``events.jsonl`` up to the session's marks; returns the cursor (turns waiting included).

    Each transcript the marks name is converted from its own bytes and marks (a span,
    :mod:`persistence.importers.live_spans`); a rewritten or truncated one starts a new span, a
    non-regular file is refused. What cannot be converted now (a missing file, a line that does not
    parse) waits, is named in ``cursor.problems``, and never holds back the session's other spans.

    Idempotent and safe to call from several processes at once (the session lock). Raises
    :class:`LiveImportError` for unusable state files (nothing is appended then).
    """
    with session_lock(session_dir):
        cursor = read_cursor(session_dir)
        marks = read_marks(session_dir)
        waiting = any(span.waiting and span.ended is None for span in cursor.spans)
        if not marks or (cursor.marks_applied >= len(marks) and not waiting):
            return cursor
        events_path = session_dir / EVENTS_FILE
        in_file = _last_seq_repairing_tail(events_path)
        if cursor.spans:
            start, last_seq, last_turn = cursor.marks_applied, cursor.last_seq, cursor.last_turn
            if in_file < last_seq:
                raise LiveImportError(
                    events_path, f"holds {in_file} events, the live cursor recorded {last_seq}"
                )
        else:  # a new session (or a cursor lost in a crash): numbered from the first mark on
            start, last_seq, last_turn = 0, 0, 0
        spans: list[Span] = list(cursor.spans)
        paths = {mark.transcript for mark in marks[start:]}
        paths |= {span.transcript for span in spans if span.waiting and span.ended is None}
        views = {path: inspect_transcript(Path(path), _open_span_of(spans, path)) for path in sorted(paths)}
        assignment = assign_marks(spans, marks, start, views)
        spans = list(assignment.spans)
        problems = [views[path].reason for path in assignment.refused]
        lines: list[str] = []
        ends: list[tuple[int, int]] = []
        source_ids: list[str] = []
        known_ids = KnownIds(session_dir)
        for index in assignment.to_convert:
            span = spans[index]
            view = views.get(span.transcript) or inspect_transcript(Path(span.transcript), None)
            if view.state != "regular":
                spans[index] = span.model_copy(update={"waiting": True})
                if view.state == "unreadable":
                    problems.append(view.reason)
                continue
            span = fold_marks(spans, index, marks, view.complete)
            target = min(span.furthest, view.complete)
            try:
                span = settle_inheritance(span, target, known_ids.excluding(span.transcript))
                conversion = convert_through(
                    cast(LiveFormat, span.format),
                    Path(span.transcript),
                    session_id,
                    target,
                    span.closes,
                    0,
                    skip_to=span.inherited_to,
                    ids_from=span.read_to,
                )
            except TranscriptImportError as exc:  # this span waits for a fix; the others go on
                spans[index] = span.model_copy(update={"waiting": True})
                problems.append(str(exc))
                continue
            key = transcript_key(span.transcript)
            source_ids.extend(f"{record_id} {key}\n" for record_id in conversion.source_ids)
            emission = renumber(conversion.lines, span, last_seq, last_turn)
            lines.extend(emission.lines)
            ends.extend(emission.end_turns)
            last_seq, last_turn = emission.last_seq, emission.last_turn
            spans[index] = emission.span.model_copy(
                update={"read_to": target, "fingerprint": _fingerprint_now(Path(span.transcript), target)}
            )
        new_lines = [line for line in lines if json.loads(line)["seq"] > in_file]
        try:
            if new_lines:
                _append_lines(events_path, new_lines)
        except OSError as exc:
            raise LiveImportError(events_path, type(exc).__name__) from None
        try:
            if source_ids:  # before the cursor: a crash in between only repeats ids (a set)
                _append_lines(session_dir / SOURCE_IDS_FILE, source_ids)
        except OSError as exc:
            raise LiveImportError(session_dir / SOURCE_IDS_FILE, type(exc).__name__) from None
        known = {boundary.end_seq for boundary in cursor.pending}
        added = [
            Boundary(end_seq=end_seq, turn_no=turn_no)
            for end_seq, turn_no in ends
            if end_seq > cursor.last_seq and end_seq not in known
        ]
        flushes = [mark.flush for mark in marks[cursor.marks_applied :] if mark.flush is not None]
        updated = LiveCursor(
            marks_applied=len(marks),
            last_seq=max(last_seq, cursor.last_seq),
            last_turn=max(last_turn, cursor.last_turn),
            pending=(*cursor.pending, *added),
            flush=flushes[-1] if flushes else cursor.flush,
            flush_mark=len(marks) if flushes else cursor.flush_mark,
            spans=tuple(spans),
            problems=tuple(problems),
        )
        _write_cursor(session_dir, updated)
        return updated


def _open_span_of(spans: list[Span], path: str) -> Span | None:
    index = open_span(spans, path)
    return spans[index] if index is not None else None


def mark_dispatched(session_dir: Path, accepted_through: int, flushed_mark: int | None = None) -> LiveCursor:
    """Drop the waiting turns through ``accepted_through`` (the queue accepted them), and the flush
    asked for at ``flushed_mark`` if that one was sent (a flush asked for since then stays)."""
    with session_lock(session_dir):
        cursor = read_cursor(session_dir)
        update: dict[str, object] = {"pending": pending_after_dispatch(cursor.pending, accepted_through)}
        if flushed_mark is not None and cursor.flush_mark == flushed_mark:
            update["flush"] = None
        updated = cursor.model_copy(update=update)
        _write_cursor(session_dir, updated)
        return updated


SYNC_ERRORS: tuple[type[OmrayError], ...] = (LiveImportError, TranscriptImportError)
"""What :func:`sync_session` raises for bad input or state (typed, without content)."""
