"""Replace a file atomically: a reader sees the old bytes or the new ones, never a part.

Standard library only. The new bytes go to a temporary file beside the target, are flushed and
fsynced, get their mode, and are renamed over the target; on any failure (or interruption) the
temporary file is removed and the target is left as it was.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_file(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` atomically with permission bits ``mode`` (its folder must exist)."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
