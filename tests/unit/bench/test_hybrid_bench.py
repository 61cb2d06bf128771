"""``omray bench hybrid`` on a tiny corpus, and the pure helpers that build its labelled set.

The end-to-end run uses the real offline embedder (in-process ONNX, no network) on a few dozen
memories; it checks the shape and the invariants of the figures, never a wall-clock number.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
from typer.testing import CliRunner

from bench.cli import bench_app
from bench.hybrid_bench import (
    MODES,
    QUERY_KINDS,
    STOP_WORDS,
    SYNONYMS,
    CorpusMemory,
    HybridBenchResult,
    LabelledQuery,
    content_words,
    generated_sentences,
    keyword_query,
    labelled_set,
    literal_query,
    memory_texts,
    paraphrase_query,
    recall_table,
    run_hybrid_bench,
)

TEXT = "Assistant: Renamed the MapToolArguments helper and fixed the failing pagination test in src/page.ts"


def test_content_words_drop_role_prefix_stop_words_and_short_words() -> None:
    words = content_words(TEXT)
    assert words[0] == "renamed"
    assert "assistant" not in words and "the" not in words and "in" not in words
    assert "maptoolarguments" in words and "pagination" in words
    assert all(len(word) >= 3 and word not in STOP_WORDS for word in words)


def test_paraphrase_query_uses_synonyms_and_a_shuffled_subset() -> None:
    allowed = {SYNONYMS.get(word, word) for word in content_words(TEXT)}
    query = paraphrase_query(TEXT, random.Random(3)).split()
    assert 3 <= len(query) <= 8
    assert set(query) <= allowed
    assert "test" not in query and "fixed" not in query  # always replaced by their synonyms


def test_keyword_query_keeps_the_three_rarest_words_in_text_order() -> None:
    frequency = Counter({"renamed": 9, "maptoolarguments": 1, "helper": 5, "fixed": 7, "failing": 2})
    frequency.update({"pagination": 3, "test": 8, "src": 9, "page": 6, "ts": 9})
    assert keyword_query(TEXT, frequency) == "maptoolarguments failing pagination"


def test_literal_query_is_three_consecutive_words_of_the_text() -> None:
    rng = random.Random(0)
    for _ in range(20):
        query = literal_query(TEXT, rng)
        assert len(query.split()) == 3
        assert query in TEXT and not query.startswith("Assistant:")


def test_labelled_set_targets_unique_texts_with_three_questions_each() -> None:
    texts = [f"User: compiled module{i} with zebra giraffe walrus otter" for i in range(30)]
    memories = [CorpusMemory(f"id{i}", text) for i, text in enumerate(texts)]
    memories.append(CorpusMemory("dup-a", texts[0]))  # duplicated content: never a target
    memories.append(CorpusMemory("short", "User: fixed it"))  # too few content words
    queries = labelled_set(memories, targets=10, seed=1)
    assert [q.kind for q in queries] == list(QUERY_KINDS) * 10
    chosen = {q.target_id for q in queries}
    assert len(chosen) == 10 and not chosen & {"id0", "dup-a", "short"}
    assert queries == labelled_set(memories, targets=10, seed=1)


def test_memory_texts_are_distinct_even_beyond_the_sentence_pool() -> None:
    texts, source = memory_texts(4000, seed=0)
    assert len(texts) == 4000 == len(set(texts))
    assert source in ("transcripts", "generated")
    assert len(set(generated_sentences(300, random.Random(0)))) == 300


def test_recall_table_scores_each_mode_on_its_query_types() -> None:
    queries = [
        LabelledQuery("paraphrase", "p", "a"),
        LabelledQuery("keyword", "k", "a"),
        LabelledQuery("literal", "l", "a"),
    ]
    hits = {
        "exact": [[], [], ["a"]],
        "bm25": [["a"], [], ["a"]],
        "vector": [["x"] * 10 + ["a"], ["a"], []],  # rank 11 does not count
        "hybrid": [["a"], ["a"], []],
    }
    headline, by_query = recall_table(hits, queries)  # type: ignore[arg-type]
    assert headline == {"exact": 1.0, "bm25": 0.5, "vector": 0.5, "hybrid": 1.0}
    assert by_query["literal"] == {"exact": 1.0, "bm25": 1.0, "vector": 0.0, "hybrid": 0.0}


@pytest.fixture(scope="module")
def tiny_run() -> HybridBenchResult:
    return run_hybrid_bench(40, targets=5, seed=0)


def test_tiny_run_backfills_everything_and_scores_every_mode(tiny_run: HybridBenchResult) -> None:
    assert tiny_run.memories == 40 and tiny_run.chunks >= 40
    # 40 one-chunk memories (and their source chunks) fit one call of 32 batches of 32 chunks
    assert tiny_run.batch_size == 32 and tiny_run.sync_calls == 1
    assert tiny_run.labelled_set["queries"] == 15 and tiny_run.queries_timed == 10
    assert set(tiny_run.recall_at_10) == set(MODES)
    assert all(0.0 <= value <= 1.0 for value in tiny_run.recall_at_10.values())
    assert tiny_run.recall_at_10["exact"] == 1.0  # a literal query always finds its own memory here
    assert 0.0 < tiny_run.search_p50_ms <= tiny_run.search_p99_ms
    assert tiny_run.original["backfill_s"] == 1945.162 and "§17.2" in str(tiny_run.original["source"])


def test_cli_prints_one_json_object() -> None:
    result = CliRunner().invoke(bench_app, ["hybrid", "--size", "12", "--targets", "2", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["size"] == 12 and figures["memories"] == 12
    assert set(figures["recall_at_10"]) == {"exact", "bm25", "vector", "hybrid"}
    assert figures["labelled_set"]["targets"] <= 2
