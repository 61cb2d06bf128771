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

Length: about 1,000 lines, on purpose. ``Store`` is the one class with intention-named write methods
(STYLE.md §4) for every table of one file: memory, generations, the job queue's group-commit
writes and the observe-start pins. Splitting it would make more than one writer class per file.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Connection, Row, select, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from persistence import schema
from persistence.connection import Synchronous, open_write_engine
from persistence.forget import (
    ForgetRequest,
    forget_rows,
    forgotten_observation_ids,
    forgotten_ranges,
    in_ranges,
)
from persistence.projection_queries import render_dirty_projections
from persistence.queries import select_coverage, select_generation
from protocol.canonical import canonical_json
from protocol.errors import ConflictError, InvalidPayloadError, OmrayError, StorageError
from protocol.identities import content_hash, source_refs_json, transcript_event_id
from protocol.jobs import JOB_PAYLOAD_ADAPTER, JobEnvelope
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

JobState = Literal["pending", "running", "succeeded", "failed"]
"""Lifecycle of one queued job."""

_FAILURE_REASON = re.compile(r"^[a-z0-9_.:-]{1,64}\Z")

_ID_LOOKUP_BATCH = 500
"""Ids per lookup of already-stored observations (well under SQLite's bound-variable limit)."""


class NotFoundError(OmrayError):
    """The row a write needs (a generation, an unfinished job) does not exist."""


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


class EnqueueResult(_Result):
    """Outcome of accepting one job into the durable FIFO."""

    job_seq: int
    """Acceptance order of the (new or already queued) job."""
    job_id: str
    """Job id."""
    created: bool
    """False when the same job id was already pending or running."""


class JobAccepted(_Result):
    """Queue write: job ``job_seq`` was accepted (a new ``pending`` row); the QueueActor numbers its jobs."""

    kind: Literal["accepted"] = "accepted"
    job_seq: int
    envelope: JobEnvelope
    accepted_at: str


class JobStarted(_Result):
    """Queue write: attempt ``attempt`` of job ``job_seq`` started (row -> ``running``)."""

    kind: Literal["started"] = "started"
    job_seq: int
    attempt: int
    started_at: str


class JobRetry(_Result):
    """Queue write: a running job waits for a retry until ``not_before`` (row -> ``pending``)."""

    kind: Literal["retry"] = "retry"
    job_seq: int
    not_before: str
    failure_reason: str


class JobFinished(_Result):
    """Queue write: the job left the FIFO as ``succeeded`` or ``failed``."""

    kind: Literal["finished"] = "finished"
    job_seq: int
    state: Literal["succeeded", "failed"]
    finished_at: str
    failure_reason: str | None = None


class JobGivenUp(_Result):
    """Queue write: the job failed for good, together with its ``job_failed`` runtime event."""

    kind: Literal["given_up"] = "given_up"
    job_seq: int
    finished_at: str
    failure_reason: str
    run_id: str
    event_type: str
    event_payload: dict[str, Any]
    db_path: str = ""
    """Database of the job (its session is a session of that database)."""


class RuntimeEventWrite(_Result):
    """Queue write: a sanitized runtime event for a session."""

    kind: Literal["runtime_event"] = "runtime_event"
    run_id: str
    event_type: str
    payload: dict[str, Any]
    created_at: str
    db_path: str = ""
    """Database whose session the event concerns."""


JobWrite = JobAccepted | JobStarted | JobRetry | JobFinished | JobGivenUp | RuntimeEventWrite
"""One durable write of the queue; a loop step applies its writes in one transaction."""


class StoredJob(_Result):
    """One unfinished or finished job row of ``omray_job``."""

    job_seq: int
    """Acceptance order."""
    envelope: JobEnvelope
    """The job as accepted."""
    handler_id: str
    """Stable handler id."""
    run_id: str
    """Session of the payload."""
    state: JobState
    """Lifecycle state."""
    attempts: int
    """Attempts started so far."""
    not_before: str | None
    """Earliest start of the next attempt (UTC ISO-8601), after a retry."""
    accepted_at: str
    """When it was accepted."""
    started_at: str | None
    """When the latest attempt started."""
    finished_at: str | None
    """When it finished."""
    failure_reason: str | None
    """Short category code of the latest failure."""


