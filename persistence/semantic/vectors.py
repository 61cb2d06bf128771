"""The vector half of hybrid search: an ``hnswlib`` cosine index of the chunk vectors, by label."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import hnswlib
import numpy as np

from persistence.semantic.files import VECTOR_FILE, DerivedIndexError, file_digest, file_key, secure_file
from persistence.semantic.manifest import Manifest
from protocol.semantic import MemoryChunk

HNSW_M: Final[int] = 16
"""Graph degree of the vector index."""
HNSW_EF_CONSTRUCTION: Final[int] = 100
"""Candidate list while inserting. Searches read 100 hits with ef 100, and hnswlib's guide sizes
ef_construction so that such a search finds >= 0.9 of the true neighbours. On 20,919 MiniLM
vectors of the LongMemEval chunks, 100 gave recall@100 0.981 (200: 0.984; recall@10 1.0 for
both) in 40 % of the insert time; inserts were the largest cost of a backfill after embedding."""
HNSW_SEED: Final[int] = 100
"""Seed of the level generator (same input, same graph)."""
_HNSW_MIN_CAPACITY: Final[int] = 64


class VectorStore:
    """The vector file of one index directory, verified against the manifest and cached.

    Not thread-safe; the owning :class:`persistence.semantic.index.SemanticIndex` calls it under
    the index lock.
    """

    def __init__(self, directory: Path) -> None:
        self._path = directory / VECTOR_FILE
        self._cache: tuple[tuple[int, int, int], str, Any] | None = None

    def forget(self) -> None:
        """Drop the cached index (the file was removed or may have changed)."""
        self._cache = None

    def load(self, manifest: Manifest, dimensions: int) -> Any:
        """The verified vector index of the manifest (cached while the file is unchanged)."""
        path = self._path
        expected_sha = manifest.meta("vector_sha") or ""
        expected_count = manifest.vector_count() + manifest.deleted_vector_count()
        if not path.is_file():
            raise DerivedIndexError(f"semantic vector file {VECTOR_FILE!r} is missing")
        key = file_key(path)
        cached = self._cache
        if cached is not None and cached[0] == key and cached[1] == expected_sha:
            index = cached[2]
        else:
            self._cache = None
            if file_digest(path) != expected_sha:
                raise DerivedIndexError(f"semantic vector file {VECTOR_FILE!r} fails its checksum")
            index = hnswlib.Index(space="cosine", dim=dimensions)
            try:
                index.load_index(str(path))
            except RuntimeError as exc:
                raise DerivedIndexError(f"semantic vector file {VECTOR_FILE!r} is unreadable") from exc
        if int(index.get_current_count()) != expected_count or int(index.dim) != dimensions:
            raise DerivedIndexError(f"semantic vector file {VECTOR_FILE!r} disagrees with the manifest")
        self._cache = (key, expected_sha, index)
        return index

    def _save(self, index: Any) -> str:
        temporary = self._path.with_name(f"{VECTOR_FILE}.tmp")
        index.save_index(str(temporary))
        secure_file(temporary)
        os.replace(temporary, self._path)
        digest = file_digest(self._path)
        self._cache = (file_key(self._path), digest, index)
        return digest

    def update(
        self,
        manifest: Manifest,
        dimensions: int,
        removed: Sequence[int],
        labels: Sequence[tuple[int, MemoryChunk]],
        vectors: Sequence[Sequence[float]],
    ) -> tuple[str, int]:
        """Remove the vectors of the ``removed`` labels and add the labelled ``vectors``, then save the
        file atomically: its digest, and how many removed vectors it keeps marked deleted.

        A removed vector is first overwritten with a random unit vector, then marked deleted: the
        file keeps the graph node (hnswlib cannot drop one) but no longer the forgotten text's
        embedding. When no vector stays, the file starts again empty (and keeps none)."""
        try:
            live = manifest.vector_count() - len(removed)
            if live <= 0:
                index = hnswlib.Index(space="cosine", dim=dimensions)
                index.init_index(
                    max_elements=max(_HNSW_MIN_CAPACITY, len(labels)),
                    M=HNSW_M,
                    ef_construction=HNSW_EF_CONSTRUCTION,
                    random_seed=HNSW_SEED,
                )
                deleted = 0
            else:
                index = self.load(manifest, dimensions)
                deleted = manifest.deleted_vector_count() + len(removed)
                if removed:
                    scrub = np.random.default_rng(len(removed)).normal(size=(len(removed), dimensions))
                    ids = np.asarray(removed, dtype=np.uint64)
                    index.add_items(scrub.astype(np.float32), ids)
                    for label in removed:
                        index.mark_deleted(int(label))
            needed = int(index.get_current_count()) + len(labels)
            capacity = int(index.get_max_elements())
            if needed > capacity:
                index.resize_index(max(needed, 2 * capacity))
            if labels:
                data = np.asarray(vectors, dtype=np.float32)
                index.add_items(data, np.asarray([label for label, _ in labels], dtype=np.uint64))
            return self._save(index), deleted
        except BaseException:
            self._cache = None  # the in-memory index may hold items the file does not
            raise
