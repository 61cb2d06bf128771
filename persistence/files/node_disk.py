"""Whose disk a path is on: a guard that makes one machine behave as several nodes with disks of their own.

On a real cluster every node has its own disk, and a process that opens a path of another node's
disk opens (or creates) some other file there, or nothing. On one machine (``ray.cluster_utils.Cluster``
in the tests, a laptop trying a layout) every node shares the machine's disk, so such a mistake
goes unseen. With ``OMRAY_CLUSTER_DISKS`` (a folder holding one folder per node) and
``OMRAY_NODE_DISK`` (this node's folder in it) set in a node's environment, opening a database,
an events file, a shipped-event log or a derived index that lies under the first and not under the
second raises :class:`ForeignDiskError` instead. Without both variables nothing is checked.
"""

from __future__ import annotations

import os
from typing import Final

from protocol.errors import StorageError

CLUSTER_DISKS_ENV: Final = "OMRAY_CLUSTER_DISKS"
"""The folder holding every node's disk folder."""
NODE_DISK_ENV: Final = "OMRAY_NODE_DISK"
"""This node's disk folder."""


class ForeignDiskError(StorageError):
    """A path on another node's disk was about to be opened on this node."""


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_on_this_node(path: str | os.PathLike[str]) -> None:
    """Raise :class:`ForeignDiskError` when ``path`` is on another node's disk (see the module)."""
    disks = os.environ.get(CLUSTER_DISKS_ENV, "")
    own = os.environ.get(NODE_DISK_ENV, "")
    if not disks or not own:
        return
    absolute = os.path.abspath(os.fspath(path))
    if _inside(absolute, os.path.abspath(disks)) and not _inside(absolute, os.path.abspath(own)):
        raise ForeignDiskError(f"{absolute!r} is on another node's disk, not on this node's ({own!r})")
