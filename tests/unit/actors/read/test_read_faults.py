"""The read side under bad input and faults (issue 16: D3, D4, D7, D8, tool cancellation/timeouts)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import actors.read.service as read_service
from actors.read.answers import MAX_ANSWER_DEPTH, TOO_DEEP_TEXT, json_safe
from actors.read.interrupt import CancelToken, ToolInterrupt
from actors.read.service import before_compaction, call_tool, memory_search, memory_status, recall
from cluster.commands.memory_cli import memory_app
from persistence.writers.store import Store
from protocol.errors import StorageError
from protocol.events import BeforeCompactionContext
from protocol.settings import OmSettings
from tests.unit.actors.read.factories import hex_id, observation
from tests.unit.actors.read.helpers import commit

runner = CliRunner()

SESSION = "s1"


def _event_line(seq: int, payload_json: str = '{"text": "hi"}') -> str:
    return (
        f'{{"schema_version": "1.0", "run_id": "{SESSION}", "seq": {seq}, "turn_no": 1, '
        f'"type": "message", "payload": {payload_json}, "ts": "2026-07-26T12:00:00+00:00"}}\n'
    )


@pytest.fixture
def memory(store: Store) -> Store:
    commit(store, [observation("a1", "Build 2510 failed", session_id=SESSION, refs=((SESSION, 1),))])
    return store


@pytest.fixture
def events_file(tmp_path: Path) -> Path:
    path = tmp_path / "events" / SESSION / "events.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(_event_line(1), encoding="utf-8")
    return path


def _paths(events: Path) -> Callable[[str], Path]:
    return lambda _session: events


def _recall(memory: Store, events: Path, **kwargs: object) -> dict[str, object]:
    return recall(memory.db_path, _paths(events), SESSION, {"id": hex_id("a1")}, **kwargs)  # type: ignore[arg-type]


def _cli_recall(memory: Store, tmp_path: Path) -> object:
    return runner.invoke(
        memory_app,
        [
            "recall",
            hex_id("a1"),
            "--session",
            SESSION,
            "--db",
            memory.db_path,
            "--events-dir",
            str(tmp_path / "events"),
        ],
    )


# ------------------------------------------------------------------------------------------ D3


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_recall_on_an_unreadable_events_file_is_a_typed_answer(memory: Store, events_file: Path) -> None:
    events_file.chmod(0)
    try:
        result = _recall(memory, events_file)
        tool = call_tool(
            "recall",
            {"id": hex_id("a1")},
            SESSION,
            db_path=memory.db_path,
            events_path_for=_paths(events_file),
        )
    finally:
        events_file.chmod(0o600)
    assert result == tool
    assert result["ok"] is False and result["error"] == "events_unreadable"
    assert "PermissionError" in str(result["message"])


def test_recall_when_reading_events_fails_is_a_typed_answer(
    memory: Store, events_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The permission case as root would see it if root could be refused: the read raises OSError.
    def refuse(*_args: object, **_kwargs: object) -> Iterator[object]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(read_service, "iter_events", refuse)
    result = _recall(memory, events_file)
    assert result["ok"] is False and result["error"] == "events_unreadable"
    assert "PermissionError" in str(result["message"])


def test_recall_on_an_events_directory_is_a_typed_answer_and_one_cli_line(
    memory: Store, events_file: Path, tmp_path: Path
) -> None:
    events_file.unlink()
    events_file.mkdir()
    result = _recall(memory, events_file)
    assert result["ok"] is False and result["error"] == "events_unreadable"
    cli = _cli_recall(memory, tmp_path)
    assert cli.exit_code == 2  # type: ignore[attr-defined]
    assert cli.exception is None or isinstance(cli.exception, SystemExit)  # type: ignore[attr-defined]
    assert cli.stderr.strip().count("\n") == 0 and "events_unreadable" in cli.stderr  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------ D4


def test_deeply_nested_tool_arguments_are_invalid_arguments(memory: Store, events_file: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    for arguments in (deep, '{"query": ' + deep + "}"):
        result = call_tool(
            "memory_search", arguments, SESSION, db_path=memory.db_path, events_path_for=_paths(events_file)
        )
        assert result["ok"] is False and result["error"] == "invalid_arguments"


def test_a_deeply_nested_events_line_is_events_unreadable(memory: Store, events_file: Path) -> None:
    events_file.write_text(_event_line(1, "[" * 100_000 + "]" * 100_000), encoding="utf-8")
    result = _recall(memory, events_file)
    assert result["ok"] is False and result["error"] == "events_unreadable"
    assert "EventsFileError" in str(result["message"])


# ------------------------------------------------------------------------------------------ D7


@pytest.mark.parametrize(
    ("payload_json", "expected"),
    [
        ('{"v": NaN, "w": [Infinity, -Infinity]}', {"v": "NaN", "w": ["Infinity", "-Infinity"]}),
        ('{"text": "cut \\ud83d here", "\\udc00": 1}', {"text": "cut \ufffd here", "\ufffd": 1}),
    ],
)
def test_recall_is_always_strict_json(
    memory: Store, events_file: Path, tmp_path: Path, payload_json: str, expected: object
) -> None:
    events_file.write_text(_event_line(1, payload_json), encoding="utf-8")
    result = _recall(memory, events_file)
    text = json.dumps(result, allow_nan=False, ensure_ascii=False)
    text.encode("utf-8")  # no lone surrogate left
    events = result["events"]
    assert isinstance(events, list) and events[0]["payload"] == expected
    cli = _cli_recall(memory, tmp_path)
    assert cli.exit_code == 0  # type: ignore[attr-defined]
    assert json.loads(cli.stdout)["events"][0]["payload"] == expected  # type: ignore[attr-defined]


def test_json_safe_copies_deep_values_without_recursion() -> None:
    value: object = float("nan")
    for _ in range(MAX_ANSWER_DEPTH):
        value = [value]
    safe = json_safe(value)
    for _ in range(MAX_ANSWER_DEPTH):
        assert isinstance(safe, list)
        safe = safe[0]
    assert safe == "NaN"
    deeper = json_safe({"a": value})  # one level more: the innermost list no longer fits
    assert isinstance(deeper, dict)
    inner = deeper["a"]
    for _ in range(MAX_ANSWER_DEPTH - 1):
        assert isinstance(inner, list)
        inner = inner[0]
    assert inner == TOO_DEEP_TEXT


def test_recall_of_a_deep_but_readable_payload_prints_from_the_cli(
    memory: Store, events_file: Path, tmp_path: Path
) -> None:
    events_file.write_text(_event_line(1, '{"v": ' + "[" * 900 + "]" * 900 + "}"), encoding="utf-8")
    result = _recall(memory, events_file)
    json.dumps(result, allow_nan=False)
    cli = _cli_recall(memory, tmp_path)
    assert cli.exit_code == 0  # type: ignore[attr-defined]
    assert TOO_DEEP_TEXT in cli.stdout  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------ D8


def _context() -> BeforeCompactionContext:
    return BeforeCompactionContext(
        session_id=SESSION, turn_no=1, trigger="compact_run", required_start_seq=1, required_end_seq=1
    )


def _drop_table(db_path: str, table: str) -> None:
    conn = sqlite3.connect(db_path)
    try:
        conn.execute(f"DROP TABLE {table}")
        conn.commit()
    finally:
        conn.close()


@pytest.fixture(params=["directory", "om_observation", "om_schema_version", "om_active_generation"])
def damaged(request: pytest.FixtureRequest, memory: Store) -> Iterator[str]:
    memory.close()
    path = Path(memory.db_path)
    if request.param == "directory":
        for companion in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            companion.unlink(missing_ok=True)
        path.mkdir()
    else:
        _drop_table(str(path), request.param)
    yield str(path)


def test_a_damaged_store_is_not_empty_memory(damaged: str, events_file: Path, tmp_path: Path) -> None:
    assert before_compaction(damaged, _context()).action == "cancel"
    with pytest.raises(StorageError):
        memory_status(damaged, SESSION, OmSettings(), len)
    answer = call_tool(
        "memory_search", {"query": "2510"}, SESSION, db_path=damaged, events_path_for=_paths(events_file)
    )
    assert answer["ok"] is False and answer["error"] == "storage_unavailable"
    cli = runner.invoke(memory_app, ["search", "2510", "--db", damaged])
    assert cli.exit_code == 2
    status = runner.invoke(memory_app, ["status", "--session", SESSION, "--db", damaged])
    assert status.exit_code == 2


def test_a_database_never_created_is_still_empty_memory(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere" / "om.sqlite")
    assert before_compaction(missing, _context()).action == "continue"
    assert memory_search(missing, {"query": "2510"})["count"] == 0
    text, _data = memory_status(missing, SESSION, OmSettings(), len)
    assert "0 recorded" in text


def test_an_empty_database_file_is_still_empty_memory(tmp_path: Path) -> None:
    path = tmp_path / "om.sqlite"
    sqlite3.connect(path).close()  # a file with no tables yet (a writer about to migrate)
    assert before_compaction(str(path), _context()).action == "continue"


# ---------------------------------------------------------------------- cancellation and timeouts


class _Ticks:
    """A fake monotonic clock that advances one second per reading."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _never_read(_session: str) -> Path:
    raise AssertionError("a cancelled recall must not read events")


