"""The client's side of "events travel, paths do not" (:mod:`protocol.shipping`).

When an agent's memory database lives on another node, the client cannot name its events file in
the observe job. Before each such job it queues a :class:`Shipment` in the same outbox lane (so the
job is sent only once its events are in the node-local log): the events of the session's own file
past what the log holds, through the job's boundary, read through the settings' redactor (what
leaves the agent's machine is what any reader of the file would pass on), in bounded batches.

Each batch is one ``ship_events`` call on the link; the log takes each event once, so a batch sent
again after a lost answer is harmless, and the sender's watermark is only ever raised to what the
log answered. The hook never waits for a shipment: the outbox sends it on a sender thread, and the
hook waits at most its deadline for the job behind it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from persistence.files.events_reader import iter_events
from protocol.errors import EventsFileError, EventsMismatchError, EventsMissingError
from protocol.redact import Redactor
from protocol.shipping import batch_size

logger = logging.getLogger("omray.shipper")

Call = Callable[[str, tuple[Any, ...], float], Any]
"""``link.call``: a link method, its arguments, a deadline."""

LOCAL_READ_ERRORS = (EventsFileError, EventsMismatchError, EventsMissingError, OSError)
"""Reading the agent's own file can fail; what was read before the failure is shipped and the job
goes out (it then fails on the data node as not ready, and its session's next shipment resumes)."""


@dataclass(frozen=True, slots=True)
class Shipment:
    """Ship a session's events through ``end_seq`` to its database's node."""

    db_path: str
    """The database (a path on its data node)."""
    session_id: str
    """The session."""
    events_path: str
    """The agent's own ``events.jsonl`` (on this node)."""
    end_seq: int
    """Ship at least through this seq (what the file holds of it)."""


class EventShipper:
    """Ships a client's sessions' new events in batches bounded as :func:`protocol.shipping.batch_size`
    says; thread-safe.

    ``call`` is the client's link; ``redactor`` the settings' (``redactor_for(redact_patterns)``).
    """

    def __init__(self, call: Call, redactor: Redactor) -> None:
        self._call = call
        self._redactor = redactor
        self._through: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self.batches_sent = 0

    def shipped_through(self, db_path: str, session_id: str) -> int | None:
        """What the node-local log is known to hold of the session (``None``: not asked yet)."""
        with self._lock:
            return self._through.get((db_path, session_id))

    def ship(self, shipment: Shipment, timeout_s: float) -> int:
        """Ship what the log lacks of the session through ``shipment.end_seq``; returns the seq the
        log is known to hold through.

        Raises the link's errors (the outbox retries); each call is bounded by ``timeout_s``.
        """
        key = (shipment.db_path, shipment.session_id)
        through = self.shipped_through(*key)
        if through is None:
            through = int(self._call("events_tail", key, timeout_s))
            self._raise_to(key, through)
        while through < shipment.end_seq:
            batch = self._next_batch(shipment, through)
            if not batch:
                break  # the file does not reach further (yet): what it held is shipped
            answer = self._call("ship_events", (*key, batch), timeout_s)
            self.batches_sent += 1
            last = int(answer["last_seq"]) if isinstance(answer, dict) else through
            if last <= through:
                break  # nothing moved: a log that refuses to advance must not loop here
            through = self._raise_to(key, last)
        return through

    def _raise_to(self, key: tuple[str, str], seq: int) -> int:
        with self._lock:
            current = max(self._through.get(key, 0), seq)
            self._through[key] = current
            return current

    def _next_batch(self, shipment: Shipment, through: int) -> list[dict[str, Any]]:
        forms: list[dict[str, Any]] = []
        sizes: list[int] = []
        try:
            for event in self._read(shipment, through):
                form = event.model_dump(mode="json")
                forms.append(form)
                sizes.append(len(json.dumps(form, ensure_ascii=False)))
                if batch_size(sizes) < len(sizes):
                    break  # the last one read starts the next batch
        except LOCAL_READ_ERRORS as exc:
            logger.warning(
                "events not shipped past a read failure",
                extra={"session_id": shipment.session_id, "error_class": type(exc).__name__},
            )
        return forms[: batch_size(sizes)]

    def _read(self, shipment: Shipment, through: int) -> Iterator[Any]:
        return iter_events(
            shipment.events_path,
            through + 1,
            shipment.end_seq,
            redactor=self._redactor,
            session_id=shipment.session_id,  # another session's line is a read failure, not shipped
        )
