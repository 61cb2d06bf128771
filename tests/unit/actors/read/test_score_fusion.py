"""Score-aware fusion of vector and keyword hits: every candidate scored on both sides."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from actors.indexer.sync import synchronize
from actors.read.fusion import convex_fuse, rrf_fuse
from actors.read.retrieval import retrieve
from persistence.semantic import SemanticIndex
from persistence.writers.store import Store
from tests.unit.persistence.semantic.conftest import Memories, RecordingWriter, semantic_settings


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


def test_a_candidate_ranked_by_one_side_is_scored_by_its_true_score_on_the_other() -> None:
    # "k" is the best keyword hit but outside the vector list; its true cosine (0.9) counts, so it
    # beats a vector-only hit whose true BM25 is 0. Scored 0 on the missing side, it would not.
    vector_hits = [f"v{n}" for n in range(100)]
    vector_scores = {item: 0.95 - n * 0.001 for n, item in enumerate(vector_hits)} | {"k": 0.9}
    keyword_scores = {"k": 10.0, "v0": 1.0}
    assert convex_fuse(vector_hits, vector_scores, ["k"], keyword_scores)[0] == "k"
    assert (
        convex_fuse(vector_hits, {item: vector_scores[item] for item in vector_hits}, ["k"], keyword_scores)[
            0
        ]
        == "v0"
    )


class TableEmbedder:
    """Fixed vectors for known texts (a unit vector along axis 0 for anything else)."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.table.get(text, [0.0, 0.0, 0.0, 1.0]) for text in texts]


def test_the_best_keyword_chunk_outside_the_vector_top_100_is_scored_by_its_cosine(
    store: Store, db_path: Path
) -> None:
    """110 chunks nearer the query's vector than the keyword winner push it out of the vector search
    (100 hits); scored 0 there it lost to a chunk both sides found, scored by its true cosine it wins."""
    memories = Memories(db_path)
    table = {"quokka": [1.0, 0.0, 0.0, 0.0]}
    for n in range(110):
        table[f"unrelated filler {n}"] = [0.8, 0.6, 0.0, 0.0]  # cosine 0.8, no shared word
        memories.observation(f"unrelated filler {n}")
    table["quokka quokka quokka seen"] = [0.6, 0.0, 0.8, 0.0]  # cosine 0.6, the best BM25
    table["quokka mentioned once among many other words here"] = [0.85, 0.0, 0.0, 0.5268]  # cosine 0.85
    winner = memories.observation("quokka quokka quokka seen")
    runner_up = memories.observation("quokka mentioned once among many other words here")
    embedder = TableEmbedder(table)
    index = SemanticIndex(db_path, semantic_settings(), RecordingWriter(store))
    while not synchronize(index, embedder).complete:
        pass

    ranked = [
        memory.memory_id for memory in retrieve(index, "quokka", embedder, limit=5, fusion="convex").results
    ]

    assert ranked[:2] == [winner, runner_up]
