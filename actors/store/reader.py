"""The reads of one memory database, served on the node that holds it.

Observer, Reflector and Indexer jobs run on any node of the cluster. What they read of a database
(its rows, the events of its sessions, the derived hybrid index) is on its data node's disk, so
they read through a :class:`DataReader`: in the worker's own process when the worker runs on the
data node, else through the database's :class:`ReaderActor` (``omray.reader.<hash>``), a threaded
actor beside its StoreActor, which ``cluster/`` pins to the same node. Both answer the same calls
with the same values, so a job's result does not depend on where it ran.

A :class:`DataReader` is a :class:`persistence.reads.memory_reader.MemoryReader` (every read-only query of the
pipelines) plus three reads that touch files beside the database:

- :meth:`DataReader.read_event_window`: a range of a session's events file, through the settings'
  redactor (the node-local log of shipped events, or the agent's own file on that node);
- :meth:`DataReader.index_plan` and :meth:`DataReader.index_commit`: the two halves of one bounded
  index synchronization (:mod:`actors.indexer.sync`), so the embedding between them, the CPU-bound
  part, runs in the worker wherever it is. A plan is a value: one sent back late, or to a reader
  that restarted, is checked against the index and dropped when the index moved on.

The ReaderActor also answers ``memory_search`` and ``recall`` for clients on other nodes
(:class:`MemoryTools`), through the read service's own entry points, and the database's other pages
(the compaction summary, status, view, cost reports, a forget's ids: :mod:`actors.read.database_views`).

Nothing here writes memory rows: the index's state row goes through the database's StoreActor
(the ``state_writer``), and results of jobs are committed by the workers through it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from actors.indexer.sync import plan_batches
from actors.read.database_views import VIEWS, DatabaseViews, view_answer
from actors.worker import lower_priority
from persistence.files.events_reader import read_event_window
from persistence.reads.memory_reader import MemoryReader
from persistence.semantic import SemanticIndex, SemanticStateWriter, SyncResult
from persistence.semantic.batches import BatchPlan
from persistence.settings.parse import settings_from_mapping
from protocol.errors import InvalidPayloadError
from protocol.events import EventWindow
from protocol.redact import redactor_for
from protocol.settings import SemanticSettings
from protocol.shipping import shipped_events_root

READ_TOOLS: Final = frozenset({"memory_search", "recall", "call_tool"})
"""The tools a ReaderActor answers for clients on other nodes."""


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
        """:func:`persistence.files.events_reader.read_event_window` of a file on this node, redacted by the
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
        (:func:`actors.indexer.sync.plan_batches`)."""
        return plan_batches(self._index(semantic), batches=batches)

    def index_commit(
        self, semantic: SemanticSettings, plan: BatchPlan, vectors: list[list[float]]
    ) -> SyncResult:
        """Record a plan's chunks with their vectors
        (:meth:`persistence.semantic.SemanticIndex.commit_batch`)."""
        return self._index(semantic).commit_batch(plan, vectors)


class MemoryTools:
    """``memory_search``, ``recall`` and ``call_tool`` of one database, answered on its node for a
    client on any node: the read service's own entry points (:mod:`actors.read.service`,
    :func:`actors.read.hybrid.hybrid_search_for`) over the local files, so the answer is the one a
    client on this node would compute. Every call takes the caller's settings block (hybrid search,
    redaction) and the root of its sessions' events files (for sessions whose events were not shipped).
    """

    def __init__(self, db_path: str, state_writer: SemanticStateWriter) -> None:
        self._db_path = db_path
        self._state_writer = state_writer
        self._local = threading.local()  # hybrid search holds a SemanticIndex: one per thread

    def _hybrid(self, semantic: SemanticSettings | None) -> Any:
        if semantic is None:
            return None
        from actors.read.hybrid import hybrid_search_for

        searches: dict[str, Any] = self._local.__dict__.setdefault("hybrid", {})
        key = semantic.model_dump_json()
        if key not in searches:
            searches[key] = hybrid_search_for(self._db_path, semantic, self._state_writer)
        return searches[key]

    def _events_path_for(self, events_root: str | None) -> Callable[[str], Path]:
        shipped = Path(shipped_events_root(self._db_path))

        def path_of(session_id: str) -> Path:
            log = shipped / session_id / "events.jsonl"
            if log.is_file() or events_root is None:
                return log
            return Path(events_root) / session_id / "events.jsonl"

        return path_of

    def memory_search(
        self, arguments: Mapping[str, object], session_id: str | None, settings_block: Mapping[str, Any]
    ) -> dict[str, object]:
        """:func:`actors.read.service.memory_search` of this database."""
        from actors.read import service

        settings = settings_from_mapping(settings_block)
        return service.memory_search(
            self._db_path, arguments, hybrid_search=self._hybrid(settings.semantic), session_id=session_id
        )

    def recall(
        self,
        session_id: str,
        arguments: Mapping[str, object],
        settings_block: Mapping[str, Any],
        events_root: str | None = None,
    ) -> dict[str, object]:
        """:func:`actors.read.service.recall` of this database: events from the session's shipped log
        (else ``<events_root>/<session>/events.jsonl``), through the settings' redactor."""
        from actors.read import service

        settings = settings_from_mapping(settings_block)
        return service.recall(
            self._db_path,
            self._events_path_for(events_root),
            session_id,
            arguments,
            redactor=redactor_for(settings.redact_patterns),
        )

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, object] | str,
        session_id: str,
        settings_block: Mapping[str, Any],
        events_root: str | None = None,
    ) -> dict[str, object]:
        """:func:`actors.read.service.call_tool` (``memory_search`` or ``recall``) of this database."""
        from actors.read import service

        settings = settings_from_mapping(settings_block)
        return service.call_tool(
            name,
            arguments,
            session_id,
            db_path=self._db_path,
            events_path_for=self._events_path_for(events_root),
            hybrid_search=self._hybrid(settings.semantic),
            redactor=redactor_for(settings.redact_patterns),
        )


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
        self._tools = MemoryTools(self.db_path, state_writer)
        if niceness is not None:
            lower_priority(niceness)

    def read_tool(self, operation: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """``memory_search``, ``recall`` or ``call_tool`` (:class:`MemoryTools`), or a page of the
        database (:func:`actors.read.database_views.view_answer`), for a client elsewhere."""
        if operation in VIEWS:
            settings = settings_from_mapping(kwargs.get("settings_block") or {})
            return view_answer(DatabaseViews(self.db_path, settings), operation, kwargs)
        if operation not in READ_TOOLS:
            known = sorted(READ_TOOLS | VIEWS)
            raise InvalidPayloadError(f"no read tool {operation!r}; known: {known!r}")
        answer: dict[str, object] = getattr(self._tools, operation)(**kwargs)
        return answer

    def ping(self) -> dict[str, Any]:
        """The file this actor reads and the process it runs in."""
        return {"db_path": self.db_path, "pid": os.getpid()}
