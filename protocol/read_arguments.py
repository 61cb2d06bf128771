"""Arguments of the read tools, ``memory_search`` and ``recall`` (reference §13.2, §13.6): one typed
model per tool, the one the read service validates with.

A tool call's arguments come from a model or a person, so a bad one is a correction the caller can
act on, never an exception: :meth:`MemorySearchArguments.from_call` and
:meth:`RecallArguments.from_call` return the checked, normalized arguments or raise
:class:`ReadArgumentsError` with the answer's ``error`` code and ``message``
(``actors.read.answers.error_result`` turns it into the tool answer). When several arguments are
wrong, the answer is the first failing check in the tool's order (the reference's): a model field
whose check fails carries the check's rank, and the lowest rank answers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar, Final, Self, TypeGuard

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from protocol.canonical import php_trim
from protocol.errors import InvalidPayloadError
from protocol.events import MAX_SEQ
from protocol.ids import FULL_ID_LENGTH, ID_OR_PREFIX
from protocol.tool_specs import (
    MEMORY_SEARCH_ARGUMENTS,
    MEMORY_SEARCH_DEFAULT_LIMIT,
    MEMORY_SEARCH_MAX_LIMIT,
    MEMORY_SEARCH_MAX_QUERY_BYTES,
    MEMORY_SEARCH_MAX_SCOPE_SESSIONS,
    MEMORY_SEARCH_MODES,
    SearchMode,
)


class ReadArgumentsError(InvalidPayloadError):
    """A read tool's arguments fail a check; nothing was read. ``code`` is the answer's ``error``
    (``invalid_query``, ``invalid_id``, ...) and ``message`` what the caller must fix."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an integer (``bool`` is not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_text(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a string SQLite can bind: no lone surrogate (a truncated ``\\ud83d`` escape)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _failed(rank: int, code: str, message: str) -> PydanticCustomError:
    """A failed check: its place in the tool's order, the answer's code and message."""
    return PydanticCustomError("read_argument", "{message}", {"rank": rank, "code": code, "message": message})


_UNEXPECTED: Final = (99, "invalid_arguments", "The arguments do not have the shape this tool takes.")
"""The answer to an error no check names (a model error the checks do not foresee)."""


class _ReadToolArguments(BaseModel):
    """What both read tools' models share: the first failing check is the answer."""

    SHAPE_CHECKS: ClassVar[Mapping[str, tuple[int, str, str]]] = {}
    """Field -> ``(rank, code, message)`` of pydantic's own errors on it (a wrong type, a missing
    value): the check of the field's type in the tool's order."""

    @classmethod
    def unknown_keys_error(cls, unknown: list[str]) -> ReadArgumentsError:
        """The answer to keys the tool does not take (only where the model forbids them)."""
        raise NotImplementedError

    @classmethod
    def _validated(cls, arguments: Mapping[Any, object], context: dict[str, object]) -> Self:
        try:
            return cls.model_validate(dict(arguments), context=context)
        except ValidationError as exc:
            raise cls._first_failure(exc) from None

    @classmethod
    def _first_failure(cls, exc: ValidationError) -> ReadArgumentsError:
        errors = exc.errors(include_url=False, include_input=False)
        unknown = sorted(str(error["loc"][0]) for error in errors if error["type"] == "extra_forbidden")
        if unknown:
            return cls.unknown_keys_error(unknown)
        failures: list[tuple[int, str, str]] = []
        for error in errors:
            context = error.get("ctx") or {}
            if error["type"] == "read_argument":
                failures.append((int(context["rank"]), str(context["code"]), str(context["message"])))
            else:
                field = str(error["loc"][0]) if error["loc"] else ""
                failures.append(cls.SHAPE_CHECKS.get(field, _UNEXPECTED))
        return ReadArgumentsError(*min(failures)[1:])


# --- memory_search (§13.2) ----------------------------------------------------------------------

_DATE_BOUND: Final = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}( [0-9]{2}:[0-9]{2})?\Z")
_MINUTE_KEY: Final = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}\Z")
_SECOND_KEY: Final = re.compile(r"^([0-9]{4}-[0-9]{2}-[0-9]{2})[ T]([0-9]{2}:[0-9]{2}:[0-9]{2})")
_DAYS_IN_MONTH: Final[tuple[int, ...]] = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def is_real_calendar_value(value: str) -> bool:
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


UNKNOWN_NAMES_SHOWN: Final[int] = 8
"""Unknown argument names quoted in a correction (the rest are counted)."""
_NAME_SHOWN_CHARACTERS: Final[int] = 40

