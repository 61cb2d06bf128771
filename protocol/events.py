"""Session events and the two host hooks omray answers (reference §2.2, §2.3, §7.1, §10.1).

* :class:`SessionEvent` is one line of a session's ``events.jsonl``.
* :class:`AfterTurnCommit` is what the agent hands over after each committed turn;
  :func:`detect_terminal_boundary` decides, with no I/O, whether that turn ended the run.
* :class:`BeforeCompactionContext` / :class:`CompactionDecision` are the compaction hook's input and
  answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, model_validator

from protocol.errors import InvalidPayloadError
from protocol.ids import SESSION_ID_ALIASES, SessionId

SUPPORTED_SCHEMA_MAJOR = 1
"""Major ``schema_version`` of the events envelope omray reads; lines of another major are skipped."""

_SCHEMA_VERSION_RE = re.compile(r"^([0-9]+)(\.[0-9]+)*\Z")

MAX_SEQ = 2**63 - 1
"""Largest seq omray accepts: SQLite's largest integer (every seq ends up in a coverage row)."""

TERMINAL_AGENT_END_REASONS: frozenset[str] = frozenset({"completed", "cancelled"})
"""``agent_end`` reasons that end a run and trigger observation."""

COMPACTION_FAILURE_PREFIX = "observational_memory active-memory projection failed: "
"""Prefix of the cancel reason when the compaction projection fails (followed by the exception class)."""


def is_compatible_schema_version(version: str) -> bool:
    """True when ``version`` (``"x.y"``) has the supported major part; malformed versions are not."""
    match = _SCHEMA_VERSION_RE.fullmatch(version) if isinstance(version, str) else None
    return match is not None and int(match.group(1)) == SUPPORTED_SCHEMA_MAJOR


def is_well_formed_schema_version(version: object) -> bool:
    """True when ``version`` is dot-separated ASCII digit groups (``"1"``, ``"1.0"``, ``"2.3.1"``).

    Only a well-formed version of another major may be skipped; ``"abc"`` or ``" 1.0"`` is a corrupt line.
    """
    if not isinstance(version, str) or not version.isascii():
        return False
    return _SCHEMA_VERSION_RE.fullmatch(version) is not None


class InvalidSessionEventError(InvalidPayloadError):
    """An events line is valid JSON but not a valid event envelope.

    ``reason`` names the offending fields and the kind of problem, never their values, so it is
    safe to log and to pass on as :class:`protocol.errors.EventsFileError`'s reason.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"invalid session event: {reason}")


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "<event>"
        parts.append(f"{where}: {item['type']}")
    return "; ".join(parts)


class SessionEvent(BaseModel):
    """One ``events.jsonl`` line (§2.3); the file is the source of truth for a session.

    Ids stay strings even when they look numeric (``"5"``): a JSON number in ``run_id`` is rejected
    rather than converted. Unknown fields are ignored: a newer minor ``schema_version`` may add some,
    and only an incompatible major version is skipped (§2.3).
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: StrictStr = Field(pattern=r"^[0-9]+(\.[0-9]+)*$")
    """Envelope version ``"x.y"``; only the major part matters (:func:`is_compatible_schema_version`)."""
    run_id: SessionId = Field(strict=True)
    """Session id, always a string."""
    seq: StrictInt = Field(ge=1, le=MAX_SEQ)
    """Position of the event in its session, from 1, strictly increasing in file order; holes are possible."""
    turn_no: StrictInt
    """Turn the event belongs to."""
    type: StrictStr = Field(min_length=1)
    """Event type, e.g. ``agent_end`` or ``llm_step_completed``."""
    payload: dict[str, Any]
    """Type-specific payload."""
    ts: StrictStr
    """ISO-8601 timestamp written by the host (UTC ATOM)."""

    @classmethod
    def parse(cls, data: object) -> SessionEvent:
        """Validate one decoded JSON line; raises :class:`InvalidSessionEventError` (no values in it)."""
        if not isinstance(data, Mapping):
            raise InvalidSessionEventError(f"expected a JSON object, got {type(data).__name__}")
        try:
            return cls.model_validate(dict(data))
        except ValidationError as error:
            raise InvalidSessionEventError(_describe(error)) from None

    @property
    def is_compatible(self) -> bool:
        """True when this line's schema major is the supported one."""
        return is_compatible_schema_version(self.schema_version)


