"""Memory records as stored in SQLite (reference §4.3), as immutable pydantic models."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from protocol import formats
from protocol.ids import SESSION_ID_ALIASES, GenerationId, ObservationId, ReflectionId, SessionId

Relevance = Literal["low", "medium", "high", "critical"]
"""How much an observation matters, as rated by the Observer."""

RELEVANCE_RANK: dict[str, int] = {"low": 0, "medium": 1, "high": 2, "critical": 3}
"""Rank of each relevance value; unknown values rank as ``medium`` (see :func:`relevance_rank`)."""

ActivityStage = Literal["observer", "reflector", "dropper"]
"""Stage shown in the live activity row."""

GenerationStatus = Literal["running", "succeeded", "failed"]
"""Lifecycle of one memory generation."""

TIMESTAMP_PATTERN = formats.TIMESTAMP_PATTERN
"""Observation timestamps are ``YYYY-MM-DD HH:MM`` (format only; no calendar check)."""


def relevance_rank(value: str) -> int:
    """Rank of a relevance value (low=0 .. critical=3); unknown values count as medium."""
    return RELEVANCE_RANK.get(value, 1)


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SourceRef(_Record):
    """One event of a session that an observation was derived from."""

    run_id: SessionId
    """Session the event belongs to."""
    seq: int = Field(ge=1)
    """Sequence number of the event in that session's ``events.jsonl``."""


class ObservationRecord(_Record):
    """One accepted observation (table ``om_observation``)."""

    observation_id: ObservationId
    """Content-derived id (reference §5.2)."""
    session_id: SessionId = Field(validation_alias=SESSION_ID_ALIASES, serialization_alias="run_id")
    """Session the observation belongs to."""
    boundary_key: str
    """Chunk key of the part that produced it."""
    source_start_seq: int
    """Start of the producing chunk's normalized range."""
    source_end_seq: int
    """End of the producing chunk's normalized range."""
    source_refs: tuple[SourceRef, ...]
    """Normalized source refs (sorted by run id then seq, unique)."""
    content: str
    """Single-line, trimmed observation text."""
    content_hash: str
    """``sha256(content)``."""
    relevance: Relevance
    """Observer's rating."""
    timestamp: str = Field(pattern=TIMESTAMP_PATTERN)
    """When it happened, ``YYYY-MM-DD HH:MM``."""
    token_count: int = Field(ge=0)
    """Token count of ``content``."""
    observer_model: str
    """``provider/model`` that wrote it."""
    observer_schema_version: str
    """Observer schema version (part of the id)."""
    created_at: str
    """UTC ISO-8601 time the part was committed."""

    @property
    def first_source_seq(self) -> int:
        """The first event of its own session it cites, else its part's start: its place in the
        session's story (``persistence.reads.projection_sql.FIRST_SOURCE_SEQ_SQL`` in SQL)."""
        own = [ref.seq for ref in self.source_refs if ref.run_id == self.session_id]
        return min(own) if own else self.source_start_seq


class ChunkPartIdentity(_Record):
    """What identifies one part of a logical chunk of source: the fields an Observer input
    (``actors.observer.packer.ChunkPart``) and its committed coverage row (:class:`CoveragePart`) share."""

    coverage_key: str
    """Identity of this part: ``sha256`` of the canonical observer-chunk-part-v1 object."""
    session_id: SessionId = Field(validation_alias=SESSION_ID_ALIASES, serialization_alias="run_id")
    """Session covered."""
    source_start_seq: int = Field(ge=1)
    """First covered seq (inclusive)."""
    source_end_seq: int = Field(ge=1)
    """Last covered seq (inclusive)."""
    chunk_key: str
    """Identity of the logical chunk this part belongs to (``observer-chunk-v1``)."""
    part_index: int = Field(ge=1)
    """1-based index of this part within its chunk."""
    part_count: int = Field(ge=1)
    """Number of parts of the chunk."""
    source_digest: str
    """Digest over every source block of the chunk."""
    part_digest: str
    """``sha256`` of this part's rendered text."""
    renderer_version: str
    """Renderer version the part was rendered with (part of the chunk key)."""
    observer_schema_version: str
    """Observer schema version (part of the chunk key)."""

    def to_coverage_part(self, covered_at: str) -> CoveragePart:
        """The coverage row committed with this part's observations."""
        identity = self.model_dump(include=set(ChunkPartIdentity.model_fields))
        return CoveragePart(**identity, boundary_key=self.chunk_key, covered_at=covered_at)


