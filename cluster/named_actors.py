"""Spawning omray's named actors on a Ray cluster and wiring them together.

Every actor is detached, lives in namespace ``omray``, restarts without limit and asks for no CPU
(they mostly wait on SQLite or on a model endpoint; on a 2-core machine a CPU reservation per actor
would starve the cluster). The actor classes themselves are plain Python in ``actors/``.

Each worker role runs as a pool (``omray.observer.0`` … ``omray.observer.N-1``, and so on, sized by
:class:`PoolSizes`), spread over the cluster's nodes; the queue runs on the node where ``omray up``
ran. Each memory database's StoreActor and ReaderActor run on the node that holds it
(:mod:`cluster.data_node`), and workers read and write through them, so no worker ever opens a file
on a node that does not have it.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import sys
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import ray
from pydantic import ValidationError
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.indexer.actor import IndexerActor
from actors.observer.actor import ObserverActor
from actors.queue.actor import QueueActor
from actors.queue.figures import QueueFigures
from actors.queue.placement import PlacementRegistry
from actors.queue.redrive import waiting_for_their_node
from actors.queue.retry import RetryPolicy
from actors.queue.scaling import PoolScaler, ScalingPolicy
from actors.reflector.actor import ReflectorActor
from actors.store.reader import DataReader
from actors.worker import RoleActor, WorkerContext
from cluster.autoscale import PoolAutoscaler
from cluster.data_node import (
    BACKGROUND_NICENESS,
    COMMON_ACTOR_OPTIONS,
    check_alive,
    current_node_id,
    reader_of,
    store_of,
)
from cluster.naming import RuntimeNames, omray_home
from cluster.pools import ROLE_NAMES, PoolSizes
from cluster.ray_calls import RayWorkerPool, StoreProxy
from persistence.database.connection import Synchronous
from persistence.writers.queue_store import QueueStore
from protocol.errors import InvalidPayloadError, SettingsError
from protocol.jobs import SEMANTIC_INDEX_HANDLER, JobEnvelope
from protocol.placement import PlacementRequest

logger = logging.getLogger("omray.cluster")

ROLE_ACTORS: dict[str, type[RoleActor]] = {
    role.role_handler_id: role for role in (ObserverActor, ReflectorActor, IndexerActor)
}
"""The actor class of each stable handler id (the names the Ray dashboard shows)."""

DEFAULT_HANDLERS: dict[str, str] = {hid: role.default_handler for hid, role in ROLE_ACTORS.items()}
"""Handler of each stable handler id in the production runtime."""

_COMMON_OPTIONS: dict[str, Any] = COMMON_ACTOR_OPTIONS

SPREAD_MEMORY_BYTES: Final = 1
"""Memory (bytes) a spread pool member asks for: Ray ignores a soft node affinity of an actor that asks
for no resource at all and places it at random (ray-project/ray#25344); a byte takes no CPU slot."""

INDEX_NICENESS: Final = 19
"""Niceness of the IndexerActor: below the other memory work. Its embedding is the one CPU-bound
job of the runtime, and the hybrid index is derived (exact search finds a new memory at once):
on a short machine turns are observed first and the index catches up (``omray bench load``)."""

QUEUE_NICENESS: Final = 0
"""Niceness the raylet starts the QueueActor's process with (``RAY_worker_niceness`` in its
runtime env, as Ray's own job supervisor is started): the agents' own priority, so that on a busy
machine a woken dispatch thread is not held behind memory work."""

RAY_WORKER_NICENESS_ENV: Final = "RAY_worker_niceness"
"""Ray's environment variable for the niceness of the worker processes it starts."""

QUEUE_SWITCH_INTERVAL_S: Final = 0.0005
"""The queue process's GIL switch interval (Python's default is 5 ms). A burst of dispatches leaves
dozens of threads waiting on one group commit; each must take the GIL back to answer, and with the
default a thread busy starting runs could hold each of them off for 5 ms."""

QUEUE_SYNCHRONOUS: Synchronous = "NORMAL"
"""The queue database survives any process, actor or cluster crash without a sync per commit; a
power loss may lose the last accepted jobs, which the next turn boundary of their session
re-dispatches (the events files stay the source of truth)."""


def _node_affinity(node_id: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


class RayWorkerContext:
    """What a handler running in a worker actor may use: StoreActors and the queue."""

    def __init__(self, names: RuntimeNames) -> None:
        self._names = names
        self._stores: dict[str, StoreProxy] = {}
        self._readers: dict[str, Any] = {}

    def store_for(self, db_path: str) -> StoreProxy:
        """A durable proxy to the single writer of ``db_path``."""
        proxy = self._stores.get(db_path)
        if proxy is None:
            check = functools.partial(check_alive, self._names, db_path)
            proxy = StoreProxy(store_of(self._names, db_path), durable=True, check=check)
            self._stores[db_path] = proxy
        return proxy

    def reader_for(self, db_path: str) -> Any:
        """Reads of ``db_path`` (:class:`actors.store.reader.DataReader`): in this process when this
        worker runs on the database's node, else through the ReaderActor on that node."""
        reader = self._readers.get(db_path)
        if reader is None:
            check_alive(self._names, db_path)  # a node that is gone: fail now, with its cause
            store = self.store_for(db_path)
            if str(store.node_id()) == current_node_id():
                reader = DataReader(db_path, store)
            else:
                check = functools.partial(check_alive, self._names, db_path)
                reader = StoreProxy(reader_of(self._names, db_path), durable=True, check=check)
            self._readers[db_path] = reader
        return reader

    def dispatch(self, envelope: JobEnvelope) -> str:
        """Enqueue a follow-up job on this runtime's queue."""
        queue = ray.get_actor(self._names.queue, namespace=self._names.namespace)
        return str(ray.get(queue.dispatch.remote(envelope)))


def spread_placement(index: int) -> dict[str, Any]:
    """Ray options that place member ``index`` of a pool on the live node it prefers, a soft affinity: the
    nodes in a stable order (``omray-node`` label, then id), round robin, so the busiest members (the lowest
    indexes) never share a node; :data:`SPREAD_MEMORY_BYTES` asked for where the node has memory to give."""
    from protocol.placement import NODE_LABEL

    alive = sorted(
        (
            (node.get("Labels") or {}).get(NODE_LABEL, ""),
            node["NodeID"],
            (node.get("Resources") or {}).get("memory", 0),
        )
        for node in ray.nodes()  # type: ignore[no-untyped-call]
        if node.get("Alive")
    )
    _, node_id, memory = alive[index % len(alive)] if alive else ("", current_node_id(), 0)
    memory_ask = {"memory": SPREAD_MEMORY_BYTES} if memory >= SPREAD_MEMORY_BYTES else {}
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=True), **memory_ask}


