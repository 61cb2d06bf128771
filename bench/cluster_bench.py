"""``omray bench cluster``: the runtime spread over several nodes, next to one node, back to back.

One ``ray.cluster_utils.Cluster`` of ``--nodes`` nodes on this machine: the head ``n0`` (agents and
queue) and ``n1``..: each a data node of one project (``storage.node``), every node with a folder
of its own as its disk (the per-node guard of :mod:`persistence.files.node_disk` is on). Agents on the
head drive every session of every project, turn by turn, with the scripted model (a fixed latency
per call, as a model endpoint has) and the built-in offline embedder (real CPU work), so their
events travel to the data nodes and the worker pools spread over all nodes. The same workload then
runs with everything on the head (databases, readers, workers: the one-node runtime), or the other
way round with ``--one-node-first``. Figures of each run:

- ``jobs_per_s``: jobs that succeeded over the wall time of the turns;
- ``visible_lag_p50_s`` / ``_p95_s``: from an agent's hook returning to the turn's first user
  message being found by that agent's ``memory_search`` (exact, its session);
- ``embedded_chunks_per_s``: a full rebuild of every project's hybrid index (derived files removed
  on the data node, one index job per project): chunks embedded over the time to a complete index.

All nodes share this machine's cores, so the cluster cannot run faster than the cores allow: the
figures show what spreading costs and where it helps here, not the speedup of separate machines.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, ClassVar

import typer
from pydantic import BaseModel

SESSIONS_PER_PROJECT = 3
MODEL_LATENCY_S = 0.05
OBJECT_STORE = 96 * 1024 * 1024


class ClusterRun(BaseModel):
    """Figures of one run of the workload."""

    placement: str
    """``spread`` (databases on their nodes, pools over all nodes) or ``one-node``."""
    jobs: int
    """Jobs that succeeded."""
    failed: int
    """Jobs that gave up (0 expected)."""
    seconds: float
    """Wall time of the turns (first hook to the queue idle after the last turn)."""
    jobs_per_s: float
    visible_lag_p50_s: float
    visible_lag_p95_s: float
    embedded_chunks: int
    """Chunks with a vector after the rebuild (all projects)."""
    embed_seconds: float
    embedded_chunks_per_s: float


class ClusterBenchResult(BaseModel):
    """``omray bench cluster``: the spread run next to the one-node run."""

    HEADLINE: ClassVar[tuple[str, ...]] = (
        "nodes",
        "jobs_per_s",
        "one_node_jobs_per_s",
        "embedded_chunks_per_s",
        "one_node_embedded_chunks_per_s",
        "visible_lag_p50_s",
        "one_node_visible_lag_p50_s",
    )
    nodes: int
    projects: int
    sessions: int
    turns: int
    jobs_per_s: float
    one_node_jobs_per_s: float
    embedded_chunks_per_s: float
    one_node_embedded_chunks_per_s: float
    visible_lag_p50_s: float
    one_node_visible_lag_p50_s: float
    runs: list[ClusterRun]
    cpus: int
    load_average: list[float]
    """``os.getloadavg()`` when the benchmark started."""
    seconds: float


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _node_args(disks: Path, name: str) -> dict[str, Any]:
    from persistence.files.node_disk import CLUSTER_DISKS_ENV, NODE_DISK_ENV
    from protocol.placement import NODE_LABEL

    return {
        "num_cpus": 1,
        "object_store_memory": OBJECT_STORE,
        "labels": {NODE_LABEL: name},
        "env_vars": {CLUSTER_DISKS_ENV: str(disks), NODE_DISK_ENV: str(disks / name)},
    }


def _on(node: str) -> dict[str, Any]:
    from protocol.placement import NODE_LABEL

    return {"label_selector": {NODE_LABEL: node}, "num_cpus": 0}


def _remove_index(db: str) -> None:
    shutil.rmtree(f"{db}.semantic", ignore_errors=True)


def _vectors(db: str) -> int:
    import sqlite3

    manifest = Path(f"{db}.semantic") / "manifest.sqlite"
    if not manifest.is_file():
        return 0
    with sqlite3.connect(f"{manifest.as_uri()}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT count(*) FROM chunk WHERE embedded = 1").fetchone()[0])


class _Run:
    def __init__(self, disks: Path, nodes: list[str], server: Any, *, spread: bool, sessions: int) -> None:
        from cluster.client import OmrayClient
        from cluster.data_node import this_node
        from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
        from cluster.naming import RuntimeNames
        from cluster.pools import PoolSizes

        self.placement = "spread" if spread else "one-node"
        self.names = RuntimeNames(prefix=f"bc{uuid.uuid4().hex[:8]}")
        head = disks / nodes[0]
        ensure_runtime(
            self.names,
            queue_db=str(head / f"{self.placement}.queue.sqlite"),
            handler_paths=DEFAULT_HANDLERS,
            retry_base_delay_s=1.0,
            pools=PoolSizes(observers=len(nodes), reflectors=1, indexers=len(nodes) - 1),
            worker_node_id=None if spread else this_node().node_id,
        )
        self.projects: dict[str, tuple[Any, str, str]] = {}  # project -> (client, db, data node)
        for number, node in enumerate(nodes[1:], start=1):
            data_node = node if spread else nodes[0]
            db = disks / data_node / f"{self.placement}-p{number}" / "om.sqlite"
            agent = head / f"{self.placement}-p{number}-agent"
            agent.mkdir(parents=True)
            storage: dict[str, Any] = {"database": str(db)}
            if spread:
                storage["node"] = node
            settings = {
                "model": "scripted/memory",
                "observer": {"observe_after_tokens": 0},
                "providers": {"scripted": {"base_url": server.base_url, "context_window": 16384}},
                "storage": storage,
                "reflector": {"reflect_after_observation_tokens": 150},
                "pools": {"observations_max_tokens": 100},
            }
            self.projects[f"p{number}"] = (
                OmrayClient(self.names, settings=settings, cwd=agent),
                str(db),
                data_node,
            )
        self.sessions = [f"s{index}" for index in range(sessions)]

    def drive(self) -> tuple[int, int, float, list[float]]:
        from cluster.commands.demo_session import commit_turn, demo_session

        turns = {session: demo_session(session) for session in self.sessions}
        lags: list[float] = []
        started = time.monotonic()
        for client, _, _ in self.projects.values():
            for session in self.sessions:
                client.session_started(session)
        for index in range(len(turns[self.sessions[0]])):
            committed: dict[tuple[str, str], float] = {}
            for project, (client, _, _) in self.projects.items():
                for session in self.sessions:
                    path = client.events_path(session)
                    client.after_turn_commit(commit_turn(path, turns[session][index]), events_path=path)
                    committed[(project, session)] = time.monotonic()
            phrases = {key: str(turns[key[1]][index][0]["payload"]["text"])[:40] for key in committed}
            for key, seen in self._visible(phrases).items():
                lags.append(seen - committed[key])
        client = next(iter(self.projects.values()))[0]
        if not client.wait_idle(timeout_s=600):
            raise RuntimeError("the queue did not drain")
        seconds = time.monotonic() - started
        counts = client.job_counts()
        return int(counts["succeeded"]), int(counts["failed"]), seconds, lags

    def _visible(
        self, phrases: dict[tuple[str, str], str], timeout_s: float = 300.0
    ) -> dict[tuple[str, str], float]:
        """When each session's phrase was first found by its agent's exact ``memory_search`` (every
        waiting session is asked in turn, so none waits behind another's)."""
        seen: dict[tuple[str, str], float] = {}
        deadline = time.monotonic() + timeout_s
        while len(seen) < len(phrases):
            if time.monotonic() > deadline:
                raise RuntimeError("a turn never became visible")
            for (project, session), phrase in phrases.items():
                if (project, session) in seen:
                    continue
                client = self.projects[project][0]
                query = {"query": phrase, "mode": "exact", "scope": "session"}
                answer = client.memory_search(query, session_id=session)
                if answer.get("ok") and answer.get("count"):
                    seen[(project, session)] = time.monotonic()
            time.sleep(0.02)
        return seen

    def rebuild_index(self) -> tuple[int, float]:
        import ray

        for _, db, node in self.projects.values():
            ray.get(ray.remote(_remove_index).options(**_on(node)).remote(db))
        started = time.monotonic()
        for client, _, _ in self.projects.values():
            client.session_started(self.sessions[0])
        client = next(iter(self.projects.values()))[0]
        if not client.wait_idle(timeout_s=900):
            raise RuntimeError("the index did not finish")
        seconds = time.monotonic() - started
        chunks = sum(
            int(ray.get(ray.remote(_vectors).options(**_on(node)).remote(db)))
            for _, db, node in self.projects.values()
        )
        return chunks, seconds


def _one_run(disks: Path, nodes: list[str], server: Any, spread: bool, sessions: int) -> ClusterRun:
    from cluster.named_actors import remove_runtime

    run = _Run(disks, nodes, server, spread=spread, sessions=sessions)
    try:
        jobs, failed, seconds, lags = run.drive()
        chunks, embed_seconds = run.rebuild_index()
    finally:
        remove_runtime(run.names)
    lags.sort()
    return ClusterRun(
        placement=run.placement,
        jobs=jobs,
        failed=failed,
        seconds=round(seconds, 2),
        jobs_per_s=round(jobs / seconds, 2),
        visible_lag_p50_s=round(statistics.median(lags), 3),
        visible_lag_p95_s=round(lags[min(len(lags) - 1, int(0.95 * len(lags)))], 3),
        embedded_chunks=chunks,
        embed_seconds=round(embed_seconds, 2),
        embedded_chunks_per_s=round(chunks / embed_seconds, 1) if embed_seconds > 0 else 0.0,
    )


def run_cluster_bench(
    nodes: int = 3, sessions: int = SESSIONS_PER_PROJECT, one_node_first: bool = False
) -> ClusterBenchResult:
    """Build the cluster, run the workload spread and on one node (back to back), report both."""
    import ray
    from ray.cluster_utils import Cluster

    from persistence.files.node_disk import CLUSTER_DISKS_ENV, NODE_DISK_ENV
    from testkit.scripted_models import ScriptedMemoryModel
    from testkit.scripted_server import ScriptedServer

    if nodes < 2:
        raise ValueError("--nodes must be at least 2 (the agents' node and one data node)")
    load = list(os.getloadavg())
    started = time.monotonic()
    names = [f"n{index}" for index in range(nodes)]
    with tempfile.TemporaryDirectory(prefix="omray-bench-cluster-") as tmp:
        disks = Path(tmp) / "disks"
        for node in names:
            (disks / node).mkdir(parents=True)
        os.environ[CLUSTER_DISKS_ENV], os.environ[NODE_DISK_ENV] = str(disks), str(disks / names[0])
        head = {**_node_args(disks, names[0]), "include_dashboard": False}
        cluster = Cluster(initialize_head=True, head_node_args=head)
        try:
            for node in names[1:]:
                cluster.add_node(**_node_args(disks, node))
            cluster.wait_for_nodes()
            ray.init(
                address=cluster.address, namespace="omray", logging_level=logging.WARNING, log_to_driver=False
            )
            try:
                with ScriptedServer(chat_default=ScriptedMemoryModel(latency_s=MODEL_LATENCY_S)) as server:
                    order = (False, True) if one_node_first else (True, False)
                    runs = [_one_run(disks, names, server, spread, sessions) for spread in order]
            finally:
                ray.shutdown()
        finally:
            cluster.shutdown()  # type: ignore[no-untyped-call]
            os.environ.pop(CLUSTER_DISKS_ENV, None)
            os.environ.pop(NODE_DISK_ENV, None)
    spread = next(run for run in runs if run.placement == "spread")
    single = next(run for run in runs if run.placement == "one-node")
    return ClusterBenchResult(
        nodes=nodes,
        projects=nodes - 1,
        sessions=sessions * (nodes - 1),
        turns=5,
        jobs_per_s=spread.jobs_per_s,
        one_node_jobs_per_s=single.jobs_per_s,
        embedded_chunks_per_s=spread.embedded_chunks_per_s,
        one_node_embedded_chunks_per_s=single.embedded_chunks_per_s,
        visible_lag_p50_s=spread.visible_lag_p50_s,
        one_node_visible_lag_p50_s=single.visible_lag_p50_s,
        runs=runs,
        cpus=os.cpu_count() or 0,
        load_average=[round(value, 2) for value in load],
        seconds=round(time.monotonic() - started, 1),
    )


def bench_cluster_command(
    nodes: Annotated[
        int, typer.Option("--nodes", min=2, max=6, help="Nodes of the local cluster (the head included).")
    ] = 3,
    sessions: Annotated[
        int, typer.Option("--sessions", min=1, max=16, help="Agent sessions per project.")
    ] = SESSIONS_PER_PROJECT,
    one_node_first: Annotated[
        bool, typer.Option("--one-node-first", help="Run the one-node baseline first.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """The runtime over N nodes (one project per data node, agents on the head) next to one node:
    jobs/s, embedding throughput and visible lag, back to back."""
    from bench.output import emit, stdout_to_stderr

    with stdout_to_stderr():
        result = run_cluster_bench(nodes, sessions, one_node_first)
    emit(result, as_json)
