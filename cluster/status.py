"""``omray status``: what runs, from Ray's state API and the queue actor."""

from __future__ import annotations

from typing import Any

import ray

from cluster.client import OmrayClient, init_ray
from cluster.naming import RuntimeNames
from protocol.errors import RuntimeNotRunningError


def runtime_status(address: str = "auto", names: RuntimeNames | None = None) -> dict[str, Any]:
    """Actors of the runtime with their state, plus the queue's status (ids and counts only)."""
    names = names or RuntimeNames()
    init_ray(address)
    from ray.util.state import list_actors

    actors = [
        {"name": a.name, "state": a.state, "pid": a.pid, "node_id": a.node_id}
        for a in list_actors(
            address=ray.get_runtime_context().gcs_address,
            filters=[("ray_namespace", "=", names.namespace)],
            limit=1000,
        )
        if a.name and a.name.startswith(f"{names.prefix}.")
    ]
    actors.sort(key=lambda a: (a["name"], a["state"] != "ALIVE"))
    queue: dict[str, Any] | None
    try:
        client = OmrayClient(names)
        queue = client.status()
        queue["job_counts"] = client.job_counts()
    except RuntimeNotRunningError:
        queue = None
    except ray.exceptions.RayError:
        queue = None
    return {"actors": actors, "queue": queue}
