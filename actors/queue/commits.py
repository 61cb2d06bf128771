"""The queue's group-commit bookkeeping: what is not written yet, and which commit makes what durable.

:class:`CommitLog` holds, in order, every item the loop has not written (accepts and commands, each
with the time it was issued) and numbers the commits in *generations*: a ``dispatch`` caller waits
until the generation that carries its job is durable. A batch whose write fails goes back whole at
the front, ahead of anything newer, so the durable rows never diverge from the in-memory state.

:class:`CommitStats` keeps the figures ``status()["commits"]`` reports. Neither class locks: the
QueueActor calls them under its own lock (stats: from the one thread that commits, or under the
lock), which also guards the state machine the items come from.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from actors.queue.commands import Command, needs_commit
from actors.queue.writes import Accept, Issued, only_finishes
from protocol.jobs import JobEnvelope

DISPATCH_WINDOW: Final = 1000
"""Recent ``dispatch`` calls (and group commits) whose times ``status()["commits"]`` summarizes."""


@dataclass(frozen=True, slots=True)
class Batch:
    """The items one commit writes, and the generation it makes durable."""

    items: list[Issued]
    """Accepts and commands in the order they were issued."""
    generation: int
    """Callers waiting for this generation (or an earlier one) are durable once it is written."""


class CommitLog:
    """Unwritten items in order, and commit generations. Not thread-safe: callers hold one lock."""

    def __init__(self) -> None:
        self._unwritten: collections.deque[Issued] = collections.deque()
        self._generation = 1  # the one the next commit writes
        self._durable_generation = 0
        self._unwritten_accepts: dict[int, int] = {}  # job_seq -> generation carrying its accept
        self.committing = False
        """A batch taken from the log is being written or carried out (so the queue is not idle)."""

    def __len__(self) -> int:
        return len(self._unwritten)

    def accept(
        self,
        job_seq: int,
        envelope: JobEnvelope,
        now: float,
        redrive_of: int | None = None,
        redrives: int = 0,
    ) -> int:
        """Queue the durable row of a new job (``redrive_of``: the failed job it re-drives); the
        generation its caller waits for."""
        self._unwritten.append((Accept(job_seq, envelope, redrive_of, redrives), now))
        self._unwritten_accepts[job_seq] = self._generation
        return self._generation

    def accept_pending(self, job_seq: int) -> int | None:
        """The generation carrying the accept of ``job_seq`` when it is not durable yet, else ``None``."""
        return self._unwritten_accepts.get(job_seq)

    def add(self, commands: Iterable[Command], now: float) -> None:
        """Queue the commands that write or do something (notices are dropped)."""
        self._unwritten.extend((command, now) for command in commands if needs_commit(command))

    def only_finishes(self) -> bool:
        """True when every unwritten item is a success record: nobody waits on them."""
        return only_finishes(self._unwritten)

    def take(self) -> Batch | None:
        """Everything unwritten, as the next commit's batch (``None``: nothing to write)."""
        if not self._unwritten:
            return None
        batch = Batch(list(self._unwritten), self._generation)
        self._unwritten.clear()
        self._generation += 1
        self.committing = True
        return batch

    def put_back(self, batch: Batch) -> None:
        """A batch whose write failed: back at the front, in order, ahead of anything newer."""
        self._unwritten.extendleft(reversed(batch.items))
        self.committing = False

    def written(self, batch: Batch) -> None:
        """The batch is durable: its generation's callers may return."""
        self._durable_generation = batch.generation
        for item, _issued in batch.items:
            if isinstance(item, Accept):
                self._unwritten_accepts.pop(item.job_seq, None)

    def is_durable(self, generation: int) -> bool:
        """True once the commit carrying ``generation`` is written."""
        return self._durable_generation >= generation


class CommitStats:
    """Group commits since start and the times of recent dispatches and commits."""

    def __init__(self) -> None:
        self._counts = collections.Counter[str]()  # transactions, writes, microseconds
        # How long recent ``dispatch`` calls took in this process, accept to durable (milliseconds).
        self._dispatch_ms: collections.deque[float] = collections.deque(maxlen=DISPATCH_WINDOW)
        self._commit_ms: collections.deque[float] = collections.deque(maxlen=DISPATCH_WINDOW)

    def dispatched(self, elapsed_ms: float, jobs: int = 1) -> None:
        """``jobs`` jobs became durable ``elapsed_ms`` after their call began."""
        self._dispatch_ms.extend(elapsed_ms for _ in range(jobs))

    def committed(self, writes: int, elapsed_s: float) -> None:
        """One transaction of ``writes`` writes took ``elapsed_s``."""
        self._counts.update(transactions=1, writes=writes, micros=round(elapsed_s * 1e6))
        self._commit_ms.append(elapsed_s * 1000.0)

    def figures(self) -> dict[str, float]:
        """Transactions, writes, mean writes and milliseconds per transaction, recent percentiles."""
        count = self._counts["transactions"]
        recent = sorted(self._dispatch_ms)
        commits = sorted(self._commit_ms)
        return {
            "transactions": count,
            "writes": self._counts["writes"],
            "writes_per_transaction": round(self._counts["writes"] / count, 2) if count else 0.0,
            "ms_per_transaction": round(self._counts["micros"] / 1000 / count, 3) if count else 0.0,
            # In this process, from accept to durable, over the last ``DISPATCH_WINDOW`` dispatches:
            # next to a caller's figure, what the transport and the caller's own process add.
            "dispatch_ms_p50": _at(recent, 0.5),
            "dispatch_ms_p95": _at(recent, 0.95),
            # The store write of the last ``DISPATCH_WINDOW`` group commits (a slow one holds every
            # dispatch it carries and every one that arrives meanwhile).
            "commit_ms_p95": _at(commits, 0.95),
            "commit_ms_max": round(commits[-1], 3) if commits else 0.0,
        }


def _at(ordered: Sequence[float], fraction: float) -> float:
    """The value at ``fraction`` of a sorted window (nearest rank below), rounded; 0 when empty."""
    return round(ordered[int(len(ordered) * fraction)], 3) if ordered else 0.0
