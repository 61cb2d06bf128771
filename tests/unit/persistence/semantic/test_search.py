"""Hybrid query flow (reference §14.5): readiness, partial, filters, truthful flags, corruption, locking."""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from actors.indexer.sync import synchronize
from actors.read.retrieval import retrieve
from persistence.search.request import DateBounds
from persistence.semantic import KEYWORD_DIR, VECTOR_FILE, SemanticIndex, SemanticSourceReader
from protocol.semantic import SemanticSearchError
from protocol.settings import EmbeddingApiSettings, SemanticSettings
from tests.unit.persistence.semantic.conftest import HashEmbedder, Memories, RecordingWriter, sync_all


def _ids(index: SemanticIndex, query: str, embedder: HashEmbedder, **kwargs: object) -> list[str]:
    return [memory.memory_id for memory in retrieve(index, query, embedder, **kwargs).results]  # type: ignore[arg-type]


def _dirty(db_path: Path) -> bool:
    state = SemanticSourceReader(db_path).semantic_state()
    return state is not None and state.dirty


def _lock_is_free(index: SemanticIndex) -> bool:
    fd = os.open(index.directory / "index.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_never_built_index_reports_building_with_memory_progress(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    memories.observation("a")
    memories.reflection("b")
    with pytest.raises(SemanticSearchError) as caught:
        retrieve(index, "a", embedder)
    assert caught.value.code == "index_building"
    assert caught.value.progress == {"indexed_count": 0, "source_count": 2}


def test_empty_database_gives_empty_complete_results(index: SemanticIndex, embedder: HashEmbedder) -> None:
    assert synchronize(index, embedder).complete
    result = retrieve(index, "anything", embedder)
    assert result.results == () and not result.truncated and not result.partial
    assert embedder.calls == []  # no memories: no embedding call at all


def test_partial_until_complete_then_finds_by_keyword_and_meaning(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    target = memories.observation("We upstreamed MapToolArguments to flatten DTO arguments")
    for i in range(7):
        memories.observation(f"unrelated note {i} about lunch")
    memories.reflection("release process uses a weekly train")
    first = synchronize(index, embedder, 2)
    assert not first.complete
    partial = retrieve(index, "unrelated lunch", embedder)
    assert partial.partial and len(partial.results) == 2  # only what the first batch indexed
    sync_all(index, embedder, 2)
    complete = retrieve(index, "maptoolarguments flatten", embedder)
    assert not complete.partial and complete.results[0].memory_id == target
    assert complete.results[0].importance == "high" and complete.results[0].session_id == "s1"


def test_progress_counts_memories_not_chunks(
    db_path: Path, writer: RecordingWriter, memories: Memories, embedder: HashEmbedder
) -> None:
    settings = SemanticSettings(
        embedding_api=EmbeddingApiSettings(
            base_url="http://localhost:8059/v1", model_id="m", chunk_bytes=10, overlap_bytes=0
        )
    )
    index = SemanticIndex(db_path, settings, writer)
    memories.observation("x" * 45)  # 5 chunks
    memories.observation("short")
    synchronize(index, embedder, 6)
    assert index.progress().as_dict() == {"indexed_count": 2, "source_count": 2}


def test_date_filters_apply_per_kind(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    inside_obs = memories.observation("deploy pipeline broke", timestamp="2026-09-11 09:00")
    memories.observation("deploy pipeline fixed", timestamp="2026-09-12 09:00")
    inside_ref = memories.reflection("deploy pipeline lessons", created_at="2026-09-11T08:15:30+00:00")
    memories.reflection("deploy pipeline retro", created_at="2026-09-12T00:00:00+00:00")
    sync_all(index, embedder)
    bounds = DateBounds(
        "2026-09-11 00:00",
        "2026-09-11 23:59",
        "2026-09-11T00:00:00+00:00",
        "2026-09-11T23:59:59.999999+00:00",
    )
    found = _ids(index, "deploy pipeline", embedder, bounds=bounds)
    assert sorted(found) == sorted([inside_obs, inside_ref])


def test_filter_rejecting_everything_is_truncated_only_on_a_large_corpus(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    never = DateBounds("2999-01-01 00:00", None, "2999-01-01T00:00:00+00:00", None)
    memories.observation("alpha one")
    memories.observation("alpha two")
    sync_all(index, embedder, 10)
    small = retrieve(index, "alpha", embedder, bounds=never)
    assert small.results == () and not small.truncated
    for i in range(600):
        memories.observation(f"alpha filler {i}")
    sync_all(index, embedder, 700)
    large = retrieve(index, "alpha", embedder, bounds=never)
    assert large.results == () and large.truncated


def test_unfiltered_small_corpus_is_not_truncated_and_limit_sets_it(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    for i in range(5):
        memories.observation(f"topic {i}")
    sync_all(index, embedder)
    everything = retrieve(index, "topic", embedder)
    assert len(everything.results) == 5 and not everything.truncated
    limited = retrieve(index, "topic", embedder, limit=2)
    assert len(limited.results) == 2 and limited.truncated


@pytest.mark.parametrize("damage", ["delete", "corrupt"])
def test_damaged_vector_file_marks_dirty_and_rebuild_restores_the_same_answers(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder, db_path: Path, damage: str
) -> None:
    for i in range(4):
        memories.observation(f"memory about subject {i}")
    sync_all(index, embedder)
    before = _ids(index, "subject 2", embedder)
    path = index.directory / VECTOR_FILE
    if damage == "delete":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:-7] + b"garbage")
    with pytest.raises(SemanticSearchError) as caught:
        retrieve(index, "subject 2", embedder)
    assert caught.value.code == "index_building" and _dirty(db_path)
    assert synchronize(index, embedder, 10).rebuilt
    assert _ids(index, "subject 2", embedder) == before


def test_missing_keyword_files_still_answer_correctly(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder, db_path: Path
) -> None:
    for i in range(4):
        memories.observation(f"memory about subject {i}")
    sync_all(index, embedder)
    before = _ids(index, "subject 2", embedder)
    shutil.rmtree(index.directory / KEYWORD_DIR)
    fresh = SemanticIndex(db_path, index._settings, index._writer)  # no in-process caches
    assert _ids(fresh, "subject 2", embedder) == before and not _dirty(db_path)


def test_stale_chunks_never_surface(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder, db_path: Path
) -> None:
    edited = memories.observation("zebra crossing incident")
    deleted = memories.observation("zebra stripes pattern")
    kept = memories.observation("zebra at the zoo")
    sync_all(index, embedder)
    memories.execute("UPDATE om_observation SET content = 'nothing left' WHERE observation_id = ?", (edited,))
    memories.execute("DELETE FROM om_observation WHERE observation_id = ?", (deleted,))
    result = retrieve(index, "zebra", embedder)
    assert [memory.memory_id for memory in result.results] == [kept]
    assert result.partial  # the source changed since the last synchronization
    assert not _dirty(db_path)


def test_a_hit_of_an_edited_memory_makes_the_answer_partial(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder, db_path: Path
) -> None:
    # An in-place edit leaves row count and max rowid alone, so only the rejected hit shows that the
    # index lags the source: its new text is not indexed, and the answer must say so.
    edited = memories.observation("zebra crossing incident")
    kept = memories.observation("zebra at the zoo")
    sync_all(index, embedder)
    assert not retrieve(index, "zebra", embedder).partial
    memories.execute("UPDATE om_observation SET content = 'zebra herd' WHERE observation_id = ?", (edited,))
    result = retrieve(index, "zebra", embedder)
    assert [memory.memory_id for memory in result.results] == [kept]
    assert result.partial and not _dirty(db_path)


def test_query_dimension_change_marks_dirty(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder, db_path: Path
) -> None:
    memories.observation("m")
    sync_all(index, embedder)
    with pytest.raises(SemanticSearchError) as caught:
        retrieve(index, "m", HashEmbedder(dimensions=8))
    assert caught.value.code == "embedding_dimensions_changed" and _dirty(db_path)


def test_source_change_during_query_embedding_reports_building(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    memories.observation("m")
    sync_all(index, embedder)

    class Interleaved(HashEmbedder):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            memories.observation("committed while the query was embedded")
            return super().embed(texts)

    with pytest.raises(SemanticSearchError) as caught:
        retrieve(index, "m", Interleaved())
    assert caught.value.code == "index_building"


def test_network_calls_run_outside_the_lock_and_use_the_prefix(
    db_path: Path, writer: RecordingWriter, memories: Memories
) -> None:
    settings = SemanticSettings(
        embedding_api=EmbeddingApiSettings(base_url="http://h/v1", model_id="m", query_prefix="Find:")
    )
    index = SemanticIndex(db_path, settings, writer)
    first = memories.observation("kafka consumer lag")
    second = memories.observation("kafka producer retries")
    seen: list[tuple[str, bool]] = []

    class Watching(HashEmbedder):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            seen.append((texts[0], _lock_is_free(index)))
            return super().embed(texts)

    class Reverser:
        def rerank(self, query: str, documents: Sequence[str]) -> list[int]:
            seen.append((query, _lock_is_free(index)))
            return [len(documents) - 1]  # only the last candidate passes the score floor

    sync_all(index, Watching())
    seen.clear()
    result = retrieve(index, "kafka", Watching(), reranker=Reverser())
    assert seen == [("Find: kafka", True), ("kafka", True)]
    assert len(result.results) == 1 and result.results[0].memory_id in {first, second}


def test_transient_errors_do_not_mark_dirty(
    index: SemanticIndex,
    memories: Memories,
    embedder: HashEmbedder,
    db_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memories.observation("m")
    sync_all(index, embedder)

    def busy(*_args: object) -> None:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(SemanticIndex, "_read", busy)
    with pytest.raises(sqlite3.OperationalError):
        retrieve(index, "m", embedder)
    assert not _dirty(db_path)
