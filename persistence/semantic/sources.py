"""Read-only queries of the canonical rows that the derived index is built from.

Three tables feed the index: observations, reflections and the transcript (``omray_transcript``,
one row per covered event with text). The index keeps a resumable cursor per table (``rowid``
order) and a cheap fingerprint (row count, max rowid and the id at it) that tells appends from
other changes. A database whose transcript table does not exist yet reads as an empty transcript.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final, Protocol

from sqlalchemy import Connection, text

from persistence.database.omray_tables import ROW_COUNT_TABLE, row_count_trigger
from persistence.database.sql_values import in_batches, json_list
from persistence.reads.memory_reader import MemoryReader, select_covering_ids
from protocol.canonical import canonical_json, sha256_hex
from protocol.semantic import MemoryKind, SourceMemory, parent_key
from protocol.source_text import cited_seqs

TABLES: Final = ("om_observation", "om_reflection", "omray_transcript")
MEMORY_TABLES: Final = TABLES[:2]
"""The tables an index needs before it can say anything (the transcript may be missing)."""
KINDS: Final[tuple[MemoryKind, MemoryKind, MemoryKind]] = ("observation", "reflection", "event")


class SemanticStateWriter(Protocol):
    """Writes the canonical ``om_semantic_state`` row (``persistence.writers.store.Store`` satisfies it)."""

    def save_semantic_state(
        self, *, signature: str, source_hash: str, dimensions: int, dirty: bool, complete: bool
    ) -> None:
        """Upsert the one state row."""
        ...


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
    events: TableFingerprint = TableFingerprint(0, 0)
    """``omray_transcript``."""

    @property
    def total(self) -> int:
        """Number of source rows (memories and transcript events)."""
        return self.observations.count + self.reflections.count + self.events.count

    def table(self, kind: str) -> TableFingerprint:
        """The fingerprint of the table holding ``kind``."""
        if kind == "event":
            return self.events
        return self.observations if kind == "observation" else self.reflections

    def to_json(self) -> str:
        """Stable text form (also what :meth:`digest` hashes)."""
        return canonical_json(
            [
                [part.count, part.max_rowid, part.last_id]
                for part in (self.observations, self.reflections, self.events)
            ]
        )

    def digest(self) -> str:
        """The ``source_hash`` stored in the state row."""
        return sha256_hex("omray-semantic-source-v2\n" + self.to_json())

    @classmethod
    def from_json(cls, raw: str) -> SourceFingerprint:
        """Inverse of :meth:`to_json` (a fingerprint without last ids reads as unknown ids)."""
        parts = [
            TableFingerprint(int(part[0]), int(part[1]), str(part[2]) if len(part) > 2 else "")
            for part in json.loads(raw)
        ]
        return cls(*parts[:3])


EMPTY_FINGERPRINT: Final = SourceFingerprint(TableFingerprint(0, 0), TableFingerprint(0, 0))


@dataclass(frozen=True, slots=True)
class SourceRow:
    """One canonical memory with its table rowid."""

    rowid: int
    """Rowid in its table."""
    memory: SourceMemory
    """The memory."""


def content_digest(content: str) -> str:
    return sha256_hex(content)


def _observation(row: Any) -> SourceMemory:
    seqs = cited_seqs([ref for ref in json_list(row.source_refs_json) if isinstance(ref, dict)], row.run_id)
    return SourceMemory(
        "observation", row.observation_id, row.run_id, row.timestamp, row.content, row.relevance, seqs
    )


def _reflection(row: Any) -> SourceMemory:
    return SourceMemory("reflection", row.reflection_id, row.run_id, row.created_at, row.content, None)


def _event(row: Any) -> SourceMemory:
    return SourceMemory("event", row.event_id, row.run_id, row.timestamp, row.content, None, (int(row.seq),))


_SELECT: Final = {
    "observation": (
        "SELECT rowid AS rid, observation_id, run_id, timestamp, content, relevance, source_refs_json"
        " FROM om_observation",
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
    "event": (
        "SELECT rowid AS rid, event_id, run_id, seq, timestamp, content FROM omray_transcript",
        _event,
        "event_id",
        "omray_transcript",
    ),
}


def _tables(conn: Connection) -> set[str]:
    return set(conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'")).scalars())


def _state_row(conn: Connection) -> SemanticState | None:
    row = conn.execute(
        text("SELECT signature, source_hash, dimensions, dirty, complete FROM om_semantic_state")
    ).first()
    if row is None:
        return None
    return SemanticState(
        row.signature, row.source_hash, int(row.dimensions), bool(row.dirty), bool(row.complete)
    )


def _kept_counts(conn: Connection, present: set[str]) -> dict[str, int]:
    """The row counts the triggers of migration ``omray_019_row_counts`` keep, for each table whose
    two triggers are both in place (a table rebuilt without them is counted the slow way)."""
    if ROW_COUNT_TABLE not in present:
        return {}
    triggers = set(
        conn.execute(
            text("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'omray_row_count_%'")
        ).scalars()
    )
    rows = conn.execute(text(f"SELECT table_name, row_count FROM {ROW_COUNT_TABLE}"))
    return {
        str(name): int(count)
        for name, count in rows
        if {row_count_trigger(str(name), "ai"), row_count_trigger(str(name), "ad")} <= triggers
    }


def _fingerprint(conn: Connection) -> SourceFingerprint:
    parts = []
    present = _tables(conn)
    kept = _kept_counts(conn, present)
    for kind in KINDS:
        _, _, id_column, table = _SELECT[kind]
        if table not in present:
            parts.append(TableFingerprint(0, 0))
            continue
        if table in kept:
            count = kept[table]
            last_rowid = int(conn.execute(text(f"SELECT coalesce(max(rowid), 0) FROM {table}")).scalar_one())
        else:
            row = conn.execute(text(f"SELECT count(*), coalesce(max(rowid), 0) FROM {table}")).one()
            count, last_rowid = int(row[0]), int(row[1])
        last = conn.execute(text(f"SELECT {id_column} FROM {table} WHERE rowid = :r"), {"r": last_rowid})
        parts.append(TableFingerprint(count, last_rowid, str(last.scalar() or "")))
    return SourceFingerprint(*parts)


class SemanticSourceReader(MemoryReader):
    """Read-only queries the semantic index needs (same guarantees as :class:`MemoryReader`)."""

    def semantic_state(self) -> SemanticState | None:
        """The state row, or ``None`` when there is none."""
        return self._run(_state_row, None, ("om_semantic_state",))

    def fingerprint(self) -> SourceFingerprint:
        """Row count and max rowid of both memory tables, in one snapshot."""
        return self._run(_fingerprint, EMPTY_FINGERPRINT, TABLES)

    def snapshot(self) -> tuple[SemanticState | None, SourceFingerprint]:
        """The state row and the fingerprint, read in one snapshot (one connection: what every
        search checks first)."""

        def query(conn: Connection) -> tuple[SemanticState | None, SourceFingerprint]:
            return _state_row(conn), _fingerprint(conn)

        # The migration that creates the state table runs after the memory tables' one.
        empty: tuple[SemanticState | None, SourceFingerprint] = (None, EMPTY_FINGERPRINT)
        return self._run(query, empty, ("om_semantic_state", *MEMORY_TABLES))

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
            present = _tables(conn)
            for kind in KINDS:
                table = _SELECT[kind][3]
                if table not in present:
                    continue
                found = conn.execute(
                    text(f"SELECT 1 FROM {table} WHERE rowid > :r LIMIT 1"), {"r": cursors[kind]}
                ).first()
                if found is not None:
                    return True
            return False

        return self._run(query, False, MEMORY_TABLES)

    def memories_by_keys(self, keys: Collection[str]) -> dict[str, SourceMemory]:
        """Current memories by parent key (unknown keys are left out)."""
        ids: dict[str, list[str]] = {kind: [] for kind in KINDS}
        for key in keys:
            kind, _, memory_id = key.partition(":")
            if kind in ids:
                ids[kind].append(memory_id)

        def query(conn: Connection) -> dict[str, SourceMemory]:
            found: dict[str, SourceMemory] = {}
            present = _tables(conn)
            for kind in KINDS:
                sql, build, id_column, table = _SELECT[kind]
                wanted = ids[kind]
                if not wanted or table not in present:
                    continue
                for batch, marks in in_batches(wanted):
                    # A driver-level statement: compiling a text() with hundreds of named binds
                    # was a third of a hybrid search's time.
                    for row in conn.exec_driver_sql(f"{sql} WHERE {id_column} IN ({marks})", batch):
                        memory = build(row)
                        found[memory.parent_key] = memory
            return found

        return self._run(query, {}, MEMORY_TABLES)

    def content_digests(self) -> dict[str, tuple[MemoryKind, int, str]]:
        """Every memory: parent key -> (kind, rowid, content digest). O(all memories): full checks only."""

        def query(conn: Connection) -> dict[str, tuple[MemoryKind, int, str]]:
            found: dict[str, tuple[MemoryKind, int, str]] = {}
            tables = _tables(conn)
            for kind in KINDS:
                _, _, id_column, table = _SELECT[kind]
                if table not in tables:
                    continue
                # Only id and content: a forget's removal runs this under the index lock, and
                # building whole memories for every row took most of that time.
                rows = conn.exec_driver_sql(f"SELECT rowid, {id_column}, content FROM {table}")
                for rowid, memory_id, content in rows:
                    found[parent_key(kind, memory_id)] = (kind, int(rowid), content_digest(content))
            return found

        return self._run(query, {}, ())

    def transcript_texts_of(self, wanted: Collection[tuple[str, int]]) -> dict[tuple[str, int], str]:
        """The transcript text of each ``(session, seq)`` that has one, in one snapshot: what the
        observations of one planning page quote (one read, not one per observation)."""
        by_session: dict[str, list[int]] = {}
        for session_id, seq in sorted(set(wanted)):
            by_session.setdefault(session_id, []).append(seq)

        def query(conn: Connection) -> dict[tuple[str, int], str]:
            found: dict[tuple[str, int], str] = {}
            for session_id, seqs in by_session.items():
                for batch, marks in in_batches(seqs):
                    rows = conn.exec_driver_sql(
                        f"SELECT seq, content FROM omray_transcript WHERE run_id = ? AND seq IN ({marks})",
                        (session_id, *batch),
                    )
                    found.update(((session_id, int(seq)), str(content)) for seq, content in rows)
            return found

        return self._run(query, {}, ("omray_transcript",)) if by_session else {}

    def covering_memories(self, events: Collection[tuple[str, int]]) -> dict[tuple[str, int], SourceMemory]:
        """For each ``(session, seq)``, the observation that covers the event
        (:func:`persistence.reads.memory_reader.select_covering_ids`); events no observation covers
        are left out."""

        def query(conn: Connection) -> dict[tuple[str, int], SourceMemory]:
            chosen = select_covering_ids(conn, events)
            if not chosen:
                return {}
            ids = sorted(set(chosen.values()))
            rows: dict[str, SourceMemory] = {}
            sql = _SELECT["observation"][0]
            for batch, marks in in_batches(ids):
                for row in conn.exec_driver_sql(f"{sql} WHERE observation_id IN ({marks})", batch):
                    memory = _observation(row)
                    rows[memory.memory_id] = memory
            return {event: rows[memory_id] for event, memory_id in chosen.items() if memory_id in rows}

        if not events:
            return {}
        return self._run(query, {}, ("om_observation", "omray_observation_ref"))
