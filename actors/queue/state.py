"""The durable job queue as a pure state machine (DESIGN.md "QueueActor", invariants 2 and 3).

``QueueState`` holds the in-memory view of the ``extension_agent`` FIFO. Its step methods take the
current time as an argument and return *commands*: frozen values that the ``QueueActor`` executes
(write the store, call a worker, emit an event, arm a timer). The state machine does no I/O, so its
whole behaviour is tested by asserting on commands, and after a crash the actor rebuilds it from
the durable rows with :meth:`QueueState.restore`.

How the actor drives it:

1. The actor numbers a new job (asking :meth:`QueueState.active_seq` first, so a job already
   queued gets no second row) and calls ``accept(envelope, job_seq, now)``; its ``JobAccepted``
   write rides in the next group commit, before ``dispatch`` returns.
2. After every step, ``next_dispatch(now)``; execute each command in order.
3. A worker's :data:`JobOutcome` goes to ``on_outcome(job_seq, outcome, now, attempt=...)``; a dead
   worker to ``on_worker_lost(job_seq, now, attempt=...)``.

Budget holds (a run answering :class:`~protocol.outcomes.JobHeld`: the project's daily model budget
is used up) are kept by :class:`actors.queue.holds.HoldBook`; this module asks it which lane heads
wait, and turns a held run into :class:`HoldJob` commands.

The commands and the store effect of each are in :mod:`actors.queue.commands`; lanes, job keys and
coalescing keys in :mod:`actors.queue.lanes`.

Length: over 600 lines because every step reads and updates the same private indexes (lanes, the
free-head heap, carriers, holds) under one set of invariants; the pieces that stand alone (commands,
lanes, retry policy, re-drives, budget holds) already live beside it.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from actors.queue.commands import (
    AlreadyQueued,
    Command,
    Dispatch,
    EmitJobFailed,
    EmitJobHeld,
    GiveUp,
    HoldJob,
    MarkSucceeded,
    OutcomeIgnored,
    ScheduleRetry,
    WakeAt,
)
from actors.queue.holds import DEFAULT_RECHECK_S, HELD_HANDLERS, HoldBook
from actors.queue.lanes import MAX_COALESCED, JobKey, carrier_end, coalesce_key, job_key, lane_of
from actors.queue.redrive import fingerprint_of
from actors.queue.retry import GiveUpNow, RetryPolicy, decide_retry
from protocol.errors import OmrayError
from protocol.jobs import JobEnvelope, pool_of
from protocol.outcomes import (
    REASON_INTERRUPTED,
    REASON_RETRY_EXHAUSTED,
    REASON_WORKER_CRASHED,
    EventsLocation,
    JobFailed,
    JobFailedEvent,
    JobHeld,
    JobHeldEvent,
    JobSucceeded,
)
from protocol.queue_rows import StoredJob, epoch_of, iso_utc

JobStatus = Literal["pending", "running"]
"""Durable status of a job that is still in the queue."""


def _carrier_rank(job: _Job) -> tuple[int, int]:
    return (carrier_end(job.envelope.payload), job.seq)


def _held_until_absorbed(job: _Job) -> bool:
    """A job accepted with its own ``not_before`` and never started (an observe tail's idle flush): it
    waits for its time only while no later job of its lane coalesces with it; one that does starts the
    group at once, and the flush rides along."""
    return job.attempts == 0 and job.envelope.not_before is not None


def _restored_not_before(row: StoredJob) -> float | None:
    # A job held since its acceptance has no not_before of its own in the row (only retries write it).
    if row.not_before is None and row.attempts == 0:
        return row.envelope.not_before
    return epoch_of(row.not_before)


class QueueStateError(OmrayError):
    """The actor called the state machine against its contract (e.g. two jobs with one sequence number)."""


@dataclass(slots=True)
class _Job:
    seq: int
    envelope: JobEnvelope
    status: JobStatus
    attempts: int
    not_before: float | None
    last_reason: str | None
    # Restored from a 'running' row: goes before everything else, ignoring not_before.
    interrupted: bool = False
    # While running: sequence number of the job whose payload the worker runs (itself, or the
    # coalesced run it rides with).
    carrier: int | None = None
    # Where the last failure's events file is corrupt, when that was the reason (ids only).
    events_location: EventsLocation | None = None
    # Runs of ``attempts`` that were held by the daily budget (sent nothing): they do not count.
    held: int = 0
    # Derived from the envelope once (the envelope never changes): the dispatch loop reads them for
    # every lane head on every step.
    key: JobKey = field(init=False)
    lane: str = field(init=False)
    handler_id: str = field(init=False)
    # The worker pool the job runs on (``protocol.jobs.pool_of``): limits and waiting work count by it.
    pool: str = field(init=False)
    coalesce_key: tuple[str, ...] | None = field(init=False)

    def __post_init__(self) -> None:
        self.key = job_key(self.envelope)
        self.lane = lane_of(self.envelope)
        self.handler_id = self.envelope.handler_id
        self.pool = pool_of(self.handler_id)
        self.coalesce_key = coalesce_key(self.envelope.payload)

    @property
    def counted(self) -> int:
        """Attempts that count against the retry policy: every run but the held ones."""
        return self.attempts - self.held

    @property
    def db_path(self) -> str:
        """The job's database."""
        return self.envelope.payload.db_path


# --- the state machine --------------------------------------------------------------------------


class QueueState:
    """In-memory state of the durable queue; every step returns the commands the actor must execute.

    Guarantees:

    - **Lanes.** A lane is one session of one database (observe and reflect jobs), or the index
      work of one database. Within a lane, jobs start in the order of their queue sequence numbers
      (never in the order Ray happens to deliver calls) and never overlap: the next one starts only
      after the previous one left the queue or went back to waiting for a retry. Different lanes
      run concurrently.
    - **Retries hold their own lane only.** A job waiting for its retry backoff holds back the
      jobs behind it in its lane (a session's order is kept: observe before the reflect it
      triggered) and nothing else.
    - **Held jobs.** A job accepted with ``not_before`` (an observe tail's idle flush) waits until
      then like a retry, except that a later job of its lane that coalesces with it starts the
      group at once: the flush is absorbed by the lane's next observe run.
    - **Coalescing.** When the head of a lane is an observe job and the jobs right behind it are
      observe jobs of the same events file and versions, one run covers them all: the worker runs
      the one with the latest boundary, and all of them finish with its outcome. Index jobs of one
      database coalesce the same way. Reflect jobs never do.
    - **Limits.** At most ``max_in_flight`` runs at once, and at most ``capacity[pool]`` on
      one worker pool (its size; forget jobs count on the reflector pool's: ``pool_of``).
    - **At-least-once, finished once.** A job leaves the queue only with :class:`MarkSucceeded` or
      :class:`GiveUp`; results for anything not in flight are ignored, so a finished job is never
      dispatched or finished again.
    - **At most ``policy.max_attempts`` attempts per job**, counting attempts lost to a worker
      crash or to a restart of the queue itself, and not counting runs held by the daily budget.
    - **Budget holds.** After a run answers :class:`JobHeld`, no observe or reflect job of its
      database starts (they wait in their lanes, in order) until the next UTC day, or until a
      re-check finds the budget allows it (one held run every ``hold_recheck_s``, or at once when a
      job is accepted under other settings or on :meth:`recheck_holds`):
      :mod:`actors.queue.holds`. Held jobs are never lost, failed or run twice for it.
    - A job key ``(db_path, job_id)`` is never queued twice while it is pending or running.

    Only the owning ``QueueActor`` calls it, from one thread at a time.
    """

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        *,
        max_in_flight: int = 1,
        capacity: Mapping[str, int] | None = None,
        coalesce: bool = True,
        hold_recheck_s: float = DEFAULT_RECHECK_S,
    ) -> None:
        if max_in_flight < 1:
            raise QueueStateError(f"max_in_flight must be >= 1, got {max_in_flight!r}")
        for handler_id, size in (capacity or {}).items():
            if size < 1:
                raise QueueStateError(f"capacity of {handler_id!r} must be >= 1, got {size!r}")
        self._policy = policy if policy is not None else RetryPolicy()
        self._max_in_flight = max_in_flight
        self._capacity = dict(capacity or {})
        self._coalesce = coalesce
        self._jobs: dict[int, _Job] = {}
        self._seq_by_key: dict[JobKey, int] = {}
        # Every unfinished job of a lane, in sequence order (running ones first, as a prefix).
        self._lanes: dict[str, list[int]] = {}
        # Running carriers (one per run in flight), the lanes they hold and the jobs they cover.
        self._carriers: dict[int, _Job] = {}
        self._members: dict[int, list[int]] = {}
        self._busy_lanes: set[str] = set()
        self._running_jobs = 0
        self._runs_by_handler: dict[str, int] = {}  # runs in flight per handler id
        # The index of free lane heads that makes a step cost what it starts, not the backlog:
        # per handler, a heap of ``(not interrupted, seq)`` entries, checked when popped (an entry
        # is live only while ``_pushed`` holds its rank and the job heads a free lane); lanes
        # changed since the last step are refreshed first; ``_timed`` holds the free heads with a
        # ``not_before`` (only they can be waiting).
        self._ready: dict[str, list[tuple[bool, int]]] = {}
        self._pushed: dict[int, bool] = {}
        self._indexed_head: dict[str, int] = {}
        self._timed: set[int] = set()
        self._dirty: set[str] = set()
        self._holds = HoldBook(hold_recheck_s)

    # --- restart -----------------------------------------------------------------------------

    @classmethod
    def restore(
        cls,
        stored_jobs: Sequence[StoredJob],
        now: float,
        policy: RetryPolicy | None = None,
        *,
        max_in_flight: int = 1,
        capacity: Mapping[str, int] | None = None,
        coalesce: bool = True,
        hold_recheck_s: float = DEFAULT_RECHECK_S,
    ) -> tuple[QueueState, list[Command]]:
        """Rebuild the state from the durable rows after the actor restarted.

        A ``running`` row was interrupted: that attempt counts, and its lane starts again before
        any other lane (in sequence order), without backoff; if it has no attempts left it gives
        up now. If two rows share a job key (a crash between storing a duplicate and discarding
        it), the lowest sequence number wins and the others come back as :class:`AlreadyQueued`
        so the actor deletes them. Finished rows are not the state's: passing one raises. Budget holds
        are not restored: a held job waits until its row's ``not_before`` (its next re-check), then
        re-checks the budget itself.
        """
        state = cls(
            policy,
            max_in_flight=max_in_flight,
            capacity=capacity,
            coalesce=coalesce,
            hold_recheck_s=hold_recheck_s,
        )
        commands: list[Command] = []
        for row in sorted(stored_jobs, key=lambda r: r.job_seq):
            if row.state not in ("pending", "running"):
                raise QueueStateError(f"stored row {row.job_seq!r} is {row.state!r}, not unfinished")
            if row.job_seq in state._jobs:
                raise QueueStateError(f"two stored rows with job_seq {row.job_seq!r}")
            existing = state._seq_by_key.get(job_key(row.envelope))
            if existing is not None:
                commands.append(AlreadyQueued(row.job_seq, row.envelope.job_id, existing))
                continue
            interrupted = row.state == "running"
            job = _Job(
                seq=row.job_seq,
                envelope=row.envelope,
                status="pending",
                attempts=row.attempts,
                not_before=None if interrupted else _restored_not_before(row),
                last_reason=REASON_INTERRUPTED if interrupted else row.failure_reason,
                interrupted=interrupted,
                held=row.held_attempts,
            )
            if job.counted >= state._policy.max_attempts:
                # Every allowed attempt has started already: never start another one.
                commands.extend(state._give_up(job, GiveUpNow(event_reason=REASON_RETRY_EXHAUSTED)))
                continue
            state._add(job)
        return state, commands

    # --- steps -------------------------------------------------------------------------------

    def accept(self, envelope: JobEnvelope, job_seq: int, now: float) -> list[Command]:
        """Queue a job that was just stored durably under ``job_seq``.

        Returns ``[]`` for a new job, or ``[AlreadyQueued]`` if its key is already pending or
        running (then nothing changes). A job sent under other settings than its database's budget
        hold was found under makes that hold re-check at once.
        """
        existing = self._seq_by_key.get(job_key(envelope))
        if existing is not None:
            return [AlreadyQueued(job_seq, envelope.job_id, existing)]
        if job_seq in self._jobs:
            raise QueueStateError(f"job_seq {job_seq!r} is already used by another queued job")
        self._add(_Job(job_seq, envelope, "pending", 0, envelope.not_before, None))
        self._holds.settings_seen(envelope.payload.db_path, fingerprint_of(envelope), now)
        return []

    def next_dispatch(self, now: float) -> list[Command]:
        """Start the head of every free lane, as far as the limits allow; or say when a retry is due.

        Lanes whose head was interrupted by a restart go first, then lanes by the sequence number of
        their head. Adds :class:`WakeAt` when a slot stays free only because a lane head is still in
        its backoff.
        """
        commands: list[Command] = []
        self._holds.purge(now)
        free = self._max_in_flight - self.in_flight
        if free <= 0:
            return commands
        self._refresh_index()
        passed: list[tuple[bool, int]] = []  # waiting heads popped on the way; they go back
        while free > 0:
            head = self._pop_next_head()
            if head is None:
                break
            if self._waiting(head, now):
                passed.append((not head.interrupted, head.seq))
                continue
            commands.append(self._start_head(head, now))
            free -= 1
        for rank in passed:
            self._pushed[rank[1]] = rank[0]
            heapq.heappush(self._ready[self._jobs[rank[1]].pool], rank)
        if free > 0:
            timed = (self._jobs[seq] for seq in self._timed)
            waits = [
                job.not_before
                for job in timed
                if self._waiting(job, now) and job.not_before is not None and job.not_before > now
            ]
            waits.extend(self._holds.wakes(now))
            if waits:
                commands.append(WakeAt(min(waits)))
        return commands

    def on_outcome(
        self,
        job_seq: int,
        outcome: JobSucceeded | JobFailed | JobHeld,
        now: float,
        *,
        attempt: int | None = None,
    ) -> list[Command]:
        """Apply a worker's result for the run in flight whose carrier is ``job_seq``.

        Pass the ``attempt`` from the :class:`Dispatch`: without it, a late result of an older
        attempt of the same job cannot be told apart from the current one.
        """
        carrier = self._in_flight_carrier(job_seq, attempt)
        if isinstance(carrier, OutcomeIgnored):
            return [carrier]
        if outcome.job_id != carrier.envelope.job_id:
            return [OutcomeIgnored(job_seq, "job_id_mismatch")]
        members = self._finish_run(carrier)
        self._holds.run_ended(carrier.db_path, carrier.seq, held=isinstance(outcome, JobHeld))
        if isinstance(outcome, JobHeld):
            return self._hold_all(carrier, members, outcome, now)
        if isinstance(outcome, JobSucceeded):
            commands: list[Command] = []
            for job in members:
                self._remove(job)
                commands.append(
                    MarkSucceeded(
                        job.seq,
                        job.envelope.job_id,
                        job.attempts,
                        job.envelope.payload.db_path,
                        job.handler_id,
                    )
                )
            return commands
        return self._fail_all(members, outcome, now)

    def on_worker_lost(self, job_seq: int, now: float, *, attempt: int | None = None) -> list[Command]:
        """The worker died mid-run: one failed, retryable attempt (``worker_crashed``) for each member."""
        carrier = self._in_flight_carrier(job_seq, attempt)
        if isinstance(carrier, OutcomeIgnored):
            return [carrier]
        members = self._finish_run(carrier)
        self._holds.run_lost(carrier.db_path, carrier.seq)
        failure = JobFailed(job_id=carrier.envelope.job_id, retryable=True, reason=REASON_WORKER_CRASHED)
        return self._fail_all(members, failure, now)

    # --- queries -----------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Jobs waiting to run (including those waiting for a retry); not counting in-flight ones."""
        return len(self._jobs) - self._running_jobs

    def delayed(self, now: float) -> list[tuple[bool, float]]:
        """Waiting jobs that may not start before a later time (part of :attr:`depth`), as ``(retry,
        not_before)`` in time order: a retry's backoff (``True``), or an observe tail held for its
        idle flush."""
        found = [
            (job.attempts > 0, job.not_before)
            for job in self._jobs.values()
            if job.carrier is None and job.not_before is not None and job.not_before > now
        ]
        return sorted(found, key=lambda item: item[1])

    @property
    def in_flight(self) -> int:
        """Runs currently in flight (a coalesced run counts once)."""
        return len(self._carriers)

    @property
    def max_in_flight(self) -> int:
        """Most runs allowed at once."""
        return self._max_in_flight

    def waiting_by_handler(self, now: float) -> dict[str, int]:
        """Lane heads that could start now (lane free, no backoff) but are held by a limit, by the
        handler id of the pool they run on (``protocol.jobs.pool_of``).

        Call it after :meth:`next_dispatch`: what it counts is work a bigger pool would start.
        """
        waiting: dict[str, int] = {}
        for head in self._free_lane_heads():
            if self._holds.blocks(head.db_path, head.handler_id, now):
                continue  # a bigger pool would not start it: its budget holds it
            if head.interrupted or head.not_before is None or head.not_before <= now:
                waiting[head.pool] = waiting.get(head.pool, 0) + 1
        return waiting

    def recheck_holds(self, db_path: str | None, now: float) -> int:
        """Let the budget holds of ``db_path`` (or of every database) re-check at the next dispatch
        (``omray retry``: the user raised a cap); how many holds will."""
        return self._holds.recheck(db_path, now)

    def held(self, now: float) -> list[dict[str, object]]:
        """The databases whose model jobs are held by their daily budget now, each with how many of
        its jobs wait (ids, codes, counts and times; for ``status``)."""
        found: list[dict[str, object]] = []
        for hold in self._holds.snapshot():
            db_path = str(hold["db_path"])
            if self._holds.active(db_path, now) is None:
                continue
            jobs = sum(
                1
                for job in self._jobs.values()
                if job.carrier is None and job.handler_id in HELD_HANDLERS and job.db_path == db_path
            )
            found.append({**hold, "jobs": jobs})
        return found

    def set_capacity(self, handler_id: str, size: int) -> None:
        """Change how many runs of ``handler_id`` may be in flight (its pool grew or shrank).

        Runs already in flight beyond a lowered limit finish normally; no new one starts until the
        count is under it.
        """
        if size < 1:
            raise QueueStateError(f"capacity of {handler_id!r} must be >= 1, got {size!r}")
        self._capacity[handler_id] = size

    def active_seq(self, job_id: str, db_path: str) -> int | None:
        """Sequence number of the pending or running job with this key, if any."""
        return self._seq_by_key.get((db_path, job_id))

    @property
    def held_projects(self) -> int:
        """Databases whose model jobs are held by their daily budget (cheap: no job list)."""
        return self._holds.count

    def lane_counts(self) -> tuple[int, int]:
        """Lanes with unfinished jobs, and those with a run in flight (cheap: no job list)."""
        return len(self._lanes), len(self._busy_lanes)

    @property
    def capacity(self) -> dict[str, int]:
        """Slots per handler id (a copy)."""
        return dict(self._capacity)

    def snapshot(self) -> dict[str, object]:
        """JSON-able view for ``omray status``: counts and per-job ids, never payload contents."""
        return {
            "depth": self.depth,
            "in_flight": self.in_flight,
            "max_in_flight": self._max_in_flight,
            "capacity": dict(self._capacity),
            "max_attempts": self._policy.max_attempts,
            "lanes": len(self._lanes),
            "busy_lanes": len(self._busy_lanes),
            "jobs": [
                {
                    "job_seq": j.seq,
                    "job_id": j.envelope.job_id,
                    "handler_id": j.handler_id,
                    "session_id": j.envelope.payload.session_id,
                    "status": j.status,
                    "attempts": j.attempts,
                    "held": j.held,
                    "not_before": j.not_before,
                    "last_reason": j.last_reason,
                    "carrier": j.carrier,
                }
                for j in sorted(self._jobs.values(), key=lambda j: j.seq)
            ],
            "holds": self._holds.snapshot(with_paths=False),
        }

    # --- internals ---------------------------------------------------------------------------

    def _add(self, job: _Job) -> None:
        self._jobs[job.seq] = job
        self._seq_by_key[job.key] = job.seq
        self._dirty.add(job.lane)
        lane = self._lanes.setdefault(job.lane, [])
        if lane and lane[-1] > job.seq:  # only a restore or an out-of-order seq lands here
            bisect.insort(lane, job.seq)
        else:
            lane.append(job.seq)

    def _refresh_index(self) -> None:
        """Bring the free-head index up to date for every lane changed since the last step."""
        for lane in self._dirty:
            old = self._indexed_head.pop(lane, None)
            if old is not None:
                self._timed.discard(old)
            seqs = self._lanes.get(lane)
            if not seqs or lane in self._busy_lanes:
                continue
            head = self._jobs[seqs[0]]
            self._indexed_head[lane] = head.seq
            if head.not_before is not None and not head.interrupted:
                self._timed.add(head.seq)
            rank = not head.interrupted
            if self._pushed.get(head.seq) is not rank:
                self._pushed[head.seq] = rank
                heapq.heappush(self._ready.setdefault(head.pool, []), (rank, head.seq))
        self._dirty.clear()

    def _live_entry(self, entry: tuple[bool, int]) -> bool:
        rank, seq = entry
        job = self._jobs.get(seq)
        if job is None or self._pushed.get(seq) is not rank or self._indexed_head.get(job.lane) != seq:
            if self._pushed.get(seq) is rank:
                del self._pushed[seq]
            return False
        return True

    def _pop_next_head(self) -> _Job | None:
        """Take the free lane head that starts first among the handlers with a free slot."""
        best: tuple[bool, int] | None = None
        for handler_id, heap in self._ready.items():
            while heap and not self._live_entry(heap[0]):
                heapq.heappop(heap)
            if heap and not self._is_full(handler_id) and (best is None or heap[0] < best):
                best = heap[0]
        if best is None:
            return None
        job = self._jobs[best[1]]
        heapq.heappop(self._ready[job.pool])
        del self._pushed[job.seq]
        return job

    def _free_lane_heads(self) -> list[_Job]:
        """The first waiting job of every lane with nothing running, in no particular order."""
        busy = self._busy_lanes
        jobs = self._jobs
        return [jobs[seqs[0]] for lane, seqs in self._lanes.items() if lane not in busy]

    def _waiting(self, head: _Job, now: float) -> bool:
        """The lane head may not start yet: its database's budget holds it, or its retry backoff or
        idle hold runs and no later job absorbs it."""
        if self._holds.blocks(head.db_path, head.handler_id, now):
            return True
        if head.interrupted or head.not_before is None or head.not_before <= now:
            return False
        return not (_held_until_absorbed(head) and self._coalesces_with_next(head))

    def _is_full(self, handler_id: str) -> bool:
        limit = self._capacity.get(handler_id)
        return limit is not None and self._runs_by_handler.get(handler_id, 0) >= limit

    def _coalesces_with_next(self, head: _Job) -> bool:
        """The job right behind ``head`` in its lane would run in ``head``'s group."""
        if not self._coalesce or head.coalesce_key is None or MAX_COALESCED < 2:
            return False
        seqs = self._lanes[head.lane]
        return len(seqs) > 1 and self._jobs[seqs[1]].coalesce_key == head.coalesce_key

    def _group_from(self, head: _Job) -> list[_Job]:
        """The head and, when coalescing applies, the waiting jobs right behind it in its lane."""
        key = head.coalesce_key if self._coalesce else None
        group = [head]
        if key is None:
            return group
        seqs = self._lanes[head.lane]
        for index in range(1, min(len(seqs), MAX_COALESCED)):
            job = self._jobs[seqs[index]]
            if job.coalesce_key != key:
                break
            group.append(job)
        return group

    def _start_head(self, head: _Job, now: float) -> Dispatch:
        """Start the run of ``head``'s group; when its database is held, this run is the re-check."""
        command = self._start(self._group_from(head))
        self._holds.started(head.db_path, head.handler_id, command.job_seq, now)
        return command

    def _start(self, group: list[_Job]) -> Dispatch:
        carrier = max(group, key=_carrier_rank)
        for job in group:
            job.status = "running"
            job.attempts += 1
            job.not_before = None
            job.interrupted = False
            job.carrier = carrier.seq
        self._carriers[carrier.seq] = carrier
        self._members[carrier.seq] = [job.seq for job in group]
        self._busy_lanes.add(carrier.lane)
        self._dirty.add(carrier.lane)
        self._running_jobs += len(group)
        self._runs_by_handler[carrier.pool] = self._runs_by_handler.get(carrier.pool, 0) + 1
        members = tuple((job.seq, job.attempts) for job in group) if len(group) > 1 else ()
        return Dispatch(
            carrier.seq,
            carrier.envelope.job_id,
            carrier.handler_id,
            carrier.attempts,
            carrier.envelope.payload,
            members,
        )

    def _in_flight_carrier(self, job_seq: int, attempt: int | None) -> _Job | OutcomeIgnored:
        job = self._carriers.get(job_seq)
        if job is None:
            return OutcomeIgnored(job_seq, "not_in_flight")
        if attempt is not None and attempt != job.attempts:
            return OutcomeIgnored(job_seq, "attempt_mismatch")
        return job

    def _finish_run(self, carrier: _Job) -> list[_Job]:
        """End the run of ``carrier``: free its lane and slot; returns its members in seq order."""
        del self._carriers[carrier.seq]
        self._busy_lanes.discard(carrier.lane)
        self._dirty.add(carrier.lane)
        self._runs_by_handler[carrier.pool] -= 1
        members = [self._jobs[seq] for seq in self._members.pop(carrier.seq)]
        self._running_jobs -= len(members)
        for job in members:
            job.carrier = None
            job.status = "pending"  # until the outcome removes it or schedules its retry
        return members

    def _fail_all(self, members: list[_Job], failure: JobFailed, now: float) -> list[Command]:
        commands: list[Command] = []
        for job in members:
            commands.extend(self._fail(job, failure.model_copy(update={"job_id": job.envelope.job_id}), now))
        return commands

    def _hold_all(self, carrier: _Job, members: list[_Job], held: JobHeld, now: float) -> list[Command]:
        """The run found the daily budget used up: its jobs wait again (the run not counted), and the
        database is held (the event only when the hold is new)."""
        hold, new = self._holds.record(carrier.db_path, held, now)
        commands: list[Command] = []
        for job in members:
            job.held += 1
            job.last_reason = held.reason
            if job.handler_id in HELD_HANDLERS:
                job.not_before = None  # the database's hold decides when it starts
            else:  # not a model job (not expected to be held): it waits on its own until the re-check
                job.not_before = hold.recheck_at
            self._dirty.add(job.lane)
            commands.append(
                HoldJob(job.seq, job.envelope.job_id, job.attempts, job.held, hold.recheck_at, held.reason)
            )
        if new:
            event = JobHeldEvent.for_hold(
                job_id=carrier.envelope.job_id,
                handler_id=carrier.handler_id,
                reason=held.reason,
                until=iso_utc(hold.until),
                spent=held.spent,
                cap=held.cap,
            )
            commands.append(EmitJobHeld(carrier.envelope.payload.session_id, event, carrier.db_path))
        return commands

    def _fail(self, job: _Job, failure: JobFailed, now: float) -> list[Command]:
        decision = decide_retry(job.counted, failure, self._policy)
        job.last_reason = failure.reason
        job.events_location = failure.events_location
        if isinstance(decision, GiveUpNow):
            self._remove(job)
            return self._give_up(job, decision)
        job.status = "pending"
        job.not_before = now + decision.delay_s
        self._dirty.add(job.lane)
        return [ScheduleRetry(job.seq, job.envelope.job_id, job.attempts, job.not_before, failure.reason)]

    def _give_up(self, job: _Job, decision: GiveUpNow) -> list[Command]:
        last = job.last_reason or decision.event_reason
        event = JobFailedEvent.for_job(
            job_id=job.envelope.job_id,
            handler_id=job.envelope.handler_id,
            attempts=max(job.counted, 1),
            event_reason=decision.event_reason,
            last_failure=last,
            events_location=job.events_location,
        )
        return [
            GiveUp(job.seq, job.envelope.job_id, job.attempts, last, fingerprint_of(job.envelope)),
            EmitJobFailed(job.envelope.payload.session_id, event, job.envelope.payload.db_path),
        ]

    def _remove(self, job: _Job) -> None:
        del self._jobs[job.seq]
        del self._seq_by_key[job.key]
        self._pushed.pop(job.seq, None)
        self._dirty.add(job.lane)
        lane = self._lanes[job.lane]
        lane.remove(job.seq)  # finished jobs are at the front of their lane: cheap
        if not lane:
            del self._lanes[job.lane]
