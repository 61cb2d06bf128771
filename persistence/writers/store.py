"""The write side of one memory database: :class:`Store`.

A ``Store`` owns the single write engine of one SQLite file (its StoreActor is the only writer).
Every write goes through an intention-named method; :meth:`Store.atomic` is the only way into a
transaction and nests as savepoints, so a caller can group several writes into one unit::

    with store.atomic():
        store.commit_observer_part(part, observations)
        store.upsert_activity(activity)

Every write is idempotent where the reference says so (reference §4.4): content-derived ids
are inserted or verified, never duplicated, and a genuine mismatch raises ``ConflictError``.
SQLite failures surface as ``StorageError`` with the exception class only (no SQL values).

The job queue's own file has its writer of its own, :class:`persistence.writers.queue_store.QueueStore`;
both share :class:`persistence.database.writer.SqliteWriter` (the engine and the transaction helper).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Connection, Row, select, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

from persistence.database import schema
from persistence.database.connection import Synchronous
from persistence.database.writer import NotFoundError, SqliteWriter, check_failure_reason
from persistence.reads.memory_reader import select_coverage, select_generation
from persistence.reads.projection import render_dirty_projections
from persistence.writers.forget import (
    forget_rows,
    forgotten_observation_ids,
    forgotten_ranges,
    in_ranges,
)
from protocol.canonical import canonical_json
from protocol.errors import ConflictError, InvalidPayloadError
from protocol.forget import ForgetRequest
from protocol.identities import content_hash, source_refs_json, transcript_event_id
from protocol.records import (
    ActivityRecord,
    CoveragePart,
    ObservationRecord,
    ReflectionRecord,
    TokenUsageRecord,
    TranscriptEntry,
)

ClaimOutcome = Literal["claimed", "already_running", "already_succeeded", "conflict"]
"""Result of :meth:`Store.claim_generation` (reference §9.3); a reclaimed failed row is ``claimed``."""

PromotionOutcome = Literal["promoted", "noop"]
"""Result of :meth:`Store.promote_generation`; ``noop`` when the generation already succeeded."""

_ID_LOOKUP_BATCH = 500
"""Ids per lookup of already-stored observations (well under SQLite's bound-variable limit)."""


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PartCommit(_Result):
    """Outcome of committing one observer chunk part."""

    status: Literal["inserted", "noop"]
    """``inserted`` for a new part, ``noop`` when a compatible part was already committed."""
    coverage_key: str
    """Key of the part."""
    observation_count: int
    """Observations stored with the part (the stored count on ``noop``)."""


class _CoverageRace(Exception):
    """Internal: the coverage insert hit a unique constraint."""


class Store(SqliteWriter):
    """Exclusive writer of one memory database.

    Guarantees: one transaction per outermost :meth:`atomic` (``BEGIN IMMEDIATE``; savepoints
    when nested); each intention method is atomic on its own; observation, coverage, reflection
    and generation writes are idempotent per reference §4.4; every transaction renders again the
    projection text of the sessions it changed. One ``Store`` per file per process; safe to call
    from several threads (each thread gets its own connection).
    """

    watches_file = True  # a memory database removed under the runtime is created again (issue 40)

    def __init__(self, db_path: str | os.PathLike[str], *, synchronous: Synchronous = "FULL") -> None:
        super().__init__(db_path, synchronous=synchronous)
        self._projection_names: frozenset[str] | None = None  # tables the projection text needs

    def _before_commit(self, conn: Connection) -> None:
        """Render again, in this transaction, the projection text of every session marked dirty
        (:func:`persistence.reads.projection.render_dirty_projections`)."""
        raw = conn.connection.driver_connection  # the same sqlite3 connection, in this transaction
        assert isinstance(raw, sqlite3.Connection)
        if self._projection_names is None:
            rows = raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
            self._projection_names = frozenset(row[0] for row in rows)
        render_dirty_projections(raw, self._projection_names)

    # --- observer parts (reference §7.8, §4.4) ------------------------------------------------

    def commit_observer_part(
        self,
        part: CoveragePart,
        observations: Sequence[ObservationRecord],
        transcript: Sequence[TranscriptEntry] = (),
    ) -> PartCommit:
        """Commit one chunk part: its observations, the transcript rows of the events it covers and
        its coverage row, all or nothing.

        A compatible part already committed is a ``noop`` with the stored count (its transcript rows
        are still written if missing); an incompatible one raises ``ConflictError``. Zero
        observations is valid and still advances coverage.
        """
        for observation in observations:
            if observation.session_id != part.session_id:
                raise InvalidPayloadError(
                    f"observation {observation.observation_id!r} is not of session {part.session_id!r}"
                )
        for entry in transcript:
            inside = part.source_start_seq <= entry.seq <= part.source_end_seq
            if entry.session_id != part.session_id or not inside:
                raise InvalidPayloadError(
                    f"transcript seq {entry.seq} is outside part {part.coverage_key!r} of {part.session_id!r}"
                )
        with self.atomic():
            conn = self._conn()
            self._insert_transcript(conn, transcript, part.covered_at)
            self._advance_transcript(conn, part.session_id, part.source_start_seq, part.source_end_seq)
            existing = select_coverage(conn, part.coverage_key)
            if existing is not None:
                return self._existing_part(existing, part, "digest mismatch")
            try:
                with conn.begin_nested():
                    self._insert_or_verify_observations(conn, observations, part)
                    try:
                        with conn.begin_nested():
                            conn.execute(
                                schema.om_coverage.insert().values(
                                    **part.model_dump(by_alias=True, exclude={"observation_count"}),
                                    observation_count=len(observations),
                                )
                            )
                    except IntegrityError as exc:
                        raise _CoverageRace from exc
            except _CoverageRace:
                existing = select_coverage(conn, part.coverage_key)
                if existing is None:
                    raise ConflictError(
                        f"Coverage conflict for key {part.coverage_key!r} after concurrent insert."
                    ) from None
                return self._existing_part(existing, part, "after concurrent insert")
            return PartCommit(
                status="inserted", coverage_key=part.coverage_key, observation_count=len(observations)
            )

    def backfill_transcript(
        self, session_id: str, entries: Sequence[TranscriptEntry], start_seq: int, through_seq: int, now: str
    ) -> int:
        """Write the transcript rows of ``start_seq..through_seq`` read again from the events file
        (coverage written without them: before they existed, or by the PHP extension); rows already
        there are kept. The session's transcript watermark moves to ``through_seq`` when the range
        joins it. Returns the watermark."""
        for entry in entries:
            if entry.session_id != session_id or not start_seq <= entry.seq <= through_seq:
                raise InvalidPayloadError(f"transcript seq {entry.seq} is not inside the backfilled range")
        with self.atomic():
            conn = self._conn()
            self._insert_transcript(conn, entries, now)
            return self._advance_transcript(conn, session_id, start_seq, through_seq)

    @staticmethod
    def _insert_transcript(conn: Connection, entries: Sequence[TranscriptEntry], now: str) -> None:
        """Insert the rows not stored yet (an event keeps the text it was first covered with); never an
        event inside a forgotten range (``persistence.writers.forget``)."""
        if not entries:
            return
        ranges = {session: forgotten_ranges(conn, session) for session in {e.session_id for e in entries}}
        entries = [entry for entry in entries if not in_ranges(entry.seq, ranges[entry.session_id])]
        if not entries:
            return
        rows = [
            {
                "event_id": transcript_event_id(entry.session_id, entry.seq),
                "run_id": entry.session_id,
                "seq": entry.seq,
                "event_type": entry.event_type,
                "timestamp": entry.timestamp,
                "content": entry.content,
                "content_hash": content_hash(entry.content),
                "created_at": now,
            }
            for entry in entries
        ]
        conn.execute(sqlite_insert(schema.omray_transcript).on_conflict_do_nothing(), rows)

    @staticmethod
    def _advance_transcript(conn: Connection, session_id: str, start_seq: int, end_seq: int) -> int:
        """Move the session's transcript watermark to ``end_seq`` when ``start_seq`` joins it."""
        table = schema.omray_transcript_through
        current = conn.execute(select(table.c.through_seq).where(table.c.run_id == session_id)).scalar()
        through = int(current or 0)
        if start_seq > through + 1 or end_seq <= through:
            return through
        statement = sqlite_insert(table).values(run_id=session_id, through_seq=end_seq)
        conn.execute(
            statement.on_conflict_do_update(index_elements=[table.c.run_id], set_={"through_seq": end_seq})
        )
        return end_seq

    @staticmethod
    def _existing_part(existing: Row[Any], part: CoveragePart, reason: str) -> PartCommit:
        if existing.source_digest == part.source_digest and existing.part_digest == part.part_digest:
            return PartCommit(
                status="noop", coverage_key=part.coverage_key, observation_count=existing.observation_count
            )
        if reason == "digest mismatch":
            raise ConflictError(f"Coverage conflict for key {part.coverage_key!r}: digest mismatch.")
        raise ConflictError(f"Coverage conflict for key {part.coverage_key!r} after concurrent insert.")

    @staticmethod
    def _insert_or_verify_observations(
        conn: Connection, observations: Sequence[ObservationRecord], part: CoveragePart
    ) -> None:
        """Insert the part's new observations in one statement; one already stored must be identical.

        One lookup for every id and one multi-row insert (the triggers still run per row): a part's
        observations cost the writer one round of statement overhead, not one per observation.
        """
        table = schema.om_observation
        ids = list(dict.fromkeys(observation.observation_id for observation in observations))
        known: dict[str, str] = {}
        for start in range(0, len(ids), _ID_LOOKUP_BATCH):
            batch = ids[start : start + _ID_LOOKUP_BATCH]
            found = conn.execute(
                select(table.c.observation_id, table.c.content_hash).where(table.c.observation_id.in_(batch))
            )
            known.update((row[0], row[1]) for row in found)
        forgotten = forgotten_observation_ids(conn, ids)  # a replayed part never brings one back
        rows: list[dict[str, Any]] = []
        for observation in observations:
            if observation.observation_id in forgotten:
                continue
            stored_hash = known.get(observation.observation_id)
            if stored_hash is not None:
                if stored_hash == observation.content_hash:
                    continue
                raise ConflictError(
                    f"Observation conflict for id {observation.observation_id!r}: content_hash mismatch."
                )
            known[observation.observation_id] = observation.content_hash  # a repeat in this part
            rows.append(
                {
                    "observation_id": observation.observation_id,
                    "run_id": observation.session_id,
                    "boundary_key": part.boundary_key,
                    "source_start_seq": part.source_start_seq,
                    "source_end_seq": part.source_end_seq,
                    "source_refs_json": source_refs_json(observation.source_refs),
                    "content": observation.content,
                    "content_hash": observation.content_hash,
                    "relevance": observation.relevance,
                    "timestamp": observation.timestamp,
                    "token_count": observation.token_count,
                    "observer_model": observation.observer_model,
                    "observer_schema_version": observation.observer_schema_version,
                    "created_at": part.covered_at,
                }
            )
        if rows:
            conn.execute(table.insert(), rows)

    # --- forget (persistence.writers.forget) ------------------------------------------------------------

    def forget(self, request: ForgetRequest, job_id: str, now: str) -> dict[str, Any]:
        """Forget what ``request`` names, in one transaction: canonical rows, their derived copies
        (trigram rows, projection lines and pieces, citation rows) and a record of what was forgotten.
        Idempotent; returns ids and counts (``persistence.writers.forget.ForgetResult.as_dict``)."""
        if not isinstance(request, ForgetRequest):
            raise InvalidPayloadError(f"forget takes a ForgetRequest, got {type(request).__name__}")
        with self.atomic():
            # Freed pages are overwritten, so the forgotten text does not stay in the file's free
            # list (the setting is per connection and not transactional: set before any delete).
            self._conn().exec_driver_sql("PRAGMA secure_delete = ON")
            result = forget_rows(self._conn(), request, job_id, now).as_dict()
        self.checkpoint_wal()
        return result

    # --- live activity (reference §11.1) -------------------------------------------------------

    def upsert_activity(self, activity: ActivityRecord) -> None:
        """Write the session's one activity row (a newer job overwrites an older one)."""
        table = schema.om_current_activity
        values = activity.model_dump(by_alias=True)
        statement = sqlite_insert(table).values(**values)
        statement = statement.on_conflict_do_update(
            index_elements=[table.c.run_id],
            set_={key: statement.excluded[key] for key in values if key != "run_id"},
        )
        with self.atomic():
            self._conn().execute(statement)

    def clear_activity(self, session_id: str, job_id: str) -> bool:
        """Delete the session's activity row only if ``job_id`` wrote it; True when a row was deleted."""
        table = schema.om_current_activity
        with self.atomic():
            result = self._conn().execute(
                table.delete().where(table.c.run_id == session_id, table.c.job_id == job_id)
            )
            return result.rowcount == 1

    # --- token usage ------------------------------------------------------------------------------

    def record_token_usage(self, usage: TokenUsageRecord) -> bool:
        """Store what one model tool loop spent; False when ``usage_id`` was already stored (a retry)."""
        statement = sqlite_insert(schema.omray_token_usage).values(**usage.model_dump(by_alias=True))
        with self.atomic():
            result = self._conn().execute(statement.on_conflict_do_nothing(index_elements=["usage_id"]))
            return result.rowcount == 1

    # --- observe plans ---------------------------------------------------------------------------

    def pin_observe_start(
        self,
        plan_key: str,
        session_id: str,
        job_id: str,
        start_seq: int,
        terminal_end_seq: int,
        pinned_at: str,
    ) -> int:
        """The seq the unfinished observe plan ``plan_key`` starts from: ``start_seq`` when none is pinned,
        else what the first attempt pinned (a retry replays the same plan whatever its coverage start)."""
        table = schema.omray_observe_start
        with self.atomic():
            conn = self._conn()
            conn.execute(
                sqlite_insert(table)
                .values(
                    plan_key=plan_key,
                    run_id=session_id,
                    job_id=job_id,
                    start_seq=start_seq,
                    terminal_end_seq=terminal_end_seq,
                    pinned_at=pinned_at,
                )
                .on_conflict_do_nothing(index_elements=[table.c.plan_key])
            )
            pinned = conn.execute(select(table.c.start_seq).where(table.c.plan_key == plan_key)).scalar_one()
        return int(pinned)

    def release_observe_start(self, plan_key: str) -> bool:
        """Forget the pinned start of a finished observe plan; True when a row was deleted."""
        table = schema.omray_observe_start
        with self.atomic():
            result = self._conn().execute(table.delete().where(table.c.plan_key == plan_key))
            return result.rowcount == 1

    # --- generations (reference §9.3, §9.4, §9.8) ------------------------------------------------

    def claim_generation(
        self,
        generation_id: str,
        session_id: str,
        observation_set_hash: str,
        reflector_model: str,
        reflector_schema_version: str,
        required_start_seq: int,
        required_end_seq: int,
        now: str,
        take_over_running: bool = False,
    ) -> ClaimOutcome:
        """Claim a threshold generation for this worker (reference §9.3).

        New id -> a ``running`` row, ``claimed``. Existing: ``succeeded`` -> ``already_succeeded``,
        ``running`` -> ``already_running`` (or, with ``take_over_running``, taken over: ``created_at
        = now``, ``claimed``), ``failed`` -> reclaimed as ``running`` with ``created_at = now`` (a
        redelivered job retrying), ``claimed``.

        ``take_over_running`` is for a redelivered attempt of the same job: the queue starts attempt
        N+1 only after attempt N ended or its worker died, so a ``running`` row is an orphan of a dead
        attempt. (The original left such rows running for good; omray finishes the generation.)
        A replay of a call that already claimed (same ``now``, the row still ``running``) is
        ``claimed`` again, so repeating a claim is idempotent.
        """
        table = schema.om_memory_generation
        with self.atomic():
            conn = self._conn()
            row = select_generation(conn, generation_id)
            if row is not None:
                return self._claim_existing(conn, row, now, take_over_running)
            try:
                with conn.begin_nested():
                    conn.execute(
                        table.insert().values(
                            generation_id=generation_id,
                            run_id=session_id,
                            trigger_kind="threshold",
                            status="running",
                            observation_set_hash=observation_set_hash,
                            reflector_model=reflector_model,
                            reflector_schema_version=reflector_schema_version,
                            threshold_idempotency_key=generation_id,
                            required_start_seq=required_start_seq,
                            required_end_seq=required_end_seq,
                            created_at=now,
                        )
                    )
            except IntegrityError:
                row = select_generation(conn, generation_id)
                if row is not None:
                    return self._claim_existing(conn, row, now)
                in_flight = conn.execute(
                    select(table.c.generation_id).where(
                        table.c.run_id == session_id,
                        table.c.observation_set_hash == observation_set_hash,
                        table.c.status.in_(("running", "succeeded")),
                    )
                ).first()
                return "already_running" if in_flight is not None else "conflict"
            return "claimed"

    @staticmethod
    def _claim_existing(
        conn: Connection, row: Row[Any], now: str, take_over_running: bool = False
    ) -> ClaimOutcome:
        if row.status == "succeeded":
            return "already_succeeded"
        if row.status == "running" and row.created_at == now:
            # The same claim replayed (the durable StoreProxy repeats a call whose StoreActor died
            # after committing it): the row is this claimant's own, so the claim still holds.
            return "claimed"
        if row.status == "running" and take_over_running:
            table = schema.om_memory_generation
            conn.execute(
                update(table)
                .where(table.c.generation_id == row.generation_id, table.c.status == "running")
                .values(created_at=now)
            )
            return "claimed"
        if row.status == "running":
            return "already_running"
        if row.status == "failed":
            table = schema.om_memory_generation
            conn.execute(
                update(table)
                .where(table.c.generation_id == row.generation_id, table.c.status == "failed")
                .values(status="running", failure_code=None, completed_at=None, created_at=now)
            )
            return "claimed"
        return "conflict"

    def fail_generation(self, generation_id: str, failure_code: str, now: str) -> bool:
        """Mark a running generation failed with a category code; False if it was not running."""
        check_failure_reason(failure_code)
        return self._finish_running_generation(generation_id, "failed", failure_code, now)

    def succeed_generation_without_promotion(self, generation_id: str, completed_at: str) -> bool:
        """Mark a running generation succeeded without touching the active pointer (under threshold)."""
        return self._finish_running_generation(generation_id, "succeeded", None, completed_at)

    def _finish_running_generation(
        self, generation_id: str, status: str, failure_code: str | None, completed_at: str
    ) -> bool:
        table = schema.om_memory_generation
        with self.atomic():
            result = self._conn().execute(
                update(table)
                .where(table.c.generation_id == generation_id, table.c.status == "running")
                .values(status=status, failure_code=failure_code, completed_at=completed_at)
            )
            return result.rowcount == 1

    def promote_generation(
        self,
        generation_id: str,
        session_id: str,
        reflections: Sequence[ReflectionRecord],
        retained_observation_ids: Sequence[str],
        completed_at: str,
    ) -> PromotionOutcome:
        """Make a running generation the session's active one, in one transaction (reference §9.8).

        ``reflections`` are prior active + new, in order; each is inserted or verified by id (new
        rows take the generation's set hash and ``completed_at``) and linked at its position.
        Then the retained observation ids are linked, the generation becomes ``succeeded`` and the
        active pointer moves. Already ``succeeded`` -> ``noop``.
        """
        if len({r.reflection_id for r in reflections}) != len(reflections):
            raise InvalidPayloadError(f"duplicate reflection id in promotion of {generation_id!r}")
        if len(set(retained_observation_ids)) != len(retained_observation_ids):
            raise InvalidPayloadError(f"duplicate retained observation id in promotion of {generation_id!r}")
        with self.atomic():
            conn = self._conn()
            row = select_generation(conn, generation_id)
            if row is None:
                raise NotFoundError(f"Generation {generation_id!r} not found for success commit.")
            if row.status == "succeeded":
                return "noop"
            if row.status != "running":
                raise ConflictError(f"Generation {generation_id!r} is {row.status!r}; cannot commit success.")
            if row.run_id != session_id or any(r.session_id != session_id for r in reflections):
                raise ConflictError(f"Generation {generation_id!r} identity mismatch on success commit.")
            for position, reflection in enumerate(reflections):
                self._insert_or_verify_reflection(conn, reflection, row, completed_at)
                conn.execute(
                    schema.om_generation_reflection.insert().values(
                        generation_id=generation_id, reflection_id=reflection.reflection_id, position=position
                    )
                )
            for position, observation_id in enumerate(retained_observation_ids):
                conn.execute(
                    schema.om_generation_retained_observation.insert().values(
                        generation_id=generation_id, observation_id=observation_id, position=position
                    )
                )
            gen = schema.om_memory_generation
            result = conn.execute(
                update(gen)
                .where(gen.c.generation_id == generation_id, gen.c.status == "running")
                .values(status="succeeded", completed_at=completed_at, failure_code=None)
            )
            if result.rowcount != 1:
                raise ConflictError(
                    f"Generation {generation_id!r} left running status before success commit."
                )
            active = schema.om_active_generation
            pointer = sqlite_insert(active).values(run_id=session_id, generation_id=generation_id)
            conn.execute(
                pointer.on_conflict_do_update(
                    index_elements=[active.c.run_id], set_={"generation_id": pointer.excluded.generation_id}
                )
            )
            return "promoted"

    @staticmethod
    def _insert_or_verify_reflection(
        conn: Connection, reflection: ReflectionRecord, generation: Row[Any], completed_at: str
    ) -> None:
        table = schema.om_reflection
        stored_content = conn.execute(
            select(table.c.content).where(table.c.reflection_id == reflection.reflection_id)
        ).scalar_one_or_none()
        if stored_content is not None:
            if stored_content == reflection.content:
                return
            raise ConflictError(f"Reflection conflict for id {reflection.reflection_id!r}.")
        conn.execute(
            table.insert().values(
                reflection_id=reflection.reflection_id,
                run_id=reflection.session_id,
                compaction_request_id="",
                observation_set_hash=generation.observation_set_hash,
                content=reflection.content,
                supporting_observation_ids_json=canonical_json(list(reflection.supporting_observation_ids)),
                compression_level="0",
                token_count=reflection.token_count,
                reflector_model=reflection.reflector_model,
                reflector_schema_version=reflection.reflector_schema_version,
                created_at=completed_at,
            )
        )

    # --- semantic index state (reference §14.4) ---------------------------------------------------

    def save_semantic_state(
        self, *, signature: str, source_hash: str, dimensions: int, dirty: bool, complete: bool
    ) -> None:
        """Write the one ``om_semantic_state`` row (the derived index's durable status marker).

        The indexer saves ``dirty=True`` before any write to derived index files and clears it only
        after all of them succeeded, so an interrupted write is seen as dirty and rebuilt.
        """
        if dimensions < 0:
            raise InvalidPayloadError("semantic index dimensions must be >= 0")
        table = schema.om_semantic_state
        values = {
            "id": 1,
            "signature": signature,
            "source_hash": source_hash,
            "dimensions": dimensions,
            "dirty": 1 if dirty else 0,
            "complete": 1 if complete else 0,
        }
        statement = sqlite_insert(table).values(**values)
        statement = statement.on_conflict_do_update(
            index_elements=[table.c.id], set_={key: statement.excluded[key] for key in values if key != "id"}
        )
        with self.atomic():
            self._conn().execute(statement)
