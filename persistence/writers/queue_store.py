"""The write side of the job queue's own database (``<prefix>.queue.sqlite``): :class:`QueueStore`.

The QueueActor is the one writer of that file: its group commits go through
:meth:`QueueStore.apply_job_writes` (the writes of one commit, in ONE transaction); the single-step
methods (``enqueue_job``, ``mark_job_running``, ``finish_job``, ...) serve tools and tests and run
the same statements. Every write is idempotent, so a batch repeated after a lost reply changes
nothing more. The rows and writes are the shapes of :mod:`protocol.queue_rows`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from sqlalchemy import Connection, Row, func, select, update

from persistence.database import schema
from persistence.database.writer import NotFoundError, SqliteWriter, check_failure_reason
from persistence.writers.queue_bulk import BulkMismatch, accepted_row, apply_bulk, bulk_plan
from protocol.canonical import canonical_json
from protocol.errors import ConflictError, InvalidPayloadError, StorageError
from protocol.jobs import JOB_PAYLOAD_ADAPTER, JobEnvelope
from protocol.queue_rows import (
    EnqueueResult,
    JobAccepted,
    JobCounts,
    JobFinished,
    JobGivenUp,
    JobHeldWrite,
    JobRetry,
    JobStarted,
    JobWrite,
    RuntimeEvent,
    StoredJob,
    WaitingJobs,
)

_STORED_JOB_COLUMNS: Final = tuple(
    info.serialization_alias or name for name, info in StoredJob.model_fields.items() if name != "envelope"
)
"""The ``omray_job`` columns a :class:`StoredJob` reads straight into its fields (``run_id`` into
``session_id``, every other one into the field of the same name)."""


def _update_unfinished(conn: Connection, job_seq: int, assignments: str, values: tuple[Any, ...]) -> bool:
    """Apply ``assignments`` (fixed SQL, ``?`` for ``values``) to job ``job_seq`` when it is unfinished;
    False when it is not (nothing changed)."""
    changed = conn.exec_driver_sql(
        f"UPDATE omray_job SET {assignments} WHERE job_seq = ? AND state IN ('pending', 'running')",
        (*values, job_seq),
    ).rowcount
    return bool(changed == 1)


class QueueStore(SqliteWriter):
    """Exclusive writer of one job-queue database.

    Guarantees: each method is atomic on its own (``apply_job_writes``: one transaction for all its
    writes); the job FIFO is ordered by ``job_seq``; a job key (database, job id) is pending or
    running at most once.
    """

    def record_placement(self, db_path: str, placement_json: str, recorded_at: str) -> str:
        """Record the node of a memory database unless it has one; returns the recorded placement
        (JSON): a database's placement is written once and never changed."""
        table = schema.omray_database_placement
        with self.atomic():
            conn = self._conn()
            conn.execute(
                table.insert()
                .prefix_with("OR IGNORE")
                .values(db_path=db_path, placement_json=placement_json, recorded_at=recorded_at)
            )
            stored = conn.execute(
                select(table.c.placement_json).where(table.c.db_path == db_path)
            ).scalar_one()
        return str(stored)

    def placements(self) -> dict[str, str]:
        """Every recorded placement (JSON), by database."""
        table = schema.omray_database_placement
        with self.atomic():
            rows = self._conn().execute(select(table.c.db_path, table.c.placement_json)).all()
        return {str(db_path): str(placement) for db_path, placement in rows}

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
        ``finished`` write for a job already finished is skipped. A batch of accepts, starts and
        finishes is written in one statement per kind (:mod:`persistence.writers.queue_bulk`); when
        one of them does not change exactly its rows, that transaction is rolled back and the batch
        written one by one, which decides as it always did.
        """
        plan = bulk_plan(writes)
        if plan is not None:
            try:
                with self.atomic():
                    return apply_bulk(self._conn(), plan)
            except BulkMismatch:
                pass  # rolled back whole: one by one decides, and names the job that is wrong
        return self.apply_job_writes_one_by_one(writes)

    def apply_job_writes_one_by_one(self, writes: Sequence[JobWrite]) -> int:
        """:meth:`apply_job_writes` with a statement per write, in order (what decides when the
        statements per kind do not fit a batch)."""
        applied = 0
        with self.atomic():
            conn = self._conn()
            for write in writes:
                if isinstance(write, JobAccepted):
                    self._insert_accepted(conn, write)
                elif isinstance(write, JobStarted):
                    self._start(conn, write)
                elif isinstance(write, JobRetry):
                    self.mark_job_retry(write.job_seq, write.not_before, write.failure_reason)
                elif isinstance(write, JobHeldWrite):
                    self._hold(conn, write)
                elif isinstance(write, JobFinished):
                    if not self._finish(conn, write):
                        continue  # recorded by an earlier try of this batch
                elif isinstance(write, JobGivenUp):
                    self.give_up_job(
                        write.job_seq,
                        write.finished_at,
                        write.failure_reason,
                        write.session_id,
                        write.event_type,
                        write.event_payload,
                        write.db_path,
                    )
                else:
                    self.record_runtime_event(
                        write.session_id, write.event_type, write.payload, write.created_at, write.db_path
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
            tuple(accepted_row(write)),
        ).rowcount
        if inserted == 1:
            if write.redrive_of is not None:
                # One write: the copy exists exactly when the failed row says it was re-driven.
                conn.exec_driver_sql(
                    "UPDATE omray_job SET redrives = ? WHERE job_seq = ?", (write.redrives, write.job_seq)
                )
                conn.exec_driver_sql(
                    "UPDATE omray_job SET redriven_to = ? WHERE job_seq = ? AND state = 'failed'",
                    (write.job_seq, write.redrive_of),
                )
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

    # The hot path of a busy queue: plain prepared statements, no savepoint each. The single-step
    # methods below run the same ones, so a row changes one way whichever path wrote it.

    @staticmethod
    def _start(conn: Connection, write: JobStarted) -> None:
        if write.attempt < 1:
            raise InvalidPayloadError(f"attempt must be >= 1 for job seq {write.job_seq!r}")
        if not _update_unfinished(
            conn,
            write.job_seq,
            "state = 'running', attempts = ?, started_at = ?, not_before = NULL",
            (write.attempt, write.started_at),
        ):
            raise NotFoundError(f"no job with seq {write.job_seq!r} in state 'pending/running'")

    @staticmethod
    def _finish(conn: Connection, write: JobFinished) -> bool:
        """Take an unfinished job out of the FIFO; False when it is not unfinished (nothing changed)."""
        check_failure_reason(write.failure_reason)
        return _update_unfinished(
            conn,
            write.job_seq,
            "state = ?, finished_at = ?, failure_reason = ?",
            (write.state, write.finished_at, write.failure_reason),
        )

    @staticmethod
    def _hold(conn: Connection, write: JobHeldWrite) -> None:
        """Put a running job back to ``pending``, held by its daily budget (repeating it changes nothing)."""
        check_failure_reason(write.failure_reason)
        if not _update_unfinished(
            conn,
            write.job_seq,
            "state = 'pending', not_before = ?, failure_reason = ?, held_attempts = ?",
            (write.not_before, write.failure_reason, write.held_attempts),
        ):
            raise NotFoundError(f"no job with seq {write.job_seq!r} in state 'pending/running'")

    def mark_job_running(self, job_seq: int, attempt: int, started_at: str) -> None:
        """Record that attempt number ``attempt`` (1-based) of an unfinished job started."""
        with self.atomic():
            self._start(self._conn(), JobStarted(job_seq=job_seq, attempt=attempt, started_at=started_at))

    def mark_job_retry(self, job_seq: int, not_before: str, failure_reason: str) -> None:
        """Put a running job back to ``pending`` until ``not_before`` after a retryable failure.

        Repeating the same call (a durable proxy retrying after a lost reply) is a no-op.
        """
        check_failure_reason(failure_reason)
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
        write = JobFinished(
            job_seq=job_seq, state=state, finished_at=finished_at, failure_reason=failure_reason
        )
        with self.atomic():
            if not self._finish(self._conn(), write):
                raise NotFoundError(f"no job with seq {job_seq!r} in state 'pending/running'")

    def give_up_job(
        self,
        job_seq: int,
        finished_at: str,
        failure_reason: str,
        session_id: str,
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
            return self.record_runtime_event(session_id, event_type, event_payload, finished_at, db_path)

    def record_runtime_event(
        self, session_id: str, event_type: str, payload: Mapping[str, Any], created_at: str, db_path: str = ""
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
                    table.c.run_id == session_id,
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
                    run_id=session_id,
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

    def failed_to_redrive(
        self,
        db_path: str | None = None,
        handler_ids: Sequence[str] | None = None,
        *,
        max_redrives: int | None = None,
        excluded_reasons: Sequence[str] = (),
    ) -> list[StoredJob]:
        """Failed jobs not re-driven yet, in ``job_seq`` order: of ``db_path`` and ``handler_ids``
        when given, re-driven fewer than ``max_redrives`` times when given, and not failed for one of
        ``excluded_reasons``."""
        table = schema.omray_job
        query = select(table).where(table.c.state == "failed", table.c.redriven_to.is_(None))
        if db_path is not None:
            query = query.where(table.c.db_path == db_path)
        if handler_ids is not None:
            query = query.where(table.c.handler_id.in_(tuple(handler_ids)))
        if max_redrives is not None:
            query = query.where(table.c.redrives < max_redrives)
        if excluded_reasons:
            query = query.where(
                (table.c.failure_reason.is_(None)) | table.c.failure_reason.not_in(tuple(excluded_reasons))
            )
        with self.atomic():
            rows = self._conn().execute(query.order_by(table.c.job_seq.asc()))
            return [self._stored_job(row) for row in rows]

    def waiting_for_cause(self, excluded_reasons: Sequence[str], max_redrives: int) -> list[WaitingJobs]:
        """Failed jobs not re-driven yet and not failed for one of ``excluded_reasons``, counted by
        database, handler, the settings fingerprint they were sent with, and whether an automatic
        re-drive may still queue them (re-driven fewer than ``max_redrives`` times)."""
        table = schema.omray_job
        fingerprint = func.json_extract(table.c.payload_json, "$.settings_fingerprint")
        automatic = table.c.redrives < max_redrives
        query = (
            select(table.c.db_path, table.c.handler_id, fingerprint, automatic, func.count())
            .where(
                table.c.state == "failed",
                table.c.redriven_to.is_(None),
                (table.c.failure_reason.is_(None)) | table.c.failure_reason.not_in(tuple(excluded_reasons)),
            )
            .group_by(table.c.db_path, table.c.handler_id, fingerprint, automatic)
            .order_by(table.c.db_path, table.c.handler_id)
        )
        with self.atomic():
            return [
                WaitingJobs(
                    db_path=str(db),
                    handler_id=str(handler),
                    settings_fingerprint=None if print_ is None else str(print_),
                    automatic=bool(auto),
                    jobs=int(count),
                )
                for db, handler, print_, auto, count in self._conn().execute(query)
            ]

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
            session_id=row.correlation_id,
            payload=JOB_PAYLOAD_ADAPTER.validate_json(row.payload_json),
        )
        # Every other field is the row's column of the same name.
        columns = row._mapping
        return StoredJob(envelope=envelope, **{name: columns[name] for name in _STORED_JOB_COLUMNS})

    def runtime_events(
        self, session_id: str, after_seq: int = 0, db_path: str | None = None
    ) -> list[RuntimeEvent]:
        """Runtime events of a session with ``event_seq > after_seq``, in order: of that session in
        database ``db_path`` only, when given (another project may use the same session id)."""
        table = schema.omray_runtime_event
        where = [table.c.run_id == session_id, table.c.event_seq > after_seq]
        if db_path is not None:
            where.append(table.c.db_path == db_path)
        with self.atomic():
            rows = self._conn().execute(select(table).where(*where).order_by(table.c.event_seq.asc()))
            return [
                RuntimeEvent(
                    event_seq=row.event_seq,
                    session_id=row.run_id,
                    event_type=row.event_type,
                    payload=json.loads(row.payload_json),
                    created_at=row.created_at,
                    db_path=row.db_path,
                )
                for row in rows
            ]

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
