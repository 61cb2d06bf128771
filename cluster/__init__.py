"""Everything that touches Ray, and the public client: ``from cluster import connect``.

The top of the package is the Ray wiring: starting and stopping a runtime (``up_down``: ``omray
up/down``; Ray's head process, ``ray_head``), the named actors and their pools (``named_actors``
creates and wires them, ``ray_calls`` makes every Ray call to them, ``pools``, ``autoscale``,
``naming``), the client and its connection to the runtime (``client``; ``runtime_connection``:
deadlines, the driver child that rejoins a restarted runtime; ``outbox``, ``forget``), metrics
(``metrics``, ``metric_catalog``, ``grafana``), the runtime status, and ``project_dirs`` (standard
library only, shared with the hook hot path). It imports ``protocol``, ``persistence`` and
``actors``, never its two subpackages: :mod:`cluster.servers` (MCP and the memory viewer, no Ray)
and :mod:`cluster.commands` (the ``omray`` CLI), which sit above it in that order.

``OmrayClient`` and ``connect`` are imported on first use, so the parts of the CLI that never
reach Ray (agent hooks, ``omray mcp``, ``omray memory``) start without importing Ray.
"""

from __future__ import annotations

# typing.TYPE_CHECKING without importing typing (2 ms): every agent hook call imports this package.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from cluster.client import OmrayClient, connect

__all__ = ["OmrayClient", "connect"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from cluster import client

        return getattr(client, name)
    raise AttributeError(f"module 'cluster' has no attribute {name!r}")
