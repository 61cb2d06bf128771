"""The indexing core's two halves: a plan made under the lock, embedded elsewhere, committed later;
a plan made on an older snapshot is dropped and the next one picks its work up."""

from __future__ import annotations

from pathlib import Path

from actors.indexer.sync import plan_batches, synchronize
from actors.read.retrieval import retrieve
from persistence.semantic import SemanticIndex, SyncResult
from persistence.writers.store import Store
from tests.unit.persistence.semantic.conftest import (
    HashEmbedder,
    Memories,
    RecordingWriter,
    semantic_settings,
    sync_all,
)


def _index(db_path: Path, store: Store) -> SemanticIndex:
    return SemanticIndex(db_path, semantic_settings(), RecordingWriter(store))


def test_a_plan_embedded_elsewhere_is_committed_whole(store: Store, db_path: Path) -> None:
    index, embedder = _index(db_path, store), HashEmbedder()
    wanted = Memories(db_path).observation("kafka consumer lag after deploy")
    plan = plan_batches(index, batches=4)
    assert not isinstance(plan, SyncResult) and plan.embedded >= 1
    result = index.commit_batch(plan, embedder.embed(plan.vector_texts()))
    assert result.complete and result.embedded_chunks == plan.embedded
    assert [m.memory_id for m in retrieve(index, "kafka lag", embedder).results] == [wanted]


def test_a_plan_of_an_older_snapshot_is_dropped(store: Store, db_path: Path) -> None:
    index, embedder, memories = _index(db_path, store), HashEmbedder(), Memories(db_path)
    memories.observation("first memory about parsers")
    stale = plan_batches(index)
    assert not isinstance(stale, SyncResult)
    synchronize(index, embedder)  # another worker commits first
    memories.observation("second memory about lexers")
    dropped = index.commit_batch(stale, embedder.embed(stale.vector_texts()))
    assert not dropped.complete and dropped.embedded_chunks == 0
    sync_all(index, embedder)
    found = retrieve(index, "memory", embedder, floor=False).results
    assert {memory.content for memory in found} == {
        "first memory about parsers",
        "second memory about lexers",
    }


def test_no_database_is_nothing_to_plan(tmp_path: Path, store: Store) -> None:
    missing = SemanticIndex(tmp_path / "none.sqlite", semantic_settings(), RecordingWriter(store))
    assert plan_batches(missing) == SyncResult(True, 0, 0, False, 0)
