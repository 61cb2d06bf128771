"""Which node each memory database lives on (pure; the QueueRuntime persists and serves it).

The first request for a database decides its node (:func:`choose`); the decision is recorded
durably and never changes afterwards: every later request, from any agent on any node, gets the
recorded placement, so one database never gets a second StoreActor (and a second, empty file) on
another node. A request whose settings ask for another node than the recorded one is refused with
:class:`~protocol.placement.PlacementConflictError` and changes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from protocol.placement import AgentNode, DataPlacement, PlacementConflictError, PlacementRequest


def choose(request: PlacementRequest, queue_node: AgentNode) -> DataPlacement:
    """The node a new database gets: the one its settings ask for, else the agent's node, else (a
    job naming a database nobody placed) the queue's node."""
    explicit = request.explicit
    if explicit is not None:
        return explicit
    return (request.agent or queue_node).placement()


@dataclass
class PlacementBook:
    """The recorded placements of one runtime. Only its owner calls it, under its lock.

    Guarantees: a database's placement is set once (by :meth:`claim` when it returns ``new=True``,
    which the owner must persist before answering) and every answer for it is that placement.
    """

    queue_node: AgentNode
    """Where databases go that a job names before any agent placed them."""
    placements: dict[str, DataPlacement] = field(default_factory=dict)

    def restore(self, recorded: Iterable[tuple[str, DataPlacement]]) -> None:
        """The placements read back from durable storage (a restarted queue)."""
        for db_path, placement in recorded:
            self.placements.setdefault(db_path, placement)

    def claim(self, request: PlacementRequest) -> tuple[DataPlacement, bool]:
        """The database's placement and whether it was chosen now (then persist it first).

        Raises :class:`PlacementConflictError` when the request asks for another node than the
        recorded one.
        """
        recorded = self.placements.get(request.db_path)
        if recorded is not None:
            asked = request.explicit
            if asked is not None and asked != recorded:
                raise PlacementConflictError(request.db_path, recorded, asked)
            return recorded, False
        placement = choose(request, self.queue_node)
        self.placements[request.db_path] = placement
        return placement, True

    def forget_unsaved(self, db_path: str) -> None:
        """Drop a placement chosen by :meth:`claim` whose write failed (the next request chooses again)."""
        self.placements.pop(db_path, None)

    def snapshot(self) -> Mapping[str, DataPlacement]:
        """Every recorded placement."""
        return dict(self.placements)


class PlacementStorePort(Protocol):
    """Durable placements (the queue's own database: :class:`persistence.writers.queue_store.QueueStore`)."""

    def record_placement(self, db_path: str, placement_json: str, recorded_at: str) -> str:
        """Insert the placement unless the database has one; returns the stored one (JSON)."""
        ...

    def placements(self) -> dict[str, str]:
        """Every stored placement (JSON), by database."""
        ...


class PlacementRegistry:
    """The runtime's placements: durable before any caller sees a new one; thread-safe.

    Callers from many threads (agents' clients, workers) claim at once; the lock covers the book and
    the one write of a new placement, so two first requests for one database from two nodes get
    the same answer. A write that fails leaves nothing behind (the next request chooses again).
    """

    def __init__(self, store: PlacementStorePort, queue_node: AgentNode, clock: Callable[[], str]) -> None:
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self.book = PlacementBook(queue_node)
        self.book.restore(
            (db_path, DataPlacement.model_validate_json(text)) for db_path, text in store.placements().items()
        )

    def claim(self, request: PlacementRequest) -> DataPlacement:
        """The database's placement (chosen and recorded now when it has none)."""
        with self._lock:
            placement, new = self.book.claim(request)
            if not new:
                return placement
            try:
                stored = self._store.record_placement(
                    request.db_path, placement.model_dump_json(), self._clock()
                )
            except BaseException:
                self.book.forget_unsaved(request.db_path)
                raise
            kept = DataPlacement.model_validate_json(stored)
            if kept != placement:  # recorded meanwhile by another life of the queue: that one holds
                self.book.placements[request.db_path] = kept
            return kept

    def placement_of(self, db_path: str) -> DataPlacement:
        """The placement of a database a job names (the queue's node when nobody placed it yet)."""
        return self.claim(PlacementRequest(db_path=db_path))
