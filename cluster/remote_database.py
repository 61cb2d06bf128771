"""What a client does with a memory database that may live on another node (issue 43).

:class:`RemoteDatabase` is a part of :class:`cluster.client.OmrayClient`: where its database lives
(asked once, :meth:`~RemoteDatabase.database_is_local`), its jobs made ready for that node when the
outbox sends them (the events shipped first, :meth:`~RemoteDatabase.for_its_node`), and its read
tools answered by the database's ReaderActor when the database is elsewhere.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from cluster.runtime_connection import Link, RuntimeMethodMissingError, RuntimeUnavailableError
from cluster.shipper import EventShipper, Shipment
from protocol.jobs import JobEnvelope, ObserveBoundaryJob, SemanticIndexJob
from protocol.settings import OmSettings
from protocol.shipping import shipped_events_path, shipped_events_root

logger = logging.getLogger("omray.client")


class RemoteDatabase(ABC):
    """The client's database, wherever it lives (mixed into :class:`cluster.client.OmrayClient`)."""

    link: Link
    settings: OmSettings
    settings_block: dict[str, Any]
    shipper: EventShipper
    cwd: Path
    hook_timeout_s: float
    call_timeout_s: float
    _ship_events: bool | None
    _database_local: bool | None

    @property
    @abstractmethod
    def db_path(self) -> Path:
        """The memory database in effect (the client's)."""

    @abstractmethod
    def events_path(self, session_id: str) -> Path:
        """A session's own ``events.jsonl`` (the client's)."""

    def ships_events(self, timeout_s: float | None = None) -> bool | None:
        """True when this client ships its sessions' events to the database's node
        (:mod:`cluster.shipper`) instead of naming their files in the jobs (``None``: not known
        yet, no runtime answered).

        ``ship_events`` given to the constructor decides; by default events are shipped when the
        database lives on another node than this client's (asked once: :meth:`database_is_local`).
        """
        if self._ship_events is not None:
            return self._ship_events
        local = self.database_is_local(timeout_s)
        return None if local is None else not local

    def database_is_local(self, timeout_s: float | None = None) -> bool | None:
        """Whether the database lives on this client's node (``None``: no runtime answered yet).

        The first answer places the database (on first use anywhere: ``storage.node``,
        ``storage.node_resource``, else this node; docs/operations.md) and is kept: a database
        never moves. Bounded by ``timeout_s`` (default: the hook's deadline); never raises. A
        runtime that does not know the question (older than this client) gets the files named.
        """
        if self._database_local is not None:
            return self._database_local
        try:
            answer = self.link.call(
                "locate_database",
                (str(self.db_path.resolve()), self.settings.data_node, self.settings.data_node_resource),
                self.hook_timeout_s if timeout_s is None else max(timeout_s, 0.001),
            )
            self._database_local = bool(answer["local"])
        except RuntimeMethodMissingError:
            self._database_local = True  # a runtime without placements runs on one node
        except Exception as exc:  # no runtime yet (or a refusal): ask again next time
            logger.info("database not located", extra={"error_class": type(exc).__name__})
            return None
        return self._database_local

    def for_its_node(self, envelope: JobEnvelope, timeout_s: float) -> JobEnvelope:
        """The job as it goes to the runtime (called when it is sent, off the hook's path).

        Jobs are built naming the agent's own files. When this client ships its events, an observe
        job's events go first (:class:`cluster.shipper.EventShipper`, through its terminal seq) and
        the job then names the session's node-local log; an index job names the logs' root. Raises
        :class:`RuntimeUnavailableError` while no runtime says where the database lives (the outbox
        sends the job later).
        """
        payload = envelope.payload
        if not isinstance(payload, ObserveBoundaryJob | SemanticIndexJob) or payload.db_path != str(
            self.db_path.resolve()
        ):
            return envelope
        ships = self.ships_events(timeout_s)
        if ships is None:
            raise RuntimeUnavailableError("the runtime did not say where the memory database lives")
        if not ships:
            return envelope
        if isinstance(payload, SemanticIndexJob):
            moved: Any = payload.model_copy(update={"events_root": shipped_events_root(payload.db_path)})
        else:
            shipment = Shipment(
                payload.db_path, payload.session_id, payload.events_path, payload.terminal_end_seq
            )
            self.shipper.ship(shipment, timeout_s)
            log = shipped_events_path(payload.db_path, payload.session_id)
            moved = payload.model_copy(update={"events_path": log})
        return envelope.model_copy(update={"payload": moved})

    def _reads_remotely(self) -> bool:
        """True when the database lives on another node: reads go to its ReaderActor there."""
        return self._ship_events is not False and self.database_is_local(self.call_timeout_s) is False

    def _remote_tool(self, operation: str, **kwargs: Any) -> dict[str, object]:
        """A read tool answered by the database's ReaderActor (:func:`cluster.data_node.ask_reader`)."""
        from cluster.data_node import ask_reader

        kwargs["settings_block"] = self.settings_block
        return ask_reader(self.link.call, str(self.db_path.resolve()), operation, kwargs, self.call_timeout_s)

    def _remote_view(self, operation: str, timeout_s: float, **arguments: Any) -> dict[str, Any] | None:
        """A page of the database (:data:`actors.read.database_views.VIEWS`) as its ReaderActor on
        another node answers it (:func:`actors.read.database_views.view_answer`), or ``None`` when the
        database lives on this node (the caller computes it here). Raises what the call raised: a
        typed :class:`protocol.errors.OmrayError`, :class:`RuntimeUnavailableError` past ``timeout_s``.
        """
        if self._ship_events is False or self.database_is_local(timeout_s) is not False:
            return None
        arguments["settings_block"] = self.settings_block
        answer: dict[str, Any] = self.link.call(
            "read_tool", (str(self.db_path.resolve()), operation, arguments), timeout_s
        )
        return answer

    def _recall_events_path(self, session_id: str) -> Path:
        """Where recall reads a session's events on this node: its shipped log beside the database
        when there is one (this is the data node), else the agent's own file."""
        shipped = Path(shipped_events_path(str(self.db_path.resolve()), session_id))
        return shipped if shipped.is_file() else self.events_path(session_id)

    def _agent_events_root(self) -> str:
        """The folder of this agent's sessions (``<root>/<session>/events.jsonl``)."""
        return str(self.events_path("s").parent.parent.resolve())
