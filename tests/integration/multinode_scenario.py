"""Memory across machines on a ``ray.cluster_utils.Cluster``; run as a script, prints one JSON object.

Ray allows one cluster connection per driver process, so ``test_multinode.py`` runs this module in
a subprocess instead of on the shared session cluster.

The cluster: the head ``c`` (the agents' node: the driver, which plays the agents, and the queue),
two data nodes ``a`` and ``b`` and a compute node ``w``. Each node has a folder of its own as its
disk (``<tmp>/disks/<node>``), and the per-node disk guard (:mod:`persistence.files.node_disk`) makes
opening a path of another node's folder an error, as it would be on machines of their own. Each
node carries its name as its ``omray-node`` label.

The workload: two projects, one on ``a`` (``storage.node: a``) and one on ``b``; agents on ``c``
drive two sessions of each, turn by turn, through ``OmrayClient`` (whose events then travel to the
data nodes). The worker pools spread over all nodes. The same workload then runs once more with
everything on ``c`` (the agent's node: the default placement, workers pinned there): the one-node
reference the memory of both projects must equal.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray
from ray.cluster_utils import Cluster
from ray.util.state import list_actors

from cluster.client import OmrayClient
from cluster.commands.demo_session import commit_turn, demo_session
from cluster.data_node import this_node
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime, remove_runtime
from cluster.naming import RuntimeNames
from cluster.pools import PoolSizes
from persistence.files.node_disk import CLUSTER_DISKS_ENV, NODE_DISK_ENV
from persistence.reads.memory_reader import MemoryReader
from protocol.events import BeforeCompactionContext
from protocol.outcomes import last_failure
from protocol.placement import NODE_LABEL
from testkit.memory_snapshot import MemorySnapshot, compare_memory, memory_snapshot
from testkit.scripted_models import ScriptedMemoryModel
from testkit.scripted_server import ScriptedServer

NODES = ("a", "b", "w")
"""The nodes besides the head ``c``: two data nodes and one with no data."""
PROJECTS = {"p1": "a", "p2": "b"}
"""Each project's data node."""
SESSIONS = ("s1", "s2")
"""Sessions of each project."""
OBJECT_STORE = 96 * 1024 * 1024


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _node_args(disks: Path, name: str) -> dict[str, Any]:
    return {
        "num_cpus": 1,
        "object_store_memory": OBJECT_STORE,
        "labels": {NODE_LABEL: name},
        "env_vars": {CLUSTER_DISKS_ENV: str(disks), NODE_DISK_ENV: str(disks / name)},
    }


def _settings(db: Path, server: ScriptedServer, node: str | None) -> dict[str, Any]:
    storage: dict[str, Any] = {"database": str(db)}
    if node is not None:
        storage["node"] = node
    return {
        "model": "scripted/memory",
        "observer": {"observe_after_tokens": 0},  # every turn end observes
        "providers": {"scripted": {"base_url": server.base_url, "context_window": 16384}},
        "storage": storage,
        "reflector": {"reflect_after_observation_tokens": 150},
        "pools": {"observations_max_tokens": 100},
        "semantic": {"embedding_api": {"base_url": server.base_url, "model_id": "hash-embedder"}},
    }


