"""Score-aware fusion of vector and keyword hits, and keyword query tokens without function words."""

from __future__ import annotations

from persistence.semantic.keyword import search_tokens
from protocol.semantic import convex_fuse, rrf_fuse


def test_the_margin_between_scores_decides_where_ranks_alone_cannot() -> None:
    vector, keyword = ["a", "b"], ["b", "a"]
    # a is far closer by vectors, b only barely better by keywords -> a
    assert convex_fuse(vector, {"a": 0.9, "b": 0.1}, keyword, {"b": 1.1, "a": 1.0})[0] == "a"
    # a and b almost equally close, b the only real keyword match -> b
    assert convex_fuse(vector, {"a": 0.70, "b": 0.69}, keyword, {"b": 12.0, "a": 1.0})[0] == "b"
    # rank-only fusion gives one answer for both cases
    assert rrf_fuse([vector, keyword]) == ["a", "b"]


def test_convex_fusion_keeps_items_of_one_list_and_respects_the_limit() -> None:
    fused = convex_fuse(["a", "b"], {"a": 1.0, "b": 0.5}, ["c"], {"c": 3.0}, limit=2)
    assert fused == ["a", "c"]  # a: 0.5 (vector 1.0), c: 0.5 (best keyword); tie -> vector rank first
    assert convex_fuse([], {}, [], {}) == []


def test_similarities_outside_zero_to_one_are_clipped() -> None:
    assert convex_fuse(["a", "b"], {"a": -0.2, "b": 1.7}, [], {}) == ["b", "a"]


def test_search_tokens_drop_function_words_unless_nothing_else_is_left() -> None:
    assert search_tokens("What did I buy for my sister's birthday?") == ["buy", "sister", "s", "birthday"]
    assert search_tokens("who am I") == ["who", "am", "i"]
