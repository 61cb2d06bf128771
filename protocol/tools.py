"""Arguments and receipts of the Observer's, Reflector's and Dropper's tools (reference §7.7, §9.5, §9.7).

Arguments come from a model, so they are parsed item by item: one bad item is counted as
rejected and never fails the whole call. Argument models ignore unknown keys, as the original
does (the JSON schemas already tell the model not to send any). Receipts are what the tool call
returns to the model; :meth:`to_tool_result` gives the exact JSON object in the original's key order.
The read tools' arguments (``memory_search``, ``recall``) are :mod:`protocol.read_arguments`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator

from protocol.canonical import php_trim
from protocol.identities import normalize_source_refs
from protocol.records import TIMESTAMP_PATTERN, Relevance, SourceRef

RECORD_OBSERVATIONS_INVALID_MESSAGE = "record_observations requires observations as a list (array)."
"""Receipt message when ``observations`` is not a list."""
ALL_OBSERVATIONS_REJECTED_MESSAGE = (
    "All observations in this call were rejected. Fix timestamps/relevance/source_refs and retry."
)
"""Receipt message when every item of a call was rejected."""
SOME_OBSERVATIONS_REJECTED_MESSAGE = (
    "Some observations were rejected; the accepted ones are saved. Resend only the rejected ones, corrected."
)
"""Receipt message when some items were rejected and others accepted or duplicated."""
OBSERVATIONS_ACCEPTED_MESSAGE = (
    "Observations accepted. Call again only if part of this chunk is still not recorded; otherwise stop."
)
"""Receipt message when nothing was rejected."""
RECORD_REFLECTIONS_INVALID_MESSAGE = "record_reflections requires reflections as a list (array)."
"""Receipt message when ``reflections`` is not a list."""
RECORD_REFLECTIONS_EMPTY_MESSAGE = (
    "record_reflections requires at least one new reflection; do not call it when nothing new is durable."
)
"""Receipt message when ``reflections`` is an empty list."""
DROP_OBSERVATIONS_INVALID_MESSAGE = "drop_observations requires a non-empty ids list."
"""Receipt message when ``ids`` is not a non-empty list."""

FORBIDDEN_REFLECTION_KEYS: frozenset[str] = frozenset({"retain_id", "retained_observation_ids"})
"""Keys of the old full-rewrite reflector; an item carrying one is rejected."""

_SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"BEGIN (?:RSA |OPENSSH |EC )?PRIVATE KEY", re.IGNORECASE),
    re.compile(
        r"\b(?:api[_-]?key|password|client[_-]?secret|access[_-]?token|auth[_-]?token|bearer\s+token"
        r"|private[_-]?key)\b\s*[:=]",
        re.IGNORECASE,
    ),
    re.compile(
        r"\b(?:api[_-]?key|password|client[_-]?secret|access[_-]?token|auth[_-]?token)\b\s+[\"']?\S+",
        re.IGNORECASE,
    ),
)


def looks_like_secret(text: str) -> bool:
    """Heuristic secret check for reflections (§9.5); can also reject benign prose ("password policy")."""
    return any(pattern.search(text) for pattern in _SECRET_PATTERNS)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


class _ModelArguments(BaseModel):
    # Model-provided: unknown keys are ignored like the original does, not an error.
    model_config = ConfigDict(frozen=True, extra="ignore")


class _Receipt(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_tool_result(self) -> dict[str, Any]:
        """The JSON object returned to the model (fields in declaration order, unset optionals left out)."""
        return {key: value for key, value in self.model_dump().items() if value is not None}

    @property
    def accepted_in_full(self) -> bool:
        """True when the call needs no correction: every item it sent was valid.

        A tool loop may then end without sending the receipt back (no wasted round); a receipt that
        reports anything rejected or unknown always goes back to the model.
        """
        return False


class InvalidArgumentsReceipt(_Receipt):
    """Answer to a reflector/dropper call whose top-level arguments are unusable; nothing changed."""

    status: Literal["rejected"] = "rejected"
    """Always ``rejected``."""
    error: Literal["invalid_arguments"] = "invalid_arguments"
    """Always ``invalid_arguments``."""
    message: str
    """What the model must fix."""


# --- record_observations (§7.7) ---------------------------------------------------------------


class ObservationDraft(_ModelArguments):
    """One observation item as the Observer sent it, after per-item validation.

    Whether each source ref is one of the part's allowed refs is checked by the caller
    (:meth:`cites_only`), since only it knows the part.
    """

    timestamp: StrictStr = Field(pattern=TIMESTAMP_PATTERN)
    """When it happened, ``YYYY-MM-DD HH:MM`` (format only)."""
    content: StrictStr
    """Trimmed, non-empty, single-line text."""
    relevance: Relevance
    """Observer's rating."""
    source_refs: tuple[SourceRef, ...] = Field(min_length=1)
    """Cited events, normalized (sorted by run id then seq, unique)."""

    @field_validator("content")
    @classmethod
    def _single_line(cls, value: str) -> str:
        value = php_trim(value)
        if value == "":
            raise ValueError("content is empty")
        if "\n" in value:
            raise ValueError("content has more than one line")
        return value

    @field_validator("source_refs", mode="before")
    @classmethod
    def _only_ref_keys(cls, refs: object) -> object:
        # Like the original, read only run_id and seq of each ref; other keys are not an error.
        if isinstance(refs, list | tuple):
            return [
                {key: ref[key] for key in ("run_id", "seq") if key in ref}
                if isinstance(ref, Mapping)
                else ref
                for ref in refs
            ]
        return refs

    @field_validator("source_refs")
    @classmethod
    def _normalized(cls, refs: tuple[SourceRef, ...]) -> tuple[SourceRef, ...]:
        return tuple(normalize_source_refs(refs))

    def cites_only(self, allowed: set[tuple[str, int]] | frozenset[tuple[str, int]]) -> bool:
        """True when every source ref is one of ``allowed`` ``(run_id, seq)`` pairs."""
        return all((ref.run_id, ref.seq) in allowed for ref in self.source_refs)


