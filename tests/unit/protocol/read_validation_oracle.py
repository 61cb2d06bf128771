"""The hand validation of ``memory_search`` and ``recall`` arguments that the typed models of
``protocol.read_arguments`` replaced (as it stood at ad6b34f), kept as the oracle the models are
compared with (``test_read_arguments.py``): same answers, same codes, same messages."""

# ruff: noqa
# mypy: ignore-errors

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, TypeGuard

from persistence.search.request import DateBounds, SearchRequest
from protocol.canonical import php_trim
from protocol.events import MAX_SEQ
from protocol.ids import FULL_ID_LENGTH, ID_OR_PREFIX
from protocol.tool_specs import (
    MEMORY_SEARCH_ARGUMENTS,
    MEMORY_SEARCH_MAX_QUERY_BYTES,
    MEMORY_SEARCH_MAX_SCOPE_SESSIONS,
    MEMORY_SEARCH_MODES,
    SearchMode,
)

ToolResult = dict


def error_result(code: str, message: str) -> ToolResult:
    return {"ok": False, "error": code, "message": message}


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_text(value: object) -> TypeGuard[str]:
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


DEFAULT_SEARCH_LIMIT: Final[int] = 20
"""Results returned when ``limit`` is omitted."""

MAX_SEARCH_LIMIT: Final[int] = 50
"""Larger limits are clamped to this silently."""

_DATE_BOUND = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}( [0-9]{2}:[0-9]{2})?\Z")
_MINUTE_KEY = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}\Z")
_SECOND_KEY = re.compile(r"^([0-9]{4}-[0-9]{2}-[0-9]{2})[ T]([0-9]{2}:[0-9]{2}:[0-9]{2})")


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


def _check_handler_types(arguments: Mapping[str, object]) -> ToolResult | None:
    query = arguments.get("query")
    if not is_text(query):
        return error_result("invalid_query", "query must be a non-empty string.")
    size = len(query.encode("utf-8"))
    if size > MEMORY_SEARCH_MAX_QUERY_BYTES:
        return error_result(
            "invalid_query",
            f"query is {size:,} bytes long; at most {MEMORY_SEARCH_MAX_QUERY_BYTES:,} bytes are searched. "
            "Search for a shorter, distinctive part of it.",
        )
    for field in ("after", "before", "query_date"):
        value = arguments.get(field)
        if value is not None and not isinstance(value, str):
            return error_result(
                f"invalid_{field}", f"{field} must be YYYY-MM-DD or YYYY-MM-DD HH:MM when provided."
            )
    limit = arguments.get("limit")
    if limit is not None and not (is_int(limit) and isinstance(limit, int) and limit >= 1):
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
        if not is_text(item) or php_trim(item) == "":
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
    then ``scope`` (``session`` means ``current_session_id``), ``mode`` and ``query_date`` (the
    format of a bound; a day alone is its first minute).
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
    query_date = _check_date_bound("query_date", arguments.get("query_date"))
    if isinstance(query_date, dict):
        return query_date
    return SearchRequest(
        query=trimmed_query,
        limit=min(limit, MAX_SEARCH_LIMIT),
        bounds=DateBounds(
            observation_after=observation_lower_bound(after) if after else None,
            observation_before=observation_upper_bound(before) if before else None,
            reflection_after=reflection_lower_bound(after) if after else None,
            reflection_before=reflection_upper_bound(before) if before else None,
        ),
        sessions=sessions,
        mode=mode,
        query_date=observation_lower_bound(query_date) if query_date else None,
    )


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
    f"seq_start + {RECALL_MAX_EVENTS - 1} (a seq is at most {MAX_SEQ})."
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
    if raw_session is not None and not is_text(raw_session):
        return error_result("invalid_session_id", INVALID_SESSION_ID_MESSAGE)
    memory_id = "" if ranged else php_trim(str(raw_id)).lower()
    if not ranged and not ID_OR_PREFIX.match(memory_id):
        return error_result("invalid_id", INVALID_ID_MESSAGE)
    target = current_session_id
    if raw_session is not None:
        target = php_trim(raw_session)
        if target == "":
            return error_result("invalid_session_id", INVALID_SESSION_ID_MESSAGE)
    if not ranged:
        return RecallRequest(memory_id=memory_id, session_id=target)
    start, end = arguments.get("seq_start"), arguments.get("seq_end", arguments.get("seq_start"))
    if not (is_int(start) and is_int(end)):
        return error_result("invalid_seq_range", INVALID_SEQ_RANGE_MESSAGE)
    assert isinstance(start, int) and isinstance(end, int)
    if start < 1 or end > MAX_SEQ or not start <= end < start + RECALL_MAX_EVENTS:
        return error_result("invalid_seq_range", INVALID_SEQ_RANGE_MESSAGE)
    return RecallRequest(memory_id="", session_id=target, seq_start=start, seq_end=end)
