"""The derived index lifecycle (reference §14.4): batches, cursor cost, rebuild conditions, dirty marker."""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

import pytest

from actors.indexer.sync import synchronize
from actors.read.retrieval import retrieve
from persistence.semantic import (
    KEYWORD_DIR,
    MANIFEST_FILE,
    VECTOR_FILE,
    SemanticIndex,
    SemanticSourceReader,
)
from persistence.semantic.vectors import VectorStore
from protocol.semantic import SemanticSearchError
from tests.unit.persistence.semantic.conftest import (
    HashEmbedder,
    Memories,
    RecordingWriter,
    semantic_settings,
    sync_all,
)


def _state(db_path: Path):  # type: ignore[no-untyped-def]
    state = SemanticSourceReader(db_path).semantic_state()
    assert state is not None
    return state


def test_first_sync_builds_in_bounded_batches_until_complete(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder, db_path: Path
) -> None:
    for i in range(10):
        memories.observation(f"observation number {i} about deployments")
    memories.reflection("a reflection about the release train")
    first = synchronize(index, embedder, 4)
    assert first.rebuilt and first.rebuild_reason == "no_state"
    assert first.embedded_chunks == 4 and not first.complete
    assert first.indexed_memories == 4 and first.source_memories == 11
    batches = 1 + sync_all(index, embedder, 4)
    assert batches == 3
    assert max(embedder.calls) <= 4 and embedder.texts_embedded == 11
    state = _state(db_path)
    assert state.complete and not state.dirty and state.dimensions == embedder.dimensions
    again = synchronize(index, embedder, 4)
    assert again.complete and again.embedded_chunks == 0 and not again.rebuilt