class CoveragePart(ChunkPartIdentity):
    """One committed chunk part (table ``om_coverage``); ``observation_count`` is set by the store."""

    boundary_key: str
    """Equal to ``chunk_key``."""
    observation_count: int = Field(default=0, ge=0)
    """Observations committed with this part (filled in by the store on commit)."""
    covered_at: str
    """UTC ISO-8601 commit time."""


class ReflectionRecord(_Record):
    """One reflection (table ``om_reflection``)."""

    reflection_id: ReflectionId
    """Content-derived id (reference §5.2)."""
    session_id: SessionId = Field(validation_alias=SESSION_ID_ALIASES, serialization_alias="run_id")
    """Session."""
    compaction_request_id: str = ""
    """Always ``''`` for threshold generations."""
    observation_set_hash: str
    """Set hash of the generation that first inserted it."""
    content: str
    """Reflection text."""
    supporting_observation_ids: tuple[ObservationId, ...]
    """Canonical observation ids, unique and sorted."""
    compression_level: str = "0"
    """Always ``'0'``."""
    token_count: int = Field(ge=0)
    """Token count of ``content``."""
    reflector_model: str
    """``provider/model`` that wrote it."""
    reflector_schema_version: str
    """Reflector schema version (part of the id)."""
    created_at: str
    """UTC ISO-8601 promotion time."""


class ActiveReflection(_Record):
    """A reflection linked to the session's active generation, with its position."""

    reflection_id: ReflectionId
    """Id."""
    content: str
    """Text."""
    supporting_observation_ids: tuple[str, ...]
    """Ids of the observations it condenses."""
    token_count: int
    """Stored token count."""
    position: int
    """Position in the active generation (ascending order)."""
    created_at: str = ""
    """UTC ISO-8601 promotion time."""


class GenerationRecord(_Record):
    """One memory generation (table ``om_memory_generation``)."""

    generation_id: GenerationId
    """Deterministic threshold-generation id."""
    session_id: SessionId = Field(validation_alias=SESSION_ID_ALIASES, serialization_alias="run_id")
    """Session."""
    trigger_kind: Literal["threshold", "compaction"] = "threshold"
    """Only ``threshold`` is produced."""
    status: GenerationStatus
    """Lifecycle state."""
    observation_set_hash: str
    """Hash of the observation set the generation was claimed for."""
    reflector_model: str
    """Model."""
    reflector_schema_version: str
    """Reflector schema version."""
    threshold_idempotency_key: str | None = None
    """Equal to ``generation_id`` for threshold generations."""
    required_start_seq: int | None = None
    """Always 1 for threshold generations."""
    required_end_seq: int | None = None
    """Source watermark: max source end seq of the claimed set."""
    failure_code: str | None = None
    """Why the generation failed, when it did."""
    created_at: str
    """Claim time (reset on reclaim)."""
    completed_at: str | None = None
    """Completion time."""


class ActivityRecord(_Record):
    """Live activity row for one session (table ``om_current_activity``)."""

    session_id: SessionId = Field(validation_alias=SESSION_ID_ALIASES, serialization_alias="run_id")
    """Session."""
    job_id: str
    """Job that wrote the row; only that job may clear it."""
    stage: ActivityStage
    """Running stage."""
    current_tokens: int = Field(ge=0)
    """Tokens being processed."""
    target_tokens: int | None = Field(default=None, gt=0)
    """Target (Dropper only)."""
    updated_at: str
    """UTC ISO-8601 time of the last write."""