def worker_handle(
    names: RuntimeNames,
    handler_id: str,
    handler_path: str,
    env_vars: Mapping[str, str] | None = None,
    data_node_id: str | None = None,
    index: int = 0,
    slots: int = 1,
) -> Any:
    """Worker ``index`` of the pool that serves ``handler_id`` (created if missing), on any node.

    Workers read and write memory through their database's node (:meth:`RayWorkerContext.reader_for`,
    the StoreActor), so a pool spreads over the nodes: member ``index`` prefers the ``index``-th
    live node (:func:`spread_placement`, a soft affinity), so a pool of N members on N nodes has one on
    each, and a worker whose node dies is restarted on another. ``data_node_id`` pins the pool to
    one node instead (a benchmark's one-node baseline on a cluster).
    """
    options: dict[str, Any] = {
        **_COMMON_OPTIONS,
        "name": names.worker(ROLE_NAMES[handler_id], index),
        "namespace": names.namespace,
        "get_if_exists": True,
        "max_task_retries": 0,  # the queue's retry policy decides, not Ray
        # ``slots`` jobs at once, plus two threads: ``ping`` (liveness, pid) answers while jobs run,
        # even while a restarted queue's redelivery of a job waits for its old attempt
        # (``WorkerActor`` never overlaps two attempts of one job).
        "max_concurrency": slots + 2,
        **(
            {"scheduling_strategy": _node_affinity(data_node_id)} if data_node_id else spread_placement(index)
        ),
    }
    if env_vars:
        options["runtime_env"] = {"env_vars": dict(env_vars)}
    context: WorkerContext = RayWorkerContext(names)
    return (
        ray.remote(ROLE_ACTORS[handler_id])
        .options(**options)
        .remote(
            context,
            handler_path,
            niceness=INDEX_NICENESS if handler_id == SEMANTIC_INDEX_HANDLER else BACKGROUND_NICENESS,
        )
    )


