"""StoreActor: the only writer of one SQLite file (DESIGN.md invariant 1).

A plain subclass of :class:`persistence.writers.store.Store`; ``cluster/`` turns it into a named,
detached, single-threaded Ray actor (``omray.store.<hash of the path>``), so writes to one file
are serialized by construction and nothing else opens that file for writing. Readers use their
own read-only connections (``persistence.reads.memory_reader.MemoryReader``) in any process.

It also keeps the node-local logs of the events agents on other nodes ship
(``<database>.events/<session>/events.jsonl``, :mod:`protocol.shipping`): it is their one writer too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from actors.store.events_log import append_shipped
from actors.worker import lower_priority
from persistence.database.connection import Synchronous
from persistence.files.events_log import EventLog
from persistence.writers.store import Store
from protocol.shipping import shipped_events_root


class StoreActor(Store):
    """Exposes the ``Store`` write methods as actor methods, plus a liveness probe."""

    def __init__(
        self,
        db_path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        niceness: int | None = None,
    ) -> None:
        """``niceness``: as for the role workers (``actors.worker.RoleActor``): writes of memory are
        background work next to the queue and the agents; ``None`` leaves the process alone."""
        super().__init__(db_path, synchronous=synchronous)
        self._events = EventLog(shipped_events_root(self.db_path))
        if niceness is not None:
            lower_priority(niceness)

    def append_events(self, session_id: str, events: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        """Append shipped events to the session's node-local log, each event once (by seq and content
        id); on disk when it returns. Returns counts and the log's last seq
        (:class:`protocol.shipping.AppendResult`); a bad batch raises and writes nothing."""
        return append_shipped(self._events, session_id, events).as_dict()

    def events_tail(self, session_id: str) -> int:
        """Seq of the last event of the session's node-local log (0: none yet)."""
        return self._events.tail(session_id)

    def ping(self) -> dict[str, Any]:
        """The file this actor owns, the process it runs in, and how many times the file was found
        removed or replaced and opened again (jobs ping before they read: the file is there after)."""
        self.ensure_file()
        return {"db_path": self.db_path, "pid": os.getpid(), "reopened": self.reopened}
