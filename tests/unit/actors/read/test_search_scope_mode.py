"""memory_search ``scope`` and ``mode`` arguments, and corrections for unknown keys (issue 18)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

import actors.read.service as read_service
from actors.read.fusion import FUSED_CANDIDATE_LIMIT
from actors.read.service import call_tool, memory_search
from persistence.search.request import SearchRequest
from persistence.writers.store import Store
from protocol.tool_specs import MEMORY_SEARCH_ARGUMENTS
from tests.unit.actors.read.factories import observation, reflection
from tests.unit.actors.read.helpers import commit, promote


@pytest.fixture
def memory(store: Store) -> Store:
    commit(store, [observation("a1", "Build 2510 failed", timestamp="2026-09-11 13:00", session_id="s1")])
    commit(store, [observation("a2", "Fixed build 2510", timestamp="2026-09-11 12:00", session_id="s1")])
    commit(store, [observation("a3", "Saw 2510 first", timestamp="2026-09-10 01:00", session_id="s2")])
    commit(store, [observation("a4", "2510 again in s3", timestamp="2026-09-12 01:00", session_id="s3")])
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


def _sessions(result: Mapping[str, Any]) -> set[str]:
    return {item["session_id"] for item in result["results"]}


def test_default_scope_and_mode_answer_as_before(memory: Store) -> None:
    default = memory_search(memory.db_path, {"query": "2510"})
    assert _ids(default) == ["a4", "a1", "a2", "b1", "a3"]
    assert set(default) == {"ok", "query", "limit", "truncated", "count", "results"}
    explicit = memory_search(
        memory.db_path, {"query": "2510", "scope": "all", "mode": "auto"}, session_id="s1"
    )
    assert explicit == default
    assert memory_search(memory.db_path, {"query": "2510", "scope": None, "mode": None}) == default


def test_scope_session_searches_only_the_calling_session(memory: Store) -> None:
    result = memory_search(memory.db_path, {"query": "2510", "scope": "session"}, session_id="s1")
    assert result["ok"] is True and _ids(result) == ["a1", "a2", "b1"] and _sessions(result) == {"s1"}
    limited = memory_search(
        memory.db_path, {"query": "2510", "scope": "session", "limit": 2}, session_id="s1"
    )
    assert _ids(limited) == ["a1", "a2"] and limited["truncated"] is True
    other = memory_search(memory.db_path, {"query": "2510", "scope": "session"}, session_id="s2")
    assert _ids(other) == ["a3"]


def test_scope_list_searches_the_named_sessions_only(memory: Store) -> None:
    result = memory_search(memory.db_path, {"query": "2510", "scope": [" s2 ", "s3", "s3"]})
    assert _ids(result) == ["a4", "a3"] and _sessions(result) == {"s2", "s3"}
    assert memory_search(memory.db_path, {"query": "2510", "scope": ["nobody"]})["count"] == 0


@pytest.mark.parametrize(
    "scope",
    ["everything", "", [], [""], ["  "], ["s1", 3], 7, {"session": "s1"}, ["x"] * 51, ["\ud83d"]],
)
def test_bad_scopes_are_corrected(memory: Store, scope: object) -> None:
    result = memory_search(memory.db_path, {"query": "2510", "scope": scope}, session_id="s1")
    assert result["ok"] is False and result["error"] == "invalid_scope"
    assert "'all', 'session'" in str(result["message"])


@pytest.mark.parametrize("session_id", [None, "", "   "])
def test_scope_session_without_a_calling_session_is_corrected(memory: Store, session_id: str | None) -> None:
    result = memory_search(memory.db_path, {"query": "2510", "scope": "session"}, session_id=session_id)
    assert result["error"] == "invalid_scope" and "calling session" in str(result["message"])


class FakeHybrid:
    """A hybrid hook answering fixed hits from several sessions, recording the requests it got."""

    def __init__(self, sessions: list[str]) -> None:
        self.sessions = sessions
        self.requests: list[SearchRequest] = []

    def __call__(self, request: SearchRequest) -> dict[str, object]:
        self.requests.append(request)
        hits = [
            {"kind": "observation", "session_id": session, "id": f"{index:02d}", "content": "hit"}
            for index, session in enumerate(self.sessions)
        ]
        return {
            "ok": True,
            "query": request.query,
            "limit": request.limit,
            "truncated": len(hits) > request.limit,
            "partial": False,
            "count": min(len(hits), request.limit),
            "results": hits[: request.limit],
        }


def test_mode_auto_is_hybrid_when_configured_and_exact_otherwise(memory: Store) -> None:
    hybrid = FakeHybrid(["s1"])
    assert memory_search(memory.db_path, {"query": "2510"}, hybrid)["partial"] is False
    assert memory_search(memory.db_path, {"query": "2510", "mode": "auto"}, hybrid)["partial"] is False
    assert len(hybrid.requests) == 2 and hybrid.requests[1].mode == "auto"
    assert "partial" not in memory_search(memory.db_path, {"query": "2510", "mode": "auto"})


def test_mode_exact_searches_exactly_even_when_hybrid_is_configured(memory: Store) -> None:
    hybrid = FakeHybrid(["s1"])
    result = memory_search(memory.db_path, {"query": "2510", "mode": "exact"}, hybrid)
    assert result == memory_search(memory.db_path, {"query": "2510"})
    assert hybrid.requests == []


def test_mode_hybrid_needs_hybrid_search(memory: Store) -> None:
    result = memory_search(memory.db_path, {"query": "2510", "mode": "hybrid"})
    assert result["ok"] is False and result["error"] == "hybrid_unavailable"
    assert "'exact'" in str(result["message"])
    hybrid = FakeHybrid(["s1"])
    assert memory_search(memory.db_path, {"query": "2510", "mode": "hybrid"}, hybrid)["ok"] is True
    assert hybrid.requests[0].mode == "hybrid"


@pytest.mark.parametrize("mode", ["semantic", "EXACT", "", 1, True, ["exact"]])
def test_bad_modes_are_corrected(memory: Store, mode: object) -> None:
    result = memory_search(memory.db_path, {"query": "2510", "mode": mode})
    assert result["error"] == "invalid_mode" and "'auto', 'exact', 'hybrid'" in str(result["message"])


def test_scoped_hybrid_search_keeps_only_the_scoped_sessions(memory: Store) -> None:
    hybrid = FakeHybrid(["s2", "s1", "s2", "s1", "s3", "s1"])
    result = memory_search(
        memory.db_path, {"query": "2510", "scope": "session", "limit": 2}, hybrid, session_id="s1"
    )
    assert hybrid.requests[0].limit == FUSED_CANDIDATE_LIMIT  # ranked over every session first
    assert result["ok"] is True and result["limit"] == 2 and result["count"] == 2
    assert [item["id"] for item in result["results"]] == ["01", "03"] and _sessions(result) == {"s1"}
    assert result["truncated"] is True  # a third s1 hit remained
    listed = memory_search(memory.db_path, {"query": "2510", "scope": ["s3", "s9"]}, hybrid)
    assert [item["id"] for item in listed["results"]] == ["04"] and listed["truncated"] is False


def test_scoped_hybrid_errors_pass_unchanged(memory: Store) -> None:
    def failing(request: SearchRequest) -> dict[str, object]:
        return {"ok": False, "error": "index_building", "message": "building", "indexed_count": 1}

    arguments = {"query": "2510", "scope": ["s1"], "mode": "hybrid"}
    result = memory_search(memory.db_path, arguments, failing)
    assert result == {"ok": False, "error": "index_building", "message": "building", "indexed_count": 1}
    # mode auto answers exactly while the index is not ready, and says so; other errors pass.
    auto = memory_search(memory.db_path, {"query": "2510", "scope": ["s1"]}, failing)
    assert auto["ok"] is True and auto["mode"] == "exact" and auto["hybrid_unavailable"] == "index_building"
    assert _sessions(auto) == {"s1"} and auto["count"] >= 1

    def unreachable(request: SearchRequest) -> dict[str, object]:
        return {"ok": False, "error": "embedding_unavailable", "message": "down"}

    failed = memory_search(memory.db_path, {"query": "2510"}, unreachable)
    assert failed == {"ok": False, "error": "embedding_unavailable", "message": "down"}


def test_unknown_keys_are_corrected_and_nothing_is_searched(
    memory: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_search(*args: object, **kwargs: object) -> dict[str, object]:
        raise AssertionError("searched despite unknown arguments")

    monkeypatch.setattr(read_service, "exact_search", no_search)
    hybrid = FakeHybrid(["s1"])
    result = memory_search(
        memory.db_path, {"query": "2510", "session_id": "other", "Mode": "exact"}, hybrid, session_id="s1"
    )
    assert result["ok"] is False and result["error"] == "unknown_arguments"
    message = str(result["message"])
    assert "'Mode', 'session_id'" in message and "nothing was searched" in message
    assert "Accepted arguments: " + ", ".join(MEMORY_SEARCH_ARGUMENTS) in message
    assert hybrid.requests == []


def test_unknown_keys_come_before_other_corrections_and_long_lists_are_cut(memory: Store) -> None:
    result = memory_search(memory.db_path, {"query": "", "k" * 100: 1, **{f"x{i}": i for i in range(9)}})
    assert result["error"] == "unknown_arguments"
    message = str(result["message"])
    assert "'" + "k" * 40 + "'" in message and "k" * 41 not in message and "and 2 more" in message


def test_call_tool_passes_the_calling_session_for_scope_session(memory: Store, tmp_path: Any) -> None:
    kwargs: dict[str, Any] = {"db_path": memory.db_path, "events_path_for": lambda s: tmp_path / s}
    result = call_tool("memory_search", '{"query": "2510", "scope": "session"}', "s2", **kwargs)
    assert _ids(result) == ["a3"]
    corrected = call_tool("memory_search", {"query": "2510", "session": "s2"}, "s2", **kwargs)
    assert corrected["error"] == "unknown_arguments"


@pytest.mark.parametrize("mode", ["exact", "hybrid", "auto"])
@pytest.mark.parametrize("size", [10_001, 50_000])
def test_a_query_over_the_limit_is_invalid_query_in_every_mode(memory: Store, mode: str, size: int) -> None:
    """Issue 33: an exact query of ~50 kB answered storage_unavailable (SQLite refuses the LIKE)."""
    from protocol.tool_specs import MEMORY_SEARCH_MAX_QUERY_BYTES

    searched: list[SearchRequest] = []

    def hybrid(request: SearchRequest) -> dict[str, object]:
        searched.append(request)
        return {"ok": True, "results": []}

    for query in ["2510 " * (size // 5) + "x" * (size % 5), "é" * (size // 2 + 1)]:
        result = memory_search(memory.db_path, {"query": query, "mode": mode}, hybrid, session_id="s1")
        assert result["ok"] is False and result["error"] == "invalid_query", result
        assert f"{MEMORY_SEARCH_MAX_QUERY_BYTES:,} bytes" in str(result["message"])
        assert "2510" not in str(result["message"])  # the query is never echoed
    assert searched == []
    at_limit = "2510" + "x" * (MEMORY_SEARCH_MAX_QUERY_BYTES - 4)
    assert memory_search(memory.db_path, {"query": at_limit, "mode": "exact"})["ok"] is True


def test_query_date_is_validated_and_normalized() -> None:
    from actors.read.search_arguments import validate_search_arguments

    day = validate_search_arguments({"query": "last week", "query_date": "2023-05-30"})
    assert isinstance(day, SearchRequest) and day.query_date == "2023-05-30 00:00"
    minute = validate_search_arguments({"query": "last week", "query_date": " 2023-05-30 23:59 "})
    assert isinstance(minute, SearchRequest) and minute.query_date == "2023-05-30 23:59"
    absent = validate_search_arguments({"query": "last week"})
    assert isinstance(absent, SearchRequest) and absent.query_date is None
    for bad in ("yesterday", "2023-02-30", "2023-05-30T10:00", 20230530):
        answer = validate_search_arguments({"query": "last week", "query_date": bad})
        assert isinstance(answer, dict) and answer["error"] == "invalid_query_date", bad