INVALID_QUERY_MESSAGE: Final[str] = "query must be a non-empty string."
"""Message of an ``invalid_query`` answer (but for a query that is too long)."""
INVALID_LIMIT_MESSAGE: Final[str] = "limit must be a positive integer when provided."
"""Message of an ``invalid_limit`` answer."""
INVALID_SCOPE_MESSAGE: Final[str] = (
    "scope must be 'all', 'session' (the calling session) or a list of 1 to "
    f"{MEMORY_SEARCH_MAX_SCOPE_SESSIONS} non-empty session ids."
)
"""Message of an ``invalid_scope`` answer for a value of the wrong shape."""
NO_CALLING_SESSION_MESSAGE: Final[str] = (
    "scope 'session' needs a calling session, and this call has none; pass a list of session ids instead."
)
"""Message of an ``invalid_scope`` answer when no calling session is known."""
INVALID_MODE_MESSAGE: Final[str] = f"mode must be one of {', '.join(map(repr, MEMORY_SEARCH_MODES))}."
"""Message of an ``invalid_mode`` answer."""


def _bound_type_message(field: str) -> str:
    return f"{field} must be YYYY-MM-DD or YYYY-MM-DD HH:MM when provided."


def _query_too_long_message(size: int) -> str:
    return (
        f"query is {size:,} bytes long; at most {MEMORY_SEARCH_MAX_QUERY_BYTES:,} bytes are searched. "
        "Search for a shorter, distinctive part of it."
    )


# The reference's order: unknown keys; the types (query, after, before, query_date, limit); then
# the values (blank query, each bound's format and calendar date, after <= before, limit, scope,
# mode, query_date). A lower rank answers first.
_TYPE_RANK: Final = {"query": 10, "after": 11, "before": 12, "query_date": 13, "limit": 14}
_VALUE_RANK: Final = {"query": 20, "after": 21, "before": 22, "scope": 25, "mode": 26, "query_date": 27}


def _date_bound(field: str, value: str | None) -> str | None:
    """A bound trimmed (``None`` when blank), or the failed check of its format or calendar date."""
    if value is None:
        return None
    trimmed = php_trim(value)
    if trimmed == "":
        return None
    rank = _VALUE_RANK[field]
    if not _DATE_BOUND.match(trimmed):
        raise _failed(rank, f"invalid_{field}", f"{field} must be YYYY-MM-DD or YYYY-MM-DD HH:MM.")
    if not is_real_calendar_value(trimmed):
        raise _failed(
            rank,
            f"invalid_{field}",
            f"{field} must be a real calendar date (YYYY-MM-DD or YYYY-MM-DD HH:MM).",
        )
    return trimmed


