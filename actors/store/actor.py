"""StoreActor: the only writer of one SQLite file (DESIGN.md invariant 1).

A plain subclass of :class:`persistence.writers.store.Store`; ``cluster/`` turns it into a named,
detached, single-threaded Ray actor (``omray.store.<hash of the path>``), so writes to one file
are serialized by construction and nothing else opens that file for writing. Readers use their
own read-only connections (``persistence.reads.memory_reader.MemoryReader``) in any process.
"""

from __future__ import annotations

import os
from typing import Any

from actors.worker import lower_priority
from persistence.database.connection import Synchronous
from persistence.writers.store import Store


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
        if niceness is not None:
            lower_priority(niceness)

    def ping(self) -> dict[str, Any]:
        """The file this actor owns, the process it runs in, and how many times the file was found
        removed or replaced and opened again (jobs ping before they read: the file is there after)."""
        self.ensure_file()
        return {"db_path": self.db_path, "pid": os.getpid(), "reopened": self.reopened}
