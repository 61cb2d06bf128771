"""Pure logic of ``memory_search`` (exact mode) and ``recall`` (reference §13.2, §13.3, §13.6).

Argument validation, LIKE pattern escaping, result merging and the recall result shapes live here;
the SQL that fetches rows and the reading of ``events.jsonl`` live elsewhere. Every result is a
JSON-able dict; errors are ``{"ok": False, "error": <code>, "message": <text>}`` values, never
exceptions, because they are answers the model must read and correct.

Length: about 950 lines, on purpose (issue 29's transcript and event-recall shapes added ~130).
Argument validation (query, limit, dates, scope, mode, unknown keys) and the answer shapes of both
tools, strict-JSON cleaning of recall included, stay together so the typed corrections read alike;
the SQL lives in ``persistence/search_queries.py``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeGuard

from protocol.canonical import condense, php_trim
from protocol.ids import display_id
from protocol.memory_views import ObservationView, ReflectionView
from protocol.records import ObservationRecord, ReflectionRecord, SourceRef
from protocol.tool_specs import (
    MEMORY_SEARCH_ARGUMENTS,
    MEMORY_SEARCH_MAX_QUERY_BYTES,
    MEMORY_SEARCH_MAX_SCOPE_SESSIONS,
    MEMORY_SEARCH_MODES,
    SearchMode,
)

ToolResult = dict[str, object]
"""A JSON-able tool answer (success or error)."""

DEFAULT_SEARCH_LIMIT: Final[int] = 20
"""Results returned when ``limit`` is omitted."""

MAX_SEARCH_LIMIT: Final[int] = 50
"""Larger limits are clamped to this silently."""

LIKE_ESCAPE: Final[str] = "\\"
"""Escape character of the exact-search LIKE pattern (``ESCAPE '\\'``)."""

_DATE_BOUND = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}( [0-9]{2}:[0-9]{2})?\Z")
_MINUTE_KEY = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}\Z")
_SECOND_KEY = re.compile(r"^([0-9]{4}-[0-9]{2}-[0-9]{2})[ T]([0-9]{2}:[0-9]{2}:[0-9]{2})")
_MEMORY_ID = re.compile(r"^[a-f0-9]{12,64}\Z")
FULL_ID_LENGTH: Final[int] = 64
"""Length of a full memory id; shorter ids are prefixes."""


class SearchedObservation(ObservationView, Protocol):
    """What a search answer shows of an observation (a full record or a slim search hit)."""

    @property
    def run_id(self) -> str: ...


class SearchedReflection(ReflectionView, Protocol):
    """What a search answer shows of a reflection (a full record or a slim search hit)."""

    @property
    def run_id(self) -> str: ...
    @property
    def created_at(self) -> str: ...


class SearchedEvent(Protocol):
    """What a search answer shows of a transcript event (a slim search hit)."""

    @property
    def event_id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def timestamp(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def content(self) -> str: ...


EXCERPT_CHARS: Final[int] = 600
"""Characters of transcript text an exact hit's excerpt shows around the match."""


def excerpt_around(content: str, query: str, width: int = EXCERPT_CHARS) -> str:
    """About ``width`` characters of ``content`` around the first match of ``query`` (ASCII case
    folded, as ``LIKE`` folds it), whitespace condensed; the start of the text when it is not found."""
    flags = re.IGNORECASE | re.ASCII
    found = re.search(re.escape(query), content, flags) if query else None
    if found is None:
        return condense(content[:width])
    room = max(0, width - (found.end() - found.start())) // 2
    start = max(0, found.start() - room)
    return condense(content[start : start + width])


def source_item(seq: int, excerpt: str) -> ToolResult:
    """The ``source`` field of a hit in the transcript: where the matching text is."""
    return {"seq_start": seq, "seq_end": seq, "excerpt": excerpt}


def _widen_source(item: ToolResult, seq: int, excerpt: str) -> None:
    """Another matching event that ``item`` covers: its ``source`` range grows to include it (the
    excerpt stays the first one's)."""
    source = item.get("source")
    if not isinstance(source, dict):
        item["source"] = source_item(seq, excerpt)
        return
    source["seq_start"] = min(int(source["seq_start"]), seq)
    source["seq_end"] = max(int(source["seq_end"]), seq)


def event_search_item(event: SearchedEvent, excerpt: str) -> ToolResult:
    """A transcript hit that no observation covers: the event itself (``recall`` takes its id)."""
    return {
        "kind": "event",
        "session_id": event.run_id,
        "id": event.event_id,
        "display_id": display_id(event.event_id),
        "timestamp": event.timestamp,
        "content": excerpt,
        "source": source_item(event.seq, excerpt),
    }