def worker_pools(
    names: RuntimeNames,
    handler_paths: Mapping[str, str],
    sizes: PoolSizes,
    env_vars: Mapping[str, str] | None = None,
    data_node_id: str | None = None,
) -> dict[str, list[Any]]:
    """Every pool's worker handles, by handler id (created if missing)."""
    return {
        hid: [
            worker_handle(
                names, hid, path, env_vars, data_node_id=data_node_id, index=i, slots=sizes.slots_of(hid)
            )
            for i in range(sizes.of(hid))
        ]
        for hid, path in handler_paths.items()
    }


@dataclass(frozen=True, slots=True)
class QueueOptions:
    """How a runtime's queue runs: the arguments of :func:`ensure_runtime` beyond names and paths,
    handed to its actor (and to every restart of it) as one value."""

    worker_env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables of the worker actors."""
    retry_base_delay_s: float = 1.0
    """Delay before a failed job's first retry (:class:`RetryPolicy`)."""
    max_in_flight: int | None = None
    """Most runs at once (default: the slots of all pools at their largest)."""
    pools: PoolSizes = field(default_factory=PoolSizes)
    """Worker pool sizes and slots."""
    scaling: ScalingPolicy | None = None
    """How quickly pools grow and shrink (default :class:`ScalingPolicy`)."""
    coalesce: bool = True
    """Run waiting observe (and index) jobs of one lane as one (``False``: the original's one by one)."""
    worker_node: str | None = None
    """Pin every worker to this node id (default: the pools spread over the cluster's nodes)."""


