"""Where each memory database lives (issue 43 item 2), on the shared one-node cluster.

The first client to use a database places it (its own node by default), the queue records it in
its own file before answering, every later request gets the same placement (also after the queue
actor is killed and restarts), a request naming another node is refused, and a database a job
names before any agent placed it goes to the queue's node.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

from cluster.client import OmrayClient
from cluster.data_node import placement_of, this_node
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.naming import RuntimeNames
from cluster.pools import PoolSizes
from persistence.writers.queue_store import QueueStore
from protocol.placement import DataPlacement, PlacementConflictError, PlacementRequest

from .conftest import assert_eventually

pytestmark = pytest.mark.integration


def test_a_database_is_placed_once_durably_and_refuses_another_node(
    names: RuntimeNames, tmp_path: Path
) -> None:
    queue_db = tmp_path / "queue.sqlite"
    queue = ensure_runtime(
        names, queue_db=str(queue_db), handler_paths=DEFAULT_HANDLERS, pools=PoolSizes(observers=1)
    )
    client = OmrayClient(
        names, settings={"storage": {"database": str(tmp_path / "p" / "om.sqlite")}}, cwd=tmp_path
    )
    assert client.database_is_local() is True  # placed on this (the agent's) node
    db = str(client.db_path.resolve())
    here = this_node().placement()
    assert DataPlacement.model_validate(ray.get(queue.placements.remote())[db]) == here
    with QueueStore(queue_db) as store:  # durable before it was answered
        assert DataPlacement.model_validate_json(store.placements()[db]) == here

    ray.kill(queue, no_restart=False)  # the queue restarts and reads its placements back
    assert_eventually(lambda: _answers(queue), timeout_s=60, message="the queue did not restart")
    assert DataPlacement.model_validate(ray.get(queue.placements.remote())[db]) == here

    elsewhere = PlacementRequest(db_path=db, node="some-other-node")
    with pytest.raises(PlacementConflictError):
        try:
            ray.get(queue.place_database.remote(elsewhere.model_dump(mode="json")))
        except ray.exceptions.RayTaskError as exc:
            raise exc.cause from None

    unplaced = str(tmp_path / "q" / "om.sqlite")  # named by a job before any agent used it
    assert placement_of(names, unplaced) == this_node().placement()  # the queue's node, here this one


def _answers(queue: object) -> bool:
    try:
        ray.get(queue.ping.remote(), timeout=5)  # type: ignore[attr-defined]
        return True
    except ray.exceptions.RayError:
        return False
