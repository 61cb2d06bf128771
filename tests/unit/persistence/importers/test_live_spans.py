"""Several transcripts per session, rewritten and truncated transcripts, non-regular files.

A session first seen with ``a.jsonl`` and then named with ``b.jsonl`` used to read ``a`` at ``b``'s
offset and stall on "malformed transcript line"; a rewritten transcript blended old and new turns;
a FIFO as transcript hung whoever read it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.commands import hook_fast
from persistence.importers.live import (
    EVENTS_FILE,
    append_mark,
    complete_length,
    convert_through,
    read_cursor,
    sync_session,
)
from persistence.importers.live_spans import FileView, Mark, Span, assign_marks, fold_marks, renumber
from tests.unit.persistence.importers.helpers import FIXTURES

SESSION = "s1"
SOURCE = FIXTURES / "claude-code-session.jsonl"
DATA = SOURCE.read_bytes()
LINE_ENDS = [index + 1 for index, byte in enumerate(DATA) if byte == 0x0A]


def _record_id(kind: str, text: str, n: int) -> str:
    # Claude Code's record ids are unique (random UUIDs): one id in two transcripts is a copied line.
    return f"{kind}{n}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def _user(text: str, n: int) -> bytes:
    record = {
        "type": "user",
        "uuid": _record_id("u", text, n),
        "timestamp": f"2026-03-03T14:{n % 60:02d}:00Z",
        "message": {"role": "user", "content": text},
    }
    return (json.dumps(record) + "\n").encode()


def _assistant(text: str, n: int) -> bytes:
    record = {
        "type": "assistant",
        "uuid": _record_id("a", text, n),
        "timestamp": f"2026-03-03T14:{n % 60:02d}:30Z",
        "message": {
            "id": f"msg{n}",
            "role": "assistant",
            "model": "m",
            "content": [{"type": "text", "text": text}],
        },
    }
    return (json.dumps(record) + "\n").encode()


def _turn(tag: str, n: int) -> bytes:
    return _user(f"ask {tag}", n) + _assistant(f"answer {tag}", n)


def _mark(path: Path, close: bool = True, offset: int | None = None) -> Mark:
    size = complete_length(path) if offset is None else offset
    return Mark(transcript=str(path), format="claude-code", offset=size, close=close)


def _events(session_dir: Path) -> list[dict[str, object]]:
    path = session_dir / EVENTS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _texts(events: list[dict[str, object]]) -> list[str]:
    found: list[str] = []
    for event in events:
        payload = event["payload"]
        assert isinstance(payload, dict)
        if event["type"] == "agent_command_applied":
            found.append(payload["text"])
        elif event["type"] == "llm_step_completed":
            found.append(payload["assistant_message"]["content"])
    return found


def _check_numbering(events: list[dict[str, object]]) -> None:
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    turns = [e["turn_no"] for e in events]
    assert turns == sorted(turns)


# ------------------------------------------------------------------------- regressions


def test_a_second_transcript_is_read_from_its_own_offset(tmp_path: Path) -> None:
    a, b, session_dir = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "s"
    a.write_bytes(_turn("a1", 1))
    append_mark(session_dir, _mark(a))
    sync_session(session_dir, SESSION)
    # b is longer than a: b's offset falls in the middle of nothing a holds.
    b.write_bytes(_turn("b1", 2) + _turn("b2" + "x" * 300, 3))
    append_mark(session_dir, _mark(b))
    cursor = sync_session(session_dir, SESSION)
    assert cursor.problems == ()
    events = _events(session_dir)
    _check_numbering(events)
    assert _texts(events) == [
        "ask a1",
        "answer a1",
        "ask b1",
        "answer b1",
        "ask b2" + "x" * 300,
        "answer b2" + "x" * 300,
    ]
    assert [s.transcript for s in cursor.spans] == [str(a), str(b)]
    assert [(p.end_seq, p.turn_no) for p in cursor.pending] == [(3, 1), (6, 2), (9, 3)]


def test_a_session_going_back_to_its_first_transcript_goes_on_where_it_stopped(tmp_path: Path) -> None:
    a, b, session_dir = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "s"
    a.write_bytes(_turn("a1", 1))
    append_mark(session_dir, _mark(a))
    b.write_bytes(_turn("b1", 2))
    append_mark(session_dir, _mark(b))
    sync_session(session_dir, SESSION)
    with a.open("ab") as handle:
        handle.write(_turn("a2", 3))
    append_mark(session_dir, _mark(a))
    cursor = sync_session(session_dir, SESSION)
    events = _events(session_dir)
    _check_numbering(events)
    assert _texts(events) == ["ask a1", "answer a1", "ask b1", "answer b1", "ask a2", "answer a2"]
    assert cursor.problems == () and len(cursor.spans) == 2


def test_a_rewritten_transcript_starts_a_new_span_and_never_blends(tmp_path: Path) -> None:
    a, session_dir = tmp_path / "a.jsonl", tmp_path / "s"
    a.write_bytes(_user("ask old", 1))  # an open turn: its answer is still to come
    append_mark(session_dir, _mark(a, close=False))
    sync_session(session_dir, SESSION)
    a.write_bytes(_assistant("answer new", 2) + _turn("new2", 3))  # replaced, not appended
    append_mark(session_dir, _mark(a))
    cursor = sync_session(session_dir, SESSION)
    events = _events(session_dir)
    _check_numbering(events)
    assert _texts(events) == ["ask old", "answer new", "ask new2", "answer new2"]
    old_turn = events[0]["turn_no"]
    # the new span's first answer is its own turn: never the answer to the old question
    assert all(e["turn_no"] != old_turn for e in events[1:])
    assert [s.ended for s in cursor.spans] == ["rewritten", None]
    assert cursor.spans[1].first_seq == 2


def test_a_truncated_transcript_starts_a_new_span(tmp_path: Path) -> None:
    a, session_dir = tmp_path / "a.jsonl", tmp_path / "s"
    a.write_bytes(_turn("one", 1) + _turn("two", 2))
    append_mark(session_dir, _mark(a))
    sync_session(session_dir, SESSION)
    a.write_bytes(_turn("three", 3))
    append_mark(session_dir, _mark(a))
    cursor = sync_session(session_dir, SESSION)
    assert _texts(_events(session_dir)) == [
        "ask one",
        "answer one",
        "ask two",
        "answer two",
        "ask three",
        "answer three",
    ]
    assert [s.ended for s in cursor.spans] == ["truncated", None]


def _returns_soon(call: Callable[[], object]) -> object:
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(call()), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "blocked on a non-regular file"
    return result[0] if result else None


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_non_regular_transcript_is_refused_without_blocking(tmp_path: Path, kind: str) -> None:
    a, session_dir = tmp_path / "a.jsonl", tmp_path / "s"
    strange = tmp_path / "strange.jsonl"
    if kind == "fifo":
        os.mkfifo(strange)
    elif kind == "directory":
        strange.mkdir()
    else:
        strange = Path("/dev/zero")
    a.write_bytes(_turn("a1", 1))
    append_mark(session_dir, Mark(transcript=str(strange), format="claude-code", offset=500, close=True))
    append_mark(session_dir, _mark(a))
    cursor = _returns_soon(lambda: sync_session(session_dir, SESSION))
    assert cursor is not None
    assert any("not a regular file" in problem and str(strange) in problem for problem in cursor.problems)
    assert _texts(_events(session_dir)) == ["ask a1", "answer a1"]  # the session goes on
    assert _returns_soon(lambda: complete_length(strange)) == 0


def test_a_fifo_named_by_a_hook_never_blocks_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    monkeypatch.setattr(hook_fast, "start_dispatcher", lambda project: None)
    for name in ("Stop", "SessionStart", "PreCompact"):
        event = {
            "session_id": SESSION,
            "hook_event_name": name,
            "transcript_path": str(fifo),
            "source": "resume",
        }
        _returns_soon(lambda event=event: hook_fast.claude_code(json.dumps(event), str(tmp_path)))
    assert _returns_soon(lambda: hook_fast.complete_length(str(fifo))) == 0
    assert _returns_soon(lambda: hook_fast.transcript_lags(str(fifo), 10, "hello")) is False
    assert _returns_soon(lambda: hook_fast.resume_needs_memory(str(fifo))) is False
    # Codex: a FIFO named like the thread's rollout
    day = tmp_path / "codex" / "sessions" / "2026" / "03" / "04"
    day.mkdir(parents=True)
    os.mkfifo(day / "rollout-2026-03-04T10-00-00-thread1.jsonl")
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    note = json.dumps({"type": "agent-turn-complete", "thread-id": "thread1"})
    _returns_soon(lambda: hook_fast.codex(note, str(tmp_path)))
    assert not (tmp_path / ".hatfield" / "sessions" / "thread1").exists()


def test_a_bad_line_in_one_transcript_holds_back_only_its_own_span(tmp_path: Path) -> None:
    a, b, session_dir = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "s"
    a.write_bytes(_turn("a1", 1) + b"{not json\n")
    b.write_bytes(_turn("b1", 2))
    append_mark(session_dir, _mark(a))
    append_mark(session_dir, _mark(b))
    cursor = sync_session(session_dir, SESSION)
    assert (
        len(cursor.problems) == 1 and "line 3" in cursor.problems[0] and "not json" not in cursor.problems[0]
    )
    assert _texts(_events(session_dir)) == ["ask b1", "answer b1"]
    a.write_bytes(_turn("a1", 1) + _turn("a2", 3))  # repaired (a rewrite of a span that read nothing)
    cursor = sync_session(session_dir, SESSION)  # no new mark: the waiting span is tried again
    assert cursor.problems == ()
    # a's mark offset still bounds what is read: through its first turn and the repaired line
    assert _texts(_events(session_dir))[:2] == ["ask b1", "answer b1"]
    assert "ask a1" in _texts(_events(session_dir))
    _check_numbering(_events(session_dir))


def test_a_cursor_from_before_spans_goes_on_as_one_span(tmp_path: Path) -> None:
    session_dir = tmp_path / "s"
    append_mark(session_dir, _mark(SOURCE, offset=LINE_ENDS[9]))
    first = sync_session(session_dir, SESSION)
    legacy = {
        "marks_applied": first.marks_applied,
        "last_seq": first.last_seq,
        "pending": [],
        "flush": None,
        "flush_mark": 0,
    }
    (session_dir / "live.cursor.json").write_text(json.dumps(legacy))
    append_mark(session_dir, _mark(SOURCE, offset=len(DATA)))
    sync_session(session_dir, SESSION)
    whole = convert_through("claude-code", SOURCE, SESSION, len(DATA), [LINE_ENDS[9], len(DATA)], 0)
    assert _events(session_dir) == [json.loads(line) for line in whole.lines]
    assert read_cursor(session_dir).spans[0].emitted == len(whole.lines)


# ------------------------------------------------------------------------- pure core


def test_folded_marks_never_read_past_the_complete_length_and_keep_their_closes() -> None:
    marks = [
        Mark(transcript=t, format="claude-code", offset=o, close=c)
        for t, o, c in [("a", 10, True), ("b", 99, True), ("a", 50, True), ("a", 40, False)]
    ]
    spans = (Span(transcript="a", format="claude-code", first_mark=0),)
    folded = fold_marks(spans, 0, marks[:3], complete=30)  # the file shrank below the second mark
    assert (folded.furthest, folded.closes, folded.next_mark) == (30, (10, 30), 3)
    again = fold_marks((folded,), 0, marks, complete=100)  # a later, lower mark never moves back
    assert (again.furthest, again.closes, again.next_mark) == (40, (10, 30), 4)


def test_assign_marks_opens_one_span_per_transcript_and_a_new_one_after_a_rewrite() -> None:
    marks = [Mark(transcript=t, format="claude-code", offset=5, close=True) for t in ("a", "b", "a")]
    first = assign_marks((), marks, 0, {"a": FileView("regular", 5), "b": FileView("regular", 5)})
    assert [(s.transcript, s.first_mark) for s in first.spans] == [("a", 0), ("b", 1)]
    read = tuple(s.model_copy(update={"read_to": 5, "fingerprint": "x"}) for s in first.spans)
    later = [*marks, Mark(transcript="a", format="claude-code", offset=9, close=True)]
    again = assign_marks(read, later, 3, {"a": FileView("regular", 9, "changed")})
    assert [(s.transcript, s.first_mark, s.ended) for s in again.spans] == [
        ("a", 0, "rewritten"),
        ("b", 1, None),
        ("a", 3, None),
    ]
    assert again.to_convert == (2,)


def test_renumber_gives_a_continued_turn_a_new_number_after_another_span() -> None:
    def line(seq: int, turn: int, kind: str = "agent_command_applied") -> str:
        return json.dumps({"seq": seq, "turn_no": turn, "type": kind}) + "\n"

    span = Span(
        transcript="a", format="claude-code", first_mark=0, emitted=1, last_local_turn=1, last_session_turn=1
    )
    emission = renumber([line(1, 1), line(2, 1, "agent_end")], span, last_seq=5, last_turn=3)
    assert [json.loads(x)["seq"] for x in emission.lines] == [6]
    assert emission.end_turns == ((6, 4),) and emission.last_turn == 4


# ------------------------------------------------------------------------- property

OPS = st.lists(
    st.tuples(
        st.sampled_from(["append"] * 3 + ["rewrite", "truncate", "delete"] + ["mark"] * 2 + ["sync"]),
        st.integers(0, 2),  # which transcript
        st.booleans(),  # close
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_any_appends_rewrites_truncations_and_switches_keep_the_events_exact(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, bool]]
) -> None:
    """Over several transcripts: nothing converted twice, nothing appended lost, no turn mixes two
    spans, seqs 1..N, turns never go down, and the events file only grows."""
    root = tmp_path_factory.mktemp("spans")
    session_dir = root / "s"
    files = [root / f"t{n}.jsonl" for n in range(3)]
    generation = [0, 0, 0]
    content: list[list[str]] = [[], [], []]  # tags of the turns each file holds now
    counter = 0
    previous = b""

    def write(n: int) -> None:
        data = b"".join(_turn(tag, i) for i, tag in enumerate(content[n]))
        files[n].write_bytes(data)

    def sync() -> None:
        nonlocal previous
        sync_session(session_dir, SESSION)
        raw = (session_dir / EVENTS_FILE).read_bytes() if (session_dir / EVENTS_FILE).exists() else b""
        assert raw.startswith(previous)  # append-only
        previous = raw
        events = _events(session_dir)
        _check_numbering(events)
        texts = _texts(events)
        assert len(texts) == len(set(texts))  # nothing converted twice (every tag is unique)
        by_turn: dict[object, set[str]] = {}
        for event, text in zip([e for e in events if e["type"] != "agent_end"], texts, strict=True):
            by_turn.setdefault(event["turn_no"], set()).add(text.split(" ", 1)[1].rsplit("-", 1)[0])
        assert all(len(origins) == 1 for origins in by_turn.values())  # no turn of two spans

    for op, n, close in ops:
        if op == "append":
            counter += 1
            content[n].append(f"f{n}g{generation[n]}-{counter}")
            write(n)
        elif op in ("rewrite", "truncate") and content[n]:
            generation[n] += 1
            counter += 1
            kept = 1 if op == "rewrite" else max(0, len(content[n]) - 1)
            content[n] = [f"f{n}g{generation[n]}-{counter + i}" for i in range(kept)]
            counter += kept
            write(n)
        elif op == "delete" and files[n].exists():  # the file goes away; a later append starts it anew
            generation[n] += 1
            content[n] = []
            files[n].unlink()
        elif op == "mark" and files[n].exists():
            append_mark(session_dir, _mark(files[n], close))
        elif op == "sync":
            sync()
    # The agent closes every transcript once more: everything each holds now is in the events.
    for n in range(3):
        if files[n].exists():
            append_mark(session_dir, _mark(files[n], True))
    sync()
    texts = set(_texts(_events(session_dir)))
    for n in range(3):
        for tag in content[n]:
            assert f"ask {tag}" in texts and f"answer {tag}" in texts


def test_the_stop_hook_still_imports_nothing_heavy(tmp_path: Path) -> None:
    import subprocess
    import sys

    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes(_turn("q", 1))
    event = {"session_id": SESSION, "hook_event_name": "Stop", "transcript_path": str(transcript)}
    script = (
        "import json, sys\n"
        "from cluster.commands import hook_fast\n"
        "hook_fast.start_dispatcher = lambda project: None\n"
        f"hook_fast.claude_code({json.dumps(json.dumps(event))}, {str(tmp_path)!r})\n"
        "heavy = {'pydantic', 'sqlalchemy', 'ray', 'typer', 'persistence', 'protocol', 'actors'}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))\n"
    )
    root = Path(__file__).resolve().parents[4]
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=root, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # Of the project's packages only the standard-library tail count is loaded (test_layout checks it).
    assert json.loads(result.stdout) == ["persistence", "persistence.files", "persistence.files.file_tail"]
    assert (tmp_path / ".hatfield" / "sessions" / SESSION / "live.marks.jsonl").exists()


def test_a_crash_between_append_and_cursor_write_appends_nothing_twice(tmp_path: Path) -> None:
    a, b, session_dir = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "s"
    a.write_bytes(_turn("a1", 1))
    append_mark(session_dir, _mark(a))
    sync_session(session_dir, SESSION)
    saved = (session_dir / "live.cursor.json").read_bytes()
    b.write_bytes(_turn("b1", 2))
    with a.open("ab") as handle:
        handle.write(_turn("a2", 3))
    append_mark(session_dir, _mark(b))
    append_mark(session_dir, _mark(a))
    done = sync_session(session_dir, SESSION)
    events = (session_dir / EVENTS_FILE).read_bytes()
    (session_dir / "live.cursor.json").write_bytes(saved)  # the events were appended, the cursor lost
    again = sync_session(session_dir, SESSION)
    assert (session_dir / EVENTS_FILE).read_bytes() == events
    assert again.pending == done.pending and again.last_seq == done.last_seq and again.spans == done.spans
