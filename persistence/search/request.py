"""One ``memory_search`` request, validated and normalized: what exact and hybrid search read.

``actors.read.search_arguments.validate_search_arguments`` builds it from the tool's arguments; the
exact-search plans (``persistence.search.sql``), the in-memory reference model
(``actors.read.search``) and the semantic index (``persistence.semantic``) all read this one type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.canonical import php_trim
from protocol.tool_specs import SearchMode


@dataclass(frozen=True, slots=True)
class DateBounds:
    """Inclusive per-kind date bounds, already normalized (``actors.read.search_arguments`` does that)."""

    observation_after: str | None = None
    """Lower bound on an observation (or transcript event) ``timestamp`` (``YYYY-MM-DD HH:MM``)."""
    observation_before: str | None = None
    """Upper bound on an observation ``timestamp``."""
    reflection_after: str | None = None
    """Lower bound on a reflection ``created_at`` (ISO-8601 UTC)."""
    reflection_before: str | None = None
    """Upper bound on a reflection ``created_at``."""

    @property
    def active(self) -> bool:
        """Whether any bound is set."""
        return any(
            bound is not None for bound in (*self.for_kind("observation"), *self.for_kind("reflection"))
        )

    def for_kind(self, kind: str) -> tuple[str | None, str | None]:
        """``(after, before)`` of a memory kind: an event is dated like an observation."""
        if kind in ("observation", "event"):
            return self.observation_after, self.observation_before
        return self.reflection_after, self.reflection_before

    def accepts(self, kind: str, timestamp: str) -> bool:
        """Whether a memory of ``kind`` dated ``timestamp`` is inside the bounds (string compares)."""
        after, before = self.for_kind(kind)
        return (after is None or after <= timestamp) and (before is None or timestamp <= before)


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """A span of memory time a query names, ``start <= t < end`` as ``YYYY-MM-DD HH:MM`` (UTC): hybrid
    search ranks memories dated inside it higher (``actors.read.query_time`` finds it)."""

    start: str
    """First minute inside the window."""
    end: str
    """First minute after it."""

    def contains(self, timestamp: str) -> bool:
        """Whether a memory dated ``timestamp`` (``YYYY-MM-DD HH:MM``, or ISO-8601 ``YYYY-MM-DDTHH:MM...``
        for a reflection) falls inside the window (string compares on the minute)."""
        minute = timestamp[:16].replace("T", " ")
        return self.start <= minute < self.end


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """A validated ``memory_search`` request with its date bounds normalized per table."""

    query: str
    """The query, trimmed (never empty)."""
    limit: int
    """Results to return, 1..50."""
    bounds: DateBounds = field(default_factory=DateBounds)
    """Inclusive per-table date bounds."""
    sessions: tuple[str, ...] | None = None
    """Sessions searched (``scope``): ``None`` is every session; else these ids, trimmed and unique."""
    mode: SearchMode = "auto"
    """``auto`` (hybrid when configured, else exact), ``exact`` or ``hybrid``."""
    query_date: str | None = None
    """The clock relative time phrases in the query are read against (``YYYY-MM-DD HH:MM`` UTC);
    ``None``: now."""

    def in_scope(self, session_id: str) -> bool:
        """Whether a memory of ``session_id`` may be returned."""
        return self.sessions is None or session_id in self.sessions

    @property
    def like_pattern(self) -> str:
        """The escaped ``LIKE`` pattern for this query (``ESCAPE '\\'``)."""
        return like_pattern(self.query)

    @property
    def fetch_limit(self) -> int:
        """Rows exact search fetches per table: one more than the limit, to tell ``truncated``."""
        return self.limit + 1


LIKE_ESCAPE = "\\"
"""Escape character of every ``LIKE`` pattern the read side builds (``ESCAPE '\\'``)."""


def escape_like(text: str) -> str:
    """``text`` with ``\\``, ``%`` and ``_`` escaped by :data:`LIKE_ESCAPE`: matched literally."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def like_pattern(query: str) -> str:
    """``'%' + escape(trim(query)) + '%'``: the exact-search pattern of a query."""
    return f"%{escape_like(php_trim(query))}%"
