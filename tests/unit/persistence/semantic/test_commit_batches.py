"""Several embedding batches per synchronize call, committed once (the backfill's cost at scale)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.indexer.sync import embed_in_batches, synchronize
from actors.read.retrieval import retrieve
from persistence.semantic import SemanticIndex, SemanticSourceReader
from persistence.semantic.vectors import VectorStore
from protocol.semantic import SemanticSearchError
from tests.unit.persistence.semantic.conftest import HashEmbedder, Memories, RecordingWriter, sync_all


def test_several_batches_are_embedded_separately_and_saved_once(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(10):
        memories.observation(f"observation {i} {'words ' * i}")
    saves: list[int] = []
    original = VectorStore._save

    def counting(self: VectorStore, built: object) -> str:
        saves.append(1)
        return original(self, built)

    monkeypatch.setattr(VectorStore, "_save", counting)
    first = synchronize(index, embedder, 3, batches=2)
    assert first.embedded_chunks == 6 and not first.complete
    assert embedder.calls == [3, 3] and saves == [1]
    second = synchronize(index, embedder, 3, batches=2)
    assert second.complete and second.embedded_chunks == 4 and second.indexed_memories == 10
    assert embedder.calls == [3, 3, 3, 1] and len(saves) == 2
    for i in (0, 9):  # both batches were saved: each observation is found (the toy vectors rank loosely)
        found = retrieve(index, f"observation {i}", embedder).results[:2]
        assert any(memory.content.startswith(f"observation {i} ") for memory in found)


def test_a_failing_later_batch_writes_nothing_and_the_next_call_resumes(
    index: SemanticIndex, memories: Memories, writer: RecordingWriter, db_path: Path
) -> None:
    for i in range(4):
        memories.observation(f"first wave {i}")
    sync_all(index, HashEmbedder(), 4)
    for i in range(6):
        memories.observation(f"second wave {i}")
    saves_before = len(writer.saves)

    class FailingSecondCall(HashEmbedder):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            if len(self.calls) == 1:
                raise SemanticSearchError("embedding_unavailable", "endpoint down")
            return super().embed(texts)

    with pytest.raises(SemanticSearchError):
        synchronize(index, FailingSecondCall(), 3, batches=2)
    assert len(writer.saves) == saves_before  # not even a dirty marker: nothing was written
    state = SemanticSourceReader(db_path).semantic_state()
    assert state is not None and not state.dirty
    assert index.progress().indexed_count == 4
    assert len(retrieve(index, "first wave", HashEmbedder()).results) == 4  # the index stays readable
    result = synchronize(index, HashEmbedder(), 3, batches=2)
    assert result.complete and not result.rebuilt and result.indexed_memories == 10


def test_batches_must_be_positive(index: SemanticIndex, embedder: HashEmbedder) -> None:
    with pytest.raises(ValueError):
        synchronize(index, embedder, 4, batches=0)


@given(st.lists(st.text(max_size=12), max_size=30), st.integers(min_value=1, max_value=7))
def test_embed_in_batches_keeps_input_order_and_groups_similar_lengths(texts: list[str], size: int) -> None:
    embedder = HashEmbedder()
    seen: list[list[str]] = []

    class Recording(HashEmbedder):
        def embed(self, batch: Sequence[str]) -> list[list[float]]:
            seen.append(list(batch))
            return super().embed(batch)

    vectors = embed_in_batches(Recording(), texts, size)
    assert vectors == embedder.embed(texts)  # each text gets its own vector, in input order
    assert all(0 < len(batch) <= size for batch in seen)
    lengths = [len(text) for batch in seen for text in batch]
    assert lengths == sorted(lengths)  # every batch holds texts of neighbouring lengths
