"""Read side of the memory database: :class:`MemoryReader` (the contiguous coverage watermark it
reports is :mod:`persistence.reads.coverage_watermark`'s pure logic).

``MemoryReader`` opens one read-only connection per call (any process, concurrently with the
writer thanks to WAL) and runs each call in one read transaction, so it sees one consistent
snapshot. A missing file, or a file whose tables do not exist yet, is "no memory yet": every
method returns its empty answer and nothing is ever created. A damaged store (the path is a
directory, a table its recorded migrations created is gone) raises ``StorageError`` instead.

The module-level ``select_*`` helpers take a SQLAlchemy ``Connection`` and are shared with
``persistence.writers.store``; they are internal to the ``persistence`` package.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from sqlalchemy import Connection, Engine, Row, func, or_, select, text
from sqlalchemy.exc import SQLAlchemyError

from persistence.database import schema
from persistence.database.connection import DatabaseMissingError, open_read_engine
from persistence.database.migrations import known_tables, tables_created_by
from persistence.database.sql_values import in_batches, json_list
from persistence.reads import usage
from persistence.reads.coverage_watermark import CoverageInterval, contiguous_end
from persistence.reads.projection_sql import FIRST_SOURCE_SEQ_SQL
from protocol.errors import StorageError
from protocol.identities import normalize_source_refs, observation_set_hash
from protocol.records import (
    ActiveReflection,
    ActivityRecord,
    CoveragePart,
    GenerationRecord,
    ModelDaySpend,
    ObservationRecord,
    TokenUsageDay,
    TokenUsageTotal,
)

T = TypeVar("T")


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ActiveCandidateSet(_Result):
    """The session's active observation pool (reference §8), without a token total."""

    session_id: str
    """Session."""
    observations: tuple[ObservationRecord, ...]
    """Active observations in source order (first source seq, then recorded order)."""
    observation_ids: tuple[str, ...]
    """Ids of ``observations``, sorted ascending (byte order)."""
    observation_set_hash: str
    """``observation_set_hash(session_id, observation_ids)``."""
    max_source_end_seq: int
    """Largest ``source_end_seq`` among ``observations``, or 0."""


class MemoryCounts(_Result):
    """Stored counts of one session (reference §12.1)."""

    recorded_observations: int
    """All observations of the session, dropped or not."""
    recorded_reflections: int
    """All reflections of the session."""
    visible_retained_observations: int
    """Retained observation ids of the active generation (0 before the first generation)."""


class SchemaVersion(_Result):
    """One row of ``om_schema_version``."""

    version: str
    """Migration version."""
    description: str
    """What the migration did."""
    checksum: str
    """``sha256`` of its statements."""
    applied_at: str
    """UTC ISO-8601 time it was applied."""


# --- row decoding (persistence-internal) ------------------------------------------------------


def _decode_source_refs(raw: str) -> list[Mapping[str, Any]]:
    decoded = json.loads(raw)
    if not isinstance(decoded, list):
        return []
    refs: list[Mapping[str, Any]] = []
    for item in decoded:
        if isinstance(item, dict):
            # PHP-era rows may spell the key ``runId``.
            refs.append({"run_id": item.get("run_id", item.get("runId")), "seq": item.get("seq")})
    return refs


def observation_from_row(row: Row[Any]) -> ObservationRecord:
    """An ``om_observation`` row as a record."""
    data = row._asdict()
    refs = normalize_source_refs(_decode_source_refs(data.pop("source_refs_json")))
    return ObservationRecord(**data, source_refs=tuple(refs))


def _decode_id_list(raw: str) -> tuple[str, ...]:
    decoded = json.loads(raw)
    if not isinstance(decoded, list):
        return ()
    return tuple(str(item) for item in decoded)


def _lenient_id_list(raw: str) -> tuple[str, ...]:
    return tuple(str(item) for item in json_list(raw))