def error_result(code: str, message: str) -> ToolResult:
    """An error answer in the shape every tool uses."""
    return {"ok": False, "error": code, "message": message}


# ------------------------------------------------------------------------------ memory_search: input


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """A validated ``memory_search`` request with its date bounds normalized per table."""

    query: str
    """The query, trimmed (never empty)."""
    limit: int
    """Results to return, 1..50."""
    observation_after: str | None = None
    """Inclusive lower bound on ``om_observation.timestamp`` (``YYYY-MM-DD HH:MM``)."""
    observation_before: str | None = None
    """Inclusive upper bound on ``om_observation.timestamp``."""
    reflection_after: str | None = None
    """Inclusive lower bound on ``om_reflection.created_at`` (ISO-8601 UTC)."""
    reflection_before: str | None = None
    """Inclusive upper bound on ``om_reflection.created_at``."""
    sessions: tuple[str, ...] | None = None
    """Sessions searched (``scope``): ``None`` is every session; else these ids, trimmed and unique."""
    mode: SearchMode = "auto"
    """``auto`` (hybrid when configured, else exact), ``exact`` or ``hybrid``."""

    def in_scope(self, session_id: str) -> bool:
        """Whether a memory of ``session_id`` may be returned."""
        return self.sessions is None or session_id in self.sessions

    @property
    def like_pattern(self) -> str:
        """The escaped ``LIKE`` pattern for this query."""
        return like_pattern(self.query)


def _format_message(field: str) -> str:
    return f"{field} must be YYYY-MM-DD or YYYY-MM-DD HH:MM."


_DAYS_IN_MONTH: Final[tuple[int, ...]] = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _is_real_calendar_value(value: str) -> bool:
    """Whether a ``YYYY-MM-DD[ HH:MM]`` string (format already checked) names a real date and time.

    Checked field by field on the proleptic Gregorian calendar rather than by a ``strftime`` round
    trip: the original accepts every 4-digit year (``0001-01-01`` included), while ``strftime``
    does not zero-pad years below 1000 on every platform and ``datetime`` has no year 0.
    """
    year, month, day = int(value[0:4]), int(value[5:7]), int(value[8:10])
    if not 1 <= month <= 12:
        return False
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = 29 if month == 2 and leap else _DAYS_IN_MONTH[month - 1]
    if not 1 <= day <= days:
        return False
    if " " not in value:
        return True
    return int(value[11:13]) <= 23 and int(value[14:16]) <= 59


def _check_date_bound(field: str, value: object) -> str | ToolResult | None:
    """The trimmed bound, ``None`` when absent or blank, or an error answer."""
    if value is None:
        return None
    assert isinstance(value, str)  # the handler checked the type already
    trimmed = php_trim(value)
    if trimmed == "":
        return None
    if not _DATE_BOUND.match(trimmed):
        return error_result(f"invalid_{field}", _format_message(field))
    if not _is_real_calendar_value(trimmed):
        return error_result(
            f"invalid_{field}", f"{field} must be a real calendar date (YYYY-MM-DD or YYYY-MM-DD HH:MM)."
        )
    return trimmed


def observation_lower_bound(value: str) -> str:
    """``D`` -> ``D 00:00``; ``D HH:MM`` as is."""
    return value if " " in value else f"{value} 00:00"


def observation_upper_bound(value: str) -> str:
    """``D`` -> ``D 23:59``; ``D HH:MM`` as is."""
    return value if " " in value else f"{value} 23:59"


def reflection_lower_bound(value: str) -> str:
    """``D`` -> ``DT00:00:00+00:00``; ``D HH:MM`` -> ``DTHH:MM:00+00:00``."""
    date, _, minute = value.partition(" ")
    return f"{date}T{minute or '00:00'}:00+00:00"


def reflection_upper_bound(value: str) -> str:
    """``D`` -> ``DT23:59:59.999999+00:00``; ``D HH:MM`` -> ``DTHH:MM:59.999999+00:00``."""
    date, _, minute = value.partition(" ")
    return f"{date}T{minute or '23:59'}:59.999999+00:00"