def observation_items(arguments: Mapping[str, Any]) -> list[Any] | None:
    """The raw ``observations`` list of a call, or ``None`` when it is not a list (invalid arguments)."""
    items = arguments.get("observations")
    return items if isinstance(items, list) else None


def parse_observation_draft(item: object) -> ObservationDraft | None:
    """One validated item, or ``None`` when it is rejected (reasons are not reported to the model)."""
    if not isinstance(item, Mapping):
        return None
    try:
        return ObservationDraft.model_validate(dict(item))
    except ValidationError:
        return None


class ObservationReceipt(_Receipt):
    """Answer to one ``record_observations`` call; ``total`` counts observations accepted so far."""

    status: Literal["accepted", "rejected"]
    """``rejected`` when the arguments were unusable or every item was rejected."""
    added: int = Field(ge=0)
    """New observations accepted by this call."""
    duplicates: int = Field(ge=0)
    """Items already accepted earlier in this run."""
    rejected: int = Field(ge=0)
    """Invalid items in this call."""
    total: int = Field(ge=0)
    """Observations accepted so far in this agent run."""
    message: str
    """Guidance for the model."""
    error: Literal["invalid_arguments", "all_rejected"] | None = None
    """Machine-readable reason for a rejected call."""

    @property
    def accepted_in_full(self) -> bool:
        """Accepted with nothing rejected."""
        return self.status == "accepted" and self.rejected == 0


def observation_receipt(added: int, duplicates: int, rejected: int, total: int) -> ObservationReceipt:
    """Receipt for a call whose items were processed (§7.7 rules)."""
    counts = {"added": added, "duplicates": duplicates, "rejected": rejected, "total": total}
    if added == 0 and duplicates == 0 and rejected > 0:
        return ObservationReceipt(
            status="rejected", **counts, message=ALL_OBSERVATIONS_REJECTED_MESSAGE, error="all_rejected"
        )
    message = SOME_OBSERVATIONS_REJECTED_MESSAGE if rejected > 0 else OBSERVATIONS_ACCEPTED_MESSAGE
    return ObservationReceipt(status="accepted", **counts, message=message)


def invalid_observations_receipt(total: int) -> ObservationReceipt:
    """Receipt for a call whose ``observations`` is not a list; counts as one rejection."""
    return ObservationReceipt(
        status="rejected",
        added=0,
        duplicates=0,
        rejected=1,
        total=total,
        message=RECORD_OBSERVATIONS_INVALID_MESSAGE,
        error="invalid_arguments",
    )


# --- record_reflections (§9.5) ----------------------------------------------------------------


class ReflectionDraft(_ModelArguments):
    """One reflection item after per-item validation; supporting ids are still request-local ids."""

    content: StrictStr
    """Trimmed, non-empty, single-line text that does not look like a secret."""
    supporting_observation_ids: tuple[StrictStr, ...] = Field(min_length=1)
    """Trimmed request-local observation ids, in the order given (mapped to canonical ids by the caller)."""

    @field_validator("content")
    @classmethod
    def _clean_content(cls, value: str) -> str:
        value = php_trim(value)
        if value == "":
            raise ValueError("content is empty")
        if "\n" in value or "\r" in value:
            raise ValueError("content has more than one line")
        if looks_like_secret(value):
            raise ValueError("content looks like a secret")
        return value

    @field_validator("supporting_observation_ids")
    @classmethod
    def _non_blank_ids(cls, ids: tuple[str, ...]) -> tuple[str, ...]:
        stripped = tuple(php_trim(item) for item in ids)
        if any(item == "" for item in stripped):
            raise ValueError("supporting id is blank")
        return stripped