def test_a_cancelled_token_stops_both_tools_before_they_start(memory: Store) -> None:
    token = CancelToken()
    token.cancel()
    interrupt = ToolInterrupt.start(token=token)
    search = memory_search(memory.db_path, {"query": "2510"}, interrupt=interrupt)
    assert search == {"cancelled": True, "message": "Cancelled before search started."}
    answer = recall(memory.db_path, _never_read, SESSION, {"id": hex_id("a1")}, interrupt=interrupt)
    assert answer == {"cancelled": True, "message": "Cancelled before recall started."}
    via_tool = call_tool(
        "recall",
        {"id": hex_id("a1")},
        SESSION,
        db_path=memory.db_path,
        events_path_for=_never_read,
        interrupt=interrupt,
    )
    assert via_tool["cancelled"] is True


def test_a_passed_deadline_answers_timed_out_at_the_next_checkpoint(memory: Store, events_file: Path) -> None:
    # start() reads the clock once (t=1, deadline 1+2.5=3.5); checkpoints read t=2, 3, then 4.
    interrupt = ToolInterrupt.start(timeout_seconds=2.5, clock=_Ticks())
    answer = _recall(memory, events_file, interrupt=interrupt)
    assert answer == {
        "timed_out": True,
        "timeout_seconds": 2.5,
        "message": "Timed out before observation lookup.",
    }
    search = memory_search(
        memory.db_path, {"query": "2510"}, interrupt=ToolInterrupt.start(timeout_seconds=1.5, clock=_Ticks())
    )
    assert search["timed_out"] is True and search["message"] == "Timed out before database open."


def test_cancelling_while_reading_events_stops_the_read(memory: Store, events_file: Path) -> None:
    events_file.write_text("".join(_event_line(seq) for seq in range(1, 4)), encoding="utf-8")
    token = CancelToken()
    checks = {"count": 0}

    class _CancelAfterReading(ToolInterrupt):
        def check(self, checkpoint: str) -> dict[str, object] | None:
            checks["count"] += 1
            if checkpoint == "while reading session events":
                token.cancel()
            return super().check(checkpoint)

    answer = _recall(memory, events_file, interrupt=_CancelAfterReading(token=token))
    assert answer == {"cancelled": True, "message": "Cancelled while reading session events."}
    assert checks["count"] > 1


def test_no_interrupt_and_a_generous_deadline_change_nothing(memory: Store, events_file: Path) -> None:
    plain = _recall(memory, events_file)
    timed = _recall(memory, events_file, interrupt=ToolInterrupt.start(timeout_seconds=1e9, clock=_Ticks()))
    assert plain == timed and plain["ok"] is True
    assert ToolInterrupt.start(timeout_seconds=0).deadline is None
