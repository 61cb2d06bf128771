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

from actors.queue.commits import Batch, CommitLog, CommitStats
from actors.queue.ports import QueueStorePort
from actors.queue.writes import wakes_callers_and_starts, writes_for
from protocol.errors import StorageError


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
        self._store = store
        self.log = CommitLog()
        """What is not written yet, in order, and the commit generations callers wait for."""
        self.stats = CommitStats()
        """Transactions, writes and recent times (``status()["commits"]``)."""

    def commit(self, carry_out: Callable[[Batch], None], *, yield_to_callers: bool = False) -> bool:
        """One group commit: every queued write in ONE transaction, then ``carry_out(batch)``.

        Raises when the store write fails (the batch then stays queued, in order, ahead of anything
        newer). Returns False when there was nothing to write. ``yield_to_callers``: let the callers
        just woken answer before the batch's starts are sent (sending holds the GIL for some 0.3 ms,
        which each caller would otherwise wait out before it could return; alternating runs: one
        agent's dispatch p50 0.2 ms lower, same throughput).
        """
        with self._commit_lock:
            with self._lock:
                batch = self.log.take()  # out of the log, not durable or carried out yet: not idle
            if batch is None:
                return False
            started = time.perf_counter()
            try:
                writes = writes_for(batch.items)  # inside: a batch that fails here is put back too
                self._store.apply_job_writes(writes)
            except BaseException:
                with self._lock:
                    self.log.put_back(batch)  # its callers wait on: the next commit carries them
                raise
            try:
                with self._lock:
                    self.log.written(batch)
                    durable = [g for g in self._wakes if self.log.is_durable(g)]
                    wakes = [self._wakes.pop(g) for g in durable]
                for wake in wakes:
                    wake.set()
                self.stats.committed(len(writes), time.perf_counter() - started)
                if yield_to_callers and wakes_callers_and_starts(batch.items):
                    time.sleep(0)
                carry_out(batch)  # under the commit lock: starts go out in commit order
            finally:
                with self._lock:
                    self.log.committing = False
            return True

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
