"""Everything that touches Ray: bootstrap, named actors, the client and the CLI.

``OmrayClient`` and ``connect`` are imported on first use, so the parts of the CLI that never
reach Ray (agent hooks, ``omray mcp``, ``omray memory``) start without importing Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cluster.client import OmrayClient, connect

__all__ = ["OmrayClient", "connect"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from cluster import client

        return getattr(client, name)
    raise AttributeError(f"module 'cluster' has no attribute {name!r}")