def select_active_reflections(
    conn: Connection, session_id: str, *, lenient: bool = False
) -> tuple[ActiveReflection, ...]:
    """Reflections linked to the session's active generation, by position then id.

    Support ids that are not JSON raise ``ValueError``, unless ``lenient`` (the read tools: such a
    row then shows no support ids rather than failing the whole answer).
    """
    ref, link, active = (
        schema.om_reflection,
        schema.om_generation_reflection,
        schema.om_active_generation,
    )
    rows = conn.execute(
        select(
            ref.c.reflection_id,
            ref.c.content,
            ref.c.supporting_observation_ids_json,
            ref.c.token_count,
            ref.c.created_at,
            link.c.position,
        )
        .join(link, link.c.reflection_id == ref.c.reflection_id)
        .join(active, active.c.generation_id == link.c.generation_id)
        .where(active.c.run_id == session_id)
        .order_by(link.c.position.asc(), ref.c.reflection_id.asc())
    )
    decode = _lenient_id_list if lenient else _decode_id_list
    return tuple(
        ActiveReflection(
            reflection_id=row.reflection_id,
            content=row.content,
            supporting_observation_ids=decode(row.supporting_observation_ids_json),
            token_count=row.token_count,
            position=row.position,
            created_at=row.created_at,
        )
        for row in rows
    )


def generation_from_row(row: Row[Any]) -> GenerationRecord:
    """An ``om_memory_generation`` row as a record (legacy columns left out)."""
    data = row._asdict()
    data.pop("compaction_request_id", None)
    data.pop("request_fingerprint", None)
    return GenerationRecord(**data)


def coverage_from_row(row: Row[Any]) -> CoveragePart:
    """An ``om_coverage`` row as a record."""
    return CoveragePart(**row._asdict())


# --- connection-level selects (persistence-internal) ------------------------------------------


def select_generation(conn: Connection, generation_id: str) -> Row[Any] | None:
    """The ``om_memory_generation`` row of ``generation_id``."""
    table = schema.om_memory_generation
    return conn.execute(select(table).where(table.c.generation_id == generation_id)).first()


def select_active_generation(conn: Connection, session_id: str) -> Row[Any] | None:
    """The generation row the session's active pointer names."""
    gen, active = schema.om_memory_generation, schema.om_active_generation
    query = (
        select(gen)
        .join(active, active.c.generation_id == gen.c.generation_id)
        .where(active.c.run_id == session_id)
    )
    return conn.execute(query).first()


def select_coverage(conn: Connection, coverage_key: str) -> Row[Any] | None:
    """The ``om_coverage`` row of ``coverage_key``."""
    table = schema.om_coverage
    return conn.execute(select(table).where(table.c.coverage_key == coverage_key)).first()


_SOURCE_ORDER = (
    text(FIRST_SOURCE_SEQ_SQL.format(row="om_observation.")),
    text("om_observation.rowid"),
    schema.om_observation.c.observation_id.asc(),
)
"""Observations in source order: first source seq, then recorded order
(``persistence.reads.projection_sql``)."""


def select_active_candidate_set(conn: Connection, session_id: str) -> ActiveCandidateSet:
    """Active observation pool of a session (reference §8)."""
    obs = schema.om_observation
    query = select(obs).where(obs.c.run_id == session_id)
    generation = select_active_generation(conn, session_id)
    if (
        generation is not None
        and generation.status == "succeeded"
        and isinstance(generation.required_end_seq, int)
    ):
        retained = schema.om_generation_retained_observation
        retained_ids = select(retained.c.observation_id).where(
            retained.c.generation_id == generation.generation_id
        )
        # Dropped observations never come back: only retained ones and those past the watermark.
        query = query.where(
            or_(obs.c.observation_id.in_(retained_ids), obs.c.source_end_seq > generation.required_end_seq)
        )
    query = query.order_by(*_SOURCE_ORDER)
    observations = tuple(observation_from_row(row) for row in conn.execute(query))
    ids = tuple(sorted({o.observation_id for o in observations}, key=lambda s: s.encode("utf-8")))
    return ActiveCandidateSet(
        session_id=session_id,
        observations=observations,
        observation_ids=ids,
        observation_set_hash=observation_set_hash(session_id, ids),
        max_source_end_seq=max((o.source_end_seq for o in observations), default=0),
    )


def _empty_candidate_set(session_id: str) -> ActiveCandidateSet:
    return ActiveCandidateSet(
        session_id=session_id,
        observations=(),
        observation_ids=(),
        observation_set_hash=observation_set_hash(session_id, []),
        max_source_end_seq=0,
    )


