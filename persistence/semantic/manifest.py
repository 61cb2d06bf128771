"""The derived chunk manifest: every indexed chunk and memory, plus the index's meta data.

A stdlib ``sqlite3`` file (``manifest.sqlite``); every access happens under the index lock, and
every committed transaction re-seals the file's checksum.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from persistence.database.sql_values import in_batches
from persistence.semantic.files import FILE_MODE, DerivedIndexError, seal, verify_sealed
from persistence.semantic.sources import KINDS, SourceFingerprint
from protocol.semantic import MemoryChunk

MANIFEST_FORMAT: Final[str] = "omray-semantic-manifest-3"
"""Version 3 indexes the transcript (``event:`` chunks with their seq) and records which chunks have
a vector; version 2's per-observation source chunks are gone (an older manifest is rebuilt)."""


class Manifest:
    """The derived chunk manifest (stdlib ``sqlite3``; every access happens under the index lock)."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self._path = path

    @classmethod
    def create(cls, path: Path, signature: str, fingerprint: SourceFingerprint) -> Manifest:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
        os.close(fd)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA secure_delete = ON")
        manifest = cls(conn, path)
        with manifest.transaction():
            conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute(
                "CREATE TABLE chunk (label INTEGER PRIMARY KEY, chunk_id TEXT NOT NULL UNIQUE,"
                " parent_key TEXT NOT NULL, position INTEGER NOT NULL, text TEXT NOT NULL,"
                " seq_start INTEGER, seq_end INTEGER, embedded INTEGER NOT NULL)"
            )
            conn.execute("CREATE INDEX chunk_parent ON chunk (parent_key)")
            conn.execute("CREATE TABLE memory (parent_key TEXT PRIMARY KEY, digest TEXT NOT NULL)")
            manifest.set_meta(
                format=MANIFEST_FORMAT,
                manifest_id=uuid.uuid4().hex,
                generation=0,
                signature=signature,
                dimensions=0,
                cursor_observation=0,
                cursor_reflection=0,
                cursor_event=0,
                fingerprint=fingerprint.to_json(),
                vector_sha="",
                keyword_sha="",
                keyword_count=0,
                chunk_count=0,
                vector_count=0,
            )
        return manifest

    @classmethod
    def open(cls, path: Path, verify: bool = True) -> Manifest:
        """Open an existing manifest; with ``verify``, its checksum must match the sealed one."""
        if not path.is_file():
            raise DerivedIndexError(f"semantic manifest {path.name!r} is missing")
        if verify:
            verify_sealed(path)
        conn = sqlite3.connect(f"{path.as_uri()}?mode=rw", uri=True, isolation_level=None)
        # A forgotten memory's chunk rows are removed in place: their text must not stay behind in
        # the file's free pages.
        conn.execute("PRAGMA secure_delete = ON")
        manifest = cls(conn, path)
        try:
            if manifest.meta("format") != MANIFEST_FORMAT:
                raise DerivedIndexError(f"semantic manifest {path.name!r} has an unknown format")
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise DerivedIndexError(f"semantic manifest {path.name!r} is unreadable") from exc
        except DerivedIndexError:
            conn.close()
            raise
        return manifest

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")
        seal(self._path)

    def meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def meta_int(self, key: str) -> int:
        value = self.meta(key)
        if value is None:
            raise DerivedIndexError(f"semantic manifest lacks {key!r}")
        return int(value)

    def set_meta(self, **values: object) -> None:
        self._conn.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?)"
            " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            [(key, str(value)) for key, value in values.items()],
        )

    def token(self) -> tuple[str | None, str | None]:
        """Identity of the manifest's current contents (changes on every write and on rebuild)."""
        return (self.meta("manifest_id"), self.meta("generation"))

    def cursors(self) -> dict[str, int]:
        return {kind: self.meta_int(f"cursor_{kind}") for kind in KINDS}

    def fingerprint(self) -> SourceFingerprint:
        raw = self.meta("fingerprint")
        if raw is None:
            raise DerivedIndexError("semantic manifest lacks its fingerprint")
        return SourceFingerprint.from_json(raw)

    def chunk_count(self) -> int:
        """Chunks in the manifest: kept in ``meta`` by :meth:`add` (a search reads it once or twice,
        and counting 100,000 rows costs milliseconds); counted for a manifest written without it."""
        kept = self.meta("chunk_count")
        if kept is not None:
            return int(kept)
        return int(self._conn.execute("SELECT count(*) FROM chunk").fetchone()[0])

    def vector_count(self) -> int:
        """Chunks that have a vector (the vector file holds exactly these labels); kept like
        :meth:`chunk_count`."""
        kept = self.meta("vector_count")
        if kept is not None:
            return int(kept)
        return int(self._conn.execute("SELECT count(*) FROM chunk WHERE embedded = 1").fetchone()[0])

    def vector_labels_for(self, labels: Collection[int]) -> dict[int, int]:
        """For chunk labels, the label whose vector stands for each: its own when it has one, else the
        first chunk of the same event (the only one of an event's chunks with a vector). Chunks
        with neither are left out."""
        found: dict[int, int] = {}
        for batch, marks in in_batches(labels):
            rows = self._conn.execute(
                "SELECT c.label, coalesce(CASE WHEN c.embedded = 1 THEN c.label END,"
                " (SELECT f.label FROM chunk AS f WHERE f.parent_key = c.parent_key AND f.embedded = 1"
                " AND f.seq_start IS NOT NULL ORDER BY f.position LIMIT 1))"
                f" FROM chunk AS c WHERE c.label IN ({marks})",
                batch,
            )
            found.update((int(label), int(vector)) for label, vector in rows if vector is not None)
        return found

    def deleted_vector_count(self) -> int:
        """Vectors of removed chunks that the vector file still holds, marked deleted (and scrubbed)."""
        kept = self.meta("deleted_vectors")
        return 0 if kept is None else int(kept)

    def memory_count(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM memory").fetchone()[0])

    def next_label(self) -> int:
        """A label no chunk has had: removed chunks' labels stay marked deleted in the vector file."""
        highest = int(self._conn.execute("SELECT coalesce(max(label), 0) FROM chunk").fetchone()[0])
        return max(highest, int(self.meta("label_floor") or 0)) + 1

    def labels_of(self, keys: Collection[str]) -> dict[int, bool]:
        """Chunk labels of the memories or events ``keys``, each with whether it has a vector."""
        found: dict[int, bool] = {}
        for batch, marks in in_batches(keys):
            rows = self._conn.execute(
                f"SELECT label, embedded FROM chunk WHERE parent_key IN ({marks})", batch
            )
            found.update((int(label), bool(embedded)) for label, embedded in rows)
        return found

    def remove(self, keys: Collection[str]) -> None:
        """Remove the chunks and digests of the memories or events ``keys`` and update the counts
        (call inside :meth:`transaction`; the vector and keyword files are the caller's)."""
        labels = self.labels_of(keys)
        if labels:
            # deleted_vectors is the vector file's to say (VectorStore.update); the commit records it.
            self.set_meta(
                chunk_count=self.chunk_count() - len(labels),
                vector_count=self.vector_count() - sum(labels.values()),
                label_floor=max(int(self.meta("label_floor") or 0), max(labels)),
            )
        for batch, marks in in_batches(keys):
            self._conn.execute(f"DELETE FROM chunk WHERE parent_key IN ({marks})", batch)
            self._conn.execute(f"DELETE FROM memory WHERE parent_key IN ({marks})", batch)

    def memory_digest(self, key: str) -> str | None:
        row = self._conn.execute("SELECT digest FROM memory WHERE parent_key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def memory_digests(self) -> dict[str, str]:
        return {
            str(key): str(digest)
            for key, digest in self._conn.execute("SELECT parent_key, digest FROM memory")
        }

    def chunk_ids_of(self, key: str) -> set[str]:
        """Chunk ids of a memory or event."""
        sql = "SELECT chunk_id FROM chunk WHERE parent_key = ?"
        return {str(row[0]) for row in self._conn.execute(sql, (key,))}

    def in_progress_parents(self) -> set[str]:
        rows = self._conn.execute(
            "SELECT DISTINCT parent_key FROM chunk WHERE parent_key NOT IN (SELECT parent_key FROM memory)"
        )
        return {str(row[0]) for row in rows}

    def chunks_by_labels(self, labels: Collection[int]) -> dict[int, MemoryChunk]:
        found: dict[int, MemoryChunk] = {}
        for batch, marks in in_batches(labels):
            rows = self._conn.execute(
                "SELECT label, chunk_id, parent_key, position, text, seq_start, seq_end, embedded FROM chunk"
                f" WHERE label IN ({marks})",
                batch,
            )
            for label, chunk_id, key, position, chunk_text, seq_start, seq_end, embedded in rows:
                found[int(label)] = MemoryChunk(
                    str(chunk_id),
                    str(key),
                    int(position),
                    str(chunk_text),
                    None if seq_start is None else int(seq_start),
                    None if seq_end is None else int(seq_end),
                    bool(embedded),
                )
        return found

    def all_chunk_texts(self) -> list[tuple[int, str]]:
        return [
            (int(label), str(value))
            for label, value in self._conn.execute("SELECT label, text FROM chunk ORDER BY label")
        ]

    def add(self, chunks: Sequence[tuple[int, MemoryChunk]], memories: Sequence[tuple[str, str]]) -> None:
        """Add chunks and memory digests, and their counts (call inside :meth:`transaction`)."""
        counts = {
            "chunk_count": self.chunk_count() + len(chunks),
            "vector_count": self.vector_count() + sum(1 for _, c in chunks if c.embedded),
        }
        self._conn.executemany(
            "INSERT INTO chunk (label, chunk_id, parent_key, position, text, seq_start, seq_end, embedded)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (label, c.chunk_id, c.parent_key, c.position, c.text, c.seq_start, c.seq_end, int(c.embedded))
                for label, c in chunks
            ],
        )
        self._conn.executemany(
            "INSERT INTO memory (parent_key, digest) VALUES (?, ?)"
            " ON CONFLICT(parent_key) DO UPDATE SET digest = excluded.digest",
            memories,
        )
        self.set_meta(**counts)
