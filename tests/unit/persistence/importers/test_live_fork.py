"""A ``claude --resume <id> --fork-session`` transcript (issue 40 item 13): the new session's file
starts with a copy of the old session's lines (same ``uuid``; the old ``sessionId``, or the new
one), then its own turns. What the project already imported is not imported, so not observed, again.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from persistence.files.events_reader import iter_events
from persistence.importers.live import (
    EVENTS_FILE,
    Mark,
    append_mark,
    read_cursor,
    sync_session,
)
from persistence.importers.live_forks import inherited_prefix
from protocol.source_text import event_search_text
from tests.unit.persistence.importers.helpers import FIXTURES, REAL_TRANSCRIPTS

FIXTURE = FIXTURES / "claude-code-session.jsonl"
REAL = REAL_TRANSCRIPTS / "claude-code" / "claude-code-viewer" / "5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"
NEW_TURNS = ("Now rename the kettle module, please.", "Renamed kettle.py to brew.py and fixed the imports.")


def _sync(sessions: Path, session_id: str, transcript: Path, offset: int | None = None) -> list[str]:
    session_dir = sessions / session_id
    size = transcript.stat().st_size if offset is None else offset
    append_mark(session_dir, Mark(transcript=str(transcript), format="claude-code", offset=size, close=True))
    sync_session(session_dir, session_id)
    return _texts(session_dir)


def _texts(session_dir: Path) -> list[str]:
    if not (session_dir / EVENTS_FILE).exists():
        return []
    return [t for t in (event_search_text(e) for e in iter_events(session_dir / EVENTS_FILE)) if t]


def _fork(original: Path, target: Path, new_session: str, *, keep_session_id: bool) -> int:
    """Write the forked transcript: the original's lines (copied as Claude Code does), then two new
    records; returns the byte length of the copied part."""
    copied = []
    for line in original.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if not keep_session_id and "sessionId" in record:
            record["sessionId"] = new_session
        copied.append(json.dumps(record))
    head = "\n".join(copied) + "\n"
    new = [
        {
            "type": "user",
            "uuid": "fork-u1",
            "sessionId": new_session,
            "timestamp": "2026-07-27T10:00:00Z",
            "message": {"role": "user", "content": NEW_TURNS[0]},
        },
        {
            "type": "assistant",
            "uuid": "fork-a1",
            "sessionId": new_session,
            "timestamp": "2026-07-27T10:00:05Z",
            "message": {
                "id": "msg-fork-1",
                "role": "assistant",
                "model": "claude",
                "content": [{"type": "text", "text": NEW_TURNS[1]}],
            },
        },
    ]
    target.write_text(head + "".join(json.dumps(r) + "\n" for r in new), encoding="utf-8")
    return len(head.encode("utf-8"))


@pytest.mark.parametrize("keep_session_id", [True, False], ids=["old-session-id", "rewritten-session-id"])
@pytest.mark.parametrize("source", ["fixture", "real"])
def test_the_copied_history_of_a_forked_transcript_is_imported_once(
    tmp_path: Path, source: str, keep_session_id: bool
) -> None:
    original = FIXTURE if source == "fixture" else REAL
    if not original.exists():
        pytest.skip(f"the shared real transcripts are absent ({REAL_TRANSCRIPTS})")
    sessions = tmp_path / ".hatfield" / "sessions"
    before = _sync(sessions, "old", original)
    assert before
    forked = tmp_path / "new.jsonl"
    _fork(original, forked, "new", keep_session_id=keep_session_id)
    after = _sync(sessions, "new", forked)
    assert after == [f"User: {NEW_TURNS[0]}", f"Assistant: {NEW_TURNS[1]}"]
    everywhere, old_only = Counter(before + after), Counter(before)
    assert all(everywhere[text] == count for text, count in old_only.items())  # the copy adds none
    seqs = [e.seq for e in iter_events(sessions / "new" / EVENTS_FILE)]
    assert seqs == list(range(1, len(seqs) + 1))


def test_a_fork_synced_while_only_its_copy_is_written_waits_then_imports_its_own_turns_once(
    tmp_path: Path,
) -> None:
    sessions = tmp_path / "sessions"
    before = _sync(sessions, "old", FIXTURE)
    forked = tmp_path / "new.jsonl"
    copied = _fork(FIXTURE, forked, "new", keep_session_id=True)
    assert _sync(sessions, "new", forked, offset=copied) == []
    assert not read_cursor(sessions / "new").spans[0].inherited_settled
    assert _sync(sessions, "new", forked) == [f"User: {NEW_TURNS[0]}", f"Assistant: {NEW_TURNS[1]}"]
    assert read_cursor(sessions / "new").spans[0].inherited_settled
    # a sync that lost its cursor converts again from the first record and finds the same events
    events = (sessions / "new" / EVENTS_FILE).read_bytes()
    (sessions / "new" / "live.cursor.json").unlink()
    _sync(sessions, "new", forked)
    assert (sessions / "new" / EVENTS_FILE).read_bytes() == events
    assert before == _texts(sessions / "old")


def test_a_fork_reported_under_the_old_session_id_adds_only_its_own_turns(tmp_path: Path) -> None:
    # Claude Code has named the old session_id with the forked file (its issue #39355): a second
    # span of the same session, whose copied history that session already holds.
    sessions = tmp_path / "sessions"
    before = _sync(sessions, "old", FIXTURE)
    forked = tmp_path / "new.jsonl"
    _fork(FIXTURE, forked, "new", keep_session_id=True)
    after = _sync(sessions, "old", forked)
    assert after == [*before, f"User: {NEW_TURNS[0]}", f"Assistant: {NEW_TURNS[1]}"]


def test_a_new_session_sharing_no_history_is_imported_whole(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    _sync(sessions, "old", FIXTURE)
    other = tmp_path / "other.jsonl"
    other.write_text(
        FIXTURE.read_text(encoding="utf-8")
        .replace('"uuid": "', '"uuid": "other-')
        .replace('"uuid":"', '"uuid":"other-'),
        encoding="utf-8",
    )
    assert _sync(sessions, "other", other) == _texts(sessions / "old")


@pytest.mark.parametrize(
    ("records", "end", "settled"),
    [
        ([(10, {"type": "user", "uuid": "k1"}), (20, {"type": "assistant", "uuid": "n1"})], 10, True),
        ([(10, {"type": "summary"}), (20, {"type": "user", "uuid": "k1"})], 20, False),
        ([(10, {"type": "user", "uuid": "n1"}), (20, {"type": "user", "uuid": "k1"})], 0, True),
        (
            [
                (10, {"type": "user", "uuid": "k1"}),
                (20, {"type": "system", "uuid": "n2"}),
                (30, {"type": "assistant", "uuid": "k2"}),
            ],
            30,
            False,
        ),
        ([], 0, False),
    ],
)
def test_inherited_prefix(records: list[tuple[int, dict[str, str]]], end: int, settled: bool) -> None:
    assert inherited_prefix(records, {"k1", "k2"}) == (end, settled)