class QueueRuntime:
    """The runtime's queue as a Ray actor: a :class:`QueueActor` built from Ray ports, plus pool
    autoscaling, built in the actor process (and on restart).

    It holds the queue rather than being one: the queue gets its store, worker pools and metrics as
    ports, and this class forwards the documented actor-handle methods to it.
    """

    def __init__(
        self,
        names: RuntimeNames,
        queue_db: str,
        handler_paths: Mapping[str, str],
        node: str,
        options: QueueOptions,
    ) -> None:
        sizes, worker_env = options.pools, options.worker_env
        sys.setswitchinterval(QUEUE_SWITCH_INTERVAL_S)
        # The queue's own file has one writer, this actor: its group commits run in-process, with no
        # StoreActor round trip on the path of every dispatch (memory databases keep theirs).
        store = QueueStore(queue_db, synchronous=QUEUE_SYNCHRONOUS)
        workers = _with_grown_members(
            names,
            worker_pools(names, handler_paths, sizes, worker_env, data_node_id=options.worker_node),
            sizes,
        )
        # Before the restore below redelivers anything: which member still runs which of the jobs
        # an earlier life of the queue left running (none on a fresh start: no query then).
        interrupted = {row.envelope.job_id for row in store.list_unfinished_jobs() if row.state == "running"}
        pool = RayWorkerPool(workers, running=running_attempts(workers, interrupted) if interrupted else None)
        policy = RetryPolicy(base_delay_s=options.retry_base_delay_s)
        from cluster.metrics import RayPoolMetrics, RayQueueMetrics

        self.data_node_id = node
        from cluster.data_node import this_node

        # Where each memory database lives: chosen on first use, durable in the queue's own file.
        self._placements = PlacementRegistry(store, this_node(), lambda: datetime.now(UTC).isoformat())
        self._queue = QueueActor(
            store,
            pool,
            policy=policy,
            max_in_flight=options.max_in_flight or sizes.total,
            capacity={hid: len(handles) * sizes.slots_of(hid) for hid, handles in workers.items()},
            coalesce=options.coalesce,
            metrics=RayQueueMetrics(names.prefix),
        )
        limits = {hid: bounds for hid, bounds in sizes.limits().items() if hid in handler_paths}

        def create(handler_id: str, index: int) -> Any:
            slots = sizes.slots_of(handler_id)
            return worker_handle(
                names,
                handler_id,
                handler_paths[handler_id],
                worker_env,
                options.worker_node,
                index=index,
                slots=slots,
            )

        scaler = PoolScaler(limits, options.scaling)
        self._autoscaler = PoolAutoscaler(
            self._queue, pool, scaler, create, RayPoolMetrics(names.prefix), time.time
        )
        self._autoscaler.start()
        self._store = store
        self._stopping = threading.Event()
        threading.Thread(target=self._watch_data_nodes, name="omray-data-nodes", daemon=True).start()

    def _watch_data_nodes(self) -> None:
        """Re-drive the jobs that gave up because their database's node was down, once it is back."""
        from cluster.data_node import placement_alive

        while not self._stopping.wait(DATA_NODE_WATCH_S):
            try:  # a failing look must not end the loop: the next one may succeed
                waiting = waiting_for_their_node(self._store.failed_to_redrive(excluded_reasons=()))
                for db_path in sorted(waiting):
                    if placement_alive(self._placements.placement_of(db_path)):
                        requeued = self._queue.retry_failed(db_path)["requeued"]
                        logger.info("data node back: jobs re-driven", extra={"jobs": requeued})
            except Exception as exc:
                logger.warning("data node watch failed", extra={"error_class": type(exc).__name__})

    # --- the documented actor-handle methods ---------------------------------------------------

    def dispatch(self, envelope: JobEnvelope | Mapping[str, Any]) -> str:
        """:meth:`QueueActor.dispatch`."""
        return self._queue.dispatch(envelope)

    def dispatch_many(self, envelopes: Sequence[JobEnvelope | Mapping[str, Any]]) -> list[str]:
        """:meth:`QueueActor.dispatch_many`."""
        return self._queue.dispatch_many(envelopes)

    def status(self) -> dict[str, Any]:
        """The queue's status plus every worker pool's size, bounds and waiting runs, and the node
        of every memory database (``placements``)."""
        return {**self._queue.status(), "pools": self._autoscaler.snapshot(), "placements": self.placements()}

    def figures(self) -> QueueFigures:
        """:meth:`QueueActor.figures`."""
        return self._queue.figures()

    def waiting_by_handler(self) -> dict[str, int]:
        """:meth:`QueueActor.waiting_by_handler`."""
        return self._queue.waiting_by_handler()

    def runtime_events(
        self, session_id: str, after_seq: int = 0, db_path: str | None = None
    ) -> list[dict[str, Any]]:
        """:meth:`QueueActor.runtime_events`."""
        return self._queue.runtime_events(session_id, after_seq, db_path)

    def job_counts(self) -> dict[str, int]:
        """:meth:`QueueActor.job_counts`."""
        return self._queue.job_counts()

    def is_idle(self) -> bool:
        """:meth:`QueueActor.is_idle`."""
        return self._queue.is_idle()

    def retry_failed(self, db_path: str | None = None) -> dict[str, int]:
        """:meth:`QueueActor.retry_failed` (``omray retry``)."""
        return self._queue.retry_failed(db_path)

    def stop(self) -> None:
        """:meth:`QueueActor.stop`."""
        self._stopping.set()
        self._queue.stop()

    def ping(self) -> dict[str, Any]:
        """Liveness probe with the process id (tests kill it by pid)."""
        return {"pid": os.getpid(), "depth": self.status()["depth"]}

    def place_database(self, request: PlacementRequest | Mapping[str, Any]) -> dict[str, Any]:
        """Where a memory database lives: the recorded placement, or (first use) the one ``request``
        asks for, recorded before it is returned. Raises
        :class:`protocol.placement.PlacementConflictError` when the request names another node than
        the recorded one, and :class:`InvalidPayloadError` for a malformed request."""
        if not isinstance(request, PlacementRequest):
            try:
                request = PlacementRequest.model_validate(request)
            except ValidationError as exc:
                raise InvalidPayloadError(f"invalid placement request ({exc.error_count()} errors)") from None
        return self._placements.claim(request).model_dump(mode="json")

    def placements(self) -> dict[str, dict[str, Any]]:
        """Every recorded placement, by database (``omray status``)."""
        return {
            db: placement.model_dump(mode="json")
            for db, placement in self._placements.book.snapshot().items()
        }

    def data_node(self) -> str:
        """Id of the node that holds the databases (where StoreActors are created)."""
        return self.data_node_id