UsageJobKind = Literal["observe", "reflect", "drop"]
"""Which model stage spent the tokens (the Dropper runs inside reflect jobs)."""


class TokenUsageTotal(_Record):
    """Tokens spent for one session (or all, summed), job kind and model; counts only, never text."""

    session_id: SessionId | None = Field(validation_alias=SESSION_ID_ALIASES, serialization_alias="run_id")
    """Session, or ``None`` for a total over sessions."""
    job_kind: UsageJobKind
    """Stage that called the model."""
    model: str = Field(min_length=1)
    """``provider/model``."""
    requests: int = Field(ge=0)
    """Model requests."""
    prompt_tokens: int = Field(ge=0)
    """Input tokens the endpoint reported."""
    cached_prompt_tokens: int = Field(ge=0)
    """Input tokens it reported as served from its prompt cache (part of ``prompt_tokens``; 0 when it
    reports none)."""
    completion_tokens: int = Field(ge=0)
    """Output tokens it reported."""
    cost_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """US dollars the provider reported for these requests (``claude-code``), ``None`` when it reported
    none (migration ``omray_017_budget``)."""


class ModelDaySpend(_Record):
    """What one model spent in one period (a UTC day), summed over sessions and stages: the input of
    the daily budget check (:mod:`actors.models.budget`). Counts and dollars only."""

    model: str = Field(min_length=1)
    """``provider/model``."""
    requests: int = Field(default=0, ge=0)
    """Model requests."""
    prompt_tokens: int = Field(default=0, ge=0)
    """Input tokens."""
    cached_prompt_tokens: int = Field(default=0, ge=0)
    """Cached input tokens (part of ``prompt_tokens``)."""
    completion_tokens: int = Field(default=0, ge=0)
    """Output tokens."""
    reported_usd: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """US dollars the provider reported, over the rows that report some."""
    unreported_prompt_tokens: int = Field(default=0, ge=0)
    """Input tokens of the rows without a reported cost (priced by the settings' ``prices``, if at all)."""
    unreported_cached_prompt_tokens: int = Field(default=0, ge=0)
    """Their cached input tokens."""
    unreported_completion_tokens: int = Field(default=0, ge=0)
    """Their output tokens."""
    unreported_requests: int = Field(default=0, ge=0)
    """Their requests (0: every row reported a cost)."""


class TokenUsageDay(TokenUsageTotal):
    """Tokens spent for one session, job kind and model on one UTC day (the cost report's days)."""

    day: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    """The UTC day, ``YYYY-MM-DD``."""


class TokenUsageRecord(TokenUsageTotal):
    """What one model tool loop spent: one row of ``omray_token_usage``."""

    usage_id: str = Field(min_length=1)
    """Idempotency key of the write (one per tool loop; a repeated write is ignored)."""
    session_id: SessionId = Field(validation_alias=SESSION_ID_ALIASES, serialization_alias="run_id")
    """Session the work was for."""
    recorded_at: str
    """UTC ISO-8601 time of the write."""


class TranscriptEntry(_Record):
    """The searchable text of one covered event: one row of ``omray_transcript``."""

    session_id: SessionId = Field(validation_alias=SESSION_ID_ALIASES, serialization_alias="run_id")
    """Session the event belongs to."""
    seq: int = Field(ge=1)
    """Seq of the event in its session."""
    event_type: str = Field(min_length=1)
    """The event's type (``agent_command_applied``, ``llm_step_completed``, ``tool_execution_end``, ...)."""
    timestamp: str = Field(pattern=TIMESTAMP_PATTERN)
    """Minute of the event, ``YYYY-MM-DD HH:MM`` (the clock observations are dated with)."""
    content: str = Field(min_length=1)
    """Its text, role-labelled (``User: ...``, ``Assistant: ...``, ``Tool result <name>: ...``)."""
