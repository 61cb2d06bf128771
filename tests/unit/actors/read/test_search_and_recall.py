"""memory_search (exact) and recall through read_service, on a real database (reference §13)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import actors.read.service as read_service
from actors.read.service import call_tool, memory_search, recall
from persistence.search.request import SearchRequest
from persistence.writers.store import Store
from tests.unit.actors.read.factories import hex_id, observation, reflection
from tests.unit.actors.read.helpers import commit, promote


@pytest.fixture
def memory(store: Store) -> Store:
    commit(store, [observation("a1", "Build 2510 failed", timestamp="2026-09-11 13:00", session_id="s1")])
    commit(store, [observation("a2", "Fixed build 2510", timestamp="2026-09-11 12:00", session_id="s1")])
    commit(store, [observation("a3", "Saw 2510 first", timestamp="2026-09-10 01:00", session_id="s2")])
    commit(store, [observation("a4", "Coverage reached 100% on tool_name parsing", session_id="s2")])
    commit(store, [observation("a5", "Coverage reached 1000 on toolXname parsing", session_id="s2")])
    commit(store, [observation("a6", "the alphatool works", session_id="s2")])
    promote(
        store,
        "s1",
        [
            reflection(
                "b1", "Release 2510 is durable", created_at="2026-09-11T08:15:30+00:00", session_id="s1"
            )
        ],
        [],
        1,
        completed_at="2026-09-11T08:15:30+00:00",
    )
    return store


def _ids(result: Mapping[str, Any]) -> list[str]:
    return [item["id"][:2] for item in result["results"]]


def test_search_covers_all_sessions_newest_first(memory: Store) -> None:
    result = memory_search(memory.db_path, {"query": "2510"})
    assert result["ok"] is True and result["count"] == 4 and result["truncated"] is False
    assert _ids(result) == ["a1", "a2", "b1", "a3"]  # 13:00 obs, 12:00 obs, 08:15 reflection, 09-10 obs
    assert {item["session_id"] for item in result["results"]} == {"s1", "s2"}
    limited = memory_search(memory.db_path, {"query": "2510", "limit": 1})
    assert limited["count"] == 1 and limited["truncated"] is True


def test_percent_and_underscore_match_literally_and_case_folds(memory: Store) -> None:
    assert _ids(memory_search(memory.db_path, {"query": "100%"})) == ["a4"]
    assert _ids(memory_search(memory.db_path, {"query": "tool_name"})) == ["a4"]
    assert _ids(memory_search(memory.db_path, {"query": "ALPHATOOL"})) == ["a6"]


def test_date_filters_and_errors(memory: Store) -> None:
    day = memory_search(memory.db_path, {"query": "2510", "after": "2026-09-11", "before": "2026-09-11"})
    assert _ids(day) == ["a1", "a2", "b1"]
    minute = memory_search(
        memory.db_path, {"query": "2510", "after": "2026-09-11 08:15", "before": "2026-09-11 08:15"}
    )
    assert _ids(minute) == ["b1"]
    assert memory_search(memory.db_path, {"query": "x", "after": "yesterday"})["error"] == "invalid_after"
    inverted = memory_search(memory.db_path, {"query": "x", "after": "2026-09-12", "before": "2026-09-11"})
    assert inverted["error"] == "invalid_date_range"
    assert memory_search(memory.db_path, {"query": "  "})["error"] == "invalid_query"


def test_missing_database_answers_empty(tmp_path: Path) -> None:
    result = memory_search(tmp_path / "none.sqlite", {"query": "abc"})
    assert result == {"ok": True, "query": "abc", "limit": 20, "truncated": False, "count": 0, "results": []}


def test_hybrid_hook_gets_the_validated_request(memory: Store) -> None:
    seen: list[SearchRequest] = []

    def hybrid(request: SearchRequest) -> dict[str, object]:
        seen.append(request)
        return {"ok": True, "hybrid": True}

    assert memory_search(memory.db_path, {"query": " 2510 ", "limit": 99}, hybrid) == {
        "ok": True,
        "hybrid": True,
    }
    assert seen[0].query == "2510" and seen[0].limit == 50


def _events_file(tmp_path: Path, session: str, seqs: range, foreign_run: str | None = None) -> Path:
    path = tmp_path / session / "events.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(
            {
                "schema_version": "1.0",
                "run_id": foreign_run if foreign_run and seq == 2 else session,
                "seq": seq,
                "turn_no": 1,
                "type": "message",
                "payload": {"text": f"event {seq}"},
                "ts": f"2026-07-26T12:0{seq}:00+00:00",
            }
        )
        for seq in seqs
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def recall_memory(store: Store, tmp_path: Path) -> Store:
    shared = "c0ffee00000"
    commit(
        store,
        [observation(shared + "1a", "first", session_id="s1", refs=(("s1", 1), ("s1", 3), ("other", 2)))],
    )
    commit(store, [observation(shared + "1b", "second", session_id="s1", refs=(("s1", 2),))])
    commit(store, [observation("dd" * 6, "foreign", session_id="s2", refs=(("s2", 1),))])
    promote(
        store,
        "s1",
        [
            reflection(
                "ee" * 6, "durable", session_id="s1", supports=(hex_id(shared + "1b"), hex_id("dd" * 6))
            )
        ],
        [hex_id(shared + "1a")],
        1,
    )
    _events_file(tmp_path / "events", "s1", range(1, 5))
    _events_file(tmp_path / "events", "s2", range(1, 3))
    return store


def _recall(
    store: Store, tmp_path: Path, arguments: dict[str, object], current: str = "s1"
) -> dict[str, Any]:
    return recall(store.db_path, lambda s: tmp_path / "events" / s / "events.jsonl", current, arguments)


def test_recall_by_unique_prefix_hydrates_only_own_session_events(
    recall_memory: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int]] = []
    original = read_service.iter_events

    def counting(path: Path, start: int, end: int, **options: Any) -> Any:
        calls.append((start, end))
        return original(path, start, end, **options)

    monkeypatch.setattr(read_service, "iter_events", counting)
    result = _recall(recall_memory, tmp_path, {"id": "C0FFEE000001A"})
    assert result["ok"] is True and result["kind"] == "observation" and result["content"] == "first"
    assert result["source_refs"] == [{"run_id": "s1", "seq": 1}, {"run_id": "s1", "seq": 3}]
    assert [event["seq"] for event in result["events"]] == [1, 3]
    assert all(event["run_id"] == "s1" for event in result["events"])
    assert "other" not in json.dumps(result)
    assert calls == [(1, 3)]  # one read for the whole range


def test_recall_ambiguous_not_found_invalid_and_foreign_session(recall_memory: Store, tmp_path: Path) -> None:
    ambiguous = _recall(recall_memory, tmp_path, {"id": "c0ffee000001"})
    assert ambiguous["error"] == "ambiguous_id" and "'s1'" in ambiguous["message"]
    missing = _recall(recall_memory, tmp_path, {"id": "dd" * 6})
    assert missing["error"] == "not_found" and "'s1'" in missing["message"]
    assert _recall(recall_memory, tmp_path, {"id": "short"})["error"] == "invalid_id"
    assert (
        _recall(recall_memory, tmp_path, {"id": "dd" * 6, "session_id": " "})["error"] == "invalid_session_id"
    )
    foreign = _recall(recall_memory, tmp_path, {"id": "dd" * 6, "session_id": "s2"})
    assert foreign["ok"] is True and foreign["session_id"] == "s2"
    assert [event["seq"] for event in foreign["events"]] == [1]


def test_recall_reflection_keeps_only_supports_of_the_session(recall_memory: Store, tmp_path: Path) -> None:
    result = _recall(recall_memory, tmp_path, {"id": "ee" * 6})
    assert result["kind"] == "reflection"
    assert result["supporting_observation_ids"] == [hex_id("c0ffee000001b")]
    assert result["source_refs"] == [{"run_id": "s1", "seq": 2}]
    assert [event["seq"] for event in result["events"]] == [2]


def test_call_tool_dispatches_and_reports_unknown_tools(recall_memory: Store, tmp_path: Path) -> None:
    def path_for(session: str) -> Path:
        return tmp_path / "events" / session / "events.jsonl"

    kwargs: dict[str, Any] = {"db_path": recall_memory.db_path, "events_path_for": path_for}
    assert call_tool("memory_search", '{"query": "first"}', "s1", **kwargs)["count"] == 1
    assert call_tool("recall", {"id": "ee" * 6}, "s1", **kwargs)["kind"] == "reflection"
    unknown = call_tool("delete_everything", {}, "s1", **kwargs)
    assert unknown["ok"] is False and unknown["error"] == "unknown_tool"
    assert call_tool("recall", "not json", "s1", **kwargs)["error"] == "invalid_arguments"
    (tmp_path / "events" / "s1" / "events.jsonl").write_text("garbage\n{}\n", encoding="utf-8")
    broken = call_tool("recall", {"id": "c0ffee000001a"}, "s1", **kwargs)
    assert broken["error"] == "events_unreadable" and "garbage" not in broken["message"]


def test_unencodable_arguments_are_answers_not_storage_errors(recall_memory: Store, tmp_path: Path) -> None:
    searched = memory_search(recall_memory.db_path, {"query": "first \ud83d"})
    assert searched["ok"] is False and searched["error"] == "invalid_query"
    recalled = _recall(recall_memory, tmp_path, {"id": "c0ffee000001a", "session_id": "\ud83d"})
    assert recalled["error"] == "invalid_session_id"