DATA_NODE_WATCH_S: Final = 2.0
"""How often the queue looks whether the data nodes of jobs that gave up as ``data_node_lost`` are back."""

RUNNING_QUERY_S: Final = 5.0
"""How long a starting queue waits for its workers to say which jobs they are running."""


def running_attempts(
    workers: Mapping[str, Mapping[int, Any]], job_ids: Collection[str] | None = None
) -> dict[str, dict[str, int]]:
    """Per pool, the job ids (of ``job_ids``, default all) its members are running now, each with
    the member's index.

    A queue that restarted while attempts ran finds them here (their workers live on). A member
    that does not answer within :data:`RUNNING_QUERY_S` counts as running nothing: its attempts
    then end as lost when it dies, or it is alive and the guard inside each worker still holds.
    """
    refs = {
        handle.ping.remote(): (hid, index)
        for hid, members in workers.items()
        for index, handle in members.items()
    }
    if not refs:
        return {}
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=RUNNING_QUERY_S)
    running: dict[str, dict[str, int]] = {}
    for ref in ready:
        hid, index = refs[ref]
        try:
            answer = ray.get(ref, timeout=0)
        except RayError:
            continue
        for job_id in answer.get("running", ()) if isinstance(answer, Mapping) else ():
            if job_ids is None or str(job_id) in job_ids:
                running.setdefault(hid, {}).setdefault(str(job_id), index)
    return running


def _with_grown_members(
    names: RuntimeNames, workers: Mapping[str, list[Any]], sizes: PoolSizes
) -> dict[str, dict[int, Any]]:
    """Every pool's members by index, with those an earlier life of the queue grew beyond the minimum."""
    existing = set(_list_named_actors(names.namespace))
    members: dict[str, dict[int, Any]] = {}
    for hid, handles in workers.items():
        members[hid] = dict(enumerate(handles))
        for index in range(len(handles), sizes.max_of(hid)):
            name = names.worker(ROLE_NAMES[hid], index)
            if name in existing:
                members[hid][index] = ray.get_actor(name, namespace=names.namespace)
    return members


def queue_db_path(names: RuntimeNames) -> str:
    """Where a runtime keeps its durable FIFO (``$OMRAY_HOME/<prefix>.queue.sqlite``)."""
    return str(omray_home() / f"{names.prefix}.queue.sqlite")


def ensure_runtime(
    names: RuntimeNames | None = None,
    *,
    queue_db: str | None = None,
    handler_paths: Mapping[str, str] | None = None,
    worker_env: Mapping[str, str] | None = None,
    retry_base_delay_s: float = 1.0,
    max_in_flight: int | None = None,
    pools: PoolSizes | None = None,
    data_node_id: str | None = None,
    scaling: ScalingPolicy | None = None,
    coalesce: bool = True,
    worker_node_id: str | None = None,
) -> Any:
    """Create (or find) the queue, its store and the worker pools; returns the queue handle.

    Must be called from a process connected to Ray (``ray.init``). Idempotent: existing named
    actors are reused, so calling it after a whole-cluster restart resumes the pending jobs.
    ``max_in_flight`` defaults to the slots of all pools at their largest; ``scaling`` sets how
    quickly pools grow and shrink (:class:`actors.queue.scaling.ScalingPolicy`). ``data_node_id`` is the
    queue's node, which holds the queue's database (default: this process's node, as for ``omray up``
    run there); memory databases a job names before any agent placed them go there too
    (:mod:`protocol.placement`). The worker pools spread over the cluster's nodes, or run on
    ``worker_node_id`` only. ``coalesce=False`` runs every observe job on its own, as the original
    did (benchmarks' baseline; the runtime always coalesces).
    """
    names = names or RuntimeNames()
    db = queue_db or queue_db_path(names)
    paths = dict(handler_paths or DEFAULT_HANDLERS)
    _check_runtime_arguments(paths, max_in_flight)  # before anything is created
    options = QueueOptions(
        worker_env=dict(worker_env or {}),
        retry_base_delay_s=retry_base_delay_s,
        max_in_flight=max_in_flight,
        pools=pools or PoolSizes.from_env(),
        scaling=scaling,
        coalesce=coalesce,
        worker_node=worker_node_id,
    )
    data_node = data_node_id or current_node_id()  # the node running `omray up` holds the databases
    _remove_queue_store_actor(names, db)
    worker_pools(names, paths, options.pools, options.worker_env, data_node_id=options.worker_node)
    queue = (
        ray.remote(QueueRuntime)
        .options(
            **_COMMON_OPTIONS,
            name=names.queue,
            namespace=names.namespace,
            get_if_exists=True,
            max_task_retries=-1,  # dispatch is idempotent for a pending job key
            # Concurrent dispatch calls wait together for one group commit.
            max_concurrency=32,
            scheduling_strategy=_node_affinity(data_node),
            # The path of every agent hook: started at the agents' own priority (Ray's job
            # supervisor does the same for itself), with memory work below it.
            runtime_env={"env_vars": {RAY_WORKER_NICENESS_ENV: str(QUEUE_NICENESS)}},
        )
        .remote(names, db, paths, data_node, options)
    )
    ray.get(queue.ping.remote())  # type: ignore[attr-defined]  # a Ray actor handle
    return queue


