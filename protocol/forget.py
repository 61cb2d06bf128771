"""What ``omray memory forget`` removes, as typed values: the caller's arguments and one job's request.

:func:`forget_arguments` is the one check of a forget call's arguments: the MCP ``forget`` tool, the
viewer's ``POST /api/forget``, ``omray memory forget`` and :meth:`cluster.client.OmrayClient.forget`
all go through it, and bad input raises :class:`ForgetArgumentsError` (an
:class:`~protocol.errors.InvalidPayloadError`) before anything is sent. Its message names fields and
rules only, never the values given.

:class:`ForgetRequest` is what one forget job removes from one session; the queue payload
(:class:`protocol.jobs.ForgetJob`) extends it, and the StoreActor gets it as is
(:meth:`protocol.jobs.ForgetJob.request`), with no dict in between.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from protocol.errors import InvalidPayloadError
from protocol.events import MAX_SEQ
from protocol.ids import SESSION_ID_ALIASES, SessionId

MAX_FORGET_IDS = 1000
"""Most memory ids one forget call (and one forget job) names."""
MAX_FORGET_RANGES = 100
"""Most event ranges one forget call names."""

FullMemoryId = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
"""A full observation or reflection id."""
GivenMemoryId = Annotated[str, Field(pattern=r"^[0-9a-f]{12,64}$")]
"""An id as a caller gives it: a full id or a display id (12+ hex characters)."""
Seq = Annotated[int, Field(ge=1, le=MAX_SEQ)]


class ForgetArgumentsError(InvalidPayloadError):
    """The arguments of a forget call are malformed; nothing was sent or changed."""


def _check_ranges(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    for number, (start, end) in enumerate(ranges, start=1):
        if start > end:
            raise ValueError(f"event range #{number} must satisfy start <= end")
    return ranges


class ForgetRequest(BaseModel):
    """What one forget job removes from one session: memories by full id, ranges of its events (their
    transcript rows), or everything of the session."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: SessionId = Field(validation_alias=SESSION_ID_ALIASES)
    """Session whose memory is forgotten."""
    memory_ids: tuple[FullMemoryId, ...] = Field(default=(), max_length=MAX_FORGET_IDS)
    """Full observation or reflection ids of this session."""
    event_ranges: tuple[tuple[Seq, Seq], ...] = Field(default=(), max_length=MAX_FORGET_RANGES)
    """Inclusive seq ranges of the session's events whose transcript text is forgotten."""
    whole_session: bool = False
    """Forget everything of the session: memory, generations, transcript rows (coverage stays)."""

    _ranges_ordered = field_validator("event_ranges")(_check_ranges)


def _range_of(value: Any) -> Any:
    """``"SEQ"`` or ``"A-B"`` (the CLI's ``--events``) as a pair; anything else as given."""
    if isinstance(value, str):
        start, sep, end = value.strip().partition("-")
        return (start, end) if sep else (start, start)
    return value


class ForgetArguments(BaseModel):
    """A forget call's arguments, checked: memory ids (of any sessions), or one session (all of it,
    or only ``event_ranges`` of its events)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ids: tuple[GivenMemoryId, ...] = Field(default=(), max_length=MAX_FORGET_IDS)
    """Observation or reflection ids, lower-cased and without repeats."""
    session_id: SessionId | None = None
    """A session to forget (all of it, or only ``event_ranges``)."""
    event_ranges: tuple[tuple[Seq, Seq], ...] = Field(default=(), max_length=MAX_FORGET_RANGES)
    """With ``session_id``: inclusive ``(start, end)`` seqs whose transcript text is forgotten."""

    @field_validator("ids", mode="before")
    @classmethod
    def _normalized_ids(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, str):
            raise ValueError("must be a list of ids, not one string")
        if isinstance(value, list | tuple):
            cleaned = [item.strip().lower() if isinstance(item, str) else item for item in value]
            return tuple(dict.fromkeys(cleaned))
        return value

    @field_validator("event_ranges", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, list | tuple):
            return tuple(_range_of(item) for item in value)
        return value

    _ranges_ordered = field_validator("event_ranges")(_check_ranges)

    @model_validator(mode="after")
    def _one_target(self) -> ForgetArguments:
        if not self.ids and self.session_id is None:
            raise ValueError("name memory ids to forget, or a session")
        if self.ids and self.session_id is not None:
            raise ValueError("give memory ids or a session, not both")
        if self.event_ranges and self.session_id is None:
            raise ValueError("event ranges need the session they belong to")
        return self


def _message(exc: ValidationError) -> str:
    """The errors of ``exc`` by field and rule, never the input values."""
    parts: list[str] = []
    for error in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(part) for part in error.get("loc", ()))
        text = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {text}" if where else text)
    return "invalid forget arguments: " + "; ".join(parts[:5])


def forget_arguments(given: ForgetArguments | Mapping[str, Any]) -> ForgetArguments:
    """``given`` checked (``ids``, ``session_id``, ``event_ranges``); raises :class:`ForgetArgumentsError`."""
    if isinstance(given, ForgetArguments):
        return given
    if not isinstance(given, Mapping):
        raise ForgetArgumentsError("invalid forget arguments: expected an object")
    try:
        return ForgetArguments.model_validate(dict(given))
    except ValidationError as exc:
        raise ForgetArgumentsError(_message(exc)) from None
