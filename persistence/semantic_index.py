"""The derived hybrid-search index of one memory database and its lifecycle (reference §14.4, §14.5).

Everything under ``<database>.semantic/`` (directory 0700, files 0600) is *derived*: it is rebuilt
from the canonical ``om_observation`` / ``om_reflection`` rows whenever it is missing, stale,
inconsistent or corrupt, and is never the source of any memory. It holds:

* ``manifest.sqlite``: every indexed chunk (integer label, chunk id, parent key ``kind:id``,
  position, text), every fully indexed memory (parent key, content digest) and the meta data
  (signature, dimensions, resumable cursor, source fingerprint, file checksums);
* ``vectors.hnsw``: an ``hnswlib`` cosine index of the chunk vectors, keyed by label;
* ``keyword/``: a ``bm25s`` index over the manifest's chunk texts (plus its label order);
* ``index.lock``: the per-project ``flock`` lock (busy -> ``index_busy``).

The durable status lives in the canonical ``om_semantic_state`` row, written through a
:class:`SemanticStateWriter` (the database's ``Store``): ``dirty`` is saved before any write to
derived storage and cleared only after all of them succeeded, so any interrupted write leads to a
rebuild instead of a silently inconsistent index.

Unlike the original, which re-read and re-chunked every memory for each batch, indexing keeps a
resumable cursor: memories are processed per table in ``rowid`` order (observations, then
reflections), ``rowid <= cursor`` means "fully indexed", and a cheap source fingerprint (row count
and max rowid per table) tells appends (new rows lie after the cursor) from other changes, which
alone trigger a full comparison of the manifest with the canonical rows. A batch therefore reads
and chunks O(batch) memories however many are already indexed. Canonical rows are append-only
in omray (content-hash ids, insert-or-verify writes); ``synchronize(full_check=True)`` compares
everything for a database edited by other tools, and search re-checks every hit against the
current canonical text, so a stale chunk is never returned.

Network calls (embedding the query or a batch) never run under the lock: the snapshot is
re-validated after re-acquiring it. Logs carry counts, codes and reasons only.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import sqlite3
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NoReturn, Protocol

import bm25s
import hnswlib
import numpy as np
from sqlalchemy import Connection, text

from persistence.queries import MemoryReader
from protocol.canonical import canonical_json, sha256_hex
from protocol.errors import StorageError
from protocol.semantic import (
    EMBEDDING_UNAVAILABLE_MESSAGE,
    INDEX_BUILDING_MESSAGE,
    INDEX_BUSY_MESSAGE,
    INDEX_DIMENSIONS_MESSAGE,
    QUERY_DIMENSIONS_MESSAGE,
    ChunkingRules,
    DateBounds,
    Embedder,
    MemoryChunk,
    MemoryKind,
    Reranker,
    Retrieval,
    SemanticSearchError,
    SourceMemory,
    apply_rerank,
    collapse_to_memories,
    filter_store_hits,
    query_text_for_embedding,
    rrf_fuse,
    store_fetch_size,
)
from protocol.settings import SemanticSettings

logger = logging.getLogger("omray.semantic")

DIRECTORY_MODE: Final[int] = 0o700
FILE_MODE: Final[int] = 0o600
LOCK_FILE: Final[str] = "index.lock"
MANIFEST_FILE: Final[str] = "manifest.sqlite"
VECTOR_FILE: Final[str] = "vectors.hnsw"
KEYWORD_DIR: Final[str] = "keyword"
KEYWORD_LABELS_FILE: Final[str] = "labels.json"
MANIFEST_FORMAT: Final[str] = "omray-semantic-manifest-1"
FUSED_CANDIDATE_LIMIT: Final[int] = 200

_HNSW_M: Final[int] = 16
_HNSW_EF_CONSTRUCTION: Final[int] = 200
_HNSW_MIN_CAPACITY: Final[int] = 64
_HNSW_SEED: Final[int] = 100
_TOKEN = re.compile(r"[^\W_]+")
_TABLES: Final = ("om_observation", "om_reflection")
_KINDS: Final[tuple[MemoryKind, MemoryKind]] = ("observation", "reflection")
_ID_BATCH: Final[int] = 500


class SemanticStateWriter(Protocol):
    """Writes the canonical ``om_semantic_state`` row (``persistence.store.Store`` satisfies it)."""

    def save_semantic_state(
        self, *, signature: str, source_hash: str, dimensions: int, dirty: bool, complete: bool
    ) -> None:
        """Upsert the one state row."""
        ...


class DerivedIndexError(StorageError):
    """A derived index file is missing, corrupt or inconsistent (the index must be rebuilt)."""


@dataclass(frozen=True, slots=True)
class SemanticState:
    """The ``om_semantic_state`` row."""

    signature: str
    """``SemanticSettings.signature()`` the index was built with."""
    source_hash: str
    """Digest of the source fingerprint the index was last synchronized against."""
    dimensions: int
    """Vector dimensions (0 before the first embedded batch)."""
    dirty: bool
    """A derived write may have been interrupted: rebuild before use."""
    complete: bool
    """Every current memory was indexed at the last synchronization."""


@dataclass(frozen=True, slots=True)
class TableFingerprint:
    """Cheap summary of one memory table."""

    count: int
    """Rows."""
    max_rowid: int
    """Largest rowid (0 when empty)."""
    last_id: str = ""
    """Memory id at ``max_rowid`` (``""`` when empty): SQLite reuses the rowid of a deleted last row."""


@dataclass(frozen=True, slots=True)
class SourceFingerprint:
    """Cheap summary of the canonical memories: changes when rows are added or removed.

    In-place edits leave it unchanged (canonical rows are append-only in omray); search still
    rejects every hit whose text changed and then reports ``partial``.
    """

    observations: TableFingerprint
    """``om_observation``."""
    reflections: TableFingerprint
    """``om_reflection``."""

    @property
    def total(self) -> int:
        """Number of source memories."""
        return self.observations.count + self.reflections.count

    def table(self, kind: str) -> TableFingerprint:
        """The fingerprint of the table holding ``kind``."""
        return self.observations if kind == "observation" else self.reflections

    def to_json(self) -> str:
        """Stable text form (also what :meth:`digest` hashes)."""
        return canonical_json(
            [
                [self.observations.count, self.observations.max_rowid, self.observations.last_id],
                [self.reflections.count, self.reflections.max_rowid, self.reflections.last_id],
            ]
        )

    def digest(self) -> str:
        """The ``source_hash`` stored in the state row."""
        return sha256_hex("omray-semantic-source-v1\n" + self.to_json())

    @classmethod
    def from_json(cls, raw: str) -> SourceFingerprint:
        """Inverse of :meth:`to_json` (a fingerprint without last ids reads as unknown ids)."""
        observations, reflections = (
            TableFingerprint(int(part[0]), int(part[1]), str(part[2]) if len(part) > 2 else "")
            for part in json.loads(raw)
        )
        return cls(observations, reflections)


EMPTY_FINGERPRINT: Final = SourceFingerprint(TableFingerprint(0, 0), TableFingerprint(0, 0))


@dataclass(frozen=True, slots=True)
class SourceRow:
    """One canonical memory with its table rowid."""

    rowid: int
    """Rowid in its table."""
    memory: SourceMemory
    """The memory."""


@dataclass(frozen=True, slots=True)
class IndexProgress:
    """Progress in memory units (reference §14.4), not a readiness signal."""

    indexed_count: int
    """Current memories fully indexed (0 unless the state is clean with a matching signature)."""
    source_count: int
    """Current memories."""

    def as_dict(self) -> dict[str, int]:
        """``{"indexed_count", "source_count"}``."""
        return {"indexed_count": self.indexed_count, "source_count": self.source_count}


@dataclass(frozen=True, slots=True)
class SyncResult:
    """Outcome of one bounded :meth:`SemanticIndex.synchronize` batch."""

    complete: bool
    """Nothing is pending and the source did not change during the batch."""
    indexed_memories: int
    """Memories fully indexed after the batch."""
    source_memories: int
    """Current memories."""
    rebuilt: bool
    """The derived index was discarded and started again in this call."""
    embedded_chunks: int
    """Chunks embedded and stored in this call."""
    memories_read: int = 0
    """Canonical memories read to plan the batch (cost measure; excludes a full comparison)."""
    memories_chunked: int = 0
    """Memories chunked to plan the batch (cost measure)."""
    rebuild_reason: str | None = None
    """Why the index was rebuilt, when it was."""


def _content_digest(content: str) -> str:
    return sha256_hex(content)


def _observation(row: Any) -> SourceMemory:
    return SourceMemory(
        "observation", row.observation_id, row.run_id, row.timestamp, row.content, row.relevance
    )


def _reflection(row: Any) -> SourceMemory:
    return SourceMemory("reflection", row.reflection_id, row.run_id, row.created_at, row.content, None)


_SELECT: Final = {
    "observation": (
        "SELECT rowid AS rid, observation_id, run_id, timestamp, content, relevance FROM om_observation",
        _observation,
        "observation_id",
        "om_observation",
    ),
    "reflection": (
        "SELECT rowid AS rid, reflection_id, run_id, created_at, content FROM om_reflection",
        _reflection,
        "reflection_id",
        "om_reflection",
    ),
}


class SemanticSourceReader(MemoryReader):
    """Read-only queries the semantic index needs (same guarantees as :class:`MemoryReader`)."""

    def semantic_state(self) -> SemanticState | None:
        """The state row, or ``None`` when there is none."""

        def query(conn: Connection) -> SemanticState | None:
            row = conn.execute(
                text("SELECT signature, source_hash, dimensions, dirty, complete FROM om_semantic_state")
            ).first()
            if row is None:
                return None
            return SemanticState(
                row.signature, row.source_hash, int(row.dimensions), bool(row.dirty), bool(row.complete)
            )

        return self._run(query, None, ("om_semantic_state",))

    def fingerprint(self) -> SourceFingerprint:
        """Row count and max rowid of both memory tables, in one snapshot."""

        def query(conn: Connection) -> SourceFingerprint:
            parts = []
            for kind in _KINDS:
                _, _, id_column, table = _SELECT[kind]
                row = conn.execute(text(f"SELECT count(*), coalesce(max(rowid), 0) FROM {table}")).one()
                last = conn.execute(text(f"SELECT {id_column} FROM {table} WHERE rowid = :r"), {"r": row[1]})
                parts.append(TableFingerprint(int(row[0]), int(row[1]), str(last.scalar() or "")))
            return SourceFingerprint(parts[0], parts[1])

        return self._run(query, EMPTY_FINGERPRINT, _TABLES)

    def rows_after(self, kind: MemoryKind, rowid: int, limit: int) -> list[SourceRow]:
        """Up to ``limit`` memories of ``kind`` with a rowid above ``rowid``, in rowid order."""
        sql, build, _, table = _SELECT[kind]

        def query(conn: Connection) -> list[SourceRow]:
            rows = conn.execute(
                text(f"{sql} WHERE rowid > :rowid ORDER BY rowid LIMIT :limit"),
                {"rowid": rowid, "limit": limit},
            )
            return [SourceRow(int(row.rid), build(row)) for row in rows]

        return self._run(query, [], (table,))

    def id_at(self, kind: MemoryKind, rowid: int) -> str:
        """Memory id of the row of ``kind`` at ``rowid`` (``""`` when there is none)."""
        _, _, id_column, table = _SELECT[kind]

        def query(conn: Connection) -> str:
            value = conn.execute(
                text(f"SELECT {id_column} FROM {table} WHERE rowid = :r"), {"r": rowid}
            ).scalar()
            return str(value or "")

        return self._run(query, "", (table,))

    def count_through(self, kind: MemoryKind, rowid: int) -> int:
        """Rows of ``kind`` with a rowid at most ``rowid``."""
        table = _SELECT[kind][3]

        def query(conn: Connection) -> int:
            return int(
                conn.execute(
                    text(f"SELECT count(*) FROM {table} WHERE rowid <= :r"), {"r": rowid}
                ).scalar_one()
            )

        return self._run(query, 0, (table,))

    def has_rows_after(self, cursors: dict[str, int]) -> bool:
        """Whether any memory lies after the per-kind cursors."""

        def query(conn: Connection) -> bool:
            for kind in _KINDS:
                table = _SELECT[kind][3]
                found = conn.execute(
                    text(f"SELECT 1 FROM {table} WHERE rowid > :r LIMIT 1"), {"r": cursors[kind]}
                ).first()
                if found is not None:
                    return True
            return False

        return self._run(query, False, _TABLES)

    def memories_by_keys(self, keys: Collection[str]) -> dict[str, SourceMemory]:
        """Current memories by parent key (unknown keys are left out)."""
        ids: dict[str, list[str]] = {kind: [] for kind in _KINDS}
        for key in keys:
            kind, _, memory_id = key.partition(":")
            if kind in ids:
                ids[kind].append(memory_id)

        def query(conn: Connection) -> dict[str, SourceMemory]:
            found: dict[str, SourceMemory] = {}
            for kind in _KINDS:
                sql, build, id_column, _ = _SELECT[kind]
                wanted = ids[kind]
                for start in range(0, len(wanted), _ID_BATCH):
                    batch = wanted[start : start + _ID_BATCH]
                    names = ", ".join(f":id{i}" for i in range(len(batch)))
                    params = {f"id{i}": value for i, value in enumerate(batch)}
                    for row in conn.execute(text(f"{sql} WHERE {id_column} IN ({names})"), params):
                        memory = build(row)
                        found[memory.parent_key] = memory
            return found

        return self._run(query, {}, _TABLES)

    def content_digests(self) -> dict[str, tuple[MemoryKind, int, str]]:
        """Every memory: parent key -> (kind, rowid, content digest). O(all memories): full checks only."""

        def query(conn: Connection) -> dict[str, tuple[MemoryKind, int, str]]:
            found: dict[str, tuple[MemoryKind, int, str]] = {}
            tables = set(conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'")).scalars())
            for kind in _KINDS:
                sql, build, _, table = _SELECT[kind]
                if table not in tables:
                    continue
                for row in conn.execute(text(sql)):
                    memory = build(row)
                    found[memory.parent_key] = (kind, int(row.rid), _content_digest(memory.content))
            return found

        return self._run(query, {}, ())


# ------------------------------------------------------------------------------- derived files


def _secure_file(path: Path) -> None:
    os.chmod(path, FILE_MODE)


def _file_digest(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _file_key(path: Path) -> tuple[int, int, int]:
    info = path.stat()
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def tokenize(text_value: str) -> list[str]:
    """Keyword tokens: lowercased runs of letters and digits (no query syntax reaches the index)."""
    return _TOKEN.findall(text_value.lower())


def query_tokens(query: str) -> list[str]:
    """Unique keyword tokens of a query, in order."""
    return list(dict.fromkeys(tokenize(query)))


_SEALED: dict[str, tuple[tuple[int, int, int], str]] = {}
"""Manifest path -> (file key, checksum) last sealed or verified by this process."""


def _seal_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _seal(path: Path) -> None:
    """Record the manifest's checksum next to it (SQLite pages carry none of their own)."""
    digest = _file_digest(path)
    seal = _seal_path(path)
    temporary = seal.with_name(seal.name + ".tmp")
    temporary.write_text(digest, encoding="ascii")
    _secure_file(temporary)
    os.replace(temporary, seal)
    _SEALED[str(path)] = (_file_key(path), digest)


