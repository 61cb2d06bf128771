"""Placements name one node, requests one choice, and the errors survive a trip between processes."""

from __future__ import annotations

import pickle

import pytest
from pydantic import ValidationError

from protocol.placement import (
    AgentNode,
    DataNodeLostError,
    DataPlacement,
    PlacementConflictError,
    PlacementRequest,
)
from protocol.shipping import EventLogConflictError


@pytest.mark.parametrize(
    "fields",
    [{}, {"node": "a", "resource": "r"}, {"node": "a", "node_id": "ab" * 28}, {"node": "has space"}],
    ids=["none", "node-and-resource", "node-and-id", "bad-name"],
)
def test_a_placement_names_exactly_one_valid_node(fields: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        DataPlacement(**fields)


def test_an_agent_node_places_by_label_when_it_has_one_else_by_id() -> None:
    assert AgentNode(node_id="ab" * 28, label="gpu").placement() == DataPlacement(node="gpu")
    assert AgentNode(node_id="ab" * 28).placement() == DataPlacement(node_id="ab" * 28)


def test_a_request_asks_for_a_node_or_a_resource_not_both() -> None:
    with pytest.raises(ValidationError):
        PlacementRequest(db_path="/d/om.sqlite", node="a", resource="r")
    assert PlacementRequest(db_path="/d/om.sqlite", resource="r").explicit == DataPlacement(resource="r")
    assert PlacementRequest(db_path="/d/om.sqlite").explicit is None


@pytest.mark.parametrize(
    "error",
    [
        PlacementConflictError("/d/om.sqlite", DataPlacement(node="a"), DataPlacement(node="b")),
        DataNodeLostError("/d/om.sqlite", DataPlacement(resource="r")),
        EventLogConflictError("s1", 7),
    ],
    ids=type,
)
def test_errors_with_fields_of_their_own_survive_pickling(error: Exception) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)


def test_a_lost_data_node_is_a_retryable_failure_with_a_cause_and_a_fix() -> None:
    from actors.worker import failure_reason
    from protocol.outcomes import REASON_DATA_NODE_LOST, explain_failure

    error = DataNodeLostError("/d/om.sqlite", DataPlacement(node="a"))
    assert failure_reason(error) == (REASON_DATA_NODE_LOST, True)
    cause, fix = explain_failure(REASON_DATA_NODE_LOST)
    assert "node" in cause and "same disk" in fix
