"""How much of a growing line file is complete (standard library only: the agent hook loads it).

A transcript or events file that is still being written may end in a half-written line. Both the
hook on the agent's hot path (``cluster.commands.hook_fast``) and the live import
(``persistence.importers.live``) count only the bytes through the last newline; this is that one
count, read backwards in chunks so a long file costs one short read.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing: the agent hook loads this
if TYPE_CHECKING:
    from typing import BinaryIO, Final

TAIL_CHUNK: Final[int] = 64 * 1024
"""Bytes read per step while looking backwards for the last newline."""


def complete_length_of(handle: BinaryIO, end: int) -> int:
    """Bytes of the open ``handle`` through its last newline before ``end`` (0 when there is none)."""
    position = end
    while position > 0:
        start = max(0, position - TAIL_CHUNK)
        handle.seek(start)
        chunk = handle.read(position - start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        position = start
    return 0