@dataclass(frozen=True)
class EventWindow:
    """What one range read of ``events.jsonl`` found.

    ``through`` is how far the file has been read for this range: ``end_seq`` once an event at or past
    it was seen, else the seq of the file's last complete event (the agent has not written the rest
    yet). Coverage may only claim seqs up to ``through``; holes below it are real holes.
    """

    events: tuple[SessionEvent, ...]
    """Events with ``start_seq <= seq <= end_seq``, in file (= seq) order."""
    through: int
    """Every event with ``seq <= through`` has been read."""


class _Hook(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EventSummary(_Hook):
    """A committed event as summarized in the after-turn hook's context (the "hot batch")."""

    seq: int = Field(ge=1, le=MAX_SEQ)
    """Sequence number of the event."""
    type: str
    """Event type."""
    payload: dict[str, Any] = Field(default_factory=dict)
    """Event payload (only ``reason``, ``retryable`` and ``retries_exhausted`` are read)."""


class AfterTurnCommit(_Hook):
    """Input of the after-turn-commit hook (§2.2): the turn's status and the events it committed."""

    session_id: SessionId = Field(validation_alias=SESSION_ID_ALIASES)
    """Session whose turn was committed."""
    turn_no: int
    """Turn number."""
    status: str
    """Run status after the turn, e.g. ``running``, ``completed``, ``failed``."""
    events: tuple[EventSummary, ...] = ()
    """Events committed by this turn, in commit order."""
    effects_count: int = Field(default=0, ge=0)
    """Number of side effects the turn committed (informational)."""
    context_fill: float | None = Field(default=None, ge=0)
    """Share of the agent's context window in use after this batch (0..1; above 1 is read as full),
    if the host knows it. From ``observer.pressure_context_fill`` on, omray observes sooner, inside
    turns too, so a coming compaction finds the range it replaces covered."""
    session_end: bool = False
    """True on the session's last batch: everything committed so far is observed now."""

    @property
    def last_seq(self) -> int | None:
        """Largest seq of the batch, if it has events."""
        return max((event.seq for event in self.events), default=None)


class TerminalBoundary(_Hook):
    """Where a run ended: observe through ``end_seq`` with this ``status``."""

    end_seq: int = Field(ge=1, le=MAX_SEQ)
    """Seq of the terminal event."""
    status: Literal["completed", "cancelled", "failed"]
    """How the run ended."""


def php_truthy(value: object) -> bool:
    """PHP's ``(bool)`` cast, which the original applies to event flags such as ``retryable`` and
    ``retries_exhausted`` (§7.1, and the Observer's source blocks)."""
    if value is None or value is False:
        return False
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str):
        return value not in ("", "0")
    if isinstance(value, list | tuple | dict):
        return len(value) > 0
    return True


def detect_terminal_boundary(ctx: AfterTurnCommit) -> TerminalBoundary | None:
    """The terminal event of a committed turn, if any (§7.1). Pure and cheap: it runs on the hot path.

    1. The first ``agent_end`` whose ``reason`` is ``completed`` or ``cancelled``.
    2. Else, only when the turn status is ``failed``: the first ``llm_step_failed`` that is not
       retryable or has exhausted its retries, reported as ``failed``.
    3. Else nothing (intermediate batches, running turns).
    """
    for event in ctx.events:
        reason = event.payload.get("reason")
        if event.type == "agent_end" and isinstance(reason, str) and reason in TERMINAL_AGENT_END_REASONS:
            status: Literal["completed", "cancelled"] = "completed" if reason == "completed" else "cancelled"
            return TerminalBoundary(end_seq=event.seq, status=status)
    if ctx.status != "failed":
        return None
    for event in ctx.events:
        if event.type != "llm_step_failed":
            continue
        payload = event.payload
        if not php_truthy(payload.get("retryable")) or php_truthy(payload.get("retries_exhausted")):
            return TerminalBoundary(end_seq=event.seq, status="failed")
    return None