class Run:
    """One runtime and its agents: both projects, driven turn by turn."""

    def __init__(self, disks: Path, server: ScriptedServer, *, spread: bool) -> None:
        self.tag = "spread" if spread else "one-node"
        self.names = RuntimeNames(prefix=f"mn{uuid.uuid4().hex[:8]}")
        home = disks / "c"
        ensure_runtime(
            self.names,
            queue_db=str(home / f"{self.tag}.queue.sqlite"),
            handler_paths=DEFAULT_HANDLERS,
            # A worker killed with its node is restarted on another within a few seconds: the
            # retries of its job (1, 2, 4 s apart) wait for that, as in production.
            retry_base_delay_s=1.0 if spread else 0.1,
            pools=PoolSizes(observers=4, reflectors=1, indexers=2),
            worker_node_id=None if spread else this_node().node_id,
        )
        self.clients: dict[str, OmrayClient] = {}
        self.dbs: dict[str, Path] = {}
        for project, node in PROJECTS.items():
            data = disks / node if spread else home
            self.dbs[project] = data / f"{self.tag}-{project}" / "om.sqlite"
            agent_dir = home / f"{self.tag}-{project}-agent"
            agent_dir.mkdir(parents=True)
            settings = _settings(self.dbs[project], server, node if spread else None)
            self.clients[project] = OmrayClient(self.names, settings=settings, cwd=agent_dir)
        self.turns = {session: demo_session(session) for session in SESSIONS}

    def start_sessions(self) -> None:
        for client in self.clients.values():
            for session_id in SESSIONS:
                client.session_started(session_id)

    def commit_turn(self, index: int) -> None:
        """Every session of both projects ends turn ``index``; returns once the jobs are accepted."""
        for client in self.clients.values():
            for session_id in SESSIONS:
                path = client.events_path(session_id)
                client.after_turn_commit(commit_turn(path, self.turns[session_id][index]), events_path=path)
        for client in self.clients.values():
            if not client.outbox.wait_empty(60):
                raise RuntimeError("the hooks' jobs were not accepted")

    def wait_idle(self, timeout_s: float = 120) -> None:
        client = next(iter(self.clients.values()))
        if not client.wait_idle(timeout_s=timeout_s):
            status = client.status()
            events = {
                f"{p}/{s}": [e.get("payload") for e in c.runtime_events(s)]
                for p, c in self.clients.items()
                for s in SESSIONS
            }
            raise RuntimeError(
                f"the {self.tag} queue did not drain: {json.dumps(status, default=str)[:3000]} {events}"
            )

    def finish(self) -> None:
        self.wait_idle()
        self.start_sessions()  # a last index batch after the final observations
        self.wait_idle()

    def reads(self, nodes: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        """Each project's search and recall answers, asked by an agent on each of ``nodes``."""
        found: dict[str, dict[str, Any]] = {}
        for project, client in self.clients.items():
            for node in nodes:
                reference = _reads_on.options(**_on(node))
                found[f"{project}@{node}"] = ray.get(
                    reference.remote(self.names.prefix, client.settings_block, str(client.cwd))
                )
        return found

    def snapshots(self) -> dict[str, MemorySnapshot]:
        """Each project's memory, read on its data node (the guard forbids reading it here)."""
        found: dict[str, MemorySnapshot] = {}
        for project, db in self.dbs.items():
            node = db.parent.parent.name
            found[project] = MemorySnapshot.from_json(
                ray.get(_snapshot_on.options(**_on(node)).remote(str(db)))
            )
        return found

    def coverage(self) -> dict[str, dict[str, int]]:
        """How far each session is covered, per project (read on the data node)."""
        return {
            project: {
                session: ray.get(_covered_on.options(**_on(db.parent.parent.name)).remote(str(db), session))
                for session in SESSIONS
            }
            for project, db in self.dbs.items()
        }


def _on(node: str) -> dict[str, Any]:
    return {"label_selector": {NODE_LABEL: node}, "num_cpus": 0}


@ray.remote
def _snapshot_on(db: str) -> dict[str, Any]:
    return memory_snapshot(db).to_json()


@ray.remote
def _covered_on(db: str, session: str) -> int:
    return MemoryReader(db).covered_end(session)


QUERIES = (
    {"query": "billing tests", "mode": "exact", "limit": 5},
    {"query": "parse dates with a timezone", "mode": "hybrid", "limit": 5},
)
"""Searches asked from every node (exact and hybrid)."""


def _search_and_recall(client: OmrayClient) -> list[dict[str, Any]]:
    """Every query, then a recall of the first hit of the first one, each in both sessions' scope."""
    answers: list[dict[str, Any]] = []
    for session_id in SESSIONS:
        for arguments in QUERIES:
            answers.append(client.memory_search({**arguments, "scope": "session"}, session_id=session_id))
        first = answers[-len(QUERIES)]["results"][0]  # type: ignore[index]
        answers.append(client.recall(session_id, {"id": first["id"]}))
    return answers


def _pages(client: OmrayClient) -> dict[str, Any]:
    """Each session's compaction decision, compaction text and ``/om-view``, and the cost report."""
    pages: dict[str, Any] = {"token_usage": client.token_usage()}
    for session_id in SESSIONS:
        context = BeforeCompactionContext(session_id=session_id, turn_no=99, trigger="compact_run")
        pages[session_id] = {
            "before_compaction": client.before_compaction(context).model_dump(mode="json"),
            "project": client.project(session_id),
            "projection_lines": list(client.projection_lines(session_id)),  # what the hooks show
            "memory_view": list(client.memory_view(session_id)),
        }
    return pages


@ray.remote
def _reads_on(prefix: str, settings: dict[str, Any], cwd: str) -> dict[str, Any]:
    """What an agent on this node gets from memory_search, recall and the other pages of memory, and
    whether it read locally."""
    client = OmrayClient(RuntimeNames(prefix=prefix), settings=settings, cwd=cwd)
    return {
        "local": client.database_is_local(),
        "answers": _search_and_recall(client),
        "pages": _pages(client),
    }


def _forget_from_afar(client: OmrayClient) -> dict[str, Any]:
    """Forget the first hit of the first query through a client on another node than the database's,
    then search again from there."""
    query = {**QUERIES[0], "scope": "all"}
    first = str(client.memory_search(query)["results"][0]["id"])  # type: ignore[index]
    report = client.forget([first], wait_s=60)
    after = client.memory_search(query)["results"]
    return {
        "local": client.database_is_local(),
        "complete": report["complete"],
        "forgotten": report["forgotten"]["observations"] + report["forgotten"]["reflections"] == [first],
        "found_after": any(hit["id"] == first for hit in after),  # type: ignore[union-attr]
    }


DASHBOARD: dict[str, str] = {}
"""``address`` of this cluster's dashboard (the state API): never Ray's guess of "the latest cluster"."""


def _alive_actors() -> list[Any]:
    return list(list_actors(address=DASHBOARD["address"], filters=[("state", "=", "ALIVE")], limit=1000))


def _actor_nodes(names: RuntimeNames, node_names: dict[str, str]) -> dict[str, str]:
    return {
        actor.name: node_names.get(actor.node_id, actor.node_id)
        for actor in _alive_actors()
        if actor.name and actor.name.startswith(names.prefix + ".")
    }


def _drive(run: Run, during_turn: Callable[[int], None] | None = None) -> None:
    run.start_sessions()
    for index in range(len(run.turns[SESSIONS[0]])):
        run.commit_turn(index)
        if during_turn is not None:
            during_turn(index)
        run.wait_idle()
    run.finish()


KILL_FROM_TURN = 1
"""The first turn during which the compute node ``w`` is killed, once one of its workers runs a job."""
KILL_TURN_LATENCY_S = 3.0
"""Model latency from the turn before the kill: the four sessions' observe jobs of a turn then run at
once, one on each observer, so member 3, the one ``w`` holds (:func:`cluster.named_actors.spread_placement`),
runs one too."""


class Killer:
    """Kills ``w`` (its raylet and workers, SIGKILL) while one of its workers runs a job."""

    def __init__(
        self, cluster: Cluster, node: Any, node_id: str, run: Run, model: ScriptedMemoryModel
    ) -> None:
        self.cluster, self.node, self.node_id, self.run, self.model = cluster, node, node_id, run, model
        self.killed_mid_job = False
        self.killed = False
        self.latency_s = model.latency_s

    def __call__(self, index: int) -> None:
        if self.killed:
            return
        if index < KILL_FROM_TURN:
            if index == KILL_FROM_TURN - 1:
                self.model.latency_s = KILL_TURN_LATENCY_S
            return
        workers = [
            ray.get_actor(actor.name, namespace=self.run.names.namespace)
            for actor in _alive_actors()
            if actor.node_id == self.node_id
            and actor.name
            and actor.name.startswith(self.run.names.prefix + ".")
            and actor.name.split(".")[1] in ("observer", "reflector", "indexer")
        ]
        deadline = time.monotonic() + 10
        while workers and time.monotonic() < deadline:
            running = [ray.get(worker.ping.remote(), timeout=5).get("running") for worker in workers]
            if any(running):
                self.killed_mid_job = True
                break
            time.sleep(0.05)
        # Mid-job when any turn lets it happen; at the last turn regardless (the test then says so).
        if self.killed_mid_job or index >= len(self.run.turns[SESSIONS[0]]) - 1:
            self.cluster.remove_node(self.node, allow_graceful=False)  # SIGKILL, raylet included
            self.killed = True
            self.model.latency_s = self.latency_s


def _wait_for_workers_on(names: RuntimeNames, node_names: dict[str, str], nodes: set[str]) -> dict[str, str]:
    """Where the runtime's actors are once its pools stand (the placement test reads it)."""
    deadline = time.monotonic() + 30
    placed = _actor_nodes(names, node_names)
    while time.monotonic() < deadline and len([n for n in placed if n.split(".")[1] == "observer"]) < 4:
        time.sleep(0.2)
        placed = _actor_nodes(names, node_names)
    return placed


LOSS_SESSION = "x1"
"""A session of project ``p2`` observed while its data node ``b`` is away."""


def _lose_a_data_node(cluster: Cluster, added: dict[str, Any], disks: Path, run: Run) -> dict[str, Any]:
    """Kill ``b`` (``p2``'s data node) with a turn of ``p2`` in flight and another committed while it
    is away; bring it back with the same disk; report what the agent and the jobs saw."""
    client = run.clients["p2"]
    path = client.events_path(LOSS_SESSION)
    turns = demo_session(LOSS_SESSION)
    client.after_turn_commit(commit_turn(path, turns[0]), events_path=path)
    if not client.outbox.wait_empty(60):
        raise RuntimeError("the first turn was not accepted")
    cluster.remove_node(added["b"], allow_graceful=False)  # SIGKILL: the raylet and everything on b
    failure_seen = _wait_for(lambda: _failures(client) or None, 90)
    started = time.monotonic()
    client.after_turn_commit(commit_turn(path, turns[1]), events_path=path)  # b is still away
    hook_s = time.monotonic() - started
    p1_failures = [e for s in SESSIONS for e in run.clients["p1"].runtime_events(s)]
    added["b"] = cluster.add_node(**_node_args(disks, "b"))  # back, with the same disk
    cluster.wait_for_nodes()
    if not client.outbox.wait_empty(120):
        raise RuntimeError("the turn committed while b was away was never accepted")
    run.wait_idle(180)
    db = run.dbs["p2"]
    covered = ray.get(_covered_on.options(**_on("b")).remote(str(db), LOSS_SESSION))
    return {
        "failure_reasons": sorted({str(reason) for reason in failure_seen or ()}),
        "p1_failures": len(p1_failures),
        "hook_s": round(hook_s, 2),
        "hook_timeout_s": client.hook_timeout_s,
        "covered": covered,
        "last_seq": turns[1][-1]["seq"],
    }


def _failures(client: OmrayClient) -> list[str]:
    """The failure categories of the loss session's ``job_failed`` events."""
    return [last_failure(event.get("payload") or {}) for event in client.runtime_events(LOSS_SESSION)]


def _wait_for(probe: Callable[[], Any], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.2)
    return None


def run_scenario(workdir: Path) -> dict[str, Any]:
    """Build the cluster, run the workload spread and on one node, report what the test checks."""
    started = time.monotonic()
    disks = workdir / "disks"
    for node in ("c", *NODES):
        (disks / node).mkdir(parents=True)
    os.environ[CLUSTER_DISKS_ENV], os.environ[NODE_DISK_ENV] = str(disks), str(disks / "c")  # the driver
    dashboard_port = _free_port()
    DASHBOARD["address"] = f"http://127.0.0.1:{dashboard_port}"
    head = {
        **_node_args(disks, "c"),
        "include_dashboard": True,  # the state API (``list_actors``) is served by the dashboard
        "dashboard_host": "127.0.0.1",
        "dashboard_port": dashboard_port,
        # A killed node is declared dead after 3 missed health checks a second apart (not 5 of 3 s).
        "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 3},
    }
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        added = {node: cluster.add_node(**_node_args(disks, node)) for node in NODES}
        cluster.wait_for_nodes()
        ray.init(
            address=cluster.address, namespace="omray", logging_level=logging.WARNING, log_to_driver=False
        )
        try:
            node_names = {
                node["NodeID"]: (node.get("Labels") or {}).get(NODE_LABEL, "?")
                for node in ray.nodes()  # type: ignore[no-untyped-call]
            }
            model = ScriptedMemoryModel(latency_s=0.3)  # jobs last long enough to be killed mid-way
            with ScriptedServer(chat_default=model) as server:
                spread = Run(disks, server, spread=True)
                try:
                    workers_placed = _wait_for_workers_on(spread.names, node_names, set(NODES) | {"c"})
                    w_id = next(node_id for node_id, name in node_names.items() if name == "w")
                    killer = Killer(cluster, added["w"], w_id, spread, model)
                    _drive(spread, killer)
                    model.latency_s = 0.0
                    placed = _actor_nodes(spread.names, node_names)
                    snapshots, coverage = spread.snapshots(), spread.coverage()
                    reads = spread.reads(("c", "a", "b"))  # w is gone
                    counts = next(iter(spread.clients.values())).job_counts()
                    forgotten = _forget_from_afar(spread.clients["p1"])  # after the memory was compared
                    model.latency_s = 2.0  # the loss session's job is still in flight when ``b`` dies
                    data_node_loss = _lose_a_data_node(cluster, added, disks, spread)
                    model.latency_s = 0.0
                finally:
                    remove_runtime(spread.names)
                reference = Run(disks, server, spread=False)
                try:
                    _drive(reference)
                    reference_snapshots = reference.snapshots()
                    reference_reads = {
                        project: _search_and_recall(client) for project, client in reference.clients.items()
                    }
                    reference_counts = next(iter(reference.clients.values())).job_counts()
                finally:
                    remove_runtime(reference.names)
            return {
                "actor_nodes": placed,
                "worker_nodes_at_start": workers_placed,
                "killed_w_mid_job": killer.killed_mid_job,
                "killed_w": killer.killed,
                "data_node_loss": data_node_loss,
                "forget_from_afar": forgotten,
                "counts": counts,
                "reference_counts": reference_counts,
                "coverage": coverage,
                "last_seqs": {s: spread.turns[s][-1][-1]["seq"] for s in SESSIONS},
                "memory": {
                    project: {
                        "observations": snapshots[project].count("observations"),
                        "reflections": snapshots[project].count("reflections"),
                        "index_state": [list(row) for row in snapshots[project].sections["index_state"]],
                        "differing": list(
                            compare_memory(snapshots[project], reference_snapshots[project]).differing
                        ),
                    }
                    for project in PROJECTS
                },
                "reads": {
                    where: {
                        "local": answer["local"],
                        "answers_ok": [bool(one.get("ok")) for one in answer["answers"]],
                        # per search its hits, per recall the source events it hydrated
                        "found": [
                            len(one.get("results", one.get("events", ()))) for one in answer["answers"]
                        ],
                        "same_as_one_node_run": answer["answers"] == reference_reads[where.split("@")[0]],
                        "pages_as_on_its_data_node": answer["pages"]
                        == reads[f"{where.split('@')[0]}@{PROJECTS[where.split('@')[0]]}"]["pages"],
                        "compaction": [answer["pages"][s]["before_compaction"]["action"] for s in SESSIONS],
                    }
                    for where, answer in reads.items()
                },
                "shipped_logs": sorted(
                    str(path.relative_to(disks))
                    for path in disks.glob("*/spread-*/om.sqlite.events/*/events.jsonl")
                ),
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
