"""Reaching a memory database where it lives, from any process of the cluster.

Each memory database lives on one node, chosen when it is first used and recorded by the queue
(:mod:`protocol.placement`, :class:`actors.queue.placement.PlacementRegistry`). Its StoreActor is
found by name, or created with the Ray scheduling options of its placement (:func:`placement_options`),
so it runs there and nowhere else: on a node label, a custom resource or a node id.

The link's *data methods* (:data:`DATA_METHODS`) are served here, by any process that is a Ray
driver or actor (the client's link child, the CLI, tests): locating a database (and placing it, on
first use), shipping a session's events to the database's node-local log, asking how far that
log goes, and ``memory_search`` / ``recall`` answered by the database's ReaderActor.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import ray
from pydantic import ValidationError
from ray.exceptions import GetTimeoutError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster.naming import RuntimeNames
from cluster.ray_calls import StoreProxy
from protocol.errors import InvalidPayloadError, RuntimeNotRunningError
from protocol.placement import (
    NODE_LABEL,
    AgentNode,
    DataNodeLostError,
    DataPlacement,
    PlacementRequest,
    valid_node_name,
)

logger = logging.getLogger("omray.cluster")

COMMON_ACTOR_OPTIONS: Final[dict[str, Any]] = {"lifetime": "detached", "max_restarts": -1, "num_cpus": 0}
"""Every omray actor is detached, restarts without limit and reserves no CPU (``cluster/runtime.py``)."""

BACKGROUND_NICENESS: Final = 17
"""Niceness of the Observer, Reflector and StoreActor processes. Ray starts every actor process at
15 (its ``worker_niceness``); memory work is background work, so these go to 17, below the
QueueActor: when cores are short, the queue (the path of every agent hook) gets the CPU first.
Workers wait on models most of the time; this only orders who runs when the machine is busy."""


def current_node_id() -> str:
    """Id of the Ray node this process runs on."""
    node_id: str = ray.get_runtime_context().get_node_id()
    return node_id


@functools.cache
def _actor_classes() -> tuple[type, type]:
    """The StoreActor and ReaderActor as Ray actors: each can say which node it runs on. Built on
    first use, so a process that only ships events or asks the queue (an agent's link child) never
    imports the memory and index code."""
    from actors.store.actor import StoreActor as BaseStoreActor
    from actors.store.reader import ReaderActor as BaseReaderActor

    class StoreActor(BaseStoreActor):
        """:class:`actors.store.actor.StoreActor` on its database's node."""

        def node_id(self) -> str:
            """The Ray node this actor (and so the database's file) is on."""
            return current_node_id()

    class ReaderActor(BaseReaderActor):
        """:class:`actors.store.reader.ReaderActor` beside its StoreActor."""

        def node_id(self) -> str:
            """The Ray node this actor runs on."""
            return current_node_id()

    return StoreActor, ReaderActor


def store_handle(names: RuntimeNames, db_path: str | Path, placement: DataPlacement | None = None) -> Any:
    """The StoreActor of memory database ``db_path``, created on demand on ``placement``'s node.

    ``placement`` defaults to the caller's node. Processes that do not know where the database
    lives use :func:`cluster.data_node.store_of`, which asks the queue's record, so a process on
    another node never creates a store (and an empty file) where the database does not live. (The
    queue's own database has no StoreActor: the QueueActor is its one writer.)
    """
    path = str(Path(db_path).resolve())
    options: dict[str, Any] = {
        **COMMON_ACTOR_OPTIONS,
        "name": names.store(path),
        "namespace": names.namespace,
        "get_if_exists": True,
        "max_task_retries": 0,
        **placement_options(placement or DataPlacement(node_id=current_node_id())),
    }
    return ray.remote(_actor_classes()[0]).options(**options).remote(path, niceness=BACKGROUND_NICENESS)


READER_CONCURRENCY: Final = 16
"""Reads one ReaderActor serves at once (jobs and searches of every node wait on it)."""


def reader_handle(names: RuntimeNames, db_path: str | Path, placement: DataPlacement | None = None) -> Any:
    """The ReaderActor of memory database ``db_path``, created on demand on ``placement``'s node
    (the StoreActor's: the same options put both on the same node)."""
    path = str(Path(db_path).resolve())
    placed = placement or DataPlacement(node_id=current_node_id())
    writer = StoreProxy(
        store_of(names, path) if placement is not None else store_handle(names, path), durable=True
    )
    options: dict[str, Any] = {
        **COMMON_ACTOR_OPTIONS,
        "name": names.reader(path),
        "namespace": names.namespace,
        "get_if_exists": True,
        "max_task_retries": 0,
        "max_concurrency": READER_CONCURRENCY,
        **placement_options(placed),
    }
    actor: Any = ray.remote(_actor_classes()[1])
    return actor.options(**options).remote(path, writer, niceness=BACKGROUND_NICENESS)


DATA_METHODS: Final = frozenset({"locate_database", "ship_events", "events_tail", "read_tool"})
"""Link methods served here rather than by the queue actor."""


class DataNodeUnavailableError(RuntimeNotRunningError):
    """The database's node did not answer within the call's deadline."""


def _queue(names: RuntimeNames) -> Any:
    try:
        return ray.get_actor(names.queue, namespace=names.namespace)
    except ValueError:
        raise RuntimeNotRunningError(
            f"no omray queue actor {names.queue!r} in namespace {names.namespace!r}; run `omray up`"
        ) from None


def _get(reference: Any, timeout_s: float, what: str) -> Any:
    try:
        return ray.get(reference, timeout=max(timeout_s, 0.001))
    except GetTimeoutError:
        ray.cancel(reference)
        raise DataNodeUnavailableError(
            f"the memory database's node did not answer {what!r} in {timeout_s:g} s"
        ) from None


RESOURCE_SHARE: Final = 0.001
"""How much of a placement's custom resource each of a database's actors asks for (a thousand
databases fit on a node that offers one unit)."""

_cache_lock = threading.Lock()
_this_node: AgentNode | None = None
_placements: dict[tuple[str, str, str], DataPlacement] = {}


def _labels_of(node_id: str) -> dict[str, str]:
    for node in ray.nodes():  # type: ignore[no-untyped-call]
        if node.get("NodeID") == node_id:
            labels = node.get("Labels") or {}
            return {str(key): str(value) for key, value in labels.items()}
    return {}


def this_node() -> AgentNode:
    """This process's node: its id, and its ``omray-node`` label if it has a valid one."""
    global _this_node
    with _cache_lock:
        if _this_node is not None:
            return _this_node
    node_id = str(ray.get_runtime_context().get_node_id())
    label = _labels_of(node_id).get(NODE_LABEL)
    found = AgentNode(node_id=node_id, label=label if valid_node_name(label) else None)
    with _cache_lock:
        _this_node = found
    return found


def placement_options(placement: DataPlacement) -> dict[str, Any]:
    """The Ray actor options that run an actor on ``placement``'s node, and only there.

    A labelled node or a resource survives a restart of that node: an actor placed there waits
    (pending) while the node is away and comes back on it. A node id does not.
    """
    if placement.node is not None:
        return {"label_selector": {NODE_LABEL: placement.node}}
    if placement.resource is not None:
        return {"resources": {placement.resource: RESOURCE_SHARE}}
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=str(placement.node_id), soft=False)}


