"""Running the queue's group commits: one transaction at a time, in order, and callers waiting for theirs.

:class:`GroupCommitter` takes everything the :class:`~actors.queue.commits.CommitLog` holds, writes
it in ONE store transaction (:func:`~actors.queue.writes.writes_for`), wakes the ``dispatch``
callers whose jobs that made durable, then hands the batch to the caller's ``carry_out`` (which
starts the runs it recorded) while still holding the commit lock, so starts go out in commit order.
A batch whose write fails goes back whole at the front of the log, ahead of anything newer, and the
error propagates; the durable rows never diverge from the state. A commit wakes only the callers it
made durable: callers of one generation share one event, set once that generation is written, so a
commit never wakes a caller only for it to find its job still unwritten and sleep again (with eight
agents dispatching, a commit carries some three of them while the others wait for the next one).
What to write and which generation is durable is decided in ``commits.py`` and ``writes.py``; this
module only runs it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from actors.queue.commits import Batch, CommitLog, CommitStats
from actors.queue.ports import QueueStorePort
from actors.queue.writes import wakes_callers_and_starts, writes_for
from protocol.errors import StorageError

MAX_DEFERRED_COMMITS: Final = 4
"""Most commits whose starts wait for a later one (``defer_starts``): with callers arriving all the
time, the starts still go out every few commits."""


class GroupCommitter:
    """The commit log of one queue and the one thread of control that writes it.

    ``lock`` is the queue's own lock (it also guards the state machine the log's items come from);
    the log is read and changed under it only, and no store call is ever made while holding it.
    Commits never overlap: a second caller of :meth:`commit` waits for the first.
    """

    def __init__(self, lock: threading.Lock, store: QueueStorePort) -> None:
        self._lock = lock
        # Per generation some caller waits for, the event set once it is durable (under ``lock``).
        self._wakes: dict[int, threading.Event] = {}
        self._commit_lock = threading.Lock()  # one commit at a time, in order
        # Durable batches whose carrying out waits for the next commit (``defer_starts``).
        self._deferred: list[Batch] = []
        self._store = store
        self.log = CommitLog()
        """What is not written yet, in order, and the commit generations callers wait for."""
        self.stats = CommitStats()
        """Transactions, writes and recent times (``status()["commits"]``)."""

    def commit(
        self,
        carry_out: Callable[[Batch], None],
        *,
        yield_to_callers: bool = False,
        defer_starts: bool = False,
    ) -> bool:
        """One group commit: every queued write in ONE transaction, then ``carry_out(batch)``.

        Raises when the store write fails (the batch then stays queued, in order, ahead of anything
        newer). Returns False when there was nothing to write or carry out. ``yield_to_callers``:
        let the callers just woken answer before the batch's starts are sent (sending holds the GIL
        for some 0.3 ms, which each caller would otherwise wait out before it could return;
        alternating runs: one agent's dispatch p50 0.2 ms lower, same throughput).

        ``defer_starts``: when other callers' jobs wait for the next commit already, keep this
        batch's carrying out (its starts) for after that commit, up to :data:`MAX_DEFERRED_COMMITS`
        commits: those callers are answered one step sooner, and the starts of several commits go
        out together (fewer worker calls). Deferred batches are carried out together, in commit
        order, by the next commit that finds nobody waiting, by a call with nothing to write, or
        before a failed write raises; until then the queue is not idle.
        """
        with self._commit_lock:
            with self._lock:
                batch = self.log.take()  # out of the log, not durable or carried out yet: not idle
            if batch is None:
                return self._carry_out_deferred(carry_out, yield_to_callers=False)
            started = time.perf_counter()
            try:
                writes = writes_for(batch.items)  # inside: a batch that fails here is put back too
                self._store.apply_job_writes(writes)
            except BaseException:
                with self._lock:
                    self.log.put_back(batch)  # its callers wait on: the next commit carries them
                    self.log.committing = bool(self._deferred)
                self._carry_out_deferred(carry_out, yield_to_callers=False)  # durable: they start
                raise
            try:
                with self._lock:
                    self.log.written(batch)
                    durable = [g for g in self._wakes if self.log.is_durable(g)]
                    wakes = [self._wakes.pop(g) for g in durable]
                    self._deferred.append(batch)
                    defer = (
                        defer_starts
                        and len(self._deferred) < MAX_DEFERRED_COMMITS
                        and self.log.accepts_waiting()
                    )
                for wake in wakes:
                    wake.set()
                self.stats.committed(len(writes), time.perf_counter() - started)
                if not defer:
                    self._carry_out_deferred(carry_out, yield_to_callers=yield_to_callers)
            finally:
                with self._lock:
                    self.log.committing = bool(self._deferred)
            return True

    def _carry_out_deferred(self, carry_out: Callable[[Batch], None], *, yield_to_callers: bool) -> bool:
        """Carry out every durable batch kept so far as one, in commit order (under the commit lock:
        starts go out in commit order); False when there was none."""
        batches, self._deferred = self._deferred, []
        if not batches:
            return False
        merged = Batch([item for batch in batches for item in batch.items], batches[-1].generation)
        try:
            if yield_to_callers and wakes_callers_and_starts(merged.items):
                time.sleep(0)
            carry_out(merged)
        finally:
            with self._lock:
                self.log.committing = False
        return True

    def has_deferred(self) -> bool:
        """Durable batches wait to be carried out (call under the lock, from the committing thread)."""
        return bool(self._deferred)

    def await_durable(self, generation: int, timeout_s: float) -> None:
        """Return once the commit carrying ``generation`` is durable; :class:`StorageError` after
        ``timeout_s`` (the job stays queued and is written once the store answers)."""
        with self._lock:
            if self.log.is_durable(generation):
                return
            wake = self._wakes.setdefault(generation, threading.Event())
        # Set only once ``generation`` is durable (generations become durable in order, never back).
        if not wake.wait(timeout_s):
            # A repeated dispatch of the job finds it queued and returns.
            raise StorageError("the queue store did not confirm the job in time; dispatch it again")

    def busy(self) -> bool:
        """Something is unwritten, or a batch is being written or carried out (call under the lock)."""
        return bool(self.log) or self.log.committing
