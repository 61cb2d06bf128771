"""Memory across machines (issue 43) on a ``ray.cluster_utils.Cluster``, run in a subprocess.

Ray allows one cluster connection per driver process and the session cluster already holds this
one, so the scenario (``multinode_scenario.py``) builds and tears down its own cluster elsewhere:
the head ``c`` (agents, queue), data nodes ``a`` and ``b``, and ``w`` without data; each node with
a folder of its own as its disk (a path of another node's folder cannot be opened there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scenario() -> dict[str, Any]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)  # the scenario must build its own cluster, never join the session one
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.multinode_scenario"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # Ray prints a killed raylet's last log lines to the driver's stdout: the answer is the last JSON line.
    answer = next(line for line in reversed(done.stdout.splitlines()) if line.startswith('{"'))
    result: dict[str, Any] = json.loads(answer)
    return result


_POOLS = ("observer", "reflector", "indexer")
_SPREAD_ORDER = ("a", "b", "c", "w")
"""The nodes by their ``omray-node`` label: the order the pools' members are spread in."""


def _by_role(nodes: dict[str, str]) -> dict[str, set[str]]:
    by_role: dict[str, set[str]] = {}
    for name, node in nodes.items():
        by_role.setdefault(name.split(".")[1], set()).add(node)
    return by_role


def test_each_database_lives_on_its_node_and_the_workers_spread(scenario: dict[str, Any]) -> None:
    nodes = scenario["actor_nodes"]
    by_role = _by_role(nodes)
    assert by_role["queue"] == {"c"}
    # One StoreActor and one ReaderActor per project, each on its project's data node.
    assert by_role["store"] == {"a", "b"} and by_role["reader"] == {"a", "b"}
    for name, node in nodes.items():
        if ".reader." in name:
            assert nodes[name.replace(".reader.", ".store.")] == node
    # The pools spread over the nodes: member i of each pool on the i-th node by label, round robin
    # (a soft affinity, so each member sits where it prefers while that node lives).
    at_start = scenario["worker_nodes_at_start"]
    members = {name: node for name, node in at_start.items() if name.split(".")[1] in _POOLS}
    assert len([name for name in members if ".observer." in name]) == 4
    assert members == {name: _SPREAD_ORDER[int(name.split(".")[2]) % 4] for name in members}
    assert "w" not in set(nodes.values())  # after w was killed, its workers run elsewhere


def test_events_travel_to_the_data_nodes(scenario: dict[str, Any]) -> None:
    # The agents on ``c`` shipped every session's events into a log beside its database.
    assert scenario["shipped_logs"] == [
        f"{node}/spread-{project}/om.sqlite.events/{session}/events.jsonl"
        for project, node in (("p1", "a"), ("p2", "b"))
        for session in ("s1", "s2", *(("x1",) if project == "p2" else ()))
    ]


def test_every_turn_is_observed_once_and_memory_equals_a_one_node_run(scenario: dict[str, Any]) -> None:
    # ``w`` (no data) was SIGKILLed, raylet included, while one of its workers ran a job.
    assert scenario["killed_w"] and scenario["killed_w_mid_job"]
    assert scenario["counts"]["failed"] == 0 and scenario["counts"]["pending"] == 0
    assert scenario["reference_counts"]["failed"] == 0
    for project in ("p1", "p2"):
        assert scenario["coverage"][project] == scenario["last_seqs"]  # every event covered
        memory = scenario["memory"][project]
        assert memory["observations"] > 0 and memory["reflections"] > 0
        # clean, complete, of the rows the database holds, matching its manifest
        assert [row[1:] for row in memory["index_state"]] == [[0, 1, True, True]]
        assert memory["differing"] == []  # identical to the one-node run: nothing lost or doubled


def test_search_and_recall_from_every_node_answer_as_a_local_read(scenario: dict[str, Any]) -> None:
    reads = scenario["reads"]
    assert sorted(reads) == [f"{p}@{n}" for p in ("p1", "p2") for n in ("a", "b", "c")]  # w: killed
    for where, read in reads.items():
        project, node = where.split("@")
        # Local on the project's data node, through its ReaderActor from every other node.
        assert read["local"] is (node == {"p1": "a", "p2": "b"}[project])
        assert all(read["answers_ok"]), where
        assert all(found > 0 for found in read["found"]), where  # hits, and recalled events
        # The same answers (exact, hybrid, recall) as the one-node run's agent read on its own disk.
        assert read["same_as_one_node_run"], where
        # The compaction summary, /om-view and the cost report: as the data node reads them.
        assert read["pages_as_on_its_data_node"], where
        assert read["compaction"] == ["replace_summary", "replace_summary"], where


def test_forget_from_another_node_removes_the_memory_there(scenario: dict[str, Any]) -> None:
    forgotten = scenario["forget_from_afar"]
    assert forgotten["local"] is False  # the agent's node is not the database's
    assert forgotten["complete"] and forgotten["forgotten"]
    assert forgotten["found_after"] is False


def test_a_lost_data_node_fails_its_jobs_with_that_cause_and_they_resume_when_it_returns(
    scenario: dict[str, Any],
) -> None:
    loss = scenario["data_node_loss"]
    assert loss["failure_reasons"] == ["data_node_lost"]  # the clear cause, and no other
    assert loss["p1_failures"] == 0  # the other project's node was fine: nothing failed there
    # The agent's hook returned by its deadline while the node was away (margin for a loaded machine).
    assert loss["hook_s"] <= loss["hook_timeout_s"] + 2.0
    # Back with the same disk: the given-up jobs ran again and every event of the session is covered.
    assert loss["covered"] == loss["last_seq"]
