"""Events that travel: an agent's new events shipped to the node that holds its project's memory.

An agent on another node than its memory database cannot hand the runtime a path: the workers
would read a file that is not on their disk. So its client reads the turn's new events from its own
``events.jsonl`` (through the redactor, as every reader does), and ships them to the database's
StoreActor, which appends them to a node-local log beside the database,
``<database>.events/<session>/events.jsonl``; the observe job then names that log.

A shipped event is identified by its session, its seq and its *content id* (the SHA-256 of its
canonical JSON): the log takes an event once, so a batch sent again after a lost answer adds
nothing, and an event whose seq the log holds with other content is refused as a conflict, never
written next to it. Batches are bounded (:data:`MAX_SHIP_EVENTS`, :data:`MAX_SHIP_BYTES`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from protocol.canonical import canonical_hash
from protocol.errors import ConflictError

EVENTS_ROOT_SUFFIX: Final = ".events"
"""The shipped logs of a database live in ``<database><suffix>/<session>/events.jsonl``."""

MAX_SHIP_EVENTS: Final = 256
"""Most events in one shipment call (a backlog goes in several calls)."""

MAX_SHIP_BYTES: Final = 4 * 1024 * 1024
"""Most bytes of event JSON in one shipment call (one event larger than this goes alone)."""


def shipped_events_root(db_path: str) -> str:
    """Root of the node-local logs of the database at ``db_path`` (a path on the data node)."""
    return f"{db_path}{EVENTS_ROOT_SUFFIX}"


def shipped_events_path(db_path: str, session_id: str) -> str:
    """The node-local log of one session (``events_root_of`` finds its root from it)."""
    return f"{shipped_events_root(db_path)}/{session_id}/events.jsonl"


def event_content_id(event: Mapping[str, Any]) -> str:
    """Content id of one event (its JSON form, as validated): equal content, equal id."""
    return canonical_hash(dict(event))


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What one shipment did to a session's log (counts only, never content)."""

    appended: int
    """Events written."""
    duplicates: int
    """Events the log already held with the same content (a batch sent again)."""
    last_seq: int
    """Seq of the log's last event after the call."""

    def as_dict(self) -> dict[str, int]:
        """JSON form (a link answer)."""
        return {"appended": self.appended, "duplicates": self.duplicates, "last_seq": self.last_seq}


class EventLogConflictError(ConflictError):
    """A shipped event's seq is in the log with other content, or falls in a hole the log skipped.

    The log is append-only: such an event is never written, and nothing of its batch is.
    """

    def __init__(self, session_id: str, seq: int) -> None:
        self.session_id = session_id
        self.seq = seq
        super().__init__(
            f"shipped event seq {seq} of session {session_id!r} conflicts with the node-local log "
            "(another event holds that seq, or the log passed it); nothing of the batch was written"
        )

    def __reduce__(self) -> tuple[type[EventLogConflictError], tuple[str, int]]:
        return type(self), (self.session_id, self.seq)  # crosses process boundaries


def batch_size(
    sizes: Sequence[int], max_events: int = MAX_SHIP_EVENTS, max_bytes: int = MAX_SHIP_BYTES
) -> int:
    """How many of the events (their JSON sizes, in order) the next call carries: at least one,
    at most ``max_events``, and no more bytes than ``max_bytes`` unless the first alone is larger."""
    taken, total = 0, 0
    for size in sizes[:max_events]:
        if taken and total + size > max_bytes:
            break
        taken, total = taken + 1, total + size
    return taken
