"""The demo's sample coding session, for benchmarks and tests.

It lives in :mod:`cluster.demo_session`, which ships in the package (``omray demo`` runs it); the
``bench`` package does not ship.
"""

from cluster.demo_session import SCHEMA_VERSION, commit_turn, demo_session, event_line

__all__ = ["SCHEMA_VERSION", "commit_turn", "demo_session", "event_line"]
