"""The runtime on a two-node ``ray.cluster_utils.Cluster``; run as a script, prints one JSON object.

Ray allows one cluster connection per driver process, so ``test_multinode.py`` runs this module in
a subprocess instead of on the shared session cluster. The head node holds the queue database; the
second node has a custom resource that two of the three workers ask for, so jobs cross nodes.
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

from actors.bench_handlers import LEDGER_ENV, for_every_role, read_ledger
from cluster.client import OmrayClient
from cluster.naming import RuntimeNames
from cluster.runtime import ROLE_ACTORS, RayWorkerContext, ensure_runtime, remove_runtime
from protocol.jobs import (
    OBSERVE_BOUNDARY_HANDLER,
    SEMANTIC_INDEX_HANDLER,
    JobEnvelope,
)

JOBS = 30
"""Jobs dispatched in the scenario."""
WORKER_NODE_RESOURCE = "omray_worker_node"
"""Custom resource only the second node has."""
NOOP = "actors.bench_handlers:noop"
HANDLERS = for_every_role(NOOP)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _job(run_id: str, n: int) -> JobEnvelope:
    payload: dict[str, Any] = {"run_id": run_id, "db_path": "/nonexistent/om.sqlite"}
    if n % 2:
        payload |= {
            "kind": "observe_boundary",
            "terminal_end_seq": n + 1,
            "terminal_status": "completed",
            "renderer_version": "1",
            "observer_schema_version": "1",
            "events_path": "/nonexistent/events.jsonl",
        }
    else:
        payload |= {"kind": "semantic_index"}
    return JobEnvelope.model_validate({"job_id": f"mn-{n:04d}", "correlation_id": run_id, "payload": payload})


def _place_worker_on_second_node(names: RuntimeNames, actor_name: str, handler_id: str, ledger: str) -> None:
    """Create a named worker that only the second node can host; ``ensure_runtime`` then reuses it."""
    ray.remote(ROLE_ACTORS[handler_id]).options(
        name=actor_name,
        namespace=names.namespace,
        lifetime="detached",
        max_restarts=-1,
        max_task_retries=0,
        num_cpus=0,
        resources={WORKER_NODE_RESOURCE: 0.1},
        runtime_env={"env_vars": {LEDGER_ENV: ledger}},
    ).remote(RayWorkerContext(names, ray.get_runtime_context().get_node_id()), NOOP)


def run_scenario(workdir: Path) -> dict[str, Any]:
    """Build the cluster, run the jobs, report where everything ran and in what order jobs started."""
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
        cluster.add_node(
            num_cpus=1, resources={WORKER_NODE_RESOURCE: 1}, object_store_memory=128 * 1024 * 1024
        )
        cluster.wait_for_nodes()
        ray.init(
            address=cluster.address, namespace="omray", logging_level=logging.WARNING, log_to_driver=False
        )
        head_node = ray.get_runtime_context().get_node_id()  # the driver's node holds the files
        names = RuntimeNames(prefix=f"mn{uuid.uuid4().hex[:8]}")
        ledger = str(workdir / "ledger.jsonl")
        queue_db = str(workdir / "queue.sqlite")
        try:
            _place_worker_on_second_node(names, names.observer, OBSERVE_BOUNDARY_HANDLER, ledger)
            _place_worker_on_second_node(names, names.indexer, SEMANTIC_INDEX_HANDLER, ledger)
            ensure_runtime(
                names,
                queue_db=queue_db,
                handler_paths=HANDLERS,
                worker_env={LEDGER_ENV: ledger},
                retry_base_delay_s=0.05,
            )
            client = OmrayClient(names)
            job_ids = [client.dispatch(_job("mn-session", n)) for n in range(JOBS)]
            idle = client.wait_idle(timeout_s=90)
            starts = [line for line in read_ledger(ledger) if line["event"] == "start"]
            actor_nodes = {
                actor.name: actor.node_id
                for actor in list_actors(filters=[("state", "=", "ALIVE")], limit=1000)
                if actor.name and actor.name.startswith(names.prefix)
            }
            nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
            other_nodes = [node["NodeID"] for node in nodes if node["Alive"] and node["NodeID"] != head_node]
            return {
                "jobs": JOBS,
                "idle": idle,
                "counts": client.job_counts(),
                "fifo": [line["job_id"] for line in starts] == job_ids,
                "executions": len(starts),
                "nodes": len(other_nodes) + 1,
                "head_node": head_node,
                "second_node": other_nodes[0] if other_nodes else None,
                "store_node": actor_nodes.get(names.store(queue_db)),
                "queue_node": actor_nodes.get(names.queue),
                "actor_nodes": actor_nodes,
                "worker_pids": sorted({int(line["pid"]) for line in starts}),
                "seconds": round(time.monotonic() - started, 1),
            }
        finally:
            remove_runtime(names)
            ray.shutdown()
    finally:
        cluster.shutdown()  # type: ignore[no-untyped-call]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="omray-multinode-") as tmp:
        result = run_scenario(Path(tmp))
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
