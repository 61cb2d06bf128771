"""Hybrid ``memory_search`` with ``scope`` on a real semantic index: never another session's memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.read.service import memory_search
from persistence.semantic import SemanticIndex
from tests.unit.persistence.semantic.conftest import HashEmbedder, Memories, hybrid_tool, sync_all

SESSIONS = ("s1", "s2", "s3")
WORDS = ("deploy", "pipeline", "broke", "fixed", "lunch", "tests", "cache")


@pytest.fixture
def indexed(index: SemanticIndex, memories: Memories, embedder: HashEmbedder) -> SemanticIndex:
    for number in range(30):
        session = SESSIONS[number % 3]
        words = " ".join(WORDS[(number + offset) % len(WORDS)] for offset in range(3))
        memories.observation(f"{words} note {number}", session_id=session)
        if number % 10 == 0:
            memories.reflection(f"{words} lesson {number}", session_id=session)
    sync_all(index, embedder, 64)
    return index


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
    scope=st.sampled_from(["session", ["s2"], ["s1", "s3"], ["nobody"]]),
    limit=st.integers(1, 12),
)
def test_scoped_hybrid_search_returns_only_scoped_sessions(
    indexed: SemanticIndex,
    embedder: HashEmbedder,
    db_path: Path,
    query: str,
    scope: str | list[str],
    limit: int,
) -> None:
    hybrid = hybrid_tool(indexed, embedder)
    arguments = {"query": query, "scope": scope, "limit": limit}
    result = memory_search(db_path, arguments, hybrid, session_id="s1")
    allowed = {"s1"} if scope == "session" else set(scope)
    assert result["ok"] is True and result["limit"] == limit
    results = result["results"]
    assert isinstance(results, list) and len(results) == result["count"]
    assert len(results) <= limit
    assert all(item["session_id"] in allowed for item in results)
    # The same hits, in the same order, as the unscoped ranking filtered to those sessions.
    wide = memory_search(db_path, {"query": query, "limit": 50}, hybrid)
    assert isinstance(wide["results"], list)
    expected = [item["id"] for item in wide["results"] if item["session_id"] in allowed][:limit]
    assert [item["id"] for item in results] == expected
    exact = memory_search(db_path, {**arguments, "mode": "exact"}, hybrid, session_id="s1")
    assert isinstance(exact["results"], list) and "partial" not in exact
    assert all(item["session_id"] in allowed for item in exact["results"])
