"""Create private folders: every folder omray creates for its data is 0700 (DESIGN.md invariant 8).

Standard library only. ``Path.mkdir``'s mode is cut by the umask and ``parents=True`` ignores it, so
each missing folder is created on its own and given its mode exactly; folders that already exist are
left as they are.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

PRIVATE_DIR_MODE: Final[int] = 0o700
"""Mode of every folder omray creates for its data."""


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents, each 0700 (existing folders are left as they are).

    A folder another process creates meanwhile is left to it (that process gives it its mode).
    Raises ``OSError`` when a folder cannot be created.
    """
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(folder, PRIVATE_DIR_MODE)