class BeforeCompactionContext(_Hook):
    """Input of the before-compaction hook (§2.2); the same hook serves CompactRun and snapshot/fork."""

    session_id: SessionId = Field(validation_alias=SESSION_ID_ALIASES)
    """Session being compacted."""
    turn_no: int
    """Current turn."""
    trigger: Literal["compact_run", "snapshot"]
    """``compact_run`` passes a coverage watermark (1..last seq); ``snapshot`` (fork) passes none."""
    required_start_seq: int | None = None
    """First seq the summary must cover, when known."""
    required_end_seq: int | None = None
    """Last seq the summary must cover, when known."""
    token_estimate_before: int = 0
    """Host's token estimate of the context before compaction."""
    messages_compacted: int = 0
    """Messages the host is about to replace."""
    messages_retained: int = 0
    """Messages the host keeps verbatim."""
    first_retained_index: int | None = None
    """Index of the first retained message, when any."""
    prior_summary_present: bool = False
    """Whether an earlier compaction summary is in the context."""
    custom_instructions: str | None = None
    """User's compaction instructions (unused by omray; never logged)."""
    resolved_model: str | None = None
    """Model the host would summarize with (unused by omray)."""
    thinking_level: str | None = None
    """Host thinking level (unused by omray)."""

    @property
    def has_coverage_watermark(self) -> bool:
        """True when both required seqs are given (CompactRun); reported in metadata only."""
        return self.required_start_seq is not None and self.required_end_seq is not None


class CompactionDecision(_Hook):
    """The hook's answer. The host takes the first ``cancel`` and the first non-empty replacement."""

    action: Literal["continue", "cancel", "replace_summary"]
    """``continue``: host compacts normally; ``cancel``: fail closed; ``replace_summary``: use our text."""
    summary_text: str | None = None
    """Replacement summary (only for ``replace_summary``; non-empty)."""
    reason: str | None = None
    """Why compaction was cancelled (only for ``cancel``; names an exception class, never memory text)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """JSON-safe metadata recorded by the host with the result."""

    @model_validator(mode="after")
    def _fields_match_action(self) -> CompactionDecision:
        if self.action == "replace_summary" and not (self.summary_text and self.summary_text.strip()):
            raise ValueError("replace_summary needs a non-empty summary_text")
        if self.action != "replace_summary" and self.summary_text is not None:
            raise ValueError(f"summary_text is only allowed with replace_summary, not {self.action!r}")
        if self.action == "cancel" and not self.reason:
            raise ValueError("cancel needs a reason")
        if self.action != "cancel" and self.reason is not None:
            raise ValueError(f"reason is only allowed with cancel, not {self.action!r}")
        return self

    @classmethod
    def continue_(cls) -> CompactionDecision:
        """Let the host compact as it normally would (empty memory)."""
        return cls(action="continue")

    @classmethod
    def cancel(cls, reason: str) -> CompactionDecision:
        """Fail closed: the host must not fall back to an LLM summary."""
        return cls(action="cancel", reason=reason)

    @classmethod
    def replace_summary(cls, text: str, metadata: Mapping[str, Any] | None = None) -> CompactionDecision:
        """Replace the host's summary with ``text`` (the rendered active memory)."""
        return cls(action="replace_summary", summary_text=text, metadata=dict(metadata or {}))


def projection_metadata(has_coverage_watermark: bool) -> dict[str, Any]:
    """Metadata attached to a ``replace_summary`` decision (§10.1), in the original's key order."""
    return {
        "om_source": "observational_memory",
        "om_projection": "active_durable_memory",
        "om_has_coverage_watermark": has_coverage_watermark,
    }


COVERAGE_INCOMPLETE_PREFIX = "observational_memory coverage incomplete: "
"""Prefix of the cancel reason when memory does not cover the range a compaction replaces yet."""


def coverage_incomplete_reason(covered_end: int, required_end: int) -> str:
    """Cancel reason for a compaction whose range is not observed yet (seqs only, never text)."""
    where = f"observed through seq {covered_end}, compaction replaces through {required_end}"
    return COVERAGE_INCOMPLETE_PREFIX + where


def projection_failure_reason(exception_class: str) -> str:
    """Cancel reason for a failed projection: fixed prefix plus the exception class name only."""
    return COMPACTION_FAILURE_PREFIX + exception_class
