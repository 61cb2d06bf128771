"""Streaming reader of a session's ``events.jsonl`` (the source of truth; reference §2.3).

The file is read line by line in file order and never loaded whole, so multi-megabyte lines and
long sessions cost only one line of memory at a time. The agent may be appending while we read:
a last line without its newline that does not parse is a write in progress and ends the read
quietly. Any other corrupt line raises :class:`protocol.errors.EventsFileError` naming the file
and line number (never the line's content).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from protocol.errors import EventsFileError
from protocol.events import SessionEvent, is_compatible_schema_version


def iter_events(path: str | Path, start_seq: int = 1, end_seq: int | None = None) -> Iterator[SessionEvent]:
    """Yield events with ``start_seq <= seq <= end_seq`` in file order.

    Stops at the first event whose seq is greater than ``end_seq`` (the host appends in seq order).
    Lines of an incompatible major ``schema_version`` are skipped. A missing file yields nothing.
    """
    file_path = Path(path)
    try:
        handle = file_path.open("rb")
    except FileNotFoundError:
        return
    with handle:
        line_no = 0
        while True:
            raw = handle.readline()
            if not raw:
                return
            line_no += 1
            complete = raw.endswith(b"\n")
            if not raw.strip():
                continue
            parsed = _parse_line(raw, file_path, line_no, complete)
            if parsed is _PARTIAL:
                # A partial last line: the writer has not finished it yet.
                return
            if not isinstance(parsed, SessionEvent):
                continue  # an event of another major schema version
            event = parsed
            if end_seq is not None and event.seq > end_seq:
                return
            if event.seq >= start_seq:
                yield event


def read_event_range(path: str | Path, start_seq: int, end_seq: int) -> list[SessionEvent]:
    """The events of the inclusive range ``start_seq..end_seq`` as a list (holes are possible)."""
    return list(iter_events(path, start_seq, end_seq))


def last_event_seq(path: str | Path) -> int:
    """Highest seq of a compatible event in the file (0 when there is none)."""
    last = 0
    for event in iter_events(path):
        last = max(last, event.seq)
    return last


_PARTIAL = object()
_SKIPPED = object()


def _parse_line(raw: bytes, path: Path, line_no: int, complete: bool) -> SessionEvent | object:
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        if not complete:
            return _PARTIAL
        raise EventsFileError(str(path), line_no, f"invalid JSON ({type(exc).__name__})") from None
    except RecursionError:
        raise EventsFileError(str(path), line_no, "JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise EventsFileError(str(path), line_no, "not a JSON object")
    version = data.get("schema_version")
    if isinstance(version, str) and not is_compatible_schema_version(version):
        return _SKIPPED
    if data.get("payload") == []:
        # PHP's json_encode writes an empty payload array as ``[]``, not ``{}``.
        data["payload"] = {}
    try:
        return SessionEvent.model_validate(data)
    except ValidationError as exc:
        fields = sorted({".".join(str(p) for p in err["loc"]) for err in exc.errors()})
        raise EventsFileError(str(path), line_no, f"invalid envelope fields {fields!r}") from None