class MemorySearchArguments(_ReadToolArguments):
    """``memory_search`` arguments, checked and normalized (reference §13.2).

    Any key besides the seven is an ``unknown_arguments`` correction; ``None`` counts as omitted.
    Build it with :meth:`from_call` (``scope: "session"`` needs the calling session).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    SHAPE_CHECKS: ClassVar[Mapping[str, tuple[int, str, str]]] = {
        "query": (_TYPE_RANK["query"], "invalid_query", INVALID_QUERY_MESSAGE),
        **{
            field: (_TYPE_RANK[field], f"invalid_{field}", _bound_type_message(field))
            for field in ("after", "before", "query_date")
        },
    }

    query: str = Field(strict=True)
    """Text to look for, trimmed (never empty; at most ``MEMORY_SEARCH_MAX_QUERY_BYTES`` as given)."""
    after: str | None = Field(default=None, strict=True)
    """Inclusive lower date bound, ``YYYY-MM-DD`` or ``YYYY-MM-DD HH:MM`` (``None``: none)."""
    before: str | None = Field(default=None, strict=True)
    """Inclusive upper date bound, same forms as ``after``; never before ``after``."""
    limit: int = MEMORY_SEARCH_DEFAULT_LIMIT
    """Results to return, 1..50 (default 20; larger values are clamped to 50)."""
    scope: tuple[str, ...] | None = None
    """Sessions searched, trimmed and unique (``None``: all). ``"all"``, ``"session"`` (the calling
    session) or a list of 1 to 50 session ids as given."""
    mode: SearchMode = "auto"
    """``auto`` (hybrid when configured, else exact), ``exact`` or ``hybrid``."""
    query_date: str | None = Field(default=None, strict=True)
    """The clock relative time phrases in the query are read against, ``YYYY-MM-DD`` or
    ``YYYY-MM-DD HH:MM`` (``None``: now)."""

    @classmethod
    def from_call(
        cls, arguments: Mapping[Any, object], calling_session: str | None = None
    ) -> MemorySearchArguments:
        """``arguments`` checked in the reference's order; raises :class:`ReadArgumentsError` with the
        first failing check (``unknown_arguments``, ``invalid_query``, ``invalid_after``,
        ``invalid_before``, ``invalid_date_range``, ``invalid_limit``, ``invalid_scope``,
        ``invalid_mode``, ``invalid_query_date``)."""
        return cls._validated(arguments, {"calling_session": calling_session})

    @classmethod
    def unknown_keys_error(cls, unknown: list[str]) -> ReadArgumentsError:
        shown = ", ".join(repr(name[:_NAME_SHOWN_CHARACTERS]) for name in unknown[:UNKNOWN_NAMES_SHOWN])
        if len(unknown) > UNKNOWN_NAMES_SHOWN:
            shown += f" and {len(unknown) - UNKNOWN_NAMES_SHOWN} more"
        noun = "argument" if len(unknown) == 1 else "arguments"
        return ReadArgumentsError(
            "unknown_arguments",
            f"memory_search does not take the {noun} {shown}; nothing was searched. Accepted arguments: "
            f"{', '.join(MEMORY_SEARCH_ARGUMENTS)}. Use scope to pick sessions and mode to pick exact or "
            "hybrid matching.",
        )

    @field_validator("query")
    @classmethod
    def _query(cls, value: str) -> str:
        if not is_text(value):
            raise _failed(_TYPE_RANK["query"], "invalid_query", INVALID_QUERY_MESSAGE)
        size = len(value.encode("utf-8"))
        if size > MEMORY_SEARCH_MAX_QUERY_BYTES:
            raise _failed(_TYPE_RANK["query"], "invalid_query", _query_too_long_message(size))
        trimmed = php_trim(value)
        if trimmed == "":
            raise _failed(_VALUE_RANK["query"], "invalid_query", INVALID_QUERY_MESSAGE)
        return trimmed

    @field_validator("after")
    @classmethod
    def _after(cls, value: str | None) -> str | None:
        return _date_bound("after", value)

    @field_validator("before")
    @classmethod
    def _before(cls, value: str | None, info: ValidationInfo) -> str | None:
        before = _date_bound("before", value)
        after = info.data.get("after")
        if (
            after is not None
            and before is not None
            and sort_key(observation_lower_bound(after)) > sort_key(observation_upper_bound(before))
        ):
            raise _failed(
                _VALUE_RANK["before"], "invalid_date_range", "after must be less than or equal to before."
            )
        return before

    @field_validator("limit", mode="before")
    @classmethod
    def _limit(cls, value: object) -> int:
        if value is None:
            return MEMORY_SEARCH_DEFAULT_LIMIT
        if not is_int(value) or value < 1:
            raise _failed(_TYPE_RANK["limit"], "invalid_limit", INVALID_LIMIT_MESSAGE)
        return min(value, MEMORY_SEARCH_MAX_LIMIT)

    @field_validator("scope", mode="before")
    @classmethod
    def _scope(cls, value: object, info: ValidationInfo) -> tuple[str, ...] | None:
        rank = _VALUE_RANK["scope"]
        if value is None or value == "all":
            return None
        if value == "session":
            calling = (info.context or {}).get("calling_session")
            session = php_trim(calling) if isinstance(calling, str) else ""
            if session == "":
                raise _failed(rank, "invalid_scope", NO_CALLING_SESSION_MESSAGE)
            return (session,)
        if not isinstance(value, list | tuple) or not 1 <= len(value) <= MEMORY_SEARCH_MAX_SCOPE_SESSIONS:
            raise _failed(rank, "invalid_scope", INVALID_SCOPE_MESSAGE)
        sessions: list[str] = []
        for item in value:
            if not is_text(item) or php_trim(item) == "":
                raise _failed(rank, "invalid_scope", INVALID_SCOPE_MESSAGE)
            sessions.append(php_trim(item))
        return tuple(dict.fromkeys(sessions))

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, value: object) -> SearchMode:
        if value is None:
            return "auto"
        for mode in MEMORY_SEARCH_MODES:
            if value == mode:
                return mode
        raise _failed(_VALUE_RANK["mode"], "invalid_mode", INVALID_MODE_MESSAGE)

    @field_validator("query_date")
    @classmethod
    def _query_date(cls, value: str | None) -> str | None:
        return _date_bound("query_date", value)


# --- recall (§13.6) -----------------------------------------------------------------------------

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

# The order: the id's type, the session's type, the id's form, a blank session, the seq range.
_ID_TYPE, _SESSION_TYPE, _ID_FORM, _SESSION_BLANK, _SEQ_RANGE = 1, 2, 3, 4, 5


class _CallingSession(str):
    """The calling session, standing in for an omitted ``session_id``: used as given, never checked."""

    __slots__ = ()


def _bad_seq_range() -> PydanticCustomError:
    return _failed(_SEQ_RANGE, "invalid_seq_range", INVALID_SEQ_RANGE_MESSAGE)


class RecallArguments(_ReadToolArguments):
    """``recall`` arguments, checked and normalized (reference §13.6): a memory or event id (or a
    unique prefix of one), or a seq range of the session's events (``seq_start`` with no ``id``).

    Other keys are ignored. Build it with :meth:`from_call`: the lookup stays in the calling
    session unless ``session_id`` names another.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    memory_id: str = Field(default="", validation_alias="id")
    """Lowercase hex id or prefix, 12..64 characters (``""`` for a seq range); the tool's ``id``."""
    session_id: str = ""
    """Session searched: the given ``session_id``, trimmed, or the calling session as it is."""
    seq_start: int | None = None
    """First seq of a range recall, at least 1 (``None``: recall by id)."""
    seq_end: int | None = None
    """Last seq of a range recall (``seq_start`` when not given), at most 99 after it."""

    @classmethod
    def from_call(cls, arguments: Mapping[Any, object], calling_session: str) -> RecallArguments:
        """``arguments`` checked in order; raises :class:`ReadArgumentsError` (``invalid_id``,
        ``invalid_session_id``, ``invalid_seq_range``) with the first failing check."""
        return cls._validated(arguments, {"calling_session": calling_session})

    @property
    def is_full_id(self) -> bool:
        """Whether ``memory_id`` is a complete id (exact lookup) rather than a prefix."""
        return len(self.memory_id) == FULL_ID_LENGTH

    @model_validator(mode="before")
    @classmethod
    def _id_or_range(cls, data: Any, info: ValidationInfo) -> Any:
        """A range recall keeps its seqs (``seq_end`` defaults to ``seq_start``); a recall by id drops
        them and needs a string id. An omitted session is the calling one."""
        if not isinstance(data, Mapping):
            return data
        given = dict(data)
        if "seq_start" in given and given.get("id") is None:
            given.pop("id", None)
            given.setdefault("seq_end", given["seq_start"])
        else:
            given.pop("seq_start", None)
            given.pop("seq_end", None)
            if not isinstance(given.get("id"), str):
                raise _failed(_ID_TYPE, "invalid_id", INVALID_ID_MESSAGE)
        if given.get("session_id") is None:
            given["session_id"] = _CallingSession((info.context or {}).get("calling_session") or "")
        return given

    @field_validator("memory_id")
    @classmethod
    def _memory_id(cls, value: str) -> str:
        memory_id = php_trim(value).lower()
        if not ID_OR_PREFIX.match(memory_id):
            raise _failed(_ID_FORM, "invalid_id", INVALID_ID_MESSAGE)
        return memory_id

    @field_validator("session_id", mode="before")
    @classmethod
    def _session_id(cls, value: object) -> str:
        if isinstance(value, _CallingSession):
            return str(value)
        if not is_text(value):
            raise _failed(_SESSION_TYPE, "invalid_session_id", INVALID_SESSION_ID_MESSAGE)
        session = php_trim(value)
        if session == "":
            raise _failed(_SESSION_BLANK, "invalid_session_id", INVALID_SESSION_ID_MESSAGE)
        return session

    @field_validator("seq_start", mode="before")
    @classmethod
    def _seq_start(cls, value: object) -> int:
        if not is_int(value) or value < 1:
            raise _bad_seq_range()
        return value

    @field_validator("seq_end", mode="before")
    @classmethod
    def _seq_end(cls, value: object, info: ValidationInfo) -> int:
        start = info.data.get("seq_start")
        if not is_int(value) or value > MAX_SEQ:
            raise _bad_seq_range()
        if start is not None and not start <= value < start + RECALL_MAX_EVENTS:
            raise _bad_seq_range()
        return value
