"""The text of cited events, read from each session's ``events.jsonl`` for source chunks.

Sessions live under one *events root*: ``<root>/<session id>/events.jsonl`` (the layout the client
and the importers write). A file is read whole once per version (inode, size, mtime) and its
event texts kept in a small per-process cache, so indexing a session's memories in batches reads
its file once, not once per memory. A missing, unreadable or corrupt file gives no source text
(the memories stay indexed by their own text); the log names the exception class only.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from persistence.events_reader import iter_events
from protocol.errors import EventsFileError
from protocol.source_text import event_search_text

logger = logging.getLogger("omray.semantic")

CACHED_FILES: Final[int] = 16
"""Event files whose texts are kept per process."""
EVENTS_FILE: Final[str] = "events.jsonl"

_FileKey = tuple[int, int, int]
_cache: OrderedDict[str, tuple[_FileKey, dict[int, str]]] = OrderedDict()
_cache_lock = threading.Lock()


def events_path(root: str, session_id: str) -> Path | None:
    """``<root>/<session>/events.jsonl``, or ``None`` for a session id that is not a plain name."""
    if session_id in ("", ".", "..") or "/" in session_id or "\\" in session_id or "\0" in session_id:
        return None
    return Path(root) / session_id / EVENTS_FILE


def _read(path: Path) -> dict[int, str]:
    texts: dict[int, str] = {}
    for event in iter_events(path):
        text = event_search_text(event)
        if text:
            texts[event.seq] = text
    return texts


class SourceEvents:
    """Event texts of the sessions under one events root (thread-safe; shares a process cache)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def texts(self, session_id: str, seqs: Iterable[int]) -> dict[int, str]:
        """Text of each wanted seq that has searchable text (others are left out)."""
        wanted = list(seqs)
        path = events_path(self.root, session_id)
        if not wanted or path is None:
            return {}
        try:
            info = os.stat(path)
            key = (info.st_ino, info.st_size, info.st_mtime_ns)
            name = str(path)
            with _cache_lock:
                cached = _cache.get(name)
                if cached is not None and cached[0] == key:
                    _cache.move_to_end(name)
                    texts = cached[1]
                else:
                    texts = None
            if texts is None:
                texts = _read(path)
                with _cache_lock:
                    _cache[name] = (key, texts)
                    _cache.move_to_end(name)
                    while len(_cache) > CACHED_FILES:
                        _cache.popitem(last=False)
        except FileNotFoundError:
            return {}
        except (OSError, EventsFileError) as exc:
            logger.warning("om.semantic.source_unreadable", extra={"exception_class": type(exc).__name__})
            return {}
        return {seq: texts[seq] for seq in wanted if seq in texts}
