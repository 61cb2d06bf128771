"""The runtime on a two-node ``ray.cluster_utils.Cluster``; run as a script, prints one JSON object.

Ray allows one cluster connection per driver process, so ``test_multinode.py`` runs this module in
a subprocess instead of on the shared session cluster. The driver runs on the head node; the
*data node* (the one that holds the databases and events files, where ``omray up`` would run) is
the second node. The same sample sessions are observed, reflected and indexed twice with the
scripted model: once with the runtime on the data node, once with it on the driver's node. The
memory must be the same, and every actor of the first run must sit on the data node.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray
from ray.cluster_utils import Cluster
from ray.util.state import list_actors

from cluster.client import OmrayClient
from cluster.commands.demo_session import commit_turn, demo_session
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime, remove_runtime
from cluster.naming import RuntimeNames
from cluster.pools import PoolSizes
from testkit.memory_snapshot import MemorySnapshot, compare_memory, memory_snapshot
from testkit.scripted_models import ScriptedMemoryModel
from testkit.scripted_server import ScriptedServer

SESSIONS = ("mn-a", "mn-b")
"""Sessions observed in each run."""
DATA_NODE_RESOURCE = "omray_data_node"
"""Custom resource only the second node has."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _settings(project: Path, server: ScriptedServer) -> dict[str, Any]:
    return {
        "model": "scripted/memory",
        "observer": {"observe_after_tokens": 0},  # every turn end observes
        "providers": {"scripted": {"base_url": server.base_url, "context_window": 16384}},
        "storage": {"database": str(project / "om.sqlite")},
        "reflector": {"reflect_after_observation_tokens": 150},
        "pools": {"observations_max_tokens": 100},
        "semantic": {"embedding_api": {"base_url": server.base_url, "model_id": "hash-embedder"}},
    }


def _drive(client: OmrayClient, project: Path) -> None:
    """Append each session's turns and call the after-turn hook, as an agent would.

    Each turn is left to finish before the next one, so both runs see the same jobs (no
    coalescing that depends on timing) and their memory can be compared row for row.
    """
    for session_id in SESSIONS:
        client.session_started(session_id)
        events_path = project / session_id / "events.jsonl"
        for turn in demo_session(session_id):
            client.after_turn_commit(commit_turn(events_path, turn), events_path=events_path)
            if not client.wait_idle(timeout_s=60):
                raise RuntimeError("the queue did not drain")


def _run(
    project: Path, server: ScriptedServer, data_node: str, tag: str
) -> tuple[MemorySnapshot, dict[str, str], dict[str, Any], str]:
    names = RuntimeNames(prefix=f"mn{tag}{uuid.uuid4().hex[:6]}")
    project.mkdir(parents=True)
    try:
        ensure_runtime(
            names,
            queue_db=str(project / "queue.sqlite"),
            handler_paths=DEFAULT_HANDLERS,
            retry_base_delay_s=0.1,
            pools=PoolSizes(observers=2, reflectors=1, indexers=1),
            data_node_id=data_node,
        )
        client = OmrayClient(names, settings=_settings(project, server), cwd=project)
        _drive(client, project)
        if not client.wait_idle(timeout_s=150):
            raise RuntimeError("the queue did not drain")
        for session_id in SESSIONS:  # a last batch after the final observations
            client.session_started(session_id)
        if not client.wait_idle(timeout_s=60):
            raise RuntimeError("the queue did not drain")
        search = client.memory_search({"query": "billing tests", "limit": 5})
        actor_nodes = {
            actor.name: actor.node_id
            for actor in list_actors(filters=[("state", "=", "ALIVE")], limit=1000)
            if actor.name and actor.name.startswith(names.prefix)
        }
        counts = client.job_counts()
        return memory_snapshot(project / "om.sqlite"), actor_nodes, counts, str(search.get("ok"))
    finally:
        remove_runtime(names)


def run_scenario(workdir: Path) -> dict[str, Any]:
    """Build the cluster, run both placements, report placement and whether memory matched."""
    started = time.monotonic()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": True,  # the state API (``list_actors``) is served by the dashboard
            "dashboard_host": "127.0.0.1",
            "dashboard_port": _free_port(),
            "object_store_memory": 128 * 1024 * 1024,
        },
    )
    try:
        cluster.add_node(num_cpus=1, resources={DATA_NODE_RESOURCE: 1}, object_store_memory=128 * 1024 * 1024)
        cluster.wait_for_nodes()
        ray.init(
            address=cluster.address, namespace="omray", logging_level=logging.WARNING, log_to_driver=False
        )
        try:
            driver_node = ray.get_runtime_context().get_node_id()
            nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
            data_node = next(
                node["NodeID"] for node in nodes if node["Alive"] and node["NodeID"] != driver_node
            )
            with ScriptedServer(chat_default=ScriptedMemoryModel()) as server:
                remote, remote_nodes, remote_counts, remote_search = _run(
                    workdir / "remote", server, data_node, "r"
                )
                local, _local_nodes, local_counts, _ = _run(workdir / "local", server, driver_node, "l")
            return {
                "driver_node": driver_node,
                "data_node": data_node,
                "actor_nodes": remote_nodes,
                "counts": remote_counts,
                "local_counts": local_counts,
                "search_ok": remote_search,
                "memory_identical": compare_memory(remote, local).identical,
                "observations": remote.count("observations"),
                "reflections": remote.count("reflections"),
                "index_state": [
                    [dirty, complete] for _, dirty, complete, *_ in remote.sections["index_state"]
                ],
                "seconds": round(time.monotonic() - started, 1),
            }
        finally:
            ray.shutdown()
    finally:
        cluster.shutdown()  # type: ignore[no-untyped-call]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="omray-multinode-") as tmp:
        result = run_scenario(Path(tmp))
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
