"""Where the shared development data lives: ``shared/data`` next to the checkout.

The main checkout sits beside ``shared/``; a git worktree of it may sit a level deeper
(``wt/<name>/``), so the nearest ancestor that holds ``shared/data`` is taken.
"""

from __future__ import annotations

from pathlib import Path


def shared_data_dir() -> Path:
    """``<ancestor>/shared/data`` of the nearest ancestor that has one (else the main checkout's)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return here.parents[2] / "shared" / "data"
