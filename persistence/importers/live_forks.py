"""Copied history in a live transcript (pure core and its small file): what was imported already.

``claude --resume <id> --fork-session`` (and ``/branch``, a compaction that re-writes the history)
starts a transcript with copies of lines another transcript already held, same ``uuid``; its own
turns follow. Imported again, that history would be observed twice. So every sync records the
``uuid`` of each record it read (:data:`SOURCE_IDS_FILE`, per session), and a new span's leading
records whose ids the project already read elsewhere (another session, or another transcript of the
same session) are not converted (:func:`inherited_prefix`). The decision is taken once per span,
before it has events of its own, so its conversion stays a pure function of its bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from persistence.importers.common import iter_record_spans
from persistence.importers.live_spans import Span

SOURCE_IDS_FILE = "live.uuids"
"""The ``uuid`` of every transcript record a session's spans read, one a line with the key of its
transcript (``<uuid> <transcript key>``, appended by each sync): how a forked transcript's copied
history is recognised, in another session of the project or in another transcript of this one."""


CONVERSATION_RECORDS = frozenset({"user", "assistant"})
"""Claude Code record types that carry the conversation (the others are housekeeping)."""


def inherited_prefix(
    records: Iterable[tuple[int, Mapping[str, Any]]], known: Container[str]
) -> tuple[int, bool]:
    """``(end, settled)``: the bytes of a transcript's copied history and whether that is final (pure).

    ``records`` are ``(end offset, record)`` in file order; ``known`` the record ids (``uuid``)
    already imported in the project. The copied history runs through the last record with a known
    id before the first conversation record (:data:`CONVERSATION_RECORDS`) whose id is unknown; it
    is final once that record was seen (more bytes may still be copied history otherwise).
    Housekeeping records in between (a summary, a snapshot) never end it.
    """
    end = 0
    for offset, record in records:
        record_id = record.get("uuid")
        if isinstance(record_id, str) and record_id in known:
            end = offset
        elif record.get("type") in CONVERSATION_RECORDS:
            return end, True
    return end, False


def transcript_key(transcript: str) -> str:
    """A short key naming one transcript path in :data:`SOURCE_IDS_FILE` (no path in the file)."""
    return hashlib.sha256(transcript.encode("utf-8", "surrogateescape")).hexdigest()[:16]


class KnownIds:
    """The record ids the project's sessions read (their :data:`SOURCE_IDS_FILE`), loaded on first
    use: at most once per sync, and only when a span's copied history is still undecided."""

    def __init__(self, session_dir: Path) -> None:
        self.session_dir = session_dir
        self._others: set[str] = set()
        self._own: dict[str, set[str]] = {}  # transcript key -> ids this session read from it
        self._loaded = False

    def excluding(self, transcript: str) -> _KnownElsewhere:
        """The ids known from anywhere but ``transcript`` in this session: a sync that lost its cursor
        converts that transcript again from its first record and must find the same events."""
        return _KnownElsewhere(self, transcript_key(transcript))

    def known_elsewhere(self, record_id: object, key: str) -> bool:
        """Whether another session, or another transcript (not ``key``) of this one, read ``record_id``."""
        self._load()
        return record_id in self._others or any(
            record_id in ids for other, ids in self._own.items() if other != key
        )

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        try:
            folders = sorted(self.session_dir.parent.iterdir())
        except OSError:
            return
        for folder in folders:
            try:
                data = (folder / SOURCE_IDS_FILE).read_bytes()
            except OSError:  # none yet (a session of an older omray, or another folder)
                continue
            text = data[: data.rfind(b"\n") + 1].decode("utf-8", errors="replace")
            own = folder.name == self.session_dir.name
            for line in text.splitlines():
                record_id, _, key = line.partition(" ")
                if own:
                    self._own.setdefault(key, set()).add(record_id)
                elif record_id:
                    self._others.add(record_id)


@dataclass(frozen=True)
class _KnownElsewhere:
    known: KnownIds
    key: str

    def __contains__(self, record_id: object) -> bool:
        return self.known.known_elsewhere(record_id, self.key)


def settle_inheritance(span: Span, target: int, known: Container[str]) -> Span:
    """``span`` with its copied history decided as far as ``target`` bytes show it."""
    if span.inherited_settled:
        return span
    if span.format != "claude-code" or span.emitted > 0:
        # Codex records carry no uuid; a span with events of its own (an older omray's) keeps its
        # conversion as it was.
        return span.model_copy(update={"inherited_settled": True})
    records = (
        (end, record)
        for _, end, record in iter_record_spans(Path(span.transcript), target, regular_only=True)
    )
    end, settled = inherited_prefix(records, known)
    return span.model_copy(update={"inherited_to": end, "inherited_settled": settled})
