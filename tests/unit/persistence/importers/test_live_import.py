"""Live import of a growing transcript: marks, the cursor, append-only events, concurrent syncs."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persistence.files.events_reader import iter_events
from persistence.importers import import_transcript
from persistence.importers.live import (
    EVENTS_FILE,
    Boundary,
    Mark,
    append_mark,
    close_points,
    complete_length,
    convert_through,
    mark_dispatched,
    pending_after_dispatch,
    read_cursor,
    read_marks,
    sync_session,
)
from tests.unit.persistence.importers.helpers import FIXTURES

SOURCE = FIXTURES / "claude-code-session.jsonl"
DATA = SOURCE.read_bytes()
LINE_ENDS = [index + 1 for index, byte in enumerate(DATA) if byte == 0x0A]
SESSION = "live-session"


def _mark(transcript: Path, offset: int, close: bool) -> Mark:
    return Mark(transcript=str(transcript), format="claude-code", offset=offset, close=close)


def _events(session_dir: Path) -> list[dict[str, object]]:
    path = session_dir / EVENTS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_close_points_never_move_backwards_and_merge_repeats() -> None:
    marks = [
        _mark(Path("t"), 10, False),
        _mark(Path("t"), 20, True),
        _mark(Path("t"), 20, True),
        _mark(Path("t"), 5, True),  # a shorter file later: counts at the furthest offset
        _mark(Path("t"), 30, False),
    ]
    assert close_points(marks) == (30, (20,))
    assert close_points([]) == (0, ())


def test_pending_after_dispatch_keeps_only_later_turns() -> None:
    pending = (Boundary(end_seq=4, turn_no=1), Boundary(end_seq=9, turn_no=2))
    assert pending_after_dispatch(pending, 4) == (Boundary(end_seq=9, turn_no=2),)
    assert pending_after_dispatch(pending, 9) == ()


def test_complete_length_stops_at_the_last_newline(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    assert complete_length(path) == 0
    path.write_bytes(b'{"a": 1}\n{"b": ')
    assert complete_length(path) == 9
    path.write_bytes(b"no newline")
    assert complete_length(path) == 0


def test_one_final_close_equals_the_batch_import(tmp_path: Path) -> None:
    out = tmp_path / "batch.jsonl"
    import_transcript("claude-code", SOURCE, SESSION, out)
    conversion = convert_through("claude-code", SOURCE, SESSION, len(DATA), [len(DATA)], 0)
    assert list(conversion.lines) == out.read_text(encoding="utf-8").splitlines(keepends=True)
    assert [b.end_seq for b in conversion.boundaries] == [
        e["seq"] for e in map(json.loads, conversion.lines) if e["type"] == "agent_end"
    ]


def test_a_half_written_last_line_is_never_read(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    session_dir = tmp_path / "s"
    cut = LINE_ENDS[6] + 7  # seven bytes into line 8
    transcript.write_bytes(DATA[:cut])
    append_mark(session_dir, _mark(transcript, complete_length(transcript), close=False))
    sync_session(session_dir, SESSION)
    transcript.write_bytes(DATA)
    append_mark(session_dir, _mark(transcript, complete_length(transcript), close=True))
    sync_session(session_dir, SESSION)
    whole = convert_through("claude-code", SOURCE, SESSION, len(DATA), [len(DATA)], 0)
    assert _events(session_dir) == [json.loads(line) for line in whole.lines]


def test_repeated_syncs_append_nothing_and_a_torn_events_tail_is_repaired(tmp_path: Path) -> None:
    session_dir = tmp_path / "s"
    append_mark(session_dir, _mark(SOURCE, LINE_ENDS[9], close=True))
    first = sync_session(session_dir, SESSION)
    events = (session_dir / EVENTS_FILE).read_bytes()
    assert sync_session(session_dir, SESSION) == first
    assert (session_dir / EVENTS_FILE).read_bytes() == events
    # A crash mid-append left half a line and the cursor was not written: the next sync cuts the
    # half line, writes the missing events once and still finds the turns to dispatch.
    (session_dir / EVENTS_FILE).write_bytes(events[: len(events) // 2 + 3])
    (session_dir / "live.cursor.json").unlink()
    append_mark(session_dir, _mark(SOURCE, LINE_ENDS[9], close=True))
    again = sync_session(session_dir, SESSION)
    assert (session_dir / EVENTS_FILE).read_bytes() == events
    assert again.pending == first.pending and again.last_seq == first.last_seq
    assert [e.seq for e in iter_events(session_dir / EVENTS_FILE)] == list(range(1, first.last_seq + 1))


def test_dispatched_turns_leave_the_cursor(tmp_path: Path) -> None:
    session_dir = tmp_path / "s"
    append_mark(session_dir, _mark(SOURCE, len(DATA), close=True))
    cursor = sync_session(session_dir, SESSION)
    assert cursor.pending
    assert mark_dispatched(session_dir, cursor.pending[-1].end_seq).pending == ()
    after = read_cursor(session_dir)
    assert after == cursor.model_copy(update={"pending": ()})
    assert (after.marks_applied, after.last_seq, after.pending) == (1, cursor.last_seq, ())


def test_a_flush_is_cleared_only_by_its_own_dispatch(tmp_path: Path) -> None:
    session_dir = tmp_path / "s"
    append_mark(session_dir, _mark(SOURCE, len(DATA), close=True))
    append_mark(
        session_dir,
        Mark(transcript=str(SOURCE), format="claude-code", offset=len(DATA), close=True, flush="compaction"),
    )
    asked = sync_session(session_dir, SESSION)
    assert (asked.flush, asked.flush_mark) == ("compaction", 2)
    # The session ends while the compaction flush is being sent: that dispatch clears only its own.
    append_mark(
        session_dir,
        Mark(transcript=str(SOURCE), format="claude-code", offset=len(DATA), close=True, flush="session_end"),
    )
    assert sync_session(session_dir, SESSION).flush == "session_end"
    assert mark_dispatched(session_dir, asked.pending[-1].end_seq, asked.flush_mark).flush == "session_end"
    assert mark_dispatched(session_dir, 0, 3).flush is None


def test_a_torn_mark_line_is_skipped(tmp_path: Path) -> None:
    session_dir = tmp_path / "s"
    append_mark(session_dir, _mark(SOURCE, LINE_ENDS[3], close=True))
    with (session_dir / "live.marks.jsonl").open("ab") as handle:
        handle.write(b'{"transcript": "x", "for')
    assert read_marks(session_dir) == [_mark(SOURCE, LINE_ENDS[3], close=True)]


steps = st.lists(
    st.tuples(st.integers(0, len(LINE_ENDS) - 1), st.booleans(), st.booleans()), min_size=1, max_size=12
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps)
def test_growing_transcript_gives_one_append_only_event_log(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, bool, bool]]
) -> None:
    """Whatever the marks and sync calls: the file is a prefix of the conversion of all marks so far,
    seqs count 1..N, and every turn that ended is pending exactly once until dispatched."""
    root = tmp_path_factory.mktemp("live")
    transcript, session_dir = root / "t.jsonl", root / "s"
    written = 0
    marks: list[Mark] = []
    dispatched: list[int] = []
    for line_index, close, sync_now in steps:
        written = max(written, LINE_ENDS[line_index])
        transcript.write_bytes(DATA[: written + 5])  # plus the start of the next line, half-written
        mark = _mark(transcript, complete_length(transcript), close)
        append_mark(session_dir, mark)
        marks.append(mark)
        if not sync_now:
            continue
        cursor = sync_session(session_dir, SESSION)
        target, closes = close_points(marks)
        expected = convert_through("claude-code", transcript, SESSION, target, closes, 0)
        assert _events(session_dir) == [json.loads(line) for line in expected.lines]
        assert [e["seq"] for e in _events(session_dir)] == list(range(1, len(expected.lines) + 1))
        ends = [e["seq"] for e in _events(session_dir) if e["type"] == "agent_end"]
        pending = [b.end_seq for b in cursor.pending]
        assert pending == sorted(set(pending)) and not set(pending) & set(dispatched)
        assert sorted(dispatched + pending) == ends
        if pending and close:  # dispatch now and then, as the background process does
            dispatched.extend(pending)
            mark_dispatched(session_dir, pending[-1])


def _sync_worker(session_dir: str, rounds: int) -> None:
    for _ in range(rounds):
        sync_session(Path(session_dir), SESSION)


def test_concurrent_syncs_from_several_processes_append_each_event_once(tmp_path: Path) -> None:
    session_dir = tmp_path / "s"
    for end in LINE_ENDS[::3]:
        append_mark(session_dir, _mark(SOURCE, end, close=True))
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_sync_worker, args=(str(session_dir), 5)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for end in LINE_ENDS[1::3]:
        append_mark(session_dir, _mark(SOURCE, end, close=False))
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    cursor = sync_session(session_dir, SESSION)
    target, closes = close_points(read_marks(session_dir))
    expected = convert_through("claude-code", SOURCE, SESSION, target, closes, 0)
    assert _events(session_dir) == [json.loads(line) for line in expected.lines]
    assert [b.end_seq for b in cursor.pending] == [b.end_seq for b in expected.boundaries]
