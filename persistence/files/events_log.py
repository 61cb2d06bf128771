"""The node-local logs of shipped events: ``<database>.events/<session>/events.jsonl``.

Written only by the database's StoreActor (one writer, one thread), read like any events file
(:mod:`persistence.files.events_reader`). What to write is decided by the StoreActor
(:func:`actors.store.events_log.append_shipped`: each event once, by seq and content id); the
lines of one shipment go in one ``write``, fsynced before it answers, so a shipment the log
acknowledged survives any crash. A half-written last line (a crash mid-write) is cut off before the next
append. Folders are 0700, files 0600.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from persistence.files.events_reader import iter_unredacted_events, last_event_seq
from persistence.files.file_tail import complete_length_of
from persistence.files.node_disk import check_on_this_node
from persistence.files.private_dirs import make_private_dirs
from protocol.errors import InvalidPayloadError
from protocol.shipping import event_content_id

FILE_MODE: Final = 0o600


def _plain_session_id(session_id: str) -> str:
    if (
        not isinstance(session_id, str)
        or session_id in ("", ".", "..")
        or any(mark in session_id for mark in ("/", "\\", "\0"))
        or len(session_id) > 255
    ):
        raise InvalidPayloadError("a shipped session id must be a plain file name")
    return session_id


class EventLog:
    """The shipped-event logs under one root (one database's ``<database>.events``).

    Not thread-safe: its one caller is the StoreActor's single thread. :meth:`write` puts all of
    its lines on disk before it returns.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._last_seq: dict[str, int] = {}

    def path(self, session_id: str) -> Path:
        """The log of ``session_id`` (which must be a plain file name)."""
        path = self.root / _plain_session_id(session_id) / "events.jsonl"
        check_on_this_node(path)
        return path

    def tail(self, session_id: str) -> int:
        """Seq of the session's last logged event (0 when it has none)."""
        known = self._last_seq.get(session_id)
        if known is None:
            path = self.path(session_id)
            self._repair_tail(path)
            known = last_event_seq(path)
            self._last_seq[session_id] = known
        return known

    def content_ids(self, session_id: str, start_seq: int, end_seq: int) -> dict[int, str]:
        """Content ids of the session's logged events with ``start_seq <= seq <= end_seq``."""
        return {
            event.seq: event_content_id(event.model_dump(mode="json"))
            for event in iter_unredacted_events(self.path(session_id), start_seq, end_seq)
        }

    def write(self, session_id: str, events: Sequence[Mapping[str, Any]], last_seq: int) -> None:
        """Append ``events`` (JSON forms, seqs past the log's last) in one write, fsynced; the log's
        last seq is then ``last_seq``."""
        if not events:
            return
        lines = "".join(json.dumps(dict(event), ensure_ascii=False) + "\n" for event in events)
        self._write(self.path(session_id), lines.encode("utf-8"))
        self._last_seq[session_id] = last_seq

    def _write(self, path: Path, data: bytes) -> None:
        make_private_dirs(path.parent)
        self._repair_tail(path)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def _repair_tail(path: Path) -> None:
        """Cut a half-written last line (a crash mid-append) off the log."""
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return
        with path.open("r+b") as handle:
            complete = complete_length_of(handle, size)
            if complete < size:
                handle.truncate(complete)
                os.fsync(handle.fileno())
