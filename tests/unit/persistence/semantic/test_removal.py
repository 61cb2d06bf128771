"""Forgotten memories leave the derived index in place (issue 42): no rebuild, no re-embedding, no
``index_building`` window, and none of their text or vectors left in the index files."""

from __future__ import annotations

import tempfile
from pathlib import Path

import hnswlib
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.indexer.sync import synchronize
from actors.read.retrieval import retrieve
from persistence.semantic import MANIFEST_FILE, VECTOR_FILE, SemanticIndex, SemanticSourceReader
from persistence.semantic.manifest import Manifest
from persistence.writers.store import Store
from protocol.semantic import SemanticSearchError, parent_key
from tests.unit.persistence.semantic.conftest import (
    HashEmbedder,
    Memories,
    RecordingWriter,
    semantic_settings,
    sync_all,
)


def _index_bytes(index: SemanticIndex) -> bytes:
    """Every byte the derived index keeps on disk."""
    return b"".join(path.read_bytes() for path in sorted(index.directory.rglob("*")) if path.is_file())


def _forget(memories: Memories, memory_id: str) -> None:
    memories.execute("DELETE FROM om_observation WHERE observation_id = ?", (memory_id,))


def test_a_forgotten_memory_is_removed_without_a_rebuild_or_new_embeddings(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder, db_path: Path
) -> None:
    gone = memories.observation("quokkasecret island picnic")
    kept = [memories.observation(f"ordinary memory number {i} about lunch") for i in range(6)]
    sync_all(index, embedder)
    embedded_before = embedder.texts_embedded
    _forget(memories, gone)

    result = synchronize(index, embedder)

    assert result.complete and not result.rebuilt and result.rebuild_reason is None
    assert embedder.texts_embedded == embedded_before  # nothing was embedded again
    assert result.indexed_memories == len(kept)
    state = SemanticSourceReader(db_path).semantic_state()
    assert state is not None and state.complete and not state.dirty
    found = retrieve(index, "quokkasecret island picnic", embedder)
    assert gone not in [memory.memory_id for memory in found.results] and not found.partial
    assert retrieve(index, "ordinary memory number 3", embedder).results[0].memory_id == kept[3]


def test_no_text_or_vector_of_a_forgotten_memory_stays_in_the_index_files(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    marker = "zanzibarquux"
    gone = memories.observation(f"{marker} holiday plans")
    for i in range(5):
        memories.observation(f"another memory {i}")
    sync_all(index, embedder)
    assert marker.encode() in _index_bytes(index)
    # The stored vector: hnswlib's cosine space keeps the normalized vector as float32.
    raw = np.asarray(embedder.embed([f"{marker} holiday plans"])[0], dtype=np.float32)
    stored = (raw / np.linalg.norm(raw)).astype(np.float32).tobytes()
    assert stored in (index.directory / VECTOR_FILE).read_bytes()
    _forget(memories, gone)

    sync_all(index, embedder)

    assert marker.encode() not in _index_bytes(index)
    assert stored not in (index.directory / VECTOR_FILE).read_bytes()


def test_labels_of_removed_chunks_are_never_given_again(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    memories.observation("first memory")
    last = memories.observation("the newest memory, holding the highest label")
    sync_all(index, embedder)
    with _open(index) as manifest:
        highest = manifest.next_label() - 1
    _forget(memories, last)
    sync_all(index, embedder)
    fresh = memories.observation("a memory added after the forget")
    sync_all(index, embedder)
    with _open(index) as manifest:
        assert manifest.next_label() - 1 > highest
    assert retrieve(index, "added after the forget", embedder).results[0].memory_id == fresh


def test_forgetting_every_memory_leaves_an_empty_index_that_grows_again(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    ids = [memories.observation(f"memory {i}") for i in range(3)]
    sync_all(index, embedder)
    for memory_id in ids:
        _forget(memories, memory_id)
    assert not synchronize(index, embedder).rebuilt
    assert retrieve(index, "memory", embedder).results == ()
    fresh = memories.observation("a brand new start")
    sync_all(index, embedder)
    assert retrieve(index, "brand new start", embedder).results[0].memory_id == fresh
    with _open(index) as manifest:
        assert manifest.deleted_vector_count() == 0  # the vector file started again


class _open:
    """The index's manifest, closed on exit."""

    def __init__(self, index: SemanticIndex) -> None:
        self._manifest = Manifest.open(index.directory / MANIFEST_FILE)

    def __enter__(self) -> Manifest:
        return self._manifest

    def __exit__(self, *_: object) -> None:
        self._manifest.close()


_STEP = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 10_000)),
    st.tuples(st.just("forget"), st.integers(0, 50)),
    st.tuples(st.just("sync"), st.integers(1, 3)),
)


@settings(max_examples=25, deadline=None)
@given(steps=st.lists(_STEP, min_size=1, max_size=25))
def test_removal_interleaved_with_additions_keeps_the_index_equal_to_the_source(
    steps: list[tuple[str, int]],
) -> None:
    """Whatever the order of additions, forgets and bounded batches: search never returns a
    forgotten memory (before, during and after index jobs); once synchronized, the index holds
    exactly the current memories (each found by its own words), counts agree with the vector
    file, and nothing ever needed a rebuild after the first build."""
    with tempfile.TemporaryDirectory() as folder:
        db_path = Path(folder) / "om.sqlite"
        store = Store(db_path)
        writer = RecordingWriter(store)
        index = SemanticIndex(db_path, semantic_settings(), writer)
        memories = Memories(db_path)
        embedder = HashEmbedder(dimensions=64)
        live: dict[str, str] = {}
        forgotten: dict[str, str] = {}
        words = 0

        def never_forgotten() -> None:
            # Before, during (between the bounded batches of an index job) and after it.
            for word in forgotten.values():
                try:
                    found = retrieve(index, word, embedder).results
                except SemanticSearchError as exc:
                    assert exc.code == "index_building"  # nothing indexed yet: no answer at all
                    continue
                assert not {memory.memory_id for memory in found} & set(forgotten)

        for action, value in steps:
            if action == "add":
                words += 1
                text = f"w{value}x{words} distinct memory"
                live[memories.observation(text)] = f"w{value}x{words}"
            elif action == "forget" and live:
                memory_id = sorted(live)[value % len(live)]
                _forget(memories, memory_id)
                forgotten[memory_id] = live.pop(memory_id)
            else:
                for _ in range(value):
                    result = synchronize(index, embedder, 2)
                    assert not result.rebuilt or result.rebuild_reason == "no_state"
                    never_forgotten()
            never_forgotten()
        sync_all(index, embedder, 2)
        with _open(index) as manifest:
            keys = set(manifest.memory_digests())
            assert keys == {parent_key("observation", memory_id) for memory_id in live}
            assert manifest.chunk_count() == manifest.vector_count() == len(live)
            if manifest.vector_count():
                vectors = hnswlib.Index(space="cosine", dim=64)
                vectors.load_index(str(index.directory / VECTOR_FILE))
                in_file = manifest.vector_count() + manifest.deleted_vector_count()
                assert vectors.get_current_count() == in_file
        for memory_id, word in live.items():
            assert retrieve(index, word, embedder).results[0].memory_id == memory_id
        never_forgotten()
        store.close()
