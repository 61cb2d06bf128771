"""``omray status``: what runs, from Ray's state API and the queue actor."""

from __future__ import annotations

from typing import Any

import ray

from cluster.client import OmrayClient, init_ray
from cluster.naming import RuntimeNames
from cluster.runtime_connection import RuntimeRejectedError
from protocol.errors import RuntimeNotRunningError


def runtime_status(address: str | None = None, names: RuntimeNames | None = None) -> dict[str, Any]:
    """Actors of the runtime with their state, plus the queue's status (ids and counts only)."""
    names = names or RuntimeNames()
    init_ray(address)
    actors = _actors(names)
    actors.sort(key=lambda a: (a["name"], a["state"] != "ALIVE"))
    queue: dict[str, Any] | None
    older = False
    try:
        client = OmrayClient(names)
        queue = client.status()
        queue["job_counts"] = client.job_counts()
        queue["recent_failures"] = [explain(failure) for failure in queue.get("recent_failures", [])]
    except RuntimeRejectedError:  # a queue runs, older than this CLI: the actors still show
        queue, older = None, True
    except RuntimeNotRunningError:
        queue = None
    except ray.exceptions.RayError:
        queue = None
    return {"actors": actors, "queue": queue, "queue_older_than_cli": older}


def explain(failure: dict[str, Any]) -> dict[str, Any]:
    """A recent failure with its last failure category, what it means and how to fix it."""
    from protocol.outcomes import explain_failure, last_failure

    category = last_failure(failure)
    cause, fix = explain_failure(category)
    return {**failure, "last_failure": category, "cause": cause, "fix": fix}


UNKNOWN_STATE = "UNKNOWN"
"""An actor's state when the head runs no state API (``omray up`` without ``--dashboard``)."""


def _actors(names: RuntimeNames) -> list[dict[str, Any]]:
    """omray's actors with their state from Ray's state API, or only their names from the GCS.

    The state API is a dashboard module; a head started without the dashboard still lists its
    named actors.
    """
    from ray.util.state import list_actors
    from ray.util.state.exception import RayStateApiException

    prefix = f"{names.prefix}."
    try:
        found = list_actors(
            address=ray.get_runtime_context().gcs_address,
            filters=[("ray_namespace", "=", names.namespace)],
            limit=1000,
        )
    except RayStateApiException:
        return [
            {"name": entry["name"], "state": UNKNOWN_STATE, "pid": None, "node_id": None}
            for entry in ray.util.list_named_actors(all_namespaces=True)
            if entry["namespace"] == names.namespace and entry["name"].startswith(prefix)
        ]
    return [
        {"name": a.name, "state": a.state, "pid": a.pid, "node_id": a.node_id}
        for a in found
        if a.name and a.name.startswith(prefix)
    ]
