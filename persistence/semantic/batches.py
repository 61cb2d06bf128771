"""One indexing batch as storage sees it (reference §14.3, §14.4): the plan a batch commits, and
the reads that fill it under the index lock.

Which rows a batch takes, and where it stops, is the indexer's rule (:mod:`actors.indexer.plan`);
it reads through a :class:`BatchSource`, which :meth:`persistence.semantic.build.IndexBuilder.planning`
hands out under the exclusive lock, after any rebuild. The commit is
:meth:`persistence.semantic.build.IndexBuilder.commit_batch`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from persistence.semantic.manifest import Manifest
from persistence.semantic.sources import SemanticSourceReader, SemanticState, SourceFingerprint, SourceRow
from protocol.semantic import ChunkingRules, MemoryChunk, MemoryKind


@dataclass
class BatchPlan:
    """What one synchronization batch will embed and record, planned under the lock."""

    state: SemanticState
    fingerprint: SourceFingerprint
    manifest_token: tuple[str | None, str | None]
    chunks: list[MemoryChunk]
    completed: list[tuple[str, str]]
    new_memories: list[tuple[str, str]]
    cursors: dict[str, int]
    cursors_changed: bool
    rebuilt: bool
    rebuild_reason: str | None
    keyword_invalid: bool
    memories_read: int = 0
    memories_chunked: int = 0
    removed: frozenset[str] = frozenset()
    """Indexed memories and events that are gone from the source (forgotten): removed in place."""
    removed_labels: dict[int, bool] = field(default_factory=dict)
    """Their chunk labels, each with whether it has a vector."""
    keyword_rows: list[tuple[int, str]] | None = None
    """With a removal: the chunk texts the keyword index keeps (rebuilt outside the lock)."""

    @property
    def embedded(self) -> int:
        """Chunks of the batch that need a vector."""
        return sum(1 for chunk in self.chunks if chunk.embedded)

    def vector_texts(self) -> list[str]:
        """The texts to embed, one per chunk that needs a vector, in chunk order."""
        return [chunk.vector_text for chunk in self.chunks if chunk.embedded]


class BatchSource:
    """The reads that fill one :class:`BatchPlan`, valid only inside
    :meth:`persistence.semantic.build.IndexBuilder.planning` (under the exclusive lock)."""

    def __init__(
        self, plan: BatchPlan, reader: SemanticSourceReader, manifest: Manifest, rules: ChunkingRules
    ) -> None:
        self.plan = plan
        """The plan to fill (cursors, chunks and counters are updated in place)."""
        self.rules = rules
        """How memory text is cut into chunks."""
        self._reader = reader
        self._manifest = manifest

    def rows_after(self, kind: MemoryKind, rowid: int, limit: int) -> list[SourceRow]:
        """Up to ``limit`` canonical rows of ``kind`` after ``rowid``, in rowid order."""
        return self._reader.rows_after(kind, rowid, limit)

    def transcript_texts_of(self, wanted: Collection[tuple[str, int]]) -> dict[tuple[str, int], str]:
        """The transcript text of each ``(session, seq)`` that has one (what observations quote)."""
        return self._reader.transcript_texts_of(wanted)

    def indexed_digest(self, key: str) -> str | None:
        """Content digest of a memory or event indexed whole, else ``None``."""
        return self._manifest.memory_digest(key)

    def indexed_chunk_ids(self, key: str) -> set[str]:
        """Chunk ids of a memory or event already in the index."""
        return self._manifest.chunk_ids_of(key)