class RuntimeEvent(_Result):
    """One row of ``omray_runtime_event`` (e.g. ``extension_agent.job_failed``)."""

    event_seq: int
    """Order of recording."""
    run_id: str
    """Session the event concerns."""
    event_type: str
    """Event type."""
    payload: dict[str, Any]
    """Sanitized payload (ids, counts, codes; never memory text)."""
    created_at: str
    """When it was recorded."""
    db_path: str = ""
    """Database whose session it concerns (``""``: unknown, an event older than the column)."""


class JobCounts(_Result):
    """Number of jobs in each state."""

    pending: int
    """Waiting to start (including retries waiting for their backoff)."""
    running: int
    """Started and not finished."""
    succeeded: int
    """Finished successfully."""
    failed: int
    """Finished after exhausting retries."""


class _CoverageRace(Exception):
    """Internal: the coverage insert hit a unique constraint."""


def _check_failure_reason(reason: str | None) -> None:
    if reason is not None and not _FAILURE_REASON.match(reason):
        raise InvalidPayloadError("failure_reason must be a short lowercase category code")


class Store:
    """Exclusive writer of one memory database.

    Guarantees: one transaction per outermost :meth:`atomic` (``BEGIN IMMEDIATE``; savepoints
    when nested); each intention method is atomic on its own; observation, coverage, reflection
    and generation writes are idempotent per reference §4.4; the job FIFO is ordered by
    ``job_seq``. One ``Store`` per file per process; safe to call from several threads (each
    thread gets its own connection).
    """

    def __init__(self, db_path: str | os.PathLike[str], *, synchronous: Synchronous = "FULL") -> None:
        self._db_path = os.fspath(db_path)
        self._engine = open_write_engine(self._db_path, synchronous=synchronous)
        self._local = threading.local()
        self._projection_names: frozenset[str] | None = None  # tables the projection text needs

    @property
    def db_path(self) -> str:
        """Path of the database file."""
        return self._db_path

    def close(self) -> None:
        """Release the engine (connections are per transaction, so nothing stays open)."""
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- transactions ---------------------------------------------------------------------

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One transaction (outermost) or savepoint (nested); rolls back when the block raises."""
        current: Connection | None = getattr(self._local, "conn", None)
        if current is not None:
            with current.begin_nested():
                yield
            return
        try:
            with self._engine.connect() as conn:
                self._local.conn = conn
                try:
                    with conn.begin():
                        yield
                        self._render_dirty_projections(conn)
                finally:
                    self._local.conn = None
        except SQLAlchemyError as exc:
            raise StorageError(f"write to {self._db_path!r} failed ({type(exc).__name__})") from exc

    def _render_dirty_projections(self, conn: Connection) -> None:
        """Render again, in this transaction, the projection text of every session marked dirty
        (:func:`persistence.projection_queries.render_dirty_projections`)."""
        raw = conn.connection.driver_connection  # the same sqlite3 connection, in this transaction
        assert isinstance(raw, sqlite3.Connection)
        if self._projection_names is None:
            rows = raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
            self._projection_names = frozenset(row[0] for row in rows)
        render_dirty_projections(raw, self._projection_names)

    def _conn(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:  # pragma: no cover - every caller enters atomic() first
            raise RuntimeError("no transaction is open")
        return conn

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
            if observation.run_id != part.run_id:
                raise InvalidPayloadError(
                    f"observation {observation.observation_id!r} is not of session {part.run_id!r}"
                )
        for entry in transcript:
            if entry.run_id != part.run_id or not part.source_start_seq <= entry.seq <= part.source_end_seq:
                raise InvalidPayloadError(
                    f"transcript seq {entry.seq} is not inside part {part.coverage_key!r} of {part.run_id!r}"
                )
        with self.atomic():
            conn = self._conn()
            self._insert_transcript(conn, transcript, part.covered_at)
            self._advance_transcript(conn, part.run_id, part.source_start_seq, part.source_end_seq)
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
                                    **part.model_dump(exclude={"observation_count"}),
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
        self, run_id: str, entries: Sequence[TranscriptEntry], start_seq: int, through_seq: int, now: str
    ) -> int:
        """Write the transcript rows of ``start_seq..through_seq`` read again from the events file
        (coverage written without them: before they existed, or by the PHP extension); rows already
        there are kept. The session's transcript watermark moves to ``through_seq`` when the range
        joins it. Returns the watermark."""
        for entry in entries:
            if entry.run_id != run_id or not start_seq <= entry.seq <= through_seq:
                raise InvalidPayloadError(f"transcript seq {entry.seq} is not inside the backfilled range")
        with self.atomic():
            conn = self._conn()
            self._insert_transcript(conn, entries, now)
            return self._advance_transcript(conn, run_id, start_seq, through_seq)

    @staticmethod
    def _insert_transcript(conn: Connection, entries: Sequence[TranscriptEntry], now: str) -> None:
        """Insert the rows not stored yet (an event keeps the text it was first covered with); never an
        event inside a forgotten range (``persistence.forget``)."""
        if not entries:
            return
        ranges = {run_id: forgotten_ranges(conn, run_id) for run_id in {entry.run_id for entry in entries}}
        entries = [entry for entry in entries if not in_ranges(entry.seq, ranges[entry.run_id])]
        if not entries:
            return
        rows = [
            {
                "event_id": transcript_event_id(entry.run_id, entry.seq),
                "run_id": entry.run_id,
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
    def _advance_transcript(conn: Connection, run_id: str, start_seq: int, end_seq: int) -> int:
        """Move the session's transcript watermark to ``end_seq`` when ``start_seq`` joins it."""
        table = schema.omray_transcript_through
        current = conn.execute(select(table.c.through_seq).where(table.c.run_id == run_id)).scalar()
        through = int(current or 0)
        if start_seq > through + 1 or end_seq <= through:
            return through
        statement = sqlite_insert(table).values(run_id=run_id, through_seq=end_seq)
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
                    "run_id": observation.run_id,
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

    # --- forget (persistence.forget) ------------------------------------------------------------

    def forget(self, request: ForgetRequest | Mapping[str, Any], job_id: str, now: str) -> dict[str, Any]:
        """Forget what ``request`` names, in one transaction: canonical rows, their derived copies
        (trigram rows, projection lines and pieces, citation rows) and a record of what was forgotten.
        Idempotent; returns ids and counts (``persistence.forget.ForgetResult.as_dict``)."""
        if not isinstance(request, ForgetRequest):
            request = ForgetRequest(
                run_id=str(request["run_id"]),
                memory_ids=tuple(request.get("memory_ids", ())),
                event_ranges=tuple((int(a), int(b)) for a, b in request.get("event_ranges", ())),
                whole_session=bool(request.get("whole_session", False)),
            )
        with self.atomic():
            return forget_rows(self._conn(), request, job_id, now).as_dict()

    # --- live activity (reference §11.1) -------------------------------------------------------

    def upsert_activity(self, activity: ActivityRecord) -> None:
        """Write the session's one activity row (a newer job overwrites an older one)."""
        table = schema.om_current_activity
        values = activity.model_dump()
        statement = sqlite_insert(table).values(**values)
        statement = statement.on_conflict_do_update(
            index_elements=[table.c.run_id],
            set_={key: statement.excluded[key] for key in values if key != "run_id"},
        )
        with self.atomic():
            self._conn().execute(statement)

    def clear_activity(self, run_id: str, job_id: str) -> bool:
        """Delete the session's activity row only if ``job_id`` wrote it; True when a row was deleted."""
        table = schema.om_current_activity
        with self.atomic():
            result = self._conn().execute(
                table.delete().where(table.c.run_id == run_id, table.c.job_id == job_id)
            )
            return result.rowcount == 1

    # --- token usage ------------------------------------------------------------------------------

    def record_token_usage(self, usage: TokenUsageRecord) -> bool:
        """Store what one model tool loop spent; False when ``usage_id`` was already stored (a retry)."""
        statement = sqlite_insert(schema.omray_token_usage).values(**usage.model_dump())
        with self.atomic():
            result = self._conn().execute(statement.on_conflict_do_nothing(index_elements=["usage_id"]))
            return result.rowcount == 1

    # --- observe plans ---------------------------------------------------------------------------

    def pin_observe_start(
        self, plan_key: str, run_id: str, job_id: str, start_seq: int, terminal_end_seq: int, pinned_at: str
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
                    run_id=run_id,
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
        run_id: str,
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
                            run_id=run_id,
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
                        table.c.run_id == run_id,
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
        _check_failure_reason(failure_code)
        table = schema.om_memory_generation
        with self.atomic():
            result = self._conn().execute(
                update(table)
                .where(table.c.generation_id == generation_id, table.c.status == "running")
                .values(status="failed", failure_code=failure_code, completed_at=now)
            )
            return result.rowcount == 1

    def succeed_generation_without_promotion(self, generation_id: str, completed_at: str) -> bool:
        """Mark a running generation succeeded without touching the active pointer (under threshold)."""
        table = schema.om_memory_generation
        with self.atomic():
            result = self._conn().execute(
                update(table)
                .where(table.c.generation_id == generation_id, table.c.status == "running")
                .values(status="succeeded", failure_code=None, completed_at=completed_at)
            )
            return result.rowcount == 1

    def promote_generation(
        self,
        generation_id: str,
        run_id: str,
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
            if row.run_id != run_id or any(r.run_id != run_id for r in reflections):
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
            pointer = sqlite_insert(active).values(run_id=run_id, generation_id=generation_id)
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
                run_id=reflection.run_id,
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

    # --- durable job queue --------------------------------------------------------------------

    def enqueue_job(self, envelope: JobEnvelope, accepted_at: str) -> EnqueueResult:
        """Append one job under the next sequence number, unless its key is already pending or running.

        For tools and tests; the QueueActor numbers its own jobs and writes them with
        :class:`JobAccepted` in its group commit.
        """
        with self.atomic():
            queued = self._unfinished_seq(self._conn(), envelope.payload.db_path, envelope.job_id)
            if queued is not None:
                return EnqueueResult(job_seq=queued, job_id=envelope.job_id, created=False)
            job_seq = self.next_job_seq()
            self.apply_job_writes([JobAccepted(job_seq=job_seq, envelope=envelope, accepted_at=accepted_at)])
        return EnqueueResult(job_seq=job_seq, job_id=envelope.job_id, created=True)

    def next_job_seq(self) -> int:
        """The sequence number after every one ever used (the QueueActor numbers new jobs from it)."""
        with self.atomic():
            used = (
                self._conn()
                .exec_driver_sql(
                    "SELECT max(coalesce((SELECT max(job_seq) FROM omray_job), 0),"
                    " coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'omray_job'), 0))"
                )
                .scalar_one()
            )
        return int(used) + 1

    def apply_job_writes(self, writes: Sequence[JobWrite]) -> int:
        """Apply one loop step's queue writes in order, in ONE transaction; returns how many changed a row.

        Each write is idempotent, so a batch repeated after a lost reply changes nothing more: a
        ``finished`` write for a job already finished is skipped.
        """
        applied = 0
        with self.atomic():
            conn = self._conn()
            for write in writes:
                if isinstance(write, JobAccepted):
                    self._insert_accepted(conn, write)
                elif isinstance(write, JobStarted):
                    if write.attempt < 1:
                        raise InvalidPayloadError(f"attempt must be >= 1 for job seq {write.job_seq!r}")
                    # The hot path of a busy queue: plain prepared statements, no savepoint each.
                    changed = conn.exec_driver_sql(
                        "UPDATE omray_job SET state = 'running', attempts = ?, started_at = ?,"
                        " not_before = NULL WHERE job_seq = ? AND state IN ('pending', 'running')",
                        (write.attempt, write.started_at, write.job_seq),
                    ).rowcount
                    if changed != 1:
                        raise NotFoundError(f"no job with seq {write.job_seq!r} in state 'pending/running'")
                elif isinstance(write, JobRetry):
                    self.mark_job_retry(write.job_seq, write.not_before, write.failure_reason)
                elif isinstance(write, JobFinished):
                    _check_failure_reason(write.failure_reason)
                    changed = conn.exec_driver_sql(
                        "UPDATE omray_job SET state = ?, finished_at = ?, failure_reason = ?"
                        " WHERE job_seq = ? AND state IN ('pending', 'running')",
                        (write.state, write.finished_at, write.failure_reason, write.job_seq),
                    ).rowcount
                    if changed != 1:
                        continue  # recorded by an earlier try of this batch
                elif isinstance(write, JobGivenUp):
                    self.give_up_job(
                        write.job_seq,
                        write.finished_at,
                        write.failure_reason,
                        write.run_id,
                        write.event_type,
                        write.event_payload,
                        write.db_path,
                    )
                else:
                    self.record_runtime_event(
                        write.run_id, write.event_type, write.payload, write.created_at, write.db_path
                    )
                applied += 1
        return applied

    @staticmethod
    def _insert_accepted(conn: Connection, write: JobAccepted) -> None:
        envelope = write.envelope
        # The hot path of a busy queue: a plain prepared statement. A row already there under this
        # seq is this same write repeated after a lost reply; anything else is a broken contract.
        inserted = conn.exec_driver_sql(
            "INSERT INTO omray_job (job_seq, job_id, handler_id, correlation_id, run_id, db_path,"
            " payload_json, state, attempts, accepted_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?)"
            " ON CONFLICT DO NOTHING",
            (
                write.job_seq,
                envelope.job_id,
                envelope.handler_id,
                envelope.correlation_id,
                envelope.payload.run_id,
                envelope.payload.db_path,
                JOB_PAYLOAD_ADAPTER.dump_json(envelope.payload).decode("utf-8"),
                write.accepted_at,
            ),
        ).rowcount
        if inserted == 1:
            return
        row = conn.exec_driver_sql(
            "SELECT job_id, db_path FROM omray_job WHERE job_seq = ?", (write.job_seq,)
        ).first()
        if row is None or (row[0], row[1]) != (envelope.job_id, envelope.payload.db_path):
            raise ConflictError(f"job seq {write.job_seq!r} or the key of job {envelope.job_id!r} is taken")

    @staticmethod
    def _unfinished_seq(conn: Connection, db_path: str, job_id: str) -> int | None:
        row = conn.exec_driver_sql(
            "SELECT job_seq FROM omray_job WHERE db_path = ? AND job_id = ?"
            " AND state IN ('pending', 'running')",
            (db_path, job_id),
        ).first()
        return None if row is None else int(row[0])

    def _transition(self, job_seq: int, from_states: tuple[str, ...], **values: Any) -> None:
        table = schema.omray_job
        with self.atomic():
            result = self._conn().execute(
                update(table)
                .where(table.c.job_seq == job_seq, table.c.state.in_(from_states))
                .values(**values)
            )
            if result.rowcount != 1:
                raise NotFoundError(f"no job with seq {job_seq!r} in state {'/'.join(from_states)!r}")

    def mark_job_running(self, job_seq: int, attempt: int, started_at: str) -> None:
        """Record that attempt number ``attempt`` (1-based) of an unfinished job started."""
        if attempt < 1:
            raise InvalidPayloadError(f"attempt must be >= 1 for job seq {job_seq!r}")
        self._transition(
            job_seq,
            ("pending", "running"),
            state="running",
            attempts=attempt,
            started_at=started_at,
            not_before=None,
        )

    def mark_job_retry(self, job_seq: int, not_before: str, failure_reason: str) -> None:
        """Put a running job back to ``pending`` until ``not_before`` after a retryable failure.

        Repeating the same call (a durable proxy retrying after a lost reply) is a no-op.
        """
        _check_failure_reason(failure_reason)
        table = schema.omray_job
        with self.atomic():
            result = self._conn().execute(
                update(table)
                .where(
                    table.c.job_seq == job_seq,
                    (table.c.state == "running")
                    | (
                        (table.c.state == "pending")
                        & (table.c.not_before == not_before)
                        & (table.c.failure_reason == failure_reason)
                    ),
                )
                .values(state="pending", not_before=not_before, failure_reason=failure_reason)
            )
            if result.rowcount != 1:
                raise NotFoundError(f"no job with seq {job_seq!r} in state 'running'")

    def finish_job(
        self,
        job_seq: int,
        state: Literal["succeeded", "failed"],
        finished_at: str,
        failure_reason: str | None = None,
    ) -> None:
        """Take an unfinished job out of the FIFO for good."""
        _check_failure_reason(failure_reason)
        self._transition(
            job_seq,
            ("pending", "running"),
            state=state,
            finished_at=finished_at,
            failure_reason=failure_reason,
        )

    def give_up_job(
        self,
        job_seq: int,
        finished_at: str,
        failure_reason: str,
        run_id: str,
        event_type: str,
        event_payload: Mapping[str, Any],
        db_path: str = "",
    ) -> int:
        """Finish a job as failed and record its failure event in ONE transaction; returns the event seq.

        A crash can then never leave a job given up without its ``job_failed`` event. Repeating the
        same call (a durable proxy retrying after a lost reply) changes nothing more.
        """
        table = schema.omray_job
        with self.atomic():
            conn = self._conn()
            state = conn.execute(select(table.c.state).where(table.c.job_seq == job_seq)).scalar_one_or_none()
            if state in ("pending", "running"):
                self.finish_job(job_seq, "failed", finished_at, failure_reason)
            elif state != "failed":
                raise NotFoundError(f"no unfinished job with seq {job_seq!r}")
            return self.record_runtime_event(run_id, event_type, event_payload, finished_at, db_path)

    def record_runtime_event(
        self, run_id: str, event_type: str, payload: Mapping[str, Any], created_at: str, db_path: str = ""
    ) -> int:
        """Record a sanitized runtime event for a session of database ``db_path``; returns its ``event_seq``.

        Repeating the same call (same session, type, payload and time: a durable proxy retrying
        after a lost reply) returns the event already recorded instead of a second one.
        """
        table = schema.omray_runtime_event
        payload_json = canonical_json(dict(payload))
        with self.atomic():
            conn = self._conn()
            recorded: int | None = conn.execute(
                select(table.c.event_seq)
                .where(
                    table.c.run_id == run_id,
                    table.c.event_type == event_type,
                    table.c.payload_json == payload_json,
                    table.c.created_at == created_at,
                    table.c.db_path == db_path,
                )
                .limit(1)
            ).scalar_one_or_none()
            if recorded is not None:
                return recorded
            result = conn.execute(
                table.insert().values(
                    run_id=run_id,
                    event_type=event_type,
                    payload_json=payload_json,
                    created_at=created_at,
                    db_path=db_path,
                )
            )
            event_seq = result.inserted_primary_key[0] if result.inserted_primary_key else None
            if not isinstance(event_seq, int):  # pragma: no cover - SQLite always returns the rowid
                raise StorageError(f"no event_seq returned for event {event_type!r}")
            return event_seq

    def list_unfinished_jobs(self) -> list[StoredJob]:
        """Pending and running jobs in acceptance (``job_seq``) order."""
        table = schema.omray_job
        with self.atomic():
            rows = self._conn().execute(
                select(table).where(table.c.state.in_(("pending", "running"))).order_by(table.c.job_seq.asc())
            )
            return [self._stored_job(row) for row in rows]

    @staticmethod
    def _stored_job(row: Row[Any]) -> StoredJob:
        envelope = JobEnvelope(
            job_id=row.job_id,
            correlation_id=row.correlation_id,
            payload=JOB_PAYLOAD_ADAPTER.validate_json(row.payload_json),
        )
        return StoredJob(
            job_seq=row.job_seq,
            envelope=envelope,
            handler_id=row.handler_id,
            run_id=row.run_id,
            state=row.state,
            attempts=row.attempts,
            not_before=row.not_before,
            accepted_at=row.accepted_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
            failure_reason=row.failure_reason,
        )

    def runtime_events(
        self, run_id: str, after_seq: int = 0, db_path: str | None = None
    ) -> list[RuntimeEvent]:
        """Runtime events of a session with ``event_seq > after_seq``, in order: of that session in
        database ``db_path`` only, when given (another project may use the same session id)."""
        table = schema.omray_runtime_event
        where = [table.c.run_id == run_id, table.c.event_seq > after_seq]
        if db_path is not None:
            where.append(table.c.db_path == db_path)
        with self.atomic():
            rows = self._conn().execute(select(table).where(*where).order_by(table.c.event_seq.asc()))
            return [
                RuntimeEvent(
                    event_seq=row.event_seq,
                    run_id=row.run_id,
                    event_type=row.event_type,
                    payload=json.loads(row.payload_json),
                    created_at=row.created_at,
                    db_path=row.db_path,
                )
                for row in rows
            ]

    def _read_statement(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Rows of ONE read statement run outside any write transaction.

        SQLite runs a lone statement on a connection in autocommit mode as a read of one WAL
        snapshot, so it never takes the write lock: a status poll never stalls the writer's commits
        (every ``atomic()`` transaction begins ``IMMEDIATE``, which does).
        """
        current: Connection | None = getattr(self._local, "conn", None)
        try:
            if current is not None:  # inside atomic() on this thread: read in its transaction
                return list(current.exec_driver_sql(sql, params).fetchall())
            with self._engine.connect() as conn:
                raw = conn.connection.driver_connection
                assert isinstance(raw, sqlite3.Connection)
                return raw.execute(sql, params).fetchall()
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise StorageError(f"read of {self._db_path!r} failed ({type(exc).__name__})") from exc

    def job_counts(self) -> JobCounts:
        """Number of jobs in each state (one snapshot; takes no write lock)."""
        rows = self._read_statement("SELECT state, count(*) FROM omray_job GROUP BY state")
        counts = {state: count for state, count in rows}
        return JobCounts(
            pending=counts.get("pending", 0),
            running=counts.get("running", 0),
            succeeded=counts.get("succeeded", 0),
            failed=counts.get("failed", 0),
        )
