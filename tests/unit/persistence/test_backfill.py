"""Coverage written before the transcript existed (or by the PHP extension) gets its transcript rows
from ``events.jsonl``: through the session's next observe job, or an index job that knows the root."""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path

from actors.indexer.actor import backfill_transcripts
from actors.observer.transcript import backfill_transcript
from actors.read.service import memory_search
from persistence.files.events_reader import read_event_window
from persistence.reads.memory_reader import MemoryReader
from persistence.writers.store import Store
from tests.unit.persistence.builders import make_observation, make_part
from tests.unit.persistence.test_nothing_observed_is_lost import write_session

TEXTS = [
    "the kiln needs a new thermocouple",
    "order it from the pottery supplier",
    "glaze firing at cone six",
]


def legacy_store(tmp_path: Path, session: str) -> tuple[Path, Path]:
    """A database whose coverage of seqs 1-4 was committed before the transcript existed."""
    db, events = tmp_path / "om.sqlite", tmp_path / "sessions" / session / "events.jsonl"
    write_session(events, TEXTS, session)
    Store(db).commit_observer_part(
        make_part(session, 1, 4), [make_observation(session, "Pottery chat", seq=1)]
    )
    with sqlite3.connect(db) as conn:  # what an older omray or the PHP extension leaves: no watermark
        conn.execute("DELETE FROM omray_transcript_through")
    return db, events


def test_an_observe_job_backfills_its_session_once(tmp_path: Path) -> None:
    db, events = legacy_store(tmp_path, "old")
    assert memory_search(db, {"query": "cone six", "mode": "exact"})["count"] == 0  # not findable yet
    read = functools.partial(read_event_window, events)
    reader, store = MemoryReader(db), Store(db)

    assert (
        backfill_transcript("old", reader, store, read, "2026-11-30 10:00", "2026-11-30T10:00:00+00:00") == 4
    )
    assert reader.transcript_through("old") == 4
    found = memory_search(db, {"query": "cone six", "mode": "exact"})
    assert found["count"] == 1 and found["results"][0]["source"]["seq_start"] == 3  # type: ignore[index]
    # Nothing lags any more: a second call reads nothing.
    assert (
        backfill_transcript("old", reader, store, read, "2026-11-30 10:00", "2026-11-30T10:00:00+00:00") == 0
    )


def test_an_index_job_backfills_lagging_sessions_from_the_events_root(tmp_path: Path) -> None:
    db, _events = legacy_store(tmp_path, "old")
    assert MemoryReader(db).transcript_lagging_sessions(10) == ["old"]
    assert backfill_transcripts(str(db), str(tmp_path / "sessions"), Store(db)) == 1
    assert MemoryReader(db).transcript_lagging_sessions(10) == []
    assert memory_search(db, {"query": "pottery supplier", "mode": "exact"})["count"] == 1


def test_a_missing_events_file_never_stalls_the_backfill(tmp_path: Path) -> None:
    db, events = legacy_store(tmp_path, "gone")
    events.unlink()
    reader, store = MemoryReader(db), Store(db)
    read = functools.partial(read_event_window, events)
    assert (
        backfill_transcript("gone", reader, store, read, "2026-11-30 10:00", "2026-11-30T10:00:00+00:00") == 0
    )
    assert reader.transcript_through("gone") == 4 and reader.transcript_lagging_sessions(10) == []