def reflection_items(arguments: Mapping[str, Any]) -> list[Any] | InvalidArgumentsReceipt:
    """The raw ``reflections`` list, or the invalid-arguments receipt (not a list, or empty)."""
    items = arguments.get("reflections")
    if not isinstance(items, list):
        return InvalidArgumentsReceipt(message=RECORD_REFLECTIONS_INVALID_MESSAGE)
    if not items:
        return InvalidArgumentsReceipt(message=RECORD_REFLECTIONS_EMPTY_MESSAGE)
    return items


def parse_reflection_draft(item: object) -> ReflectionDraft | None:
    """One validated item, or ``None`` when it is rejected (including items with retain keys)."""
    if not isinstance(item, Mapping) or FORBIDDEN_REFLECTION_KEYS.intersection(item.keys()):
        return None
    try:
        return ReflectionDraft.model_validate(dict(item))
    except ValidationError:
        return None


class _CountsReceipt(_Receipt):
    """A processed call that is always ``accepted``: its counts tell what happened, and its guidance
    line (the original's words, :meth:`guidance_for`) says them to the model."""

    status: Literal["accepted"] = "accepted"
    """Always ``accepted``, even when every item was rejected or unknown."""
    added: int = Field(ge=0)
    """Items newly accepted by this call."""

    @classmethod
    def guidance_for(cls, counts: Mapping[str, int]) -> str:
        """The guidance line of these counts."""
        raise NotImplementedError

    @classmethod
    def of(cls, **counts: int) -> Self:
        """The receipt of these counts, with its guidance line."""
        return cls.model_validate({**counts, "guidance": cls.guidance_for(counts)})


class ReflectionReceipt(_CountsReceipt):
    """Answer to one processed ``record_reflections`` call (only the counts tell how it went)."""

    duplicates: int = Field(ge=0)
    """Items equal to an active reflection or to one accepted earlier in this run."""
    rejected: int = Field(ge=0)
    """Invalid items in this call."""
    total_this_run: int = Field(ge=0)
    """Reflections accepted so far in this agent run."""
    guidance: str
    """``Recorded <a> reflection[s]; <d> duplicate[s]; <r> rejected. Total this run: <n>.``"""

    @property
    def accepted_in_full(self) -> bool:
        """Nothing rejected."""
        return self.rejected == 0

    @classmethod
    def guidance_for(cls, counts: Mapping[str, int]) -> str:
        """Singular only for exactly 1; "rejected" never plural."""
        return (
            f"Recorded {_plural(counts['added'], 'reflection')}; "
            f"{_plural(counts['duplicates'], 'duplicate')}; "
            f"{counts['rejected']} rejected. Total this run: {counts['total_this_run']}."
        )


def reflection_receipt(added: int, duplicates: int, rejected: int, total_this_run: int) -> ReflectionReceipt:
    """Receipt with the original's guidance line."""
    return ReflectionReceipt.of(**locals())


# --- drop_observations (§9.7) -----------------------------------------------------------------


def drop_ids(arguments: Mapping[str, Any]) -> list[Any] | InvalidArgumentsReceipt:
    """The raw ``ids`` list, or the invalid-arguments receipt when it is not a non-empty list.

    Each id is then classified by the caller (missing, duplicate in request, duplicate in run,
    added); ``reason`` is accepted and discarded.
    """
    ids = arguments.get("ids")
    if not isinstance(ids, list) or not ids:
        return InvalidArgumentsReceipt(message=DROP_OBSERVATIONS_INVALID_MESSAGE)
    return ids


class DropReceipt(_CountsReceipt):
    """Answer to one processed ``drop_observations`` call; the tool only queues proposals (``added``)."""

    missing: int = Field(ge=0)
    """Blank, non-string or unknown ids."""
    duplicate_in_request: int = Field(ge=0)
    """Ids repeated within this call."""
    duplicate_in_run: int = Field(ge=0)
    """Ids proposed by an earlier call of this run."""
    total_candidates: int = Field(ge=0)
    """Proposals queued so far in this run."""
    max_drops_allowed: int = Field(ge=0)
    """Hard cap on drops for this run."""
    guidance: str
    """``Queued <a> drop candidate[s]. Candidates this run: <n>. Maximum drops allowed: <m>.``"""

    @property
    def accepted_in_full(self) -> bool:
        """Every id was known."""
        return self.missing == 0

    @classmethod
    def guidance_for(cls, counts: Mapping[str, int]) -> str:
        """``Queued <a> drop candidate[s]. Candidates this run: <n>. Maximum drops allowed: <m>.``"""
        return (
            f"Queued {_plural(counts['added'], 'drop candidate')}. "
            f"Candidates this run: {counts['total_candidates']}. "
            f"Maximum drops allowed: {counts['max_drops_allowed']}."
        )


def drop_receipt(
    added: int,
    missing: int,
    duplicate_in_request: int,
    duplicate_in_run: int,
    total_candidates: int,
    max_drops_allowed: int,
) -> DropReceipt:
    """Receipt with the original's guidance line."""
    return DropReceipt.of(**locals())