def placement_alive(placement: DataPlacement) -> bool:
    """Whether a live node of the cluster can hold ``placement``'s actors now."""
    for node in ray.nodes():  # type: ignore[no-untyped-call]
        if not node.get("Alive"):
            continue
        if placement.node_id is not None and node.get("NodeID") == placement.node_id:
            return True
        if placement.node is not None and (node.get("Labels") or {}).get(NODE_LABEL) == placement.node:
            return True
        if placement.resource is not None and (node.get("Resources") or {}).get(placement.resource, 0) > 0:
            return True
    return False


def check_alive(names: RuntimeNames, db_path: str) -> None:
    """Raise :class:`DataNodeLostError` when no live node can hold ``db_path``'s actors now."""
    placement = placement_of(names, db_path)
    if not placement_alive(placement):
        raise DataNodeLostError(db_path, placement)


def placement_of(
    names: RuntimeNames, db_path: str, request: PlacementRequest | None = None, timeout_s: float = 30.0
) -> DataPlacement:
    """Where ``db_path`` lives, as the queue recorded it (placing it now, by ``request``, on first use).

    A database's placement never changes, so answers are kept for the life of the process (a
    request that names a node is always sent: the queue refuses one that conflicts).
    """
    key = (names.namespace, names.queue, db_path)
    if request is None or request.explicit is None:
        with _cache_lock:
            known = _placements.get(key)
        if known is not None:
            return known
    asked = request or PlacementRequest(db_path=db_path)
    answer = _get(
        _queue(names).place_database.remote(asked.model_dump(mode="json")), timeout_s, "place_database"
    )
    placement = DataPlacement.model_validate(answer)
    with _cache_lock:
        _placements[key] = placement
    return placement