def _check_runtime_arguments(handler_paths: Mapping[str, str], max_in_flight: int | None) -> None:
    """:class:`SettingsError` for handler ids without a role, malformed handler paths (``module:function``
    with an importable module) and a ``max_in_flight`` below 1; nothing is created before this."""
    unknown = sorted(set(handler_paths) - set(ROLE_NAMES))
    if unknown:
        raise SettingsError(f"no worker role serves handler ids {unknown!r}; known: {sorted(ROLE_NAMES)!r}")
    for handler_id, path in handler_paths.items():
        module, _, function = path.partition(":") if isinstance(path, str) else ("", "", "")
        if not module or not function.isidentifier():
            raise SettingsError(f"handler path of {handler_id!r} must be 'module:function', got {path!r}")
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise SettingsError(f"handler module {module!r} of {handler_id!r} cannot be imported")
    if max_in_flight is not None and (
        not isinstance(max_in_flight, int) or isinstance(max_in_flight, bool) or max_in_flight < 1
    ):
        raise SettingsError(f"max_in_flight must be an integer >= 1 (or None), got {max_in_flight!r}")


def _remove_queue_store_actor(names: RuntimeNames, queue_db: str) -> None:
    """Remove a StoreActor an earlier version ran for the queue's file: the queue is now its one writer."""
    try:
        ray.kill(ray.get_actor(names.store(queue_db), namespace=names.namespace), no_restart=True)
    except ValueError:
        return  # none: the usual case


def remove_runtime(names: RuntimeNames | None = None, db_paths: list[str] | None = None) -> list[str]:
    """Kill the runtime's named actors (no restart); returns the names removed."""
    names = names or RuntimeNames()
    removed: list[str] = []
    candidates = [names.queue, names.observer, names.reflector, names.indexer]
    members = tuple(f"{names.prefix}.{role}." for role in ROLE_NAMES.values())
    for info in _list_named_actors(names.namespace):
        data = (f"{names.prefix}.store.", f"{names.prefix}.reader.")
        if info.startswith((*data, *members)) and info not in candidates:
            candidates.append(info)
    handles: dict[str, Any] = {}
    for actor_name in candidates:
        try:
            handles[actor_name] = ray.get_actor(actor_name, namespace=names.namespace)
        except ValueError:
            continue
    _close_worker_clients(
        [handle for name, handle in handles.items() if name.startswith(members)], timeout_s=5.0
    )
    for actor_name, handle in handles.items():
        ray.kill(handle, no_restart=True)
        removed.append(actor_name)
    return removed


def _close_worker_clients(workers: list[Any], timeout_s: float) -> None:
    """Ask workers to close their HTTP clients before they are killed (a kill runs no exit hooks)."""
    if not workers:
        return
    refs = [worker.shutdown.remote() for worker in workers]
    try:
        ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    except Exception as exc:  # a dead or busy worker is killed anyway
        logger.info("worker shutdown skipped", extra={"error_class": type(exc).__name__})


def _list_named_actors(namespace: str) -> list[str]:
    try:
        entries = ray.util.list_named_actors(all_namespaces=True)
    except Exception:  # older Ray or a transient GCS error: fall back to the fixed names
        return []
    return [e["name"] for e in entries if isinstance(e, dict) and e.get("namespace") == namespace]
