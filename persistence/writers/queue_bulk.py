"""The queue's group commits in a few statements: one per kind of write, not one per write.

A group commit carries the accepts, starts and finishes of several jobs (three of each is typical
with eight agents dispatching). Written one by one, each is a statement of its own, and each
statement lets go of the GIL while SQLite runs it (``sqlite3`` releases it around every step and
reset); in the queue process, where Ray's threads and the ``dispatch`` callers want the GIL all the
time, each release costs a wait to get it back. Measured in one process (400 commits of 9 writes,
two busy threads beside it, switch interval 0.5 ms): 1.9–2.4 ms a commit one by one, 1.6–2.1 ms in
one statement per kind, for 0.3–0.4 ms of CPU either way (docs/benchmarks-history.md, issue 42).

:func:`bulk_plan` orders a batch into *layers*: layer ``k`` holds the ``k``-th write of every job
in the batch, so a job's writes keep their order (its accept before its start), and two writes of
one layer touch two different rows. A start or a finish depends on its own row only; an accept
also on the unfinished job keys, so a layer runs its accepts first, where they see the keys as the
batch found them (an accept that inserts here inserts one by one too). Each kind becomes one
statement over a JSON array (``json_each``), so its SQL text is fixed and stays prepared.
:func:`apply_bulk` runs the plan and checks that every accept inserted its row and every start found
its job; when one did not (a batch repeated after a lost reply, a broken contract),
it raises :class:`BulkMismatch`, the caller rolls back and writes the batch one by one, which
decides exactly as before (and names the job that is wrong). Finishes count what they changed, as
one by one (a finish repeated after a lost reply changes nothing).

Only the three kinds of the hot path take this way; a batch with any other write (a retry, a hold,
a give-up with its event, an accept that re-drives a failed job) is written one by one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from sqlalchemy import Connection

from persistence.database.writer import check_failure_reason
from protocol.errors import InvalidPayloadError
from protocol.jobs import JOB_PAYLOAD_ADAPTER
from protocol.queue_rows import JobAccepted, JobFinished, JobStarted, JobWrite

_INSERT_ACCEPTED: Final = (
    "INSERT INTO omray_job (job_seq, job_id, handler_id, correlation_id, run_id, db_path,"
    " payload_json, state, attempts, accepted_at)"
    " SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),"
    " json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'),"
    " json_extract(value, '$[6]'), 'pending', 0, json_extract(value, '$[7]')"
    " FROM json_each(?) WHERE true ON CONFLICT DO NOTHING"
)
_START: Final = (
    "UPDATE omray_job SET state = 'running', attempts = json_extract(w.value, '$[1]'),"
    " started_at = json_extract(w.value, '$[2]'), not_before = NULL"
    " FROM json_each(?) AS w"
    " WHERE omray_job.job_seq = json_extract(w.value, '$[0]') AND +omray_job.state IN ('pending', 'running')"
)
_FINISH: Final = (
    "UPDATE omray_job SET state = json_extract(w.value, '$[1]'), finished_at = json_extract(w.value, '$[2]'),"
    " failure_reason = json_extract(w.value, '$[3]')"
    " FROM json_each(?) AS w"
    " WHERE omray_job.job_seq = json_extract(w.value, '$[0]') AND +omray_job.state IN ('pending', 'running')"
)


class BulkMismatch(Exception):
    """An accept found its row taken, or a start found no unfinished job: write the batch one by one."""


@dataclass(slots=True)
class Layer:
    """Writes of one layer, by kind (each job at most once in a layer)."""

    accepted: list[JobAccepted] = field(default_factory=list)
    started: list[JobStarted] = field(default_factory=list)
    finished: list[JobFinished] = field(default_factory=list)

    def statements(self) -> int:
        """Statements this layer takes."""
        return sum(1 for kinds in (self.accepted, self.started, self.finished) if kinds)


def bulk_plan(writes: Sequence[JobWrite]) -> list[Layer] | None:
    """The layers of ``writes`` (see the module docstring); ``None`` when the batch holds a write of
    another kind or a bad value (one by one then raises the error it always did, at its place), or
    when the layers would take as many statements as the writes one by one."""
    layers: list[Layer] = []
    depth: dict[int, int] = {}
    for write in writes:
        if not isinstance(write, JobAccepted | JobStarted | JobFinished):
            return None
        k = depth.get(write.job_seq, 0)
        depth[write.job_seq] = k + 1
        if k == len(layers):
            layers.append(Layer())
        layer = layers[k]
        if isinstance(write, JobAccepted) and write.redrive_of is None:
            layer.accepted.append(write)
        elif isinstance(write, JobStarted) and write.attempt >= 1:
            layer.started.append(write)
        elif isinstance(write, JobFinished) and _is_reason(write.failure_reason):
            layer.finished.append(write)
        else:
            return None
    if sum(layer.statements() for layer in layers) >= len(writes):
        return None
    return layers


def apply_bulk(conn: Connection, layers: Sequence[Layer]) -> int:
    """Run ``layers`` in order on ``conn`` (inside the caller's transaction); how many writes changed
    a row. Raises :class:`BulkMismatch` when an accept or a start did not change exactly its row:
    the caller rolls back and writes one by one."""
    applied = 0
    for layer in layers:
        # Accepts first: each then sees the keys as the batch found them, so an accept that inserts
        # here inserts one by one too (a job's accept is its first write, always in layer 0).
        if layer.accepted:
            accepted = [accepted_row(w) for w in layer.accepted]
            if conn.exec_driver_sql(_INSERT_ACCEPTED, (json.dumps(accepted),)).rowcount != len(accepted):
                raise BulkMismatch
            applied += len(accepted)
        if layer.started:
            rows = [[w.job_seq, w.attempt, w.started_at] for w in layer.started]
            if conn.exec_driver_sql(_START, (json.dumps(rows),)).rowcount != len(rows):
                raise BulkMismatch
            applied += len(rows)
        if layer.finished:
            rows = [[w.job_seq, w.state, w.finished_at, w.failure_reason] for w in layer.finished]
            applied += conn.exec_driver_sql(_FINISH, (json.dumps(rows),)).rowcount
    return applied


def _is_reason(reason: str | None) -> bool:
    try:
        check_failure_reason(reason)
    except InvalidPayloadError:
        return False
    return True


def accepted_row(write: JobAccepted) -> list[object]:
    """The ``omray_job`` values an accept inserts, in the order of the insert's columns (``job_seq``,
    ``job_id``, ``handler_id``, ``correlation_id``, ``run_id``, ``db_path``, ``payload_json``,
    ``accepted_at``): the bulk insert and the one-by-one insert bind the same row."""
    envelope = write.envelope
    return [
        write.job_seq,
        envelope.job_id,
        envelope.handler_id,
        envelope.session_id,
        envelope.payload.session_id,
        envelope.payload.db_path,
        JOB_PAYLOAD_ADAPTER.dump_json(envelope.payload).decode("utf-8"),
        write.accepted_at,
    ]
