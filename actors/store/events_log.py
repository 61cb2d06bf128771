"""Which shipped events a session's node-local log takes (pure; the StoreActor writes them).

The log is append-only and its seqs increase strictly, like any ``events.jsonl``. A shipment is a
batch of events in increasing seq order, each with its content id
(:func:`protocol.shipping.event_content_id`). :func:`plan_append` decides, with no I/O, which of
them to write: those past the log's last seq; an event at or below it must be in the log with the
same content (a batch sent again after a lost answer, or a stale retry arriving after a newer
batch), and is then skipped. Anything else is a conflict and nothing of the batch is written.

So whatever the sender retries, duplicates or delivers late, the log holds each event once, in
seq order, and never an event the agent did not write at that seq.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from protocol.errors import InvalidPayloadError
from protocol.events import InvalidSessionEventError, SessionEvent
from protocol.shipping import AppendResult, EventLogConflictError, event_content_id


@dataclass(frozen=True, slots=True)
class AppendPlan:
    """What to do with one shipment."""

    write: tuple[int, ...]
    """Positions (in the shipment) of the events to append, in order."""
    duplicates: int
    """Events the log already holds with the same content."""
    last_seq: int
    """The log's last seq once the writes are done."""


def plan_append(
    session_id: str,
    last_seq: int,
    logged: Mapping[int, str],
    incoming: Sequence[tuple[int, str]],
) -> AppendPlan:
    """The plan for ``incoming`` (``(seq, content id)`` per event) against a log whose last seq is
    ``last_seq`` and whose events at the seqs of ``incoming`` that are ``<= last_seq`` have the
    content ids ``logged`` (a seq missing there is a hole of the log).

    Raises :class:`InvalidPayloadError` when ``incoming`` is not strictly increasing, and
    :class:`EventLogConflictError` for an event that the log holds with other content or that would
    go into one of its holes; either way nothing is written.
    """
    previous = 0
    for seq, _ in incoming:
        if seq <= previous:
            raise InvalidPayloadError("shipped events must have strictly increasing seqs")
        previous = seq
    write: list[int] = []
    duplicates = 0
    end = last_seq
    for position, (seq, content_id) in enumerate(incoming):
        if seq > end:
            write.append(position)
            end = seq
            continue
        if logged.get(seq) != content_id:
            raise EventLogConflictError(session_id, seq)
        duplicates += 1
    return AppendPlan(tuple(write), duplicates, end)


class EventLogPort(Protocol):
    """The node-local logs of one database (:class:`persistence.files.events_log.EventLog`)."""

    def tail(self, session_id: str) -> int: ...
    def content_ids(self, session_id: str, start_seq: int, end_seq: int) -> dict[int, str]: ...
    def write(self, session_id: str, events: Sequence[Mapping[str, Any]], last_seq: int) -> None: ...


def append_shipped(log: EventLogPort, session_id: str, events: Sequence[Mapping[str, Any]]) -> AppendResult:
    """Append the shipped ``events`` (JSON objects, increasing seqs) the session's log lacks.

    Raises :class:`InvalidPayloadError` (a malformed event, one of another session, seqs not
    increasing) or :class:`EventLogConflictError`; nothing is written then.
    """
    forms: list[dict[str, Any]] = []
    incoming: list[tuple[int, str]] = []
    for event in events:
        try:
            model = SessionEvent.parse(event)
        except InvalidSessionEventError as exc:
            raise InvalidPayloadError(f"a shipped event is invalid: {exc.reason}") from None
        if model.run_id != session_id:
            raise InvalidPayloadError("a shipped event belongs to another session")
        form = model.model_dump(mode="json")
        forms.append(form)
        incoming.append((model.seq, event_content_id(form)))
    last_seq = log.tail(session_id)
    old = [seq for seq, _ in incoming if seq <= last_seq]
    # A batch sent again: compare with what the log holds (rare, so reading that range is fine).
    logged = log.content_ids(session_id, min(old), last_seq) if old else {}
    plan = plan_append(session_id, last_seq, logged, incoming)
    log.write(session_id, [forms[position] for position in plan.write], plan.last_seq)
    return AppendResult(len(plan.write), plan.duplicates, plan.last_seq)
