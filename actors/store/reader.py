"""The reads of one memory database, served on the node that holds it.

Observer, Reflector and Indexer jobs run on any node of the cluster. What they read of a database
(its rows, the events of its sessions, the derived hybrid index) is on its data node's disk, so
they read through a :class:`DataReader`: in the worker's own process when the worker runs on the
data node, else through the database's :class:`ReaderActor` (``omray.reader.<hash>``), a threaded
actor beside its StoreActor, which ``cluster/`` pins to the same node. Both answer the same calls
with the same values, so a job's result does not depend on where it ran.

A :class:`DataReader` is a :class:`persistence.queries.MemoryReader` (every read-only query of the
pipelines) plus three reads that touch files beside the database:

- :meth:`DataReader.read_event_window`: a range of a session's events file, through the settings'
  redactor (the node-local log of shipped events, or the agent's own file on that node);
- :meth:`DataReader.index_plan` and :meth:`DataReader.index_commit`: the two halves of one bounded
  index synchronization (``persistence.semantic``), so the embedding between them, the CPU-bound
  part, runs in the worker wherever it is. A plan is a value: one sent back late, or to a reader
  that restarted, is checked against the index and dropped when the index moved on.

Nothing here writes memory rows: the index's state row goes through the database's StoreActor
(the ``state_writer``), and results of jobs are committed by the workers through it.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from actors.worker import lower_priority
from persistence.events_reader import read_event_window
from persistence.queries import MemoryReader
from persistence.semantic import SemanticIndex, SemanticStateWriter, SyncResult
from persistence.semantic.chunking import BatchPlan
from protocol.events import EventWindow
from protocol.redact import redactor_for
from protocol.settings import SemanticSettings


class DataReader(MemoryReader):
    """Every read a job makes of one database and the files beside it; safe from many threads."""

    def __init__(self, db_path: str | os.PathLike[str], state_writer: SemanticStateWriter) -> None:
        super().__init__(db_path)
        self._state_writer = state_writer
        self._local = threading.local()  # a SemanticIndex is one per thread

    def read_event_window(
        self,
        events_path: str,
        start_seq: int,
        end_seq: int,
        *,
        redact_patterns: tuple[str, ...] = (),
        session_id: str | None = None,
    ) -> EventWindow:
        """:func:`persistence.events_reader.read_event_window` of a file on this node, redacted by the
        built-in set plus ``redact_patterns`` (the settings' ``privacy.redact_patterns``)."""
        return read_event_window(
            events_path,
            start_seq,
            end_seq,
            redactor=redactor_for(tuple(redact_patterns)),
            session_id=session_id,
        )

    def _index(self, semantic: SemanticSettings) -> SemanticIndex:
        indexes: dict[str, SemanticIndex] = self._local.__dict__.setdefault("indexes", {})
        key = semantic.model_dump_json()
        index = indexes.get(key)
        if index is None:
            index = indexes[key] = SemanticIndex(self.db_path, semantic, self._state_writer)
        return index

    def index_plan(self, semantic: SemanticSettings, batches: int) -> BatchPlan | SyncResult:
        """What the next ``batches`` embedding batches of the index are
        (:meth:`persistence.semantic.build.IndexBuilder.plan_batch`)."""
        return self._index(semantic).plan_batch(batches=batches)

    def index_commit(
        self, semantic: SemanticSettings, plan: BatchPlan, vectors: list[list[float]]
    ) -> SyncResult:
        """Record a plan's chunks with their vectors (:meth:`...IndexBuilder.commit_batch`)."""
        return self._index(semantic).commit_batch(plan, vectors)


class ReaderActor(DataReader):
    """:class:`DataReader` as the named actor beside a database's StoreActor (``cluster/`` runs it
    threaded, on the database's node). Holds no state of its own beyond caches."""

    def __init__(
        self,
        db_path: str | os.PathLike[str],
        state_writer: SemanticStateWriter,
        *,
        niceness: int | None = None,
    ) -> None:
        super().__init__(db_path, state_writer)
        if niceness is not None:
            lower_priority(niceness)

    def ping(self) -> dict[str, Any]:
        """The file this actor reads and the process it runs in."""
        return {"db_path": self.db_path, "pid": os.getpid()}
