"""Fixtures of the semantic index tests: a temporary database, fake embedders, direct row inserts."""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from actors.indexer.sync import synchronize
from actors.read.hybrid import run_hybrid_search
from actors.read.retrieval import retrieve
from persistence.search.request import SearchRequest
from persistence.semantic import SemanticIndex
from persistence.writers.store import Store
from protocol.settings import EmbeddingApiSettings, SemanticSettings

_WORD = re.compile(r"[^\W_]+")


@dataclass
class HashEmbedder:
    """Deterministic bag-of-words vectors: texts sharing words get close vectors. Counts its calls."""

    dimensions: int = 32
    calls: list[int] = field(default_factory=list)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(len(texts))
        vectors = []
        for value in texts:
            vector = [0.0] * self.dimensions
            vector[0] = 0.05  # never a zero vector
            for word in _WORD.findall(value.lower()):
                digest = hashlib.sha256(word.encode()).digest()
                vector[1 + digest[0] % (self.dimensions - 1)] += 1.0
            vectors.append(vector)
        return vectors

    @property
    def texts_embedded(self) -> int:
        return sum(self.calls)


@dataclass
class RecordingWriter:
    """A state writer that forwards to the Store and records every saved state."""

    store: Store
    saves: list[dict[str, object]] = field(default_factory=list)

    def save_semantic_state(
        self, *, signature: str, source_hash: str, dimensions: int, dirty: bool, complete: bool
    ) -> None:
        self.saves.append({"dimensions": dimensions, "dirty": dirty, "complete": complete})
        self.store.save_semantic_state(
            signature=signature,
            source_hash=source_hash,
            dimensions=dimensions,
            dirty=dirty,
            complete=complete,
        )


def semantic_settings(
    chunk_bytes: int = 1200, overlap_bytes: int = 192, batch_size: int = 4
) -> SemanticSettings:
    return SemanticSettings(
        embedding_api=EmbeddingApiSettings(
            base_url="http://localhost:8059/v1",
            model_id="fake-embedder",
            chunk_bytes=chunk_bytes,
            overlap_bytes=overlap_bytes,
            batch_size=batch_size,
        )
    )


class Memories:
    """Writes canonical rows straight into the test database (the Store created and migrated it)."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.counter = 0

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.db_path, isolation_level=None)

    def _id(self, content: str) -> str:
        self.counter += 1
        return hashlib.sha256(f"{self.counter}\n{content}".encode()).hexdigest()

    def observation(self, content: str, timestamp: str = "2026-09-11 10:00", session_id: str = "s1") -> str:
        memory_id = self._id(content)
        with self._connect() as conn:
            conn.execute(
                "INSERT INTO om_observation (observation_id, run_id, boundary_key, source_start_seq,"
                " source_end_seq, source_refs_json, content, content_hash, relevance, timestamp, token_count,"
                " observer_model, observer_schema_version, created_at)"
                " VALUES (?, ?, 'b', 1, 1, '[]', ?, ?, 'high', ?, 1, 'm', '1', '2026-09-11T10:00:00+00:00')",
                (memory_id, session_id, content, hashlib.sha256(content.encode()).hexdigest(), timestamp),
            )
        return memory_id

    def reflection(
        self, content: str, created_at: str = "2026-09-11T10:00:00+00:00", session_id: str = "s1"
    ) -> str:
        memory_id = self._id(content)
        with self._connect() as conn:
            conn.execute(
                "INSERT INTO om_reflection (reflection_id, run_id, compaction_request_id,"
                " observation_set_hash, content, supporting_observation_ids_json, compression_level,"
                " token_count, reflector_model,"
                " reflector_schema_version, created_at) VALUES (?, ?, '', 'h', ?, '[]', '0', 1, 'm', '1', ?)",
                (memory_id, session_id, content, created_at),
            )
        return memory_id

    def execute(self, sql: str, params: Sequence[object] = ()) -> None:
        with self._connect() as conn:
            conn.execute(sql, params)


@pytest.fixture
def writer(store: Store) -> RecordingWriter:
    return RecordingWriter(store)


@pytest.fixture
def memories(store: Store, db_path: Path) -> Memories:
    return Memories(db_path)


@pytest.fixture
def index(db_path: Path, writer: RecordingWriter) -> SemanticIndex:
    return SemanticIndex(db_path, semantic_settings(), writer)


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder()


def sync_all(index: SemanticIndex, embedder: HashEmbedder, batch_size: int | None = None) -> int:
    """Run batches until complete; returns the number of batches."""
    for batches in range(1, 10_000):
        if synchronize(index, embedder, batch_size).complete:
            return batches
    raise AssertionError("indexing never completed")


def hybrid_tool(index: SemanticIndex, embedder: HashEmbedder) -> Callable[[SearchRequest], dict[str, object]]:
    """The ``hybrid_search`` hook ``actors.read.hybrid.hybrid_search_for`` builds, with a fake embedder."""

    def search(request: SearchRequest) -> dict[str, object]:
        return run_hybrid_search(
            lambda: retrieve(index, request.query, embedder, bounds=request.bounds, limit=request.limit),
            request.query,
            request.limit,
        )

    return search
