"""Everything that touches Ray: bootstrap, named actors, the client and the CLI."""

from __future__ import annotations

from cluster.client import OmrayClient, connect

__all__ = ["OmrayClient", "connect"]
