"""The transcript rows of the events an observe part covers (pure).

Every covered event that carries text (user and assistant messages, tool calls, tool results) gets
one ``omray_transcript`` row, committed with the coverage part that covers it: coverage means "the
Observer was shown these events", and the rows keep them findable whatever the Observer chose to
write down (DESIGN.md invariant 10).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from actors.observer.blocks import event_timestamp
from protocol.errors import EventsFileError, EventsMismatchError, EventsMissingError
from protocol.events import EventWindow, SessionEvent
from protocol.records import TranscriptEntry
from protocol.source_text import event_search_text

logger = logging.getLogger("omray.observer")


def transcript_entries(events: Iterable[SessionEvent], now_local: str) -> list[TranscriptEntry]:
    """One entry per event with searchable text, in seq order; events without text are left out."""
    entries: list[TranscriptEntry] = []
    for event in events:
        text = event_search_text(event)
        if text.strip() == "":
            continue
        entries.append(
            TranscriptEntry(
                session_id=event.run_id,
                seq=event.seq,
                event_type=event.type,
                timestamp=event_timestamp(event.ts, now_local),
                content=text,
            )
        )
    return entries


def entries_in(entries: Sequence[TranscriptEntry], start_seq: int, end_seq: int) -> list[TranscriptEntry]:
    """The entries with ``start_seq <= seq <= end_seq``."""
    return [entry for entry in entries if start_seq <= entry.seq <= end_seq]


class TranscriptReads(Protocol):
    """What a backfill reads of the memory database (``persistence.reads.memory_reader.MemoryReader``)."""

    def transcript_through(self, session_id: str) -> int: ...
    def covered_end(self, session_id: str) -> int: ...


class TranscriptWrites(Protocol):
    """The one write of a backfill (the database's ``Store``)."""

    def backfill_transcript(
        self, session_id: str, entries: Sequence[TranscriptEntry], start_seq: int, through_seq: int, now: str
    ) -> int: ...


def backfill_transcript(
    session_id: str,
    memory: TranscriptReads,
    store: TranscriptWrites,
    read_events: Callable[[int, int], EventWindow],
    now_local: str,
    now_utc: str,
) -> int:
    """Write the transcript rows of a session's covered events that have none yet (coverage written
    before the transcript existed, or by the PHP extension), read again from its events file.

    Returns how many events were read (0 when nothing lagged). The watermark moves to the covered
    end even when the file no longer holds some of those events: what it holds is written, and a
    session is never stuck on a file that was truncated or removed.
    """
    through = memory.transcript_through(session_id)
    covered = memory.covered_end(session_id)
    if covered <= through:
        return 0
    try:
        window = read_events(through + 1, covered)
        events: tuple[SessionEvent, ...] = window.events
    except (OSError, EventsFileError, EventsMissingError, EventsMismatchError) as exc:
        logger.warning(
            "om.transcript.backfill_unreadable",
            extra={"session_id": session_id, "exception_class": type(exc).__name__},
        )
        events = ()
    entries = [entry for entry in transcript_entries(events, now_local) if through < entry.seq <= covered]
    store.backfill_transcript(session_id, entries, through + 1, covered, now_utc)
    return len(events)