def test_batch_cost_does_not_grow_with_indexed_memories(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    for i in range(60):
        memories.observation(f"memory {i}")
    results = []
    while True:
        result = synchronize(index, embedder, 3)
        results.append(result)
        if result.complete:
            break
    assert len(results) == 20
    assert all(r.memories_chunked <= 3 and r.memories_read <= 6 for r in results)
    assert [r.memories_chunked for r in results[1:]] == [3] * 19  # flat, not growing
    assert embedder.calls == [3] * 20


def test_a_memory_larger_than_one_batch_is_resumed_not_restarted(
    db_path: Path, writer: RecordingWriter, memories: Memories, embedder: HashEmbedder
) -> None:
    index = SemanticIndex(db_path, semantic_settings(chunk_bytes=10, overlap_bytes=0), writer)
    memories.observation("x" * 95)  # 10 chunks
    results = [synchronize(index, embedder, 4) for _ in range(3)]
    assert [r.embedded_chunks for r in results] == [4, 4, 2]
    assert [r.complete for r in results] == [False, False, True]
    assert results[-1].indexed_memories == 1


def test_appended_memories_are_indexed_incrementally(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    for i in range(5):
        memories.observation(f"early {i}")
    sync_all(index, embedder, 10)
    embedder.calls.clear()
    memories.observation("late arrival")
    memories.reflection("late reflection")
    result = synchronize(index, embedder, 10)
    assert result.complete and not result.rebuilt and result.embedded_chunks == 2
    assert result.memories_read == 2 and embedder.calls == [2]


def test_source_change_during_embedding_is_never_complete(
    index: SemanticIndex, memories: Memories, db_path: Path
) -> None:
    memories.observation("one")

    class CommittingEmbedder(HashEmbedder):
        def embed(self, texts):  # type: ignore[no-untyped-def]
            if not self.calls:
                memories.observation("committed by the observer meanwhile")
            return super().embed(texts)

    embedder = CommittingEmbedder()
    first = synchronize(index, embedder, 10)
    assert first.embedded_chunks == 1 and not first.complete
    second = synchronize(index, embedder, 10)
    assert second.complete and second.embedded_chunks == 1 and not second.rebuilt


def test_dirty_state_rebuilds(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder, writer: RecordingWriter, db_path: Path
) -> None:
    memories.observation("m")
    sync_all(index, embedder)
    state = _state(db_path)
    writer.save_semantic_state(
        signature=state.signature,
        source_hash=state.source_hash,
        dimensions=state.dimensions,
        dirty=True,
        complete=True,
    )
    result = synchronize(index, embedder)
    assert result.rebuilt and result.rebuild_reason == "dirty" and result.complete


def test_signature_change_rebuilds(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder, writer: RecordingWriter, db_path: Path
) -> None:
    memories.observation("m" * 50)
    sync_all(index, embedder)
    other = SemanticIndex(db_path, semantic_settings(chunk_bytes=20, overlap_bytes=5), writer)
    result = synchronize(other, embedder, 100)
    assert result.rebuilt and result.rebuild_reason == "signature_changed"
    assert result.embedded_chunks == 3 and result.complete


@pytest.mark.parametrize("victim", [MANIFEST_FILE, VECTOR_FILE])
@pytest.mark.parametrize("damage", ["delete", "corrupt"])
def test_missing_or_corrupt_derived_files_rebuild(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder, victim: str, damage: str
) -> None:
    for i in range(3):
        memories.observation(f"memory {i}")
    sync_all(index, embedder)
    path = index.directory / victim
    if damage == "delete":
        path.unlink()
    else:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    result = synchronize(index, embedder)
    assert result.rebuilt and result.rebuild_reason == "derived_invalid" and result.complete
    assert result.embedded_chunks == 3


def test_keyword_index_damage_is_repaired_from_the_manifest_without_reembedding(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    for i in range(3):
        memories.observation(f"memory {i}")
    sync_all(index, embedder)
    embedder.calls.clear()
    labels = index.directory / KEYWORD_DIR / "labels.json"
    labels.write_text("[1]")
    result = synchronize(index, embedder)
    assert not result.rebuilt and embedder.calls == [] and result.complete
    assert labels.read_text() != "[1]"


def test_keyword_repair_clears_the_dirty_marker(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder, db_path: Path
) -> None:
    # A repair that writes derived files sets dirty first, so it must clear it when done: otherwise
    # search says index_building and the next batch re-embeds everything.
    for i in range(3):
        memories.observation(f"memory {i}")
    sync_all(index, embedder)
    (index.directory / KEYWORD_DIR / "labels.json").write_text("[1]")
    assert synchronize(index, embedder).complete
    state = _state(db_path)
    assert not state.dirty and state.complete
    assert retrieve(index, "memory", embedder).results
    embedder.calls.clear()
    again = synchronize(index, embedder)
    assert not again.rebuilt and embedder.calls == []


def test_a_reused_rowid_is_not_mistaken_for_an_indexed_memory(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder, db_path: Path
) -> None:
    # Deleting the last row and inserting another reuses its rowid: same count, same max rowid.
    memories.observation("stays")
    gone = memories.observation("penguin colony census")
    sync_all(index, embedder)
    memories.execute("DELETE FROM om_observation WHERE observation_id = ?", (gone,))
    fresh = memories.observation("walrus migration survey")
    assert retrieve(index, "walrus", embedder).partial  # the new memory is not indexed yet
    result = synchronize(index, embedder)
    assert not result.rebuilt  # the deleted memory is removed in place, the new one indexed
    sync_all(index, embedder)
    found = retrieve(index, "walrus", embedder)
    assert not found.partial and found.results[0].memory_id == fresh
    assert all(memory.memory_id != gone for memory in retrieve(index, "penguin colony", embedder).results)


def test_full_check_finds_content_edited_in_place(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    edited = memories.observation("original words")
    sync_all(index, embedder)
    memories.execute("UPDATE om_observation SET content = 'new words' WHERE observation_id = ?", (edited,))
    assert not synchronize(index, embedder).rebuilt  # the cheap fingerprint cannot see in-place edits
    result = synchronize(index, embedder, full_check=True)
    assert result.rebuilt and result.rebuild_reason == "stale_chunk"


def test_dimension_change_marks_dirty_then_rebuilds(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder, db_path: Path
) -> None:
    memories.observation("first")
    sync_all(index, embedder)
    memories.observation("second")
    with pytest.raises(SemanticSearchError) as caught:
        synchronize(index, HashEmbedder(dimensions=8))
    assert caught.value.code == "embedding_dimensions_changed"
    assert _state(db_path).dirty
    result = synchronize(index, HashEmbedder(dimensions=8), 10)
    assert result.rebuilt and result.complete and _state(db_path).dimensions == 8


def test_dirty_marker_precedes_derived_writes_and_a_crash_leads_to_rebuild(
    index: SemanticIndex,
    memories: Memories,
    embedder: HashEmbedder,
    writer: RecordingWriter,
    db_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memories.observation("first")
    sync_all(index, embedder)
    memories.observation("second")
    seen: list[bool] = []

    def crash(self: VectorStore, _index: object) -> str:
        seen.append(bool(writer.saves[-1]["dirty"]))
        raise OSError("disk full")

    monkeypatch.setattr(VectorStore, "_save", crash)
    with pytest.raises(OSError):
        synchronize(index, embedder)
    assert seen == [True] and _state(db_path).dirty
    monkeypatch.undo()
    result = synchronize(index, embedder, 10)
    assert result.rebuilt and result.rebuild_reason == "dirty" and result.complete
    assert result.indexed_memories == 2


def test_lock_held_gives_index_busy(
    db_path: Path, writer: RecordingWriter, memories: Memories, embedder: HashEmbedder
) -> None:
    index = SemanticIndex(db_path, semantic_settings(), writer, lock_wait_s=0.05)
    memories.observation("m")
    sync_all(index, embedder)
    fd = os.open(index.directory / "index.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for call in (lambda: synchronize(index, embedder), lambda: retrieve(index, "m", embedder)):
            with pytest.raises(SemanticSearchError) as caught:
                call()
            assert caught.value.code == "index_busy"
    finally:
        os.close(fd)
    assert retrieve(index, "m", embedder).results


def test_derived_files_are_private(index: SemanticIndex, memories: Memories, embedder: HashEmbedder) -> None:
    memories.observation("m")
    sync_all(index, embedder)
    assert stat.S_IMODE(index.directory.stat().st_mode) == 0o700
    for path in index.directory.rglob("*"):
        expected = 0o700 if path.is_dir() else 0o600
        assert stat.S_IMODE(path.stat().st_mode) == expected, path.name
