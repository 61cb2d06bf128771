"""Stateful property test of database placements: chosen once, durable, the same for everyone.

Agents on several nodes (some with an ``omray-node`` label) open databases, with settings that
name a node or a resource or neither; jobs name databases nobody placed; the queue restarts at any
moment (a new registry over the same real queue database); a placement write may fail. Checked:

- every answer for a database is the placement recorded first, whoever asks and from where;
- what the queue database holds is exactly what was answered (a failed write leaves nothing);
- a request whose settings ask for another node than the recorded one is refused and changes nothing;
- the first placement is the settings' choice, else the asking agent's node (its label when it has
  one), else the queue's node.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from actors.queue.placement import PlacementRegistry
from persistence.writers.queue_store import QueueStore
from protocol.errors import StorageError
from protocol.placement import AgentNode, DataPlacement, PlacementConflictError, PlacementRequest

NODES = (
    AgentNode(node_id="a" * 56, label="node-a"),
    AgentNode(node_id="b" * 56, label=None),
    AgentNode(node_id="c" * 56, label="node-c"),
)
QUEUE_NODE = AgentNode(node_id="d" * 56, label="head")
DATABASES = ("/data/p1/om.sqlite", "/data/p2/om.sqlite", "/data/p3/om.sqlite")


class FlakyStore:
    """The real queue store; the next placement write fails when told to."""

    def __init__(self, store: QueueStore) -> None:
        self.store = store
        self.fail_next = False

    def record_placement(self, db_path: str, placement_json: str, recorded_at: str) -> str:
        if self.fail_next:
            self.fail_next = False
            raise StorageError("disk full")
        return self.store.record_placement(db_path, placement_json, recorded_at)

    def placements(self) -> dict[str, str]:
        return self.store.placements()


class PlacementModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="omray-placement-"))
        self.store = FlakyStore(QueueStore(self.directory / "queue.sqlite"))
        self.registry = PlacementRegistry(self.store, QUEUE_NODE, lambda: "2026-01-01T00:00:00+00:00")
        self.answered: dict[str, DataPlacement] = {}

    def teardown(self) -> None:
        self.store.store.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _expected_first(self, request: PlacementRequest) -> DataPlacement:
        if request.explicit is not None:
            return request.explicit
        agent = request.agent or QUEUE_NODE
        return DataPlacement(node=agent.label) if agent.label else DataPlacement(node_id=agent.node_id)

    @rule(
        db=st.sampled_from(DATABASES),
        agent=st.sampled_from((*NODES, None)),
        asked=st.sampled_from((None, ("node", "node-a"), ("node", "gpu"), ("resource", "omray_data"))),
        write_fails=st.booleans(),
    )
    def someone_opens_a_database(
        self, db: str, agent: AgentNode | None, asked: tuple[str, str] | None, write_fails: bool
    ) -> None:
        kind, value = asked or ("", "")
        request = PlacementRequest(
            db_path=db,
            agent=agent,
            node=value if kind == "node" else None,
            resource=value if kind == "resource" else None,
        )
        self.store.fail_next = write_fails
        before = self.store.placements()
        recorded = self.answered.get(db)
        if recorded is not None and request.explicit not in (None, recorded):
            with pytest.raises(PlacementConflictError):
                self.registry.claim(request)
            assert self.store.placements() == before
            return
        if recorded is None and write_fails:
            with pytest.raises(StorageError):
                self.registry.claim(request)
            assert self.store.placements() == before
            return
        answer = self.registry.claim(request)
        self.store.fail_next = False
        if recorded is None:
            assert answer == self._expected_first(request)
            self.answered[db] = answer
        assert answer == self.answered[db]

    @rule()
    def the_queue_restarts(self) -> None:
        self.registry = PlacementRegistry(self.store, QUEUE_NODE, lambda: "2026-01-01T00:00:00+00:00")

    @invariant()
    def the_durable_record_is_what_was_answered(self) -> None:
        stored = {db: DataPlacement.model_validate_json(text) for db, text in self.store.placements().items()}
        assert stored == self.answered


TestPlacements = PlacementModel.TestCase
TestPlacements.settings = settings(
    max_examples=30, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_first_requests_from_many_nodes_at_once_get_one_placement(tmp_path: Path) -> None:
    store = QueueStore(tmp_path / "queue.sqlite")
    registry = PlacementRegistry(store, QUEUE_NODE, lambda: "2026-01-01T00:00:00+00:00")
    answers: list[DataPlacement] = []
    barrier = threading.Barrier(12)

    def claim(agent: AgentNode) -> None:
        barrier.wait()
        answers.append(registry.claim(PlacementRequest(db_path=DATABASES[0], agent=agent)))

    threads = [threading.Thread(target=claim, args=(NODES[i % 3],)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(answers)) == 1 and len(answers) == 12
    assert store.placements() == {DATABASES[0]: answers[0].model_dump_json()}
    store.close()
