"""Reaching a memory database where it lives: its StoreActor, from any process of the cluster.

The link's *data methods* (:data:`DATA_METHODS`) are served here, by any process that is a Ray
driver or actor (the client's link child, the CLI, tests): shipping a session's events to the
database's node-local log and asking how far that log goes. The StoreActor is found by name, or
created where the database lives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import ray
from ray.exceptions import GetTimeoutError

from cluster.naming import RuntimeNames
from protocol.errors import InvalidPayloadError, RuntimeNotRunningError

DATA_METHODS: Final = frozenset({"ship_events", "events_tail"})
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


def store_of(names: RuntimeNames, db_path: str, timeout_s: float = 30.0) -> Any:
    """The StoreActor of ``db_path``: the running one, else one created on the runtime's data node."""
    from cluster.runtime import store_handle

    try:
        return ray.get_actor(names.store(db_path), namespace=names.namespace)
    except ValueError:
        pass
    node = str(_get(_queue(names).data_node.remote(), timeout_s, "data_node"))
    return store_handle(names, db_path, data_node_id=node)


def data_call(names: RuntimeNames, method: str, args: Sequence[Any], timeout_s: float) -> Any:
    """Serve one data method of the link (:data:`DATA_METHODS`) within ``timeout_s``."""
    if method == "ship_events":
        db_path, session_id, events = _arguments(args, 3, method)
        store = store_of(names, str(db_path), timeout_s)
        return _get(store.append_events.remote(str(session_id), list(events)), timeout_s, method)
    if method == "events_tail":
        db_path, session_id = _arguments(args, 2, method)
        store = store_of(names, str(db_path), timeout_s)
        return int(_get(store.events_tail.remote(str(session_id)), timeout_s, method))
    raise InvalidPayloadError(f"no data method {method!r}")


def _arguments(args: Sequence[Any], count: int, method: str) -> Sequence[Any]:
    if len(args) != count:
        raise InvalidPayloadError(f"{method} takes {count} arguments, got {len(args)}")
    return args