def _check_not_damaged(conn: Connection, present: set[str], db_path: str) -> None:
    """Raise :class:`StorageError` when a table the recorded migrations created is gone.

    "Not created yet" (no tables, or a writer between migration steps) reads as empty memory; a
    dropped table must not, or a damaged store would answer "no memory" instead of failing.
    Costs one query only when some known table is absent.
    """
    missing = known_tables() - present
    if not missing or not present:
        return
    version_table = schema.om_schema_version.name
    if version_table not in present:
        if present & known_tables():
            raise StorageError(f"{db_path!r} is damaged: table {version_table!r} is missing")
        return
    applied = conn.execute(select(schema.om_schema_version.c.version)).scalars()
    lost = sorted(tables_created_by(applied) - present)
    if lost:
        raise StorageError(f"{db_path!r} is damaged: table {lost[0]!r} is missing")


def select_covering_ids(conn: Connection, events: Iterable[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """For each ``(session, seq)``, the id of the observation covering the event: one of its coverage
    part's observations that cites it, else the one citing the nearest seq of that part (ties: the
    earlier seq, then the first written). Events whose part has no observation are left out."""
    chosen: dict[tuple[str, int], str] = {}
    # The DB-API cursor directly: a search resolves a hundred hits, and SQLAlchemy's per-statement
    # overhead was most of that time.
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        for session_id, seq in dict.fromkeys(events):
            citing = cursor.execute(
                "SELECT r.observation_id FROM omray_observation_ref AS r"
                " JOIN om_observation AS o ON o.observation_id = r.observation_id"
                " WHERE r.run_id = ? AND r.seq = ? ORDER BY o.rowid LIMIT 1",
                (session_id, seq),
            ).fetchone()
            if citing is not None:  # the common case: an observation cites the event itself
                chosen[(session_id, seq)] = str(citing[0])
                continue
            part = cursor.execute(
                "SELECT source_start_seq, source_end_seq FROM om_observation"
                " WHERE run_id = ? AND source_start_seq <= ? ORDER BY source_start_seq DESC LIMIT 1",
                (session_id, seq),
            ).fetchone()
            if part is None or int(part[1]) < seq:
                continue
            found = cursor.execute(
                "SELECT r.observation_id FROM omray_observation_ref AS r"
                " JOIN om_observation AS o ON o.observation_id = r.observation_id"
                " WHERE r.run_id = ? AND r.seq BETWEEN ? AND ? AND o.source_start_seq = ?"
                " ORDER BY abs(r.seq - ?), r.seq, o.rowid LIMIT 1",
                (session_id, int(part[0]), int(part[1]), int(part[0]), seq),
            ).fetchone()
            if found is not None:
                chosen[(session_id, seq)] = str(found[0])
    finally:
        cursor.close()
    return chosen


class MemoryReader:
    """Read-only view of one memory database, usable from any process.

    Guarantees: never creates, migrates or writes the file; one read-only connection and one
    consistent snapshot per call; a missing file or tables not created yet give the empty
    answer; a damaged store raises :class:`StorageError`.
    """

    def __init__(self, db_path: str | os.PathLike[str]) -> None:
        self._db_path = os.fspath(db_path)
        self._engine: Engine | None = None

    @property
    def db_path(self) -> str:
        """Path of the database file."""
        return self._db_path

    def _run(self, query: Callable[[Connection], T], empty: T, tables: Sequence[str]) -> T:
        try:
            if self._engine is None:
                self._engine = open_read_engine(self._db_path)
            with self._engine.connect() as conn, conn.begin():
                present = set(
                    conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'")).scalars()
                )
                _check_not_damaged(conn, present, self._db_path)
                if not set(tables) <= present:
                    return empty
                return query(conn)
        except DatabaseMissingError:
            return empty
        except SQLAlchemyError as exc:
            if isinstance(exc.__cause__, DatabaseMissingError):
                return empty
            if isinstance(exc.__cause__, StorageError):
                raise exc.__cause__ from exc
            raise StorageError(f"reading {self._db_path!r} failed ({type(exc).__name__})") from exc
        except (ValidationError, ValueError) as exc:
            raise StorageError(f"{self._db_path!r} holds a row omray cannot decode") from exc

    def active_generation(self, session_id: str) -> GenerationRecord | None:
        """The session's active generation, or ``None`` before the first promotion."""

        def query(conn: Connection) -> GenerationRecord | None:
            row = select_active_generation(conn, session_id)
            return None if row is None else generation_from_row(row)

        return self._run(query, None, ("om_active_generation", "om_memory_generation"))

    def generation(self, generation_id: str) -> GenerationRecord | None:
        """One generation row by id, or ``None``."""

        def query(conn: Connection) -> GenerationRecord | None:
            row = select_generation(conn, generation_id)
            return None if row is None else generation_from_row(row)

        return self._run(query, None, ("om_memory_generation",))

    def generation_exists_for_set(self, session_id: str, observation_set_hash: str) -> bool:
        """True when any generation (running, succeeded or failed) was claimed for this exact set (§9.1)."""
        table = schema.om_memory_generation

        def query(conn: Connection) -> bool:
            row = conn.execute(
                select(table.c.generation_id)
                .where(table.c.run_id == session_id, table.c.observation_set_hash == observation_set_hash)
                .limit(1)
            ).first()
            return row is not None

        return self._run(query, False, ("om_memory_generation",))

    def active_reflections(self, session_id: str) -> list[ActiveReflection]:
        """Reflections linked to the active generation, by position (support ids that are not JSON
        fail the read: the pipelines must not work from a damaged row)."""
        return self._run(
            lambda conn: list(select_active_reflections(conn, session_id)),
            [],
            ("om_reflection", "om_generation_reflection", "om_active_generation"),
        )

    def active_candidate_set(self, session_id: str) -> ActiveCandidateSet:
        """The active observation pool (reference §8); callers count tokens themselves."""
        return self._run(
            lambda conn: select_active_candidate_set(conn, session_id),
            _empty_candidate_set(session_id),
            (
                "om_observation",
                "om_active_generation",
                "om_memory_generation",
                "om_generation_retained_observation",
            ),
        )

    def contiguous_covered_end(
        self, session_id: str, renderer_version: str, observer_schema_version: str
    ) -> int | None:
        """Contiguous coverage watermark of a session for both versions (reference §7.8)."""

        def query(conn: Connection) -> int | None:
            cov = schema.om_coverage
            rows = conn.execute(
                select(
                    cov.c.chunk_key,
                    cov.c.part_index,
                    cov.c.part_count,
                    cov.c.source_start_seq,
                    cov.c.source_end_seq,
                    cov.c.source_digest,
                ).where(
                    cov.c.run_id == session_id,
                    cov.c.renderer_version == renderer_version,
                    cov.c.observer_schema_version == observer_schema_version,
                )
            )
            return contiguous_end(CoverageInterval(**row._asdict()) for row in rows)

        return self._run(query, None, ("om_coverage",))

    def transcript_through(self, session_id: str) -> int:
        """The seq through which the session's covered events are in the transcript (0: none)."""

        def query(conn: Connection) -> int:
            table = schema.omray_transcript_through
            value = conn.execute(select(table.c.through_seq).where(table.c.run_id == session_id)).scalar()
            return int(value or 0)

        return self._run(query, 0, (schema.omray_transcript_through.name,))

    def covered_end(self, session_id: str) -> int:
        """The last seq any coverage part of the session reaches, whatever its versions (0: none)."""

        def query(conn: Connection) -> int:
            cov = schema.om_coverage
            value = conn.execute(
                select(func.max(cov.c.source_end_seq)).where(cov.c.run_id == session_id)
            ).scalar()
            return int(value or 0)

        return self._run(query, 0, ("om_coverage",))

    def transcript_lagging_sessions(self, limit: int) -> list[str]:
        """Up to ``limit`` sessions with coverage beyond their transcript watermark (coverage written
        before the transcript existed, or by the PHP extension), in session id order."""

        def query(conn: Connection) -> list[str]:
            rows = conn.exec_driver_sql(
                "SELECT c.run_id FROM om_coverage AS c LEFT JOIN omray_transcript_through AS t"
                " ON t.run_id = c.run_id GROUP BY c.run_id"
                " HAVING max(c.source_end_seq) > coalesce(max(t.through_seq), 0) ORDER BY c.run_id LIMIT ?",
                (limit,),
            )
            return [str(row[0]) for row in rows]

        return self._run(query, [], ("om_coverage", schema.omray_transcript_through.name))

    def stored_coverage_part(self, coverage_key: str) -> CoveragePart | None:
        """The committed coverage part of ``coverage_key``, if any."""

        def query(conn: Connection) -> CoveragePart | None:
            row = select_coverage(conn, coverage_key)
            return None if row is None else coverage_from_row(row)

        return self._run(query, None, ("om_coverage",))

    def memory_counts(self, session_id: str) -> MemoryCounts:
        """Recorded observation/reflection counts and the visible retained count (reference §12.1)."""

        def query(conn: Connection) -> MemoryCounts:
            obs, ref = schema.om_observation, schema.om_reflection
            retained, active = schema.om_generation_retained_observation, schema.om_active_generation
            observations = conn.execute(select(func.count()).where(obs.c.run_id == session_id)).scalar_one()
            reflections = conn.execute(select(func.count()).where(ref.c.run_id == session_id)).scalar_one()
            visible = conn.execute(
                select(func.count())
                .select_from(retained)
                .join(active, active.c.generation_id == retained.c.generation_id)
                .where(active.c.run_id == session_id)
            ).scalar_one()
            return MemoryCounts(
                recorded_observations=observations,
                recorded_reflections=reflections,
                visible_retained_observations=visible,
            )

        empty = MemoryCounts(recorded_observations=0, recorded_reflections=0, visible_retained_observations=0)
        return self._run(
            query,
            empty,
            ("om_observation", "om_reflection", "om_generation_retained_observation", "om_active_generation"),
        )

    def observations_by_ids(
        self, observation_ids: Sequence[str], session_id: str | None = None
    ) -> list[ObservationRecord]:
        """Observations with the given ids (optionally of one session), in the order asked."""

        def query(conn: Connection) -> list[ObservationRecord]:
            obs = schema.om_observation
            wanted = list(dict.fromkeys(observation_ids))
            found: dict[str, ObservationRecord] = {}
            for ids, _ in in_batches(wanted):
                batch = select(obs).where(obs.c.observation_id.in_(ids))
                if session_id is not None:
                    batch = batch.where(obs.c.run_id == session_id)
                for row in conn.execute(batch):
                    found[row.observation_id] = observation_from_row(row)
            return [found[i] for i in wanted if i in found]

        return self._run(query, [], ("om_observation",))

    def all_observations(self, session_id: str) -> list[ObservationRecord]:
        """Every observation of a session, dropped or not, in source order (first source seq, then
        recorded order)."""

        def query(conn: Connection) -> list[ObservationRecord]:
            obs = schema.om_observation
            rows = conn.execute(select(obs).where(obs.c.run_id == session_id).order_by(*_SOURCE_ORDER))
            return [observation_from_row(row) for row in rows]

        return self._run(query, [], ("om_observation",))

    def token_usage(self, session_id: str | None = None) -> list[TokenUsageTotal]:
        """Summed token usage per session, job kind and model (one session's, or every session's)."""
        return usage.token_usage(self._run, session_id)

    def token_usage_by_day(self, since_day: str, session_id: str | None = None) -> list[TokenUsageDay]:
        """Summed token usage per UTC day from ``since_day`` (``YYYY-MM-DD``), session, job kind and
        model, newest day first (one session's, or every session's)."""
        return usage.token_usage_by_day(self._run, since_day, session_id)

    def spend_since(self, since: str) -> list[ModelDaySpend]:
        """What each model spent since ``since`` (UTC ISO-8601), over every session (the daily budget)."""
        return usage.spend_since(self._run, since)

    def activity(self, session_id: str) -> ActivityRecord | None:
        """The session's live activity row as stored (freshness is the caller's decision)."""

        def query(conn: Connection) -> ActivityRecord | None:
            table = schema.om_current_activity
            row = conn.execute(select(table).where(table.c.run_id == session_id)).first()
            return None if row is None else ActivityRecord(**row._asdict())

        return self._run(query, None, ("om_current_activity",))

    def schema_versions(self) -> list[SchemaVersion]:
        """Rows of ``om_schema_version``, by version."""

        def query(conn: Connection) -> list[SchemaVersion]:
            table = schema.om_schema_version
            rows = conn.execute(select(table).order_by(table.c.version.asc()))
            return [SchemaVersion(**row._asdict()) for row in rows]

        return self._run(query, [], ("om_schema_version",))

    def all_activity(self) -> list[ActivityRecord]:
        """Every stored activity row, by session id (freshness is the caller's decision).

        A row omray cannot decode (an unknown stage, a negative count) is skipped, not raised, so
        one bad row never hides the other sessions from a live view.
        """

        def query(conn: Connection) -> list[ActivityRecord]:
            table = schema.om_current_activity
            records: list[ActivityRecord] = []
            for row in conn.execute(select(table).order_by(table.c.run_id.asc())):
                try:
                    records.append(ActivityRecord(**row._asdict()))
                except ValidationError:
                    continue
            return records

        return self._run(query, [], ("om_current_activity",))
