"""Fusion, candidate filtering and flags, collapse, rerank order, date bounds and tool answers."""

from __future__ import annotations

import pytest

from actors.read.fusion import apply_rerank, collapse_to_memories, rrf_fuse
from actors.read.hybrid import hybrid_answer, run_hybrid_search
from actors.read.retrieval import query_text_for_embedding
from actors.read.search_arguments import validate_search_arguments
from persistence.search.request import DateBounds, SearchRequest
from persistence.semantic.candidates import filter_store_hits, store_fetch_size
from protocol.semantic import (
    Retrieval,
    SemanticSearchError,
    SourceMemory,
)

OBS = SourceMemory("observation", "a" * 64, "s1", "2026-09-11 08:00", "first  memory\n text", "high")
REF = SourceMemory("reflection", "b" * 64, "s2", "2026-09-11T08:15:30+00:00", "a reflection", None)


def test_rrf_rewards_items_ranked_by_both_stores() -> None:
    fused = rrf_fuse([["v1", "both", "v3"], ["k1", "both"]])
    assert fused[0] == "both"
    assert set(fused) == {"v1", "both", "v3", "k1"}
    # equal scores: better single rank first, then the earlier list
    assert rrf_fuse([["x", "y"], ["z"]]) == ["x", "z", "y"]


def test_rrf_uses_k_60_and_caps_candidates() -> None:
    many = [f"c{i}" for i in range(300)]
    assert len(rrf_fuse([many, list(reversed(many))])) == 200
    # 1/61 + 1/63 (ranks 1 and 3) beats 1/62 + 1/62 only slightly; k=60 makes this exact order
    assert rrf_fuse([["a", "b", "c"], ["c", "b", "a"]])[0] in {"a", "c"}
    assert rrf_fuse([["a", "b", "c"], ["c", "b", "a"]])[-1] == "b"


def test_filter_rejecting_everything_on_a_huge_corpus_is_truncated() -> None:
    fetch = store_fetch_size(1_000_000, filtered=True)
    assert fetch == 500
    hits = filter_store_hits((f"c{i}" for i in range(fetch)), lambda _c: False, fetch, 1_000_000)
    assert hits.chunk_ids == () and hits.truncated


def test_small_corpus_is_not_truncated() -> None:
    fetch = store_fetch_size(2, filtered=True)
    assert fetch == 2
    hits = filter_store_hits(["c1", "c2"], lambda _c: False, fetch, 2)
    assert hits.chunk_ids == () and not hits.truncated
    assert store_fetch_size(0, filtered=False) == 1
    assert store_fetch_size(5000, filtered=False) == 100


def test_reaching_the_kept_limit_before_the_end_is_truncated() -> None:
    ranked = [f"c{i}" for i in range(300)]
    hits = filter_store_hits(ranked, lambda c: int(c[1:]) % 2 == 0, 500, 300, limit=100)
    assert len(hits.chunk_ids) == 100 and hits.truncated
    exact = filter_store_hits(ranked[:100], lambda _c: True, 100, 100)
    assert len(exact.chunk_ids) == 100 and not exact.truncated


def test_collapse_keeps_first_occurrence_in_hit_order() -> None:
    parent_of = {"c1": REF.parent_key, "c2": OBS.parent_key, "c3": REF.parent_key}
    memories = {OBS.parent_key: OBS, REF.parent_key: REF}
    assert collapse_to_memories(["c1", "c2", "c3"], parent_of, memories) == [REF, OBS]


def test_collapse_without_canonical_memory_fails() -> None:
    with pytest.raises(SemanticSearchError) as caught:
        collapse_to_memories(["c1"], {"c1": OBS.parent_key}, {})
    assert caught.value.code == "semantic_search_failed"


def test_rerank_order_filters_and_rejects_bad_offsets() -> None:
    assert apply_rerank(["a", "b", "c"], [2, 0]) == ["c", "a"]
    for bad in ([3], [0, 0], [-1]):
        with pytest.raises(SemanticSearchError) as caught:
            apply_rerank(["a", "b", "c"], bad)
        assert caught.value.code == "reranker_unavailable"


def _bounds(**arguments: object) -> DateBounds:
    request = validate_search_arguments({"query": "x", **arguments})
    assert isinstance(request, SearchRequest)
    return request.bounds


def test_date_bounds_are_per_kind_and_inclusive() -> None:
    day = _bounds(after="2026-09-11", before="2026-09-11")
    assert day.active
    assert day.accepts("observation", "2026-09-11 00:00") and day.accepts("observation", "2026-09-11 23:59")
    assert not day.accepts("observation", "2026-09-12 00:00")
    assert day.accepts("reflection", "2026-09-11T23:59:59.5+00:00")
    assert not day.accepts("reflection", "2026-09-10T23:59:59+00:00")
    minute = _bounds(after="2026-09-11 08:15", before="2026-09-11 08:15")
    assert minute.accepts("reflection", REF.timestamp)  # created 08:15:30 is inside the minute
    assert not minute.accepts("observation", OBS.timestamp)
    assert not DateBounds().active and DateBounds().accepts("observation", "anything")


def test_query_prefix_is_joined_with_one_space() -> None:
    assert query_text_for_embedding("Represent this:", "q") == "Represent this: q"
    assert query_text_for_embedding("", "q") == "q"


def test_hybrid_answer_applies_limit_and_shapes_items() -> None:
    answer = hybrid_answer("q", 1, Retrieval((OBS, REF), truncated=False, partial=True))
    assert answer["truncated"] is True and answer["partial"] is True and answer["count"] == 1
    assert answer["results"] == [
        {
            "kind": "observation",
            "session_id": "s1",
            "id": OBS.memory_id,
            "display_id": "a" * 12,
            "timestamp": OBS.timestamp,
            "content": "first memory text",
            "importance": "high",
        }
    ]
    reflection_item = hybrid_answer("q", 5, Retrieval((REF,), False, False))["results"]
    assert isinstance(reflection_item, list) and "importance" not in reflection_item[0]


def test_failures_become_visible_answers_never_results() -> None:
    def building() -> Retrieval:
        raise SemanticSearchError("index_building", "m", {"indexed_count": 1, "source_count": 3})

    def broken() -> Retrieval:
        raise RuntimeError("secret memory text")

    assert run_hybrid_search(building, "q", 5) == {
        "ok": False,
        "error": "index_building",
        "message": "m",
        "indexed_count": 1,
        "source_count": 3,
    }
    failed = run_hybrid_search(broken, "q", 5)
    assert failed["error"] == "semantic_search_failed" and "secret" not in str(failed)
    assert "results" not in failed
