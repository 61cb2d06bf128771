"""Where a pool member asks Ray to put it (``cluster.named_actors.spread_placement``), without Ray."""

from __future__ import annotations

from typing import Any

import pytest

from cluster import named_actors
from cluster.named_actors import SPREAD_MEMORY_BYTES, spread_placement

N1, N2, N3, N4 = (digit * 56 for digit in "1234")
"""Node ids (Ray checks they are 28 bytes of hex)."""


def _node(label: str, node_id: str, *, alive: bool = True, memory: float | None = 8e9) -> dict[str, Any]:
    resources = {"CPU": 1.0} if memory is None else {"CPU": 1.0, "memory": memory}
    return {"NodeID": node_id, "Alive": alive, "Labels": {"omray-node": label}, "Resources": resources}


@pytest.fixture
def nodes(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    monkeypatch.setattr(named_actors.ray, "nodes", lambda: found)
    return found


def test_members_go_round_robin_over_the_live_nodes_by_label(nodes: list[dict[str, Any]]) -> None:
    nodes += [_node("w", N1), _node("a", N2), _node("c", N3, alive=False), _node("b", N4)]
    chosen = [spread_placement(index)["scheduling_strategy"] for index in range(5)]
    assert [strategy.node_id for strategy in chosen] == [N2, N4, N1, N2, N4]
    assert all(strategy.soft for strategy in chosen)  # a member whose node dies moves to another


def test_a_member_asks_for_a_byte_of_memory_where_the_node_has_some(nodes: list[dict[str, Any]]) -> None:
    # Ray ignores the soft affinity of an actor that asks for nothing: the byte is what makes it count.
    nodes += [_node("a", N1), _node("b", N2, memory=None), _node("c", N3, memory=0.0)]
    assert spread_placement(0)["memory"] == SPREAD_MEMORY_BYTES
    # A node that offers no memory would never take the member: it asks for nothing there.
    assert "memory" not in spread_placement(1) and "memory" not in spread_placement(2)
