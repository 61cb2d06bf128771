"""One finding of ``omray integrate``'s checks (apart, so every check module can share it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One thing the agent will need, and whether it is there."""

    ok: bool
    """Whether it is ready."""
    what: str
    """What was checked."""
    detail: str
    """What was found; when not ready, what to do."""
    note: bool = False
    """Worth knowing but not a failure (``ok`` stays true): printed ``note``."""
