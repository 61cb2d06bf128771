"""Stateful property test of shipping events into a node-local log: nothing lost, nothing doubled,
order kept, whatever the network does with the shipments.

An agent appends events to its session (with holes in the seqs, as hosts may leave); its sender
ships the events past its watermark in bounded batches (:func:`protocol.shipping.batch_size`) to a
real :class:`persistence.files.events_log.EventLog` through :func:`actors.store.events_log.append_shipped`.
Any shipment may be lost on the way, applied with its answer lost (the sender then sends it again),
or kept by the network and delivered later, after newer ones (a stale retry). A sender may also
restart and learn its watermark from the log's tail.

A forged batch (an event at a logged seq with other content, or one falling into a hole the log
passed) is refused whole. Checked after every step: the log holds a prefix of the agent's events,
each once, in seq order, with the agent's content. At the end, once the network delivers, the log
holds every event.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.store.events_log import append_shipped
from persistence.files.events_log import EventLog
from persistence.files.events_reader import iter_unredacted_events
from protocol.shipping import EventLogConflictError, batch_size

SESSION = "s-1"


def _event(seq: int, text: str) -> dict[str, Any]:
    return {
        "schema_version": "1.0",
        "run_id": SESSION,
        "seq": seq,
        "turn_no": seq // 3,
        "type": "llm_step_completed",
        "payload": {"text": text},
        "ts": "2026-01-01T00:00:00+00:00",
    }


class ShippingModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="omray-ship-"))
        self.log = EventLog(self.directory / "om.sqlite.events")
        self.agent: list[dict[str, Any]] = []  # the agent's own events file
        self.next_seq = 1
        self.watermark = 0  # the sender's: what the log is known to hold
        self.delayed: list[list[dict[str, Any]]] = []  # shipments the network holds back

    def teardown(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def _batch(self, max_events: int) -> list[dict[str, Any]]:
        pending = [event for event in self.agent if event["seq"] > self.watermark]
        sizes = [len(str(event)) for event in pending]
        return pending[: batch_size(sizes, max_events=max_events, max_bytes=600)]

    @rule(count=st.integers(1, 5), gap=st.integers(0, 2), text=st.text(max_size=40))
    def agent_writes(self, count: int, gap: int, text: str) -> None:
        for _ in range(count):
            self.next_seq += gap
            self.agent.append(_event(self.next_seq, f"{text}-{self.next_seq}"))
            self.next_seq += 1

    @precondition(lambda self: any(e["seq"] > self.watermark for e in self.agent))
    @rule(fate=st.sampled_from(["delivered", "lost", "answer_lost", "held"]), size=st.integers(1, 4))
    def sender_ships(self, fate: str, size: int) -> None:
        batch = self._batch(size)
        if fate == "lost":
            return
        if fate == "held":
            self.delayed.append(batch)
            return
        result = append_shipped(self.log, SESSION, batch)
        assert result.appended + result.duplicates == len(batch)
        if fate == "delivered":
            self.watermark = result.last_seq

    @precondition(lambda self: bool(self.delayed))
    @rule(index=st.integers(0, 10))
    def network_delivers_late(self, index: int) -> None:
        batch = self.delayed.pop(index % len(self.delayed))
        result = append_shipped(self.log, SESSION, batch)
        assert result.appended + result.duplicates == len(batch)

    @precondition(lambda self: self.log.tail(SESSION) > 0)
    @rule(data=st.data())
    def a_conflicting_batch_is_refused_whole(self, data: st.DataObject) -> None:
        """An event at a logged seq with other content, or one that would fill a hole the log
        passed: refused as a conflict, and nothing of its batch (not even its new events) written."""
        tail = self.log.tail(SESSION)
        seq = data.draw(st.integers(1, tail))
        before = self.log.path(SESSION).read_bytes()
        forged = [_event(seq, "not what the agent wrote"), _event(tail + 1000, "new")]
        with pytest.raises(EventLogConflictError):
            append_shipped(self.log, SESSION, forged)
        assert self.log.path(SESSION).read_bytes() == before

    @rule()
    def sender_restarts(self) -> None:
        self.log = EventLog(self.log.root)  # a new StoreActor life: no cached tail
        self.watermark = self.log.tail(SESSION)

    @invariant()
    def log_is_a_prefix_of_the_agents_events(self) -> None:
        logged = [
            event.model_dump(mode="json")
            for event in iter_unredacted_events(self.log.path(SESSION), 1, 10**9)
        ]
        assert logged == self.agent[: len(logged)]

    def teardown_check(self) -> None:
        while any(event["seq"] > self.watermark for event in self.agent):
            self.watermark = append_shipped(self.log, SESSION, self._batch(4)).last_seq
        for batch in self.delayed:
            append_shipped(self.log, SESSION, batch)
        logged = [
            event.model_dump(mode="json")
            for event in iter_unredacted_events(self.log.path(SESSION), 1, 10**9)
        ]
        assert logged == self.agent


class ShippingModelWithFinalCheck(ShippingModel):
    def teardown(self) -> None:
        try:
            self.teardown_check()
        finally:
            super().teardown()


TestEventShipping = ShippingModelWithFinalCheck.TestCase
TestEventShipping.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