def _verify_sealed(path: Path) -> None:
    try:
        expected = _seal_path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise DerivedIndexError(f"semantic manifest {path.name!r} has no readable checksum") from exc
    key = _file_key(path)
    if _SEALED.get(str(path)) == (key, expected):
        return
    if _file_digest(path) != expected:
        raise DerivedIndexError(f"semantic manifest {path.name!r} fails its checksum")
    _SEALED[str(path)] = (key, expected)


class _Manifest:
    """The derived chunk manifest (stdlib ``sqlite3``; every access happens under the index lock)."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self._path = path

    @classmethod
    def create(cls, path: Path, signature: str, fingerprint: SourceFingerprint) -> _Manifest:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
        os.close(fd)
        conn = sqlite3.connect(path, isolation_level=None)
        manifest = cls(conn, path)
        with manifest.transaction():
            conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute(
                "CREATE TABLE chunk (label INTEGER PRIMARY KEY, chunk_id TEXT NOT NULL UNIQUE,"
                " parent_key TEXT NOT NULL, position INTEGER NOT NULL, text TEXT NOT NULL)"
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
                fingerprint=fingerprint.to_json(),
                vector_sha="",
                keyword_sha="",
                keyword_count=0,
            )
        return manifest

    @classmethod
    def open(cls, path: Path, verify: bool = True) -> _Manifest:
        """Open an existing manifest; with ``verify``, its checksum must match the sealed one."""
        if not path.is_file():
            raise DerivedIndexError(f"semantic manifest {path.name!r} is missing")
        if verify:
            _verify_sealed(path)
        conn = sqlite3.connect(f"{path.as_uri()}?mode=rw", uri=True, isolation_level=None)
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
        _seal(self._path)

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
        return {kind: self.meta_int(f"cursor_{kind}") for kind in _KINDS}

    def fingerprint(self) -> SourceFingerprint:
        raw = self.meta("fingerprint")
        if raw is None:
            raise DerivedIndexError("semantic manifest lacks its fingerprint")
        return SourceFingerprint.from_json(raw)

    def chunk_count(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM chunk").fetchone()[0])

    def memory_count(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM memory").fetchone()[0])

    def next_label(self) -> int:
        return int(self._conn.execute("SELECT coalesce(max(label), 0) + 1 FROM chunk").fetchone()[0])

    def memory_digest(self, key: str) -> str | None:
        row = self._conn.execute("SELECT digest FROM memory WHERE parent_key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def memory_digests(self) -> dict[str, str]:
        return {
            str(key): str(digest)
            for key, digest in self._conn.execute("SELECT parent_key, digest FROM memory")
        }

    def chunk_ids_of(self, key: str) -> set[str]:
        return {
            str(row[0])
            for row in self._conn.execute("SELECT chunk_id FROM chunk WHERE parent_key = ?", (key,))
        }

    def in_progress_parents(self) -> set[str]:
        rows = self._conn.execute(
            "SELECT DISTINCT parent_key FROM chunk WHERE parent_key NOT IN (SELECT parent_key FROM memory)"
        )
        return {str(row[0]) for row in rows}

    def chunks_by_labels(self, labels: Collection[int]) -> dict[int, tuple[str, str, str]]:
        found: dict[int, tuple[str, str, str]] = {}
        wanted = list(labels)
        for start in range(0, len(wanted), _ID_BATCH):
            batch = wanted[start : start + _ID_BATCH]
            marks = ", ".join("?" for _ in batch)
            rows = self._conn.execute(
                f"SELECT label, chunk_id, parent_key, text FROM chunk WHERE label IN ({marks})", batch
            )
            for label, chunk_id, key, chunk_text in rows:
                found[int(label)] = (str(chunk_id), str(key), str(chunk_text))
        return found

    def all_chunk_texts(self) -> list[tuple[int, str]]:
        return [
            (int(label), str(value))
            for label, value in self._conn.execute("SELECT label, text FROM chunk ORDER BY label")
        ]

    def add(self, chunks: Sequence[tuple[int, MemoryChunk]], memories: Sequence[tuple[str, str]]) -> None:
        self._conn.executemany(
            "INSERT INTO chunk (label, chunk_id, parent_key, position, text) VALUES (?, ?, ?, ?, ?)",
            [(label, c.chunk_id, c.parent_key, c.position, c.text) for label, c in chunks],
        )
        self._conn.executemany(
            "INSERT INTO memory (parent_key, digest) VALUES (?, ?)"
            " ON CONFLICT(parent_key) DO UPDATE SET digest = excluded.digest",
            memories,
        )


@dataclass
class _KeywordIndex:
    """A bm25s index over chunk texts; document ``i`` is chunk ``labels[i]``."""

    labels: list[int]
    retriever: Any | None
    vocabulary: frozenset[str]

    @classmethod
    def build(cls, rows: Sequence[tuple[int, str]]) -> _KeywordIndex:
        corpus = [tokenize(value) for _, value in rows]
        labels = [label for label, _ in rows]
        if not any(corpus):
            return cls(labels, None, frozenset())
        retriever = bm25s.BM25()
        retriever.index(corpus, show_progress=False)
        return cls(labels, retriever, frozenset(k for k in retriever.vocab_dict if k))

    def query(self, tokens: Sequence[str], k: int) -> list[int]:
        """Labels of up to ``k`` chunks matching at least one token, best first."""
        known = [token for token in tokens if token in self.vocabulary]
        if self.retriever is None or not known or k <= 0:
            return []
        scores = np.asarray(self.retriever.get_scores(known), dtype=np.float64)
        order = np.argsort(-scores, kind="stable")[:k]
        return [self.labels[int(i)] for i in order if scores[int(i)] > 0]

    def save(self, directory: Path) -> str:
        directory.mkdir(mode=DIRECTORY_MODE)
        os.chmod(directory, DIRECTORY_MODE)
        if self.retriever is not None:
            self.retriever.save(str(directory), show_progress=False)
        (directory / KEYWORD_LABELS_FILE).write_text(json.dumps(self.labels), encoding="utf-8")
        for path in directory.iterdir():
            _secure_file(path)
        return _directory_digest(directory)

    @classmethod
    def load(cls, directory: Path) -> _KeywordIndex:
        labels = [int(value) for value in json.loads((directory / KEYWORD_LABELS_FILE).read_text("utf-8"))]
        if not (directory / "params.index.json").is_file():
            return cls(labels, None, frozenset())
        retriever = bm25s.BM25.load(str(directory), show_progress=False)
        return cls(labels, retriever, frozenset(k for k in retriever.vocab_dict if k))


_FileKeys = tuple[tuple[str, tuple[int, int, int]], ...]


def _directory_keys(directory: Path) -> _FileKeys:
    """Names and stat keys of a directory's files: unchanged keys mean unchanged files."""
    return tuple((path.name, _file_key(path)) for path in sorted(directory.iterdir()))


