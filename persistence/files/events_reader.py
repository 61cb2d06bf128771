"""Streaming reader of a session's ``events.jsonl`` (the source of truth; reference §2.3).

The file is read line by line in file order and never loaded whole, so multi-megabyte lines and
long sessions cost only one line of memory at a time. The agent may be appending while we read:
a last line without its newline that does not parse is a write in progress and ends the read
quietly. Any other corrupt line raises :class:`protocol.errors.EventsFileError` naming the file,
the line number and the nearest seq (never the line's content).

What counts as corrupt: invalid JSON, a value that is not an object, an envelope that fails
validation (a ``seq`` beyond SQLite's integers included), a ``schema_version`` that is not
``x.y`` digits (only a well-formed version of another major is skipped), and a ``seq`` that does not
increase strictly over the previous compatible event (a duplicate or an out-of-order line).

A range read needs only its own lines: it stops right after the event that reaches its end (it
never reads the line after it), and a corrupt line that lies before the range (the next good event
is still below the range's start) is passed over. Anything else that is corrupt fails the read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from pydantic import ValidationError

from persistence.files.node_disk import check_on_this_node
from protocol.errors import EventsFileError, EventsMismatchError, EventsMissingError
from protocol.events import (
    EventWindow,
    SessionEvent,
    is_compatible_schema_version,
    is_well_formed_schema_version,
)
from protocol.redact import DEFAULT_REDACTOR, USER_TURN_EVENT, Redactor, user_turn_private_depth


class _RangeReader:
    """One pass over the file for ``start_seq..end_seq``; records how far the file was read."""

    def __init__(
        self,
        path: Path,
        start_seq: int,
        end_seq: int | None,
        redactor: Redactor | None = DEFAULT_REDACTOR,
        *,
        session_id: str | None = None,
    ) -> None:
        self.path = path
        self.session_id = session_id
        """When set: a missing file and an event of another session are errors, not "nothing yet"."""
        self.redactor = redactor
        """Applied to every event yielded (``None``: raw payloads, for reads that only count seqs)."""
        self.start_seq = start_seq
        self.end_seq = end_seq
        self.last_seq = 0
        """Seq of the last compatible event read (in or before the range)."""
        self.reached_end = False
        """True once an event at or past ``end_seq`` was seen: the whole range has been read."""
        self.private_depth = 0
        """Depth of the ``<private>`` span the user messages read so far left open (carried into the
        next user message; the file is read from its start, so a range read knows it too)."""

    def __iter__(self) -> Iterator[SessionEvent]:
        check_on_this_node(self.path)
        try:
            handle = self.path.open("rb")
        except FileNotFoundError:
            if self.session_id is not None:
                raise EventsMissingError(str(self.path)) from None
            return
        with handle:
            yield from self._lines(handle)

    def _lines(self, handle: BinaryIO) -> Iterator[SessionEvent]:
        deferred: EventsFileError | None = None
        line_no = 0
        for raw in handle:
            line_no += 1
            if not raw.strip():
                continue
            try:
                parsed = _parse_line(raw, self.path, line_no, raw.endswith(b"\n"), self.last_seq)
            except EventsFileError as error:
                if self.last_seq >= self.start_seq:
                    raise
                # Nothing of the range read yet: the line belongs to the range only if the next good
                # event is past the range's start (seqs increase strictly in file order).
                deferred = deferred or error
                continue
            if parsed is _PARTIAL:
                return  # a partial last line: the writer has not finished it yet
            if not isinstance(parsed, SessionEvent):
                continue  # an event of another major schema version
            event = parsed
            if event.seq <= self.last_seq:
                kind = "duplicate seq" if event.seq == self.last_seq else "seq out of order"
                raise EventsFileError(
                    str(self.path),
                    line_no,
                    f"{kind}: {event.seq} after {self.last_seq}",
                    seq=event.seq,
                    after_seq=self.last_seq,
                )
            if self.session_id is not None and event.run_id != self.session_id:
                raise EventsMismatchError(str(self.path), line_no, self.session_id, event.run_id, event.seq)
            if deferred is not None:
                if event.seq > self.start_seq:
                    raise deferred
                deferred = None  # the corrupt line lies before the range: this read does not need it
            self.last_seq = event.seq
            if self.end_seq is not None and event.seq == self.end_seq:
                self.reached_end = True
                yield self._redacted(event)
                return  # never read the line after the range
            if self.end_seq is not None and event.seq > self.end_seq:
                # The range ends in a hole: it is a real hole only if no later line goes back into it.
                self._check_no_line_returns_below(handle, line_no, event.seq)
                self.reached_end = True
                return
            if event.seq >= self.start_seq:
                yield self._redacted(event)
            elif self.redactor is not None and event.type == USER_TURN_EVENT:
                self.private_depth = user_turn_private_depth(event.payload, self.private_depth)
        if deferred is not None:
            raise deferred

    def _redacted(self, event: SessionEvent) -> SessionEvent:
        # The one choke point between events files and everything omray keeps or sends
        # (protocol.redact): private spans and likely secrets never leave this reader.
        if self.redactor is None:
            return event
        if event.type == USER_TURN_EVENT:
            payload, self.private_depth = self.redactor.user_turn_payload(event.payload, self.private_depth)
        else:
            payload = self.redactor.payload(event.payload)
        return event.model_copy(update={"payload": payload})

    def _check_no_line_returns_below(self, handle: BinaryIO, line_no: int, overshoot_seq: int) -> None:
        """Scan the rest of the file for an event that belongs to the range but comes after ``overshoot_seq``.

        Lines this read does not need (corrupt ones, other majors, seqs past the range) are passed over.
        """
        assert self.end_seq is not None
        for raw in handle:
            line_no += 1
            if not raw.strip():
                continue
            try:
                parsed = _parse_line(raw, self.path, line_no, raw.endswith(b"\n"), overshoot_seq)
            except EventsFileError:
                continue
            if isinstance(parsed, SessionEvent) and parsed.seq <= self.end_seq:
                raise EventsFileError(
                    str(self.path),
                    line_no,
                    f"seq out of order: {parsed.seq} after {overshoot_seq}",
                    seq=parsed.seq,
                    after_seq=overshoot_seq,
                )


def iter_events(
    path: str | Path,
    start_seq: int = 1,
    end_seq: int | None = None,
    *,
    redactor: Redactor = DEFAULT_REDACTOR,
    session_id: str | None = None,
) -> Iterator[SessionEvent]:
    """Yield events with ``start_seq <= seq <= end_seq`` in file order, redacted by ``redactor``
    (``<private>`` spans and likely secrets; :mod:`protocol.redact`).

    Stops right after the event at or past ``end_seq`` (seqs increase strictly in file order).
    Lines of an incompatible major ``schema_version`` are skipped. A missing file yields nothing,
    unless ``session_id`` is given (see :func:`read_event_window`).
    """
    return iter(_RangeReader(Path(path), start_seq, end_seq, redactor, session_id=session_id))


def iter_unredacted_events(path: str | Path, start_seq: int, end_seq: int) -> Iterator[SessionEvent]:
    """As :func:`iter_events`, without the redactor: for comparing events as they were stored (the
    node-local log of shipped events, whose events were redacted before they were shipped)."""
    return iter(_RangeReader(Path(path), start_seq, end_seq, None))


def read_event_range(
    path: str | Path, start_seq: int, end_seq: int, *, redactor: Redactor = DEFAULT_REDACTOR
) -> list[SessionEvent]:
    """The events of the inclusive range ``start_seq..end_seq`` as a list (holes are possible), redacted."""
    return list(iter_events(path, start_seq, end_seq, redactor=redactor))


def read_event_window(
    path: str | Path,
    start_seq: int,
    end_seq: int,
    *,
    redactor: Redactor = DEFAULT_REDACTOR,
    session_id: str | None = None,
) -> EventWindow:
    """The events of ``start_seq..end_seq`` and how far the file has been read for them.

    ``through`` is ``end_seq`` when the file reaches the range's end, else the seq of its last
    complete event: the rest has not been written yet (or the end seq does not exist).

    With ``session_id`` (a job that reads the file of one session) a missing file raises
    :class:`protocol.errors.EventsMissingError` and an event of another session read on the way
    :class:`protocol.errors.EventsMismatchError`; without it, a missing file is an empty window.
    """
    reader = _RangeReader(Path(path), start_seq, end_seq, redactor, session_id=session_id)
    events = tuple(reader)
    through = end_seq if reader.reached_end else reader.last_seq
    return EventWindow(events=events, through=through)


def last_event_seq(path: str | Path) -> int:
    """Highest seq of a compatible event in the file (0 when there is none)."""
    reader = _RangeReader(Path(path), 1, None, None)
    for _ in reader:
        pass
    return reader.last_seq


_PARTIAL = object()
_SKIPPED = object()


def _parse_line(
    raw: bytes, path: Path, line_no: int, complete: bool, after_seq: int
) -> SessionEvent | object:
    def corrupt(reason: str, seq: int | None = None) -> EventsFileError:
        return EventsFileError(str(path), line_no, reason, seq=seq, after_seq=after_seq)

    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        if not complete:
            return _PARTIAL
        raise corrupt(f"invalid JSON ({type(exc).__name__})") from None
    except RecursionError:
        raise corrupt("JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise corrupt("not a JSON object")
    raw_seq = data.get("seq")
    seq = raw_seq if type(raw_seq) is int and 1 <= raw_seq <= 2**63 - 1 else None
    version = data.get("schema_version")
    if not is_well_formed_schema_version(version):
        raise corrupt("invalid envelope fields ['schema_version']", seq)
    if not is_compatible_schema_version(str(version)):
        return _SKIPPED
    if data.get("payload") == []:
        # PHP's json_encode writes an empty payload array as ``[]``, not ``{}``.
        data["payload"] = {}
    try:
        return SessionEvent.model_validate(data)
    except ValidationError as exc:
        fields = sorted({".".join(str(p) for p in err["loc"]) for err in exc.errors()})
        raise corrupt(f"invalid envelope fields {fields!r}", seq) from None