def sort_key(value: str) -> str:
    """Comparable form of a memory time: minute and second precision both become ``...THH:MM:SS``."""
    if _MINUTE_KEY.match(value):
        return f"{value[:10]}T{value[11:16]}:00"
    second = _SECOND_KEY.match(value)
    if second:
        return f"{second.group(1)}T{second.group(2)}"
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_text(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a string SQLite can bind: no lone surrogate (a truncated ``\\ud83d`` escape)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_handler_types(arguments: Mapping[str, object]) -> ToolResult | None:
    query = arguments.get("query")
    if not _is_text(query):
        return error_result("invalid_query", "query must be a non-empty string.")
    size = len(query.encode("utf-8"))
    if size > MEMORY_SEARCH_MAX_QUERY_BYTES:
        return error_result(
            "invalid_query",
            f"query is {size:,} bytes long; at most {MEMORY_SEARCH_MAX_QUERY_BYTES:,} bytes are searched. "
            "Search for a shorter, distinctive part of it.",
        )
    for field in ("after", "before"):
        value = arguments.get(field)
        if value is not None and not isinstance(value, str):
            return error_result(
                f"invalid_{field}", f"{field} must be YYYY-MM-DD or YYYY-MM-DD HH:MM when provided."
            )
    limit = arguments.get("limit")
    if limit is not None and not (_is_int(limit) and isinstance(limit, int) and limit >= 1):
        return error_result("invalid_limit", "limit must be a positive integer when provided.")
    return None


UNKNOWN_NAMES_SHOWN: Final[int] = 8
"""Unknown argument names quoted in a correction (the rest are counted)."""

_NAME_SHOWN_CHARACTERS: Final[int] = 40


def _unknown_arguments(arguments: Mapping[str, object]) -> ToolResult | None:
    """The correction for argument keys ``memory_search`` does not take, or ``None``."""
    unknown = sorted(str(key) for key in arguments if key not in MEMORY_SEARCH_ARGUMENTS)
    if not unknown:
        return None
    shown = ", ".join(repr(name[:_NAME_SHOWN_CHARACTERS]) for name in unknown[:UNKNOWN_NAMES_SHOWN])
    if len(unknown) > UNKNOWN_NAMES_SHOWN:
        shown += f" and {len(unknown) - UNKNOWN_NAMES_SHOWN} more"
    noun = "argument" if len(unknown) == 1 else "arguments"
    return error_result(
        "unknown_arguments",
        f"memory_search does not take the {noun} {shown}; nothing was searched. Accepted arguments: "
        f"{', '.join(MEMORY_SEARCH_ARGUMENTS)}. Use scope to pick sessions and mode to pick exact or "
        "hybrid matching.",
    )


INVALID_SCOPE_MESSAGE: Final[str] = (
    "scope must be 'all', 'session' (the calling session) or a list of 1 to "
    f"{MEMORY_SEARCH_MAX_SCOPE_SESSIONS} non-empty session ids."
)
"""Message of an ``invalid_scope`` answer for a value of the wrong shape."""

NO_CALLING_SESSION_MESSAGE: Final[str] = (
    "scope 'session' needs a calling session, and this call has none; pass a list of session ids instead."
)
"""Message of an ``invalid_scope`` answer when no calling session is known."""


def _check_scope(value: object, current_session_id: str | None) -> tuple[str, ...] | ToolResult | None:
    """The sessions searched (``None``: all), or an ``invalid_scope`` answer."""
    if value is None or value == "all":
        return None
    if value == "session":
        session = php_trim(current_session_id) if current_session_id is not None else ""
        if session == "":
            return error_result("invalid_scope", NO_CALLING_SESSION_MESSAGE)
        return (session,)
    if not isinstance(value, list | tuple) or not 1 <= len(value) <= MEMORY_SEARCH_MAX_SCOPE_SESSIONS:
        return error_result("invalid_scope", INVALID_SCOPE_MESSAGE)
    sessions: list[str] = []
    for item in value:
        if not _is_text(item) or php_trim(item) == "":
            return error_result("invalid_scope", INVALID_SCOPE_MESSAGE)
        sessions.append(php_trim(item))
    return tuple(dict.fromkeys(sessions))


def _check_mode(value: object) -> SearchMode | ToolResult:
    if value is None:
        return "auto"
    for mode in MEMORY_SEARCH_MODES:
        if value == mode:
            return mode
    return error_result("invalid_mode", f"mode must be one of {', '.join(map(repr, MEMORY_SEARCH_MODES))}.")


def validate_search_arguments(
    arguments: Mapping[str, object], current_session_id: str | None = None
) -> SearchRequest | ToolResult:
    """Validate ``memory_search`` arguments; the request or an error answer (nothing is searched).

    ``None`` values count as omitted. Checks: unknown keys, then the reference order (types, blank
    query, bound format, real calendar date, ``after <= before``, limit: default 20, clamped to 50),
    then ``scope`` (``session`` means ``current_session_id``) and ``mode``.
    """
    unknown = _unknown_arguments(arguments)
    if unknown is not None:
        return unknown
    type_error = _check_handler_types(arguments)
    if type_error is not None:
        return type_error
    query = arguments["query"]
    assert isinstance(query, str)
    trimmed_query = php_trim(query)
    if trimmed_query == "":
        return error_result("invalid_query", "query must be a non-empty string.")
    after = _check_date_bound("after", arguments.get("after"))
    if isinstance(after, dict):
        return after
    before = _check_date_bound("before", arguments.get("before"))
    if isinstance(before, dict):
        return before
    if (
        after is not None
        and before is not None
        and sort_key(observation_lower_bound(after)) > sort_key(observation_upper_bound(before))
    ):
        return error_result("invalid_date_range", "after must be less than or equal to before.")
    raw_limit = arguments.get("limit")
    limit = raw_limit if isinstance(raw_limit, int) else DEFAULT_SEARCH_LIMIT
    if limit < 1:
        return error_result("invalid_limit", "limit must be a positive integer.")
    sessions = _check_scope(arguments.get("scope"), current_session_id)
    if isinstance(sessions, dict):
        return sessions
    mode = _check_mode(arguments.get("mode"))
    if isinstance(mode, dict):
        return mode
    return SearchRequest(
        query=trimmed_query,
        limit=min(limit, MAX_SEARCH_LIMIT),
        observation_after=observation_lower_bound(after) if after else None,
        observation_before=observation_upper_bound(before) if before else None,
        reflection_after=reflection_lower_bound(after) if after else None,
        reflection_before=reflection_upper_bound(before) if before else None,
        sessions=sessions,
        mode=mode,
    )


# ------------------------------------------------------------------------------ memory_search: LIKE


def like_pattern(query: str) -> str:
    """``'%' + escape(trim(query)) + '%'`` with ``\\``, ``%`` and ``_`` escaped by ``\\``."""
    escaped = php_trim(query).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _fold(char: str) -> str:
    # SQLite's default LIKE folds ASCII letters only; every other character must match exactly.
    return char.lower() if "A" <= char <= "Z" else char


_LikeToken = tuple[Literal["any", "one", "char"], str]


def _like_tokens(pattern: str) -> list[_LikeToken] | None:
    """Tokens of a LIKE pattern with escape ``\\``; ``None`` when it ends in a lone escape (no match)."""
    tokens: list[_LikeToken] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == LIKE_ESCAPE:
            index += 1
            if index >= len(pattern):
                return None
            tokens.append(("char", _fold(pattern[index])))
        elif char == "%":
            tokens.append(("any", ""))
        elif char == "_":
            tokens.append(("one", ""))
        else:
            tokens.append(("char", _fold(char)))
        index += 1
    return tokens


def like_matches(pattern: str, text: str) -> bool:
    """Whether ``text LIKE pattern ESCAPE '\\'`` holds under SQLite's default (ASCII-case-folding) LIKE.

    SQLite reads both strings as NUL-terminated, so each is cut at its first NUL character.
    """
    pattern = pattern.split("\0", 1)[0]
    text = text.split("\0", 1)[0]
    tokens = _like_tokens(pattern)
    if tokens is None:
        return False
    folded = [_fold(char) for char in text]
    # reachable[i]: the tokens consumed so far can match exactly text[:i].
    reachable = [True] + [False] * len(folded)
    for kind, char in tokens:
        if kind == "any":
            seen = False
            for position in range(len(reachable)):
                seen = seen or reachable[position]
                reachable[position] = seen
            continue
        following = [False] * len(reachable)
        for position in range(len(folded)):
            if reachable[position] and (kind == "one" or folded[position] == char):
                following[position + 1] = True
        reachable = following
    return reachable[-1]


def observation_matches(request: SearchRequest, observation: ObservationRecord) -> bool:
    """Whether the exact search selects this observation (scope, timestamp bounds, content LIKE)."""
    if not request.in_scope(observation.run_id):
        return False
    timestamp = observation.timestamp
    if request.observation_after is not None and timestamp < request.observation_after:
        return False
    if request.observation_before is not None and timestamp > request.observation_before:
        return False
    return like_matches(request.like_pattern, observation.content)


def reflection_matches(request: SearchRequest, reflection: ReflectionRecord) -> bool:
    """Whether the exact search selects this reflection (scope, ``created_at`` bounds, content LIKE)."""
    if not request.in_scope(reflection.run_id):
        return False
    created_at = reflection.created_at
    if request.reflection_after is not None and created_at < request.reflection_after:
        return False
    if request.reflection_before is not None and created_at > request.reflection_before:
        return False
    return like_matches(request.like_pattern, reflection.content)


# ----------------------------------------------------------------------------- memory_search: output


def observation_search_item(observation: SearchedObservation) -> ToolResult:
    """One observation hit."""
    return {
        "kind": "observation",
        "session_id": observation.run_id,
        "id": observation.observation_id,
        "display_id": display_id(observation.observation_id),
        "timestamp": observation.timestamp,
        "importance": observation.relevance,
        "content": condense(observation.content),
    }


def reflection_search_item(reflection: SearchedReflection) -> ToolResult:
    """One reflection hit (no importance; its time is ``created_at``)."""
    return {
        "kind": "reflection",
        "session_id": reflection.run_id,
        "id": reflection.reflection_id,
        "display_id": display_id(reflection.reflection_id),
        "timestamp": reflection.created_at,
        "content": condense(reflection.content),
    }


def merge_search_results(
    query: str,
    limit: int,
    observation_rows: Iterable[SearchedObservation],
    reflection_rows: Iterable[SearchedReflection],
    transcript_rows: Sequence[SearchedEvent] = (),
    covering: Mapping[tuple[str, int], SearchedObservation] | None = None,
) -> ToolResult:
    """Merge the tables' hits: newest first, then events, observations, reflections, each kind in the
    order its rows come (observations of one minute in source order, the latest first; reflections
    by id: ``persistence.search_queries.ExactSearchRows``; observations standing for a transcript
    hit after the observation hits).

    A transcript hit stands for the observation covering its event (``covering``), with a
    ``source`` excerpt around the match; when that observation is already a hit, its ``source``
    range grows to include the event. An event no observation covers is its own ``event`` hit.
    ``truncated`` says more hits existed than ``limit``; each table should be fetched with
    ``LIMIT limit + 1`` so that it can be told.
    """
    items = [observation_search_item(row) for row in observation_rows]
    items.extend(reflection_search_item(row) for row in reflection_rows)
    shown = {str(item["id"]): item for item in items}
    for event in transcript_rows:
        excerpt = excerpt_around(event.content, query)
        cover = (covering or {}).get((event.run_id, event.seq))
        if cover is None:
            item = event_search_item(event, excerpt)
        elif cover.observation_id in shown:
            _widen_source(shown[cover.observation_id], event.seq, excerpt)
            continue
        else:
            item = {**observation_search_item(cover), "source": source_item(event.seq, excerpt)}
        shown[str(item["id"])] = item
        items.append(item)
    # Stable sorts: equal times keep the kind order, each kind in the order its rows came.
    items.sort(key=lambda item: str(item["kind"]))
    items.sort(key=lambda item: sort_key(str(item["timestamp"])), reverse=True)
    results = items[:limit]
    return {
        "ok": True,
        "query": query,
        "limit": limit,
        "truncated": len(items) > limit or len(transcript_rows) > limit,
        "count": len(results),
        "results": results,
    }


def restrict_to_scope(answer: ToolResult, request: SearchRequest) -> ToolResult:
    """A ranked (hybrid) answer cut to the request's sessions and ``limit``; errors pass unchanged.

    The answer should come from a search with a wider limit than ``request.limit``, so that hits of
    other sessions do not crowd the requested ones out; ``truncated`` stays true when that search
    was truncated or more in-scope hits remain.
    """
    results = answer.get("results")
    if answer.get("ok") is not True or not isinstance(results, list):
        return answer
    kept = [
        item for item in results if isinstance(item, dict) and request.in_scope(str(item.get("session_id")))
    ]
    return {
        **answer,
        "limit": request.limit,
        "truncated": bool(answer.get("truncated")) or len(kept) > request.limit,
        "count": min(len(kept), request.limit),
        "results": kept[: request.limit],
    }


def search_in_memory(
    request: SearchRequest,
    observations: Iterable[ObservationRecord],
    reflections: Iterable[ReflectionRecord],
) -> ToolResult:
    """The whole exact search over in-memory rows: a reference model of what the SQL path returns.

    ``observations`` come in the order they were recorded (the database's insertion order).
    """
    rows = list(observations)
    recorded = {row.observation_id: index for index, row in enumerate(rows)}
    observation_hits = sorted(
        (row for row in rows if observation_matches(request, row)),
        key=lambda row: row.observation_id,
    )
    observation_hits.sort(key=lambda row: row.timestamp, reverse=True)
    fetch = request.limit + 1
    # The page, then its hits of one minute in source order, the latest first.
    observation_hits = sorted(
        observation_hits[:fetch],
        key=lambda row: (row.run_id, -row.first_source_seq, -recorded[row.observation_id]),
    )
    observation_hits.sort(key=lambda row: row.timestamp, reverse=True)
    reflection_hits = sorted(
        (row for row in reflections if reflection_matches(request, row)),
        key=lambda row: row.reflection_id,
    )
    reflection_hits.sort(key=lambda row: row.created_at, reverse=True)
    return merge_search_results(
        request.query, request.limit, observation_hits[:fetch], reflection_hits[:fetch]
    )


# ------------------------------------------------------------------------------------------- recall

INVALID_ID_MESSAGE: Final[str] = (
    "id must be a lowercase hex memory id: the full 64 characters or a unique prefix of at least 12."
)
"""Message of every ``invalid_id`` answer."""

INVALID_SESSION_ID_MESSAGE: Final[str] = "session_id must be a non-empty session/run id when provided."
"""Message of every ``invalid_session_id`` answer."""


RECALL_MAX_EVENTS: Final[int] = 100
"""Longest seq range one ``recall`` by range returns."""

INVALID_SEQ_RANGE_MESSAGE: Final[str] = (
    f"seq_start must be an integer >= 1 and seq_end, when given, an integer from seq_start to "
    f"seq_start + {RECALL_MAX_EVENTS - 1}."
)
"""Message of every ``invalid_seq_range`` answer."""


@dataclass(frozen=True, slots=True)
class RecallRequest:
    """A validated ``recall`` request: a memory or event id, or a seq range of the session."""

    memory_id: str
    """Lowercase hex id or prefix, 12..64 characters (``""`` for a seq range)."""
    session_id: str
    """Session searched: the given ``session_id`` or the current session."""
    seq_start: int | None = None
    """First seq of a range recall (``None``: recall by id)."""
    seq_end: int | None = None
    """Last seq of a range recall."""

    @property
    def is_full_id(self) -> bool:
        """Whether ``memory_id`` is a complete id (exact lookup) rather than a prefix."""
        return len(self.memory_id) == FULL_ID_LENGTH


def validate_recall_arguments(
    arguments: Mapping[str, object], current_session_id: str
) -> RecallRequest | ToolResult:
    """Validate ``recall`` arguments; recall stays in the current session unless ``session_id`` is given."""
    raw_id = arguments.get("id")
    ranged = "seq_start" in arguments and raw_id is None
    if not ranged and not isinstance(raw_id, str):
        return error_result("invalid_id", INVALID_ID_MESSAGE)
    raw_session = arguments.get("session_id")
    if raw_session is not None and not _is_text(raw_session):
        return error_result("invalid_session_id", INVALID_SESSION_ID_MESSAGE)
    memory_id = "" if ranged else php_trim(str(raw_id)).lower()
    if not ranged and not _MEMORY_ID.match(memory_id):
        return error_result("invalid_id", INVALID_ID_MESSAGE)
    target = current_session_id
    if raw_session is not None:
        target = php_trim(raw_session)
        if target == "":
            return error_result("invalid_session_id", INVALID_SESSION_ID_MESSAGE)
    if not ranged:
        return RecallRequest(memory_id=memory_id, session_id=target)
    start, end = arguments.get("seq_start"), arguments.get("seq_end", arguments.get("seq_start"))
    if not (_is_int(start) and _is_int(end)):
        return error_result("invalid_seq_range", INVALID_SEQ_RANGE_MESSAGE)
    assert isinstance(start, int) and isinstance(end, int)
    if start < 1 or not start <= end < start + RECALL_MAX_EVENTS:
        return error_result("invalid_seq_range", INVALID_SEQ_RANGE_MESSAGE)
    return RecallRequest(memory_id="", session_id=target, seq_start=start, seq_end=end)


def recall_ambiguous(kind: Literal["observation", "reflection", "event"], session_id: str) -> ToolResult:
    """Answer for a prefix that matches several memories of one kind."""
    return error_result(
        "ambiguous_id",
        f"Multiple {kind}s match that id prefix in session {session_id!r}; pass more characters of the id.",
    )


def recall_not_found(memory_id: str, session_id: str) -> ToolResult:
    """Answer for an id that matches nothing in the target session."""
    return error_result(
        "not_found",
        f"No observation, reflection or transcript event with id {memory_id!r} in session {session_id!r}. "
        "For a memory from another session, pass the session_id that memory_search returned.",
    )


def _ref_run_id(ref: Mapping[str, object]) -> str | None:
    value = ref.get("run_id", ref.get("runId"))
    if isinstance(value, str):
        return value
    if _is_int(value):
        return str(value)
    return None


def _ref_seq(value: object) -> int | None:
    if _is_int(value):
        assert isinstance(value, int)
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[0-9]+", value.strip()):
        return int(value.strip())
    return None


def _session_refs(refs: Iterable[Mapping[str, object] | SourceRef], session_id: str) -> list[tuple[str, int]]:
    kept: list[tuple[str, int]] = []
    for ref in refs:
        if isinstance(ref, SourceRef):
            run_id: str | None = ref.run_id
            seq: int | None = ref.seq
        else:
            run_id = _ref_run_id(ref)
            seq = _ref_seq(ref.get("seq"))
        if run_id == session_id and seq is not None and seq >= 1:
            kept.append((run_id, seq))
    return kept


def refs_for_session(refs: Iterable[Mapping[str, object] | SourceRef], session_id: str) -> list[ToolResult]:
    """Source refs of ``session_id`` as ``{"run_id", "seq"}`` dicts, in input order.

    Accepts ``run_id`` or the legacy ``runId`` key and numeric seqs >= 1; refs of other sessions and
    malformed refs are dropped, so a recall never shows another session's events.
    """
    return [{"run_id": run_id, "seq": seq} for run_id, seq in _session_refs(refs, session_id)]


def hydration_range(refs: Iterable[Mapping[str, object]]) -> tuple[int, int] | None:
    """``(min seq, max seq)`` of the refs (already filtered to the target session), or ``None``."""
    seqs = [seq for ref in refs if (seq := _ref_seq(ref.get("seq"))) is not None and seq >= 1]
    if not seqs:
        return None
    return (min(seqs), max(seqs))


NON_FINITE_TEXT: Final[dict[str, str]] = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
"""How :func:`json_safe` encodes floats strict JSON cannot carry."""


def _safe_text(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (``"\\ud800"`` in the source JSON) has no UTF-8 form: U+FFFD stands in.
        return "".join("\ufffd" if 0xD800 <= ord(char) <= 0xDFFF else char for char in text)
    return text


def _safe_scalar(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return NON_FINITE_TEXT[repr(value)]
    if isinstance(value, str):
        return _safe_text(value)
    return value


MAX_ANSWER_DEPTH: Final[int] = 200
"""Deepest nesting :func:`json_safe` copies; any JSON encoder (and a model) can take this much."""

TOO_DEEP_TEXT: Final[str] = f"[nested deeper than {MAX_ANSWER_DEPTH} levels]"
"""What stands in for a value nested deeper than :data:`MAX_ANSWER_DEPTH`."""


def json_safe(value: object) -> object:
    """A copy of ``value`` that ``json.dumps(..., allow_nan=False)`` and UTF-8 always accept.

    NaN and the infinities (which Python's JSON reader accepts in events files) become the strings
    ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; lone surrogates in strings and keys become U+FFFD;
    a container nested deeper than :data:`MAX_ANSWER_DEPTH` becomes :data:`TOO_DEEP_TEXT`, so no
    encoder in the caller's stack can hit its recursion limit. Iterative: no recursion here either.
    """
    root: list[Any] = [None]
    pending: list[tuple[object, Any, Any, int]] = [(value, root, 0, 0)]
    while pending:
        source, target, slot, depth = pending.pop()
        if isinstance(source, Mapping | list | tuple) and depth >= MAX_ANSWER_DEPTH:
            target[slot] = TOO_DEEP_TEXT
        elif isinstance(source, Mapping):
            copied: dict[object, object] = {}
            target[slot] = copied
            for key, item in source.items():
                safe_key = _safe_scalar(key)
                copied[safe_key] = None
                pending.append((item, copied, safe_key, depth + 1))
        elif isinstance(source, list | tuple):
            items: list[object] = [None] * len(source)
            target[slot] = items
            pending.extend((item, items, index, depth + 1) for index, item in enumerate(source))
        else:
            target[slot] = _safe_scalar(source)
    return root[0]


def _first_present(event: Mapping[str, object], *keys: str) -> object:
    for key in keys:
        if key in event:
            return event[key]
    return None


def hydrate_events(
    events: Iterable[Mapping[str, object]], refs: Iterable[Mapping[str, object]], session_id: str
) -> list[ToolResult]:
    """The events the refs point at, from the events read for :func:`hydration_range`, sorted by seq.

    Only events of ``session_id`` whose seq is referenced are kept, each as
    ``{run_id, seq, type, created_at, payload}``.
    """
    wanted = {seq for _, seq in _session_refs(refs, session_id)}
    hydrated: list[tuple[int, ToolResult]] = []
    for event in events:
        seq = _ref_seq(event.get("seq"))
        if _ref_run_id(event) != session_id or seq is None or seq not in wanted:
            continue
        hydrated.append(
            (
                seq,
                {
                    "run_id": session_id,
                    "seq": seq,
                    "type": event.get("type"),
                    "created_at": _first_present(event, "created_at", "createdAt", "ts"),
                    "payload": event.get("payload"),
                },
            )
        )
    hydrated.sort(key=lambda pair: pair[0])
    return [item for _, item in hydrated]


def observation_recall_result(
    observation: ObservationRecord, session_id: str, events: Iterable[Mapping[str, object]]
) -> ToolResult:
    """Recall answer for one observation; ``events`` are those read for its refs' hydration range."""
    source_refs = refs_for_session(observation.source_refs, session_id)
    return {
        "ok": True,
        "kind": "observation",
        "session_id": session_id,
        "id": observation.observation_id,
        "content": observation.content,
        "timestamp": observation.timestamp,
        "importance": observation.relevance,
        "source_refs": source_refs,
        "events": hydrate_events(events, source_refs, session_id),
    }


def event_recall_result(
    session_id: str,
    seq_start: int,
    seq_end: int,
    events: Iterable[Mapping[str, object]],
    event_id: str | None = None,
    covering: Sequence[str] = (),
) -> ToolResult:
    """Recall answer for transcript events: one event by its id, or a seq range of the session.

    ``events`` are those read for the range; ``covering`` the ids of the observations that cover
    it (``recall`` each for what the Observer wrote down).
    """
    refs = [{"run_id": session_id, "seq": seq} for seq in range(seq_start, seq_end + 1)]
    answer: ToolResult = {"ok": True, "kind": "event", "session_id": session_id}
    if event_id is not None:
        answer["id"] = event_id
    answer.update(
        {
            "seq_start": seq_start,
            "seq_end": seq_end,
            "covered_by": list(covering),
            "events": hydrate_events(events, refs, session_id),
        }
    )
    return answer


def supporting_observations_in_session(
    reflection: ReflectionRecord, observations: Iterable[ObservationRecord], session_id: str
) -> list[ObservationRecord]:
    """The reflection's supporting observations that exist in ``session_id``, in support-id order, deduped."""
    by_id = {row.observation_id: row for row in observations if row.run_id == session_id}
    kept: list[ObservationRecord] = []
    seen: set[str] = set()
    for observation_id in reflection.supporting_observation_ids:
        if observation_id in seen or observation_id not in by_id:
            continue
        seen.add(observation_id)
        kept.append(by_id[observation_id])
    return kept


def reflection_source_refs(observations: Iterable[ObservationRecord], session_id: str) -> list[ToolResult]:
    """Union of the observations' refs in ``session_id``, deduped, sorted by run id then seq."""
    unique: set[tuple[str, int]] = set()
    for observation in observations:
        unique.update(_session_refs(observation.source_refs, session_id))
    return [{"run_id": run_id, "seq": seq} for run_id, seq in sorted(unique)]


def reflection_recall_result(
    reflection: ReflectionRecord,
    session_id: str,
    supporting_observations: Iterable[ObservationRecord],
    events: Iterable[Mapping[str, object]],
) -> ToolResult:
    """Recall answer for one reflection.

    ``supporting_observations`` are the rows looked up for its supporting ids (others are ignored);
    ``events`` are those read for the hydration range of the resulting refs.
    """
    supported = supporting_observations_in_session(reflection, supporting_observations, session_id)
    source_refs = reflection_source_refs(supported, session_id)
    return {
        "ok": True,
        "kind": "reflection",
        "session_id": session_id,
        "id": reflection.reflection_id,
        "content": reflection.content,
        "supporting_observation_ids": [row.observation_id for row in supported],
        "source_refs": source_refs,
        "events": hydrate_events(events, source_refs, session_id),
    }


def recall_source_refs(
    observation_or_supported: ObservationRecord | Sequence[ObservationRecord], session_id: str
) -> list[ToolResult]:
    """Refs to hydrate for an observation, or for a reflection's supporting observations."""
    if isinstance(observation_or_supported, ObservationRecord):
        return refs_for_session(observation_or_supported.source_refs, session_id)
    return reflection_source_refs(observation_or_supported, session_id)