def store_of(
    names: RuntimeNames, db_path: str, timeout_s: float = 30.0, request: PlacementRequest | None = None
) -> Any:
    """The StoreActor of ``db_path``: the running one, else one created on the database's node."""
    try:
        return ray.get_actor(names.store(db_path), namespace=names.namespace)
    except ValueError:
        pass
    return store_handle(names, db_path, placement_of(names, db_path, request, timeout_s))


def reader_of(names: RuntimeNames, db_path: str, timeout_s: float = 30.0) -> Any:
    """The ReaderActor of ``db_path``: the running one, else one created on the database's node."""
    try:
        return ray.get_actor(names.reader(db_path), namespace=names.namespace)
    except ValueError:
        pass
    return reader_handle(names, db_path, placement_of(names, db_path, None, timeout_s))


def locate(
    names: RuntimeNames, db_path: str, node: str | None, resource: str | None, timeout_s: float
) -> dict[str, Any]:
    """Place ``db_path`` (on first use: the settings' node or resource, else this process's node) and
    say where it lives: ``{"placement": ..., "local": <its StoreActor runs on this node>}``."""
    try:
        request = PlacementRequest(db_path=db_path, node=node, resource=resource, agent=this_node())
    except ValidationError as exc:
        raise InvalidPayloadError(f"invalid placement request ({exc.error_count()} errors)") from None
    placement = placement_of(names, db_path, request, timeout_s)
    here = this_node()
    if placement.node is not None:  # by name: known without asking the node (it may be down)
        local = placement.node == here.label
    elif placement.node_id is not None:
        local = placement.node_id == here.node_id
    else:  # a resource several nodes may offer: where does the StoreActor run?
        store = store_of(names, db_path, timeout_s, request)
        local = str(_get(store.node_id.remote(), timeout_s, "node_id")) == here.node_id
    return {"placement": placement.model_dump(mode="json"), "local": local}


def data_call(names: RuntimeNames, method: str, args: Sequence[Any], timeout_s: float) -> Any:
    """Serve one data method of the link (:data:`DATA_METHODS`) within ``timeout_s``."""
    if method == "locate_database":
        db_path, node, resource = _arguments(args, 3, method)
        return locate(names, str(db_path), node, resource, timeout_s)
    if method == "ship_events":
        db_path, session_id, events = _arguments(args, 3, method)
        store = store_of(names, str(db_path), timeout_s)
        return _get(store.append_events.remote(str(session_id), list(events)), timeout_s, method)
    if method == "events_tail":
        db_path, session_id = _arguments(args, 2, method)
        store = store_of(names, str(db_path), timeout_s)
        return int(_get(store.events_tail.remote(str(session_id)), timeout_s, method))
    if method == "read_tool":
        db_path, operation, kwargs = _arguments(args, 3, method)
        reader = reader_of(names, str(db_path), timeout_s)
        return _get(reader.read_tool.remote(str(operation), dict(kwargs)), timeout_s, method)
    raise InvalidPayloadError(f"no data method {method!r}")


def _arguments(args: Sequence[Any], count: int, method: str) -> Sequence[Any]:
    if len(args) != count:
        raise InvalidPayloadError(f"{method} takes {count} arguments, got {len(args)}")
    return args


def ask_reader(
    call: Any, db_path: str, operation: str, kwargs: dict[str, Any], timeout_s: float
) -> dict[str, object]:
    """A read tool of a client whose database lives on another node, answered there by its
    ReaderActor through the client's link (``call``: ``link.call``): the answer a client on that
    node computes. A failure is a ``storage_unavailable`` answer, as a local read failure is."""
    try:
        answer: dict[str, object] = call("read_tool", (db_path, operation, kwargs), timeout_s)
    except Exception as exc:
        logger.warning("remote read failed", extra={"tool": operation, "error_class": type(exc).__name__})
        return {
            "ok": False,
            "error": "storage_unavailable",
            "message": f"Memory could not be read ({type(exc).__name__}).",
        }
    return answer