def _directory_digest(directory: Path) -> str:
    lines = [f"{path.name}:{_file_digest(path)}" for path in sorted(directory.iterdir())]
    return sha256_hex("\n".join(lines))


@dataclass
class _BatchPlan:
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


@dataclass
class _Candidates:
    chunk_ids: list[str]
    texts: dict[str, str]
    parent_of: dict[str, str]
    memories: dict[str, SourceMemory]
    truncated: bool
    lagging: bool = False
    """The keyword index lags the manifest, or a hit came from a deleted or edited memory."""


def _is_transient(exc: sqlite3.Error) -> bool:
    message = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in message or "busy" in message)


class SemanticIndex:
    """The derived hybrid index of one memory database: bounded synchronization and hybrid search.

    Guarantees: every derived write happens under the per-project lock and between a saved
    ``dirty`` marker and its clearing; any listed rebuild condition (no state row, dirty, signature
    change, derived files missing/corrupt/inconsistent, an indexed chunk no longer current)
    discards the derived files and starts again; search never returns a chunk whose memory is gone
    or whose text changed, marks the index dirty on corruption, and never holds the lock across an
    embedding or rerank call. Safe to use from several processes (``flock``); one instance per
    thread.
    """

    def __init__(
        self, db_path: str | os.PathLike[str], settings: SemanticSettings, state_writer: SemanticStateWriter
    ) -> None:
        self._db_path = os.fspath(db_path)
        self._directory = Path(f"{os.path.abspath(self._db_path)}.semantic")
        self._settings = settings
        self._signature = settings.signature()
        self._rules = ChunkingRules.from_settings(settings.embedding_api)
        self._writer = state_writer
        self._reader = SemanticSourceReader(self._db_path)
        self._vector_cache: tuple[tuple[int, int, int], str, Any] | None = None
        self._keyword_cache: tuple[_FileKeys, str, _KeywordIndex] | None = None

    @property
    def directory(self) -> Path:
        """``<database>.semantic``."""
        return self._directory

    # --- lock and files --------------------------------------------------------------------------

    def _ensure_directory(self) -> None:
        if not self._directory.is_dir():
            self._directory.mkdir(mode=DIRECTORY_MODE, parents=False, exist_ok=True)
        os.chmod(self._directory, DIRECTORY_MODE)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self._ensure_directory()
        fd = os.open(self._directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise SemanticSearchError("index_busy", INDEX_BUSY_MESSAGE) from None
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _path(self, name: str) -> Path:
        return self._directory / name

    def _remove_derived(self) -> None:
        for name in (
            MANIFEST_FILE,
            f"{MANIFEST_FILE}-journal",
            f"{MANIFEST_FILE}.sha256",
            VECTOR_FILE,
            f"{VECTOR_FILE}.tmp",
        ):
            self._path(name).unlink(missing_ok=True)
        for name in (KEYWORD_DIR, f"{KEYWORD_DIR}.tmp"):
            shutil.rmtree(self._path(name), ignore_errors=True)
        self._vector_cache = None
        self._keyword_cache = None

    def _save_state(self, source_hash: str, dimensions: int, dirty: bool, complete: bool) -> None:
        self._writer.save_semantic_state(
            signature=self._signature,
            source_hash=source_hash,
            dimensions=dimensions,
            dirty=dirty,
            complete=complete,
        )

    def _mark_dirty(self, state: SemanticState) -> None:
        self._save_state(state.source_hash, state.dimensions, dirty=True, complete=False)

    def _load_vectors(self, manifest: _Manifest, dimensions: int) -> Any:
        """The verified vector index of the manifest (cached while the file is unchanged)."""
        path = self._path(VECTOR_FILE)
        expected_sha = manifest.meta("vector_sha") or ""
        expected_count = manifest.chunk_count()
        if not path.is_file():
            raise DerivedIndexError(f"semantic vector file {VECTOR_FILE!r} is missing")
        key = _file_key(path)
        cached = self._vector_cache
        if cached is not None and cached[0] == key and cached[1] == expected_sha:
            index = cached[2]
        else:
            self._vector_cache = None
            if _file_digest(path) != expected_sha:
                raise DerivedIndexError(f"semantic vector file {VECTOR_FILE!r} fails its checksum")
            index = hnswlib.Index(space="cosine", dim=dimensions)
            try:
                index.load_index(str(path))
            except RuntimeError as exc:
                raise DerivedIndexError(f"semantic vector file {VECTOR_FILE!r} is unreadable") from exc
        if int(index.get_current_count()) != expected_count or int(index.dim) != dimensions:
            raise DerivedIndexError(f"semantic vector file {VECTOR_FILE!r} disagrees with the manifest")
        self._vector_cache = (key, expected_sha, index)
        return index

    def _save_vectors(self, index: Any) -> str:
        temporary = self._path(f"{VECTOR_FILE}.tmp")
        index.save_index(str(temporary))
        _secure_file(temporary)
        os.replace(temporary, self._path(VECTOR_FILE))
        path = self._path(VECTOR_FILE)
        digest = _file_digest(path)
        self._vector_cache = (_file_key(path), digest, index)
        return digest

    def _load_keyword(self, manifest: _Manifest) -> _KeywordIndex:
        """The verified keyword index (cached while its checksum is unchanged)."""
        expected = manifest.meta("keyword_sha") or ""
        directory = self._path(KEYWORD_DIR)
        if not directory.is_dir():
            raise DerivedIndexError(f"semantic keyword index {KEYWORD_DIR!r} is missing")
        keys = _directory_keys(directory)
        cached = self._keyword_cache
        if cached is not None and cached[0] == keys and cached[1] == expected:
            return cached[2]
        digest = _directory_digest(directory)
        if digest != expected:
            raise DerivedIndexError(f"semantic keyword index {KEYWORD_DIR!r} fails its checksum")
        try:
            keyword = _KeywordIndex.load(directory)
        except Exception as exc:  # any parse failure of a derived file means "corrupt"
            raise DerivedIndexError(f"semantic keyword index {KEYWORD_DIR!r} is unreadable") from exc
        if len(keyword.labels) != manifest.meta_int("keyword_count"):
            raise DerivedIndexError(f"semantic keyword index {KEYWORD_DIR!r} disagrees with the manifest")
        self._keyword_cache = (keys, digest, keyword)
        return keyword

    def _rebuild_keyword(self, manifest: _Manifest) -> None:
        keyword = _KeywordIndex.build(manifest.all_chunk_texts())
        temporary = self._path(f"{KEYWORD_DIR}.tmp")
        shutil.rmtree(temporary, ignore_errors=True)
        digest = keyword.save(temporary)
        shutil.rmtree(self._path(KEYWORD_DIR), ignore_errors=True)
        os.replace(temporary, self._path(KEYWORD_DIR))
        with manifest.transaction():
            manifest.set_meta(keyword_sha=digest, keyword_count=len(keyword.labels))
        self._keyword_cache = (_directory_keys(self._path(KEYWORD_DIR)), digest, keyword)

    # --- progress --------------------------------------------------------------------------------

    def progress(self) -> IndexProgress:
        """Indexed and source memory counts (indexed is 0 unless the state is clean and current)."""
        fingerprint = self._reader.fingerprint()
        state = self._reader.semantic_state()
        indexed = 0
        if state is not None and not state.dirty and state.signature == self._signature:
            try:
                with closing(_Manifest.open(self._path(MANIFEST_FILE), verify=False)) as manifest:
                    indexed = manifest.memory_count()
            except (DerivedIndexError, sqlite3.Error):
                indexed = 0
        return IndexProgress(min(indexed, fingerprint.total), fingerprint.total)

    def _building(self) -> SemanticSearchError:
        return SemanticSearchError("index_building", INDEX_BUILDING_MESSAGE, self.progress().as_dict())

    # --- synchronization -------------------------------------------------------------------------

    def synchronize(
        self, embedder: Embedder, batch_size: int | None = None, *, full_check: bool = False
    ) -> SyncResult:
        """Index one bounded batch (at most ``batch_size`` chunks); ``complete`` when nothing is left.

        Rebuilds first when any rebuild condition holds. The embedding call runs outside the lock;
        if the index changed meanwhile the batch is dropped (``complete=False``, nothing written).
        Raises ``SemanticSearchError`` (``index_busy``, ``embedding_dimensions_changed``, or the
        embedder's own ``embedding_unavailable``).
        """
        size = batch_size if batch_size is not None else self._settings.embedding_api.batch_size
        if size < 1:
            raise ValueError("batch_size must be >= 1")
        with self._locked():
            plan = self._plan(size, full_check)
        vectors: list[list[float]] = []
        if plan.chunks:
            vectors = embedder.embed([chunk.text for chunk in plan.chunks])
        with self._locked():
            return self._commit(plan, vectors)

    def _plan(self, size: int, full_check: bool) -> _BatchPlan:
        state = self._reader.semantic_state()
        fingerprint = self._reader.fingerprint()
        reason, cursors = self._check(state, fingerprint, full_check)
        rebuilt = reason is not None
        if reason is not None:
            self._rebuild(reason, fingerprint, first_build=state is None)
            state = SemanticState(self._signature, fingerprint.digest(), 0, False, False)
            cursors = {kind: 0 for kind in _KINDS}
        assert state is not None
        with closing(_Manifest.open(self._path(MANIFEST_FILE))) as manifest:
            keyword_invalid = manifest.chunk_count() > 0 and not self._keyword_ok(manifest)
            stored_cursors = manifest.cursors()
            plan = _BatchPlan(
                state=state,
                fingerprint=fingerprint,
                manifest_token=manifest.token(),
                chunks=[],
                completed=[],
                new_memories=[],
                cursors=dict(cursors),
                cursors_changed=cursors != stored_cursors or manifest.fingerprint() != fingerprint,
                rebuilt=rebuilt,
                rebuild_reason=reason,
                keyword_invalid=keyword_invalid,
            )
            self._collect(manifest, plan, size)
        return plan

    def _keyword_ok(self, manifest: _Manifest) -> bool:
        try:
            self._load_keyword(manifest)
        except DerivedIndexError:
            return False
        return True

    def _check(
        self, state: SemanticState | None, fingerprint: SourceFingerprint, full_check: bool
    ) -> tuple[str | None, dict[str, int]]:
        """The rebuild reason (``None`` when the index can be extended) and the cursors to resume from."""
        if state is None:
            return "no_state", {}
        if state.dirty:
            return "dirty", {}
        if state.signature != self._signature:
            return "signature_changed", {}
        try:
            with closing(_Manifest.open(self._path(MANIFEST_FILE))) as manifest:
                if manifest.meta("signature") != self._signature:
                    return "derived_inconsistent", {}
                dimensions = manifest.meta_int("dimensions")
                if dimensions != state.dimensions:
                    return "derived_inconsistent", {}
                if manifest.chunk_count() > 0:
                    self._load_vectors(manifest, dimensions)
                cursors = manifest.cursors()
                previous = manifest.fingerprint()
                if full_check or not self._appended_only(previous, fingerprint):
                    return self._full_diff(manifest, cursors)
                return None, cursors
        except DerivedIndexError as exc:
            logger.warning("om.semantic.derived_invalid", extra={"exception_class": type(exc).__name__})
            return "derived_invalid", {}
        except (sqlite3.DatabaseError, ValueError, TypeError) as exc:
            logger.warning("om.semantic.derived_invalid", extra={"exception_class": type(exc).__name__})
            return "derived_invalid", {}

    def _appended_only(self, previous: SourceFingerprint, current: SourceFingerprint) -> bool:
        if previous == current:
            return True
        for kind in _KINDS:
            before, now = previous.table(kind), current.table(kind)
            if now.count < before.count or now.max_rowid < before.max_rowid:
                return False
            if before.count and self._reader.count_through(kind, before.max_rowid) != before.count:
                return False
            if before.count and self._reader.id_at(kind, before.max_rowid) != before.last_id:
                return False  # the last row was deleted and its rowid reused by a new memory
        return True

    def _full_diff(self, manifest: _Manifest, cursors: dict[str, int]) -> tuple[str | None, dict[str, int]]:
        """Compare the manifest with every canonical memory: stale chunks -> rebuild; misses behind
        the cursor -> move the cursor back (already indexed memories are then skipped cheaply)."""
        current = self._reader.content_digests()
        for key, digest in manifest.memory_digests().items():
            found = current.get(key)
            if found is None or found[2] != digest:
                return "stale_chunk", {}
        in_progress = manifest.in_progress_parents()
        memories = self._reader.memories_by_keys(in_progress)
        for key in in_progress:
            memory = memories.get(key)
            if memory is None:
                return "stale_chunk", {}
            if not manifest.chunk_ids_of(key) <= {chunk.chunk_id for chunk in memory.chunks(self._rules)}:
                return "stale_chunk", {}
        resumed = dict(cursors)
        indexed = manifest.memory_digests()
        for key, (kind, rowid, _digest) in current.items():
            if key not in indexed and rowid <= resumed[kind]:
                resumed[kind] = rowid - 1
        return None, resumed

    def _rebuild(self, reason: str, fingerprint: SourceFingerprint, first_build: bool) -> None:
        # The marker precedes any derived write, so a crash mid-rebuild is rebuilt again.
        self._save_state(fingerprint.digest(), 0, dirty=True, complete=False)
        self._remove_derived()
        _Manifest.create(self._path(MANIFEST_FILE), self._signature, fingerprint).close()
        self._save_state(fingerprint.digest(), 0, dirty=False, complete=False)
        log = logger.info if first_build else logger.warning
        log("om.semantic.rebuild", extra={"reason": reason, "source_count": fingerprint.total})

    def _collect(self, manifest: _Manifest, plan: _BatchPlan, size: int) -> None:
        """Fill ``plan`` with the next chunks after the cursors; stop before a memory that does not fit."""
        for kind in _KINDS:
            while len(plan.chunks) < size:
                rows = self._reader.rows_after(kind, plan.cursors[kind], size)
                plan.memories_read += len(rows)
                if not rows:
                    break
                for row in rows:
                    if not self._take(manifest, plan, row, size):
                        return
                if len(plan.chunks) >= size:
                    return
            if len(plan.chunks) >= size:
                return

    def _take(self, manifest: _Manifest, plan: _BatchPlan, row: SourceRow, size: int) -> bool:
        """Add one memory's missing chunks; False when it does not fit whole (the batch is full)."""
        memory = row.memory
        digest = _content_digest(memory.content)
        if manifest.memory_digest(memory.parent_key) == digest:
            plan.cursors[memory.kind] = row.rowid
            plan.cursors_changed = True
            return True
        chunks = memory.chunks(self._rules)
        plan.memories_chunked += 1
        done = manifest.chunk_ids_of(memory.parent_key)
        todo = [chunk for chunk in chunks if chunk.chunk_id not in done]
        room = size - len(plan.chunks)
        if len(todo) > room:
            plan.chunks.extend(todo[:room])
            return False
        plan.chunks.extend(todo)
        plan.new_memories.append((memory.parent_key, digest))
        plan.cursors[memory.kind] = row.rowid
        plan.cursors_changed = True
        return True

    def _commit(self, plan: _BatchPlan, vectors: Sequence[Sequence[float]]) -> SyncResult:
        state = self._reader.semantic_state()
        manifest = _Manifest.open(self._path(MANIFEST_FILE))
        with closing(manifest):
            if state != plan.state or manifest.token() != plan.manifest_token:
                # Someone else wrote meanwhile: drop this batch rather than mix two snapshots.
                return self._result(plan, manifest, complete=False, embedded=0)
            dimensions = self._check_vectors(plan, vectors)
            if not plan.chunks and not plan.cursors_changed and not plan.keyword_invalid:
                return self._finish(plan, manifest, dimensions, embedded=0)
            self._save_state(plan.fingerprint.digest(), dimensions, dirty=True, complete=False)
            # From here on the state row says dirty: _finish must always clear it.
            labels: list[tuple[int, MemoryChunk]] = []
            if plan.chunks:
                first = manifest.next_label()
                labels = [(first + offset, chunk) for offset, chunk in enumerate(plan.chunks)]
                vector_sha = self._append_vectors(manifest, dimensions, labels, vectors)
            else:
                vector_sha = manifest.meta("vector_sha") or ""
            generation = manifest.meta_int("generation") + 1
            with manifest.transaction():
                manifest.add(labels, plan.new_memories)
                manifest.set_meta(
                    generation=generation,
                    dimensions=dimensions,
                    vector_sha=vector_sha,
                    cursor_observation=plan.cursors["observation"],
                    cursor_reflection=plan.cursors["reflection"],
                    fingerprint=plan.fingerprint.to_json(),
                )
            pending = self._reader.has_rows_after(plan.cursors)
            chunk_count = manifest.chunk_count()
            keyword_count = manifest.meta_int("keyword_count")
            # bm25s cannot add documents: rebuild when done, or when the lag doubles (amortized O(1)).
            if plan.keyword_invalid or (
                keyword_count != chunk_count and (not pending or chunk_count >= 2 * keyword_count)
            ):
                self._rebuild_keyword(manifest)
            return self._finish(plan, manifest, dimensions, embedded=len(labels), marked_dirty=True)

    def _check_vectors(self, plan: _BatchPlan, vectors: Sequence[Sequence[float]]) -> int:
        dimensions = plan.state.dimensions
        if not plan.chunks:
            return dimensions
        widths = {len(vector) for vector in vectors}
        if len(vectors) != len(plan.chunks) or len(widths) != 1 or 0 in widths:
            raise SemanticSearchError("embedding_unavailable", EMBEDDING_UNAVAILABLE_MESSAGE)
        batch_dimensions = widths.pop()
        if dimensions not in (0, batch_dimensions):
            self._save_state(plan.fingerprint.digest(), dimensions, dirty=True, complete=False)
            logger.warning("om.semantic.dimensions_changed", extra={"dimensions": batch_dimensions})
            raise SemanticSearchError("embedding_dimensions_changed", INDEX_DIMENSIONS_MESSAGE)
        return batch_dimensions

    def _append_vectors(
        self,
        manifest: _Manifest,
        dimensions: int,
        labels: Sequence[tuple[int, MemoryChunk]],
        vectors: Sequence[Sequence[float]],
    ) -> str:
        try:
            if manifest.chunk_count() == 0:
                index = hnswlib.Index(space="cosine", dim=dimensions)
                index.init_index(
                    max_elements=max(_HNSW_MIN_CAPACITY, len(labels)),
                    M=_HNSW_M,
                    ef_construction=_HNSW_EF_CONSTRUCTION,
                    random_seed=_HNSW_SEED,
                )
            else:
                index = self._load_vectors(manifest, dimensions)
            needed = int(index.get_current_count()) + len(labels)
            capacity = int(index.get_max_elements())
            if needed > capacity:
                index.resize_index(max(needed, 2 * capacity))
            data = np.asarray(vectors, dtype=np.float32)
            index.add_items(data, np.asarray([label for label, _ in labels], dtype=np.uint64))
            return self._save_vectors(index)
        except BaseException:
            self._vector_cache = None  # the in-memory index may hold items the file does not
            raise

    def _finish(
        self,
        plan: _BatchPlan,
        manifest: _Manifest,
        dimensions: int,
        embedded: int,
        marked_dirty: bool = False,
    ) -> SyncResult:
        pending = self._reader.has_rows_after(plan.cursors)
        unchanged = self._reader.fingerprint() == plan.fingerprint
        complete = not pending and unchanged
        final = SemanticState(self._signature, plan.fingerprint.digest(), dimensions, False, complete)
        if marked_dirty or final != plan.state or embedded or plan.cursors_changed:
            self._save_state(final.source_hash, final.dimensions, dirty=False, complete=complete)
        if plan.rebuilt or embedded:
            logger.info(
                "om.semantic.batch",
                extra={
                    "embedded_chunks": embedded,
                    "complete": complete,
                    "source_count": plan.fingerprint.total,
                },
            )
        return self._result(plan, manifest, complete=complete, embedded=embedded)

    def _result(self, plan: _BatchPlan, manifest: _Manifest, complete: bool, embedded: int) -> SyncResult:
        return SyncResult(
            complete=complete,
            indexed_memories=manifest.memory_count(),
            source_memories=plan.fingerprint.total,
            rebuilt=plan.rebuilt,
            embedded_chunks=embedded,
            memories_read=plan.memories_read,
            memories_chunked=plan.memories_chunked,
            rebuild_reason=plan.rebuild_reason,
        )

    # --- search ----------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        embedder: Embedder | None = None,
        *,
        query_vector: Sequence[float] | None = None,
        bounds: DateBounds | None = None,
        reranker: Reranker | None = None,
        limit: int | None = None,
    ) -> Retrieval:
        """Hybrid retrieval (reference §14.5): vectors + BM25, RRF, optional rerank, collapse.

        Give ``embedder`` (the query prefix is applied here) or a ready ``query_vector``. With
        ``limit``, results are cut to it and ``truncated`` also says whether more were found.
        Raises ``SemanticSearchError`` with a §14.7 code; never returns results of a dirty,
        mismatched or corrupt index.
        """
        date_bounds = bounds or DateBounds()
        with self._locked():
            state, fingerprint = self._reader.semantic_state(), self._reader.fingerprint()
            if state is None or state.dirty or state.signature != self._signature:
                raise self._building()
            if fingerprint.total == 0:
                return Retrieval((), False, False)
            if state.dimensions == 0:
                raise self._building()
            partial = not state.complete or state.source_hash != fingerprint.digest()
        vector = self._query_vector(query, embedder, query_vector)
        with self._locked():
            if self._reader.semantic_state() != state or self._reader.fingerprint() != fingerprint:
                raise self._building()
            if len(vector) != state.dimensions:
                self._mark_dirty(state)
                logger.warning("om.semantic.query_dimensions_changed", extra={"dimensions": len(vector)})
                raise SemanticSearchError("embedding_dimensions_changed", QUERY_DIMENSIONS_MESSAGE)
            candidates = self._retrieve_guarded(query, vector, date_bounds, partial, state)
        hits = candidates.chunk_ids
        if reranker is not None and hits:
            order = reranker.rerank(query, [candidates.texts[chunk_id] for chunk_id in hits])
            hits = apply_rerank(hits, order)
        memories = collapse_to_memories(hits, candidates.parent_of, candidates.memories)
        truncated = candidates.truncated
        if limit is not None:
            truncated = truncated or len(memories) > limit
            memories = memories[:limit]
        logger.info(
            "om.semantic.search",
            extra={"results": len(memories), "truncated": truncated, "partial": partial},
        )
        return Retrieval(tuple(memories), truncated, partial or candidates.lagging)

    def _query_vector(
        self, query: str, embedder: Embedder | None, query_vector: Sequence[float] | None
    ) -> list[float]:
        if query_vector is None:
            if embedder is None:
                raise ValueError("search needs an embedder or a query_vector")
            prefixed = query_text_for_embedding(self._settings.embedding_api.query_prefix, query)
            vectors = embedder.embed([prefixed])
            if len(vectors) != 1:
                raise SemanticSearchError("embedding_unavailable", EMBEDDING_UNAVAILABLE_MESSAGE)
            query_vector = vectors[0]
        vector = [float(value) for value in query_vector]
        array = np.asarray(vector, dtype=np.float64)
        if not vector or not np.all(np.isfinite(array)) or not float(np.dot(array, array)) > 0:
            raise SemanticSearchError("embedding_unavailable", EMBEDDING_UNAVAILABLE_MESSAGE)
        return vector

    def _retrieve_guarded(
        self, query: str, vector: Sequence[float], bounds: DateBounds, partial: bool, state: SemanticState
    ) -> _Candidates:
        try:
            return self._retrieve(query, vector, bounds, partial, state)
        except sqlite3.Error as exc:
            if _is_transient(exc):
                raise  # healthy embeddings are kept: a busy file is no reason to rebuild
            self._corrupt(state, exc)
        except (DerivedIndexError, RuntimeError, ValueError, KeyError) as exc:
            self._corrupt(state, exc)

    def _corrupt(self, state: SemanticState, exc: BaseException) -> NoReturn:
        self._mark_dirty(state)
        logger.warning("om.semantic.derived_corrupt", extra={"exception_class": type(exc).__name__})
        raise self._building() from exc

    def _retrieve(
        self, query: str, vector: Sequence[float], bounds: DateBounds, partial: bool, state: SemanticState
    ) -> _Candidates:
        with closing(_Manifest.open(self._path(MANIFEST_FILE))) as manifest:
            if (
                manifest.meta("signature") != self._signature
                or manifest.meta_int("dimensions") != state.dimensions
            ):
                raise DerivedIndexError("semantic manifest disagrees with the state row")
            chunk_count = manifest.chunk_count()
            if chunk_count == 0:
                return _Candidates([], {}, {}, {}, truncated=False)
            filtered = bounds.active or partial
            fetch = store_fetch_size(chunk_count, filtered)
            index = self._load_vectors(manifest, state.dimensions)
            k = min(fetch, chunk_count)
            index.set_ef(max(k, 64))
            found, _distances = index.knn_query(np.asarray([vector], dtype=np.float32), k=k)
            vector_labels = [int(label) for label in found[0]]
            keyword_count = manifest.meta_int("keyword_count")
            keyword_lagging = keyword_count != chunk_count
            keyword_labels: list[int] = []
            tokens = query_tokens(query)
            if tokens and keyword_count:
                keyword = self._keyword_for_search(manifest)
                keyword_labels = keyword.query(tokens, min(fetch, len(keyword.labels)))
            rows = manifest.chunks_by_labels(set(vector_labels) | set(keyword_labels))
        if len(rows) != len(set(vector_labels) | set(keyword_labels)):
            raise DerivedIndexError("semantic index returned labels the manifest does not know")
        parent_of = {chunk_id: key for chunk_id, key, _ in rows.values()}
        texts = {chunk_id: chunk_text for chunk_id, _, chunk_text in rows.values()}
        memories = self._reader.memories_by_keys(set(parent_of.values()))
        # A hit of a deleted or edited memory proves the index lags the source (an in-place edit
        # or a reused rowid leaves the cheap fingerprint unchanged): the answer is then partial.
        stale: set[str] = set()
        accept = self._acceptor(parent_of, memories, bounds, stale)
        vector_hits = filter_store_hits(
            [rows[label][0] for label in vector_labels], accept, fetch, chunk_count
        )
        keyword_hits = filter_store_hits(
            [rows[label][0] for label in keyword_labels], accept, fetch, keyword_count
        )
        fused = rrf_fuse([vector_hits.chunk_ids, keyword_hits.chunk_ids], limit=FUSED_CANDIDATE_LIMIT)
        truncated = len(fused) >= FUSED_CANDIDATE_LIMIT or vector_hits.truncated or keyword_hits.truncated
        return _Candidates(fused, texts, parent_of, memories, truncated, keyword_lagging or bool(stale))

    def _keyword_for_search(self, manifest: _Manifest) -> _KeywordIndex:
        try:
            return self._load_keyword(manifest)
        except DerivedIndexError:
            # The keyword index is derived from the (verified) manifest alone: rebuild it in memory
            # for this query; the next synchronization repairs the files.
            logger.warning("om.semantic.keyword_rebuilt_in_memory", extra={"reason": "invalid"})
            keyword = _KeywordIndex.build(manifest.all_chunk_texts())
            self._keyword_cache = None
            return keyword

    def _acceptor(
        self,
        parent_of: dict[str, str],
        memories: dict[str, SourceMemory],
        bounds: DateBounds,
        stale: set[str],
    ) -> Callable[[str], bool]:
        """Keeps hits of current chunks inside the bounds; adds deleted or edited parents to ``stale``."""
        current: dict[str, set[str]] = {}

        def accept(chunk_id: str) -> bool:
            key = parent_of[chunk_id]
            memory = memories.get(key)
            if memory is None:
                stale.add(key)
                return False
            if not bounds.accepts(memory.kind, memory.timestamp):
                return False
            if key not in current:
                current[key] = {chunk.chunk_id for chunk in memory.chunks(self._rules)}
            if chunk_id not in current[key]:
                stale.add(key)
                return False
            return True

        return accept


def semantic_directory(db_path: str | os.PathLike[str]) -> Path:
    """``<database>.semantic``: the only directory to delete to repair the derived index."""
    return Path(f"{os.fspath(db_path)}.semantic")


__all__ = [
    "DerivedIndexError",
    "IndexProgress",
    "SemanticIndex",
    "SemanticSourceReader",
    "SemanticState",
    "SemanticStateWriter",
    "SourceFingerprint",
    "SyncResult",
    "query_tokens",
    "semantic_directory",
    "tokenize",
]
