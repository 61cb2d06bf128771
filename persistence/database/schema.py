"""SQLAlchemy Core description of the memory database (reference §4.3) plus omray's own tables.

The ``om_*`` tables keep the PHP extension's table names, column names, types, CHECK and UNIQUE
constraints so that an ``om.sqlite`` written by either implementation is readable by the other.
omray only adds tables named ``omray_*`` (the durable job queue and its runtime events).

These ``Table`` objects describe the *final* shape. Migrations (``persistence.database.migrations``)
compile their DDL from them, so a future change to an existing table needs a new migration
with its own literal DDL instead of an edit here.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.types import TypeEngine

metadata = MetaData()
"""Every table omray reads or writes."""

_OBSERVATION_TIMESTAMP_GLOB = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]"


def _required(kind: type[TypeEngine[Any]], *names: str) -> list[Column[Any]]:
    """``NOT NULL`` columns of one type, in the order given (keys, references and defaults are spelt out)."""
    return [Column(name, kind, nullable=False) for name in names]


def _optional(kind: type[TypeEngine[Any]], *names: str) -> list[Column[Any]]:
    """Nullable columns of one type, in the order given."""
    return [Column(name, kind, nullable=True) for name in names]


# --- PHP-compatible tables (reference §4.3) -------------------------------------------------

om_schema_version = Table(
    "om_schema_version",
    metadata,
    Column("version", Text, primary_key=True, nullable=False),
    *_required(Text, "description", "checksum", "applied_at"),
)

om_observation = Table(
    "om_observation",
    metadata,
    Column("observation_id", Text, primary_key=True, nullable=False),
    *_required(Text, "run_id", "boundary_key"),
    *_required(Integer, "source_start_seq", "source_end_seq"),
    *_required(Text, "source_refs_json", "content", "content_hash", "relevance", "timestamp"),
    Column("token_count", Integer, nullable=False),
    *_required(Text, "observer_model", "observer_schema_version", "created_at"),
    CheckConstraint("relevance IN ('low', 'medium', 'high', 'critical')"),
    CheckConstraint(f"timestamp GLOB '{_OBSERVATION_TIMESTAMP_GLOB}'"),
)
Index("idx_om_observation_run_created", om_observation.c.run_id, om_observation.c.created_at)
Index("idx_om_observation_run_boundary", om_observation.c.run_id, om_observation.c.boundary_key)
Index(
    "idx_om_observation_run_range",
    om_observation.c.run_id,
    om_observation.c.source_start_seq,
    om_observation.c.source_end_seq,
)
Index(
    "idx_om_observation_run_timestamp",
    om_observation.c.run_id,
    om_observation.c.timestamp,
    om_observation.c.observation_id,
)

om_coverage = Table(
    "om_coverage",
    metadata,
    Column("coverage_key", Text, primary_key=True, nullable=False),
    *_required(Text, "run_id", "boundary_key"),
    *_required(Integer, "source_start_seq", "source_end_seq"),
    Column("chunk_key", Text, nullable=False),
    *_required(Integer, "part_index", "part_count"),
    *_required(Text, "source_digest", "part_digest", "renderer_version", "observer_schema_version"),
    Column("observation_count", Integer, nullable=False),
    Column("covered_at", Text, nullable=False),
    CheckConstraint("source_start_seq >= 1"),
    CheckConstraint("source_end_seq >= source_start_seq"),
    CheckConstraint("part_index >= 1"),
    CheckConstraint("part_count >= part_index"),
    CheckConstraint("observation_count >= 0"),
    UniqueConstraint("run_id", "chunk_key", "part_index", "renderer_version", "observer_schema_version"),
)
Index(
    "idx_om_coverage_run_versions_range",
    om_coverage.c.run_id,
    om_coverage.c.renderer_version,
    om_coverage.c.observer_schema_version,
    om_coverage.c.source_start_seq,
    om_coverage.c.source_end_seq,
)
Index(
    "idx_om_coverage_run_chunk_part", om_coverage.c.run_id, om_coverage.c.chunk_key, om_coverage.c.part_index
)

om_reflection = Table(
    "om_reflection",
    metadata,
    Column("reflection_id", Text, primary_key=True, nullable=False),
    *_required(Text, "run_id", "compaction_request_id", "observation_set_hash", "content"),
    *_required(Text, "supporting_observation_ids_json", "compression_level"),
    Column("token_count", Integer, nullable=False),
    *_required(Text, "reflector_model", "reflector_schema_version", "created_at"),
)
Index("idx_om_reflection_request", om_reflection.c.compaction_request_id, om_reflection.c.created_at)
Index("idx_om_reflection_run", om_reflection.c.run_id, om_reflection.c.created_at)

om_memory_generation = Table(
    "om_memory_generation",
    metadata,
    Column("generation_id", Text, primary_key=True, nullable=False),
    *_required(Text, "run_id", "trigger_kind", "status", "observation_set_hash"),
    *_required(Text, "reflector_model", "reflector_schema_version"),
    Column("threshold_idempotency_key", Text, nullable=True),
    *_optional(Integer, "required_start_seq", "required_end_seq"),
    *_optional(Text, "compaction_request_id", "request_fingerprint", "failure_code"),
    Column("created_at", Text, nullable=False),
    Column("completed_at", Text, nullable=True),
    CheckConstraint("trigger_kind IN ('threshold', 'compaction')"),
    CheckConstraint("status IN ('running', 'succeeded', 'failed')"),
)
Index(
    "idx_om_memory_generation_run_created", om_memory_generation.c.run_id, om_memory_generation.c.created_at
)
Index(
    "idx_om_memory_generation_run_set_status",
    om_memory_generation.c.run_id,
    om_memory_generation.c.observation_set_hash,
    om_memory_generation.c.status,
)
Index(
    "idx_om_memory_generation_threshold_key",
    om_memory_generation.c.threshold_idempotency_key,
    unique=True,
    sqlite_where=text("threshold_idempotency_key IS NOT NULL"),
)
Index(
    "idx_om_memory_generation_compaction_request",
    om_memory_generation.c.compaction_request_id,
    om_memory_generation.c.reflector_schema_version,
    om_memory_generation.c.reflector_model,
    unique=True,
    sqlite_where=text("compaction_request_id IS NOT NULL"),
)


def _generation_members(name: str, member_id: str) -> Table:
    """An ordered list of a generation's members (reflections, retained observations): one row per
    member, each at its own position."""
    return Table(
        name,
        metadata,
        Column("generation_id", Text, ForeignKey("om_memory_generation.generation_id"), nullable=False),
        Column(member_id, Text, nullable=False),
        Column("position", Integer, nullable=False),
        PrimaryKeyConstraint("generation_id", member_id),
        UniqueConstraint("generation_id", "position"),
    )


om_generation_reflection = _generation_members("om_generation_reflection", "reflection_id")
om_generation_retained_observation = _generation_members(
    "om_generation_retained_observation", "observation_id"
)

om_active_generation = Table(
    "om_active_generation",
    metadata,
    Column("run_id", Text, primary_key=True, nullable=False),
    Column("generation_id", Text, ForeignKey("om_memory_generation.generation_id"), nullable=False),
)

om_current_activity = Table(
    "om_current_activity",
    metadata,
    Column("run_id", Text, primary_key=True, nullable=False),
    *_required(Text, "job_id", "stage"),
    Column("current_tokens", Integer, nullable=False),
    Column("target_tokens", Integer, nullable=True, server_default=text("NULL")),
    Column("updated_at", Text, nullable=False),
    CheckConstraint("stage IN ('observer', 'reflector', 'dropper')"),
    CheckConstraint("current_tokens >= 0"),
    CheckConstraint("target_tokens IS NULL OR target_tokens > 0"),
)

om_semantic_state = Table(
    "om_semantic_state",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    *_required(Text, "signature", "source_hash"),
    *_required(Integer, "dimensions", "dirty", "complete"),
    CheckConstraint("id = 1"),
)

# Legacy inert tables: created for old data, never written by current code (reference §4.3).
om_compaction_request = Table(
    "om_compaction_request",
    metadata,
    Column("request_id", Text, primary_key=True, nullable=False),
    Column("run_id", Text, nullable=False),
    *_optional(Integer, "required_start_seq", "required_end_seq", "required_watermark"),
    Column("request_fingerprint", Text, nullable=False),
    Column("observation_set_hash", Text, nullable=True),
    *_required(Text, "status", "requested_at", "updated_at"),
    *_optional(Text, "completed_at", "failure_code", "failure_metadata_json"),
)
Index(
    "idx_om_compaction_request_run_status",
    om_compaction_request.c.run_id,
    om_compaction_request.c.status,
    om_compaction_request.c.updated_at,
)

om_compaction_result = Table(
    "om_compaction_result",
    metadata,
    Column("result_id", Text, primary_key=True, nullable=False),
    Column("request_id", Text, nullable=False, unique=True),
    Column("run_id", Text, nullable=False),
    Column("required_watermark", Integer, nullable=True),
    Column("observation_set_hash", Text, nullable=True),
    Column("status", Text, nullable=False),
    *_optional(Text, "replacement_text", "metadata_json", "failure_code", "failure_metadata_json"),
    Column("created_at", Text, nullable=False),
    Column("completed_at", Text, nullable=True),
)

# --- omray's own additive tables ------------------------------------------------------------

omray_job = Table(
    "omray_job",
    metadata,
    Column("job_seq", Integer, primary_key=True, autoincrement=True),
    *_required(Text, "job_id", "handler_id"),
    Column("correlation_id", Text, nullable=True),
    *_required(Text, "run_id", "payload_json", "state"),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("not_before", Text, nullable=True),
    Column("accepted_at", Text, nullable=False),
    *_optional(Text, "started_at", "finished_at", "failure_reason"),
    Column("db_path", Text, nullable=False, server_default=text("''")),
    # omray_015: the job_seq a failed job was queued again as, and how often its work was re-driven.
    Column("redriven_to", Integer, nullable=True),
    Column("redrives", Integer, nullable=False, server_default=text("0")),
    # omray_017: runs that found the project's daily budget used up (held, not counted as attempts).
    Column("held_attempts", Integer, nullable=False, server_default=text("0")),
    CheckConstraint("state IN ('pending', 'running', 'succeeded', 'failed')"),
    CheckConstraint("attempts >= 0"),
    sqlite_autoincrement=True,
)
Index(
    "idx_omray_job_unfinished_key",
    omray_job.c.db_path,
    omray_job.c.job_id,
    unique=True,
    sqlite_where=text("state IN ('pending', 'running')"),
)
Index("idx_omray_job_state_seq", omray_job.c.state, omray_job.c.job_seq)

omray_runtime_event = Table(
    "omray_runtime_event",
    metadata,
    Column("event_seq", Integer, primary_key=True, autoincrement=True),
    *_required(Text, "run_id", "event_type", "payload_json", "created_at"),
    Column("db_path", Text, nullable=False, server_default=text("''")),
    sqlite_autoincrement=True,
)
Index("idx_omray_runtime_event_run_seq", omray_runtime_event.c.run_id, omray_runtime_event.c.event_seq)
Index(
    "idx_omray_runtime_event_db_run_seq",
    omray_runtime_event.c.db_path,
    omray_runtime_event.c.run_id,
    omray_runtime_event.c.event_seq,
)

omray_observe_start = Table(
    "omray_observe_start",
    metadata,
    Column("plan_key", Text, primary_key=True, nullable=False),
    *_required(Text, "run_id", "job_id"),
    *_required(Integer, "start_seq", "terminal_end_seq"),
    Column("pinned_at", Text, nullable=False),
    CheckConstraint("start_seq >= 1"),
)
"""The first seq a session's observe plan started from (one row per session and versions while a plan
is unfinished), pinned by the first attempt: a retry, or the job a retry was coalesced into, plans the
same parts from the same memory, so the result does not depend on when a crash happened."""

omray_token_usage = Table(
    "omray_token_usage",
    metadata,
    Column("usage_id", Text, primary_key=True, nullable=False),
    *_required(Text, "run_id", "job_kind", "model"),
    *_required(Integer, "requests", "prompt_tokens", "cached_prompt_tokens", "completion_tokens"),
    Column("recorded_at", Text, nullable=False),
    # omray_017: US dollars the provider reported for the loop (NULL: it reported none).
    Column("cost_usd", Float, nullable=True),
    CheckConstraint("job_kind IN ('observe', 'reflect', 'drop')"),
    CheckConstraint("requests >= 0 AND prompt_tokens >= 0 AND completion_tokens >= 0"),
    CheckConstraint("cached_prompt_tokens >= 0 AND cached_prompt_tokens <= prompt_tokens"),
    Index("idx_omray_token_usage_run", "run_id", "job_kind", "model"),
    Index("idx_omray_token_usage_recorded", "recorded_at"),
)
"""Tokens each model tool loop spent, per session, stage and model: counts and ids only, never text.
One row per loop (a retried part is spent again and counted again); ``usage_id`` makes a repeated
write of one loop a no-op."""

omray_transcript = Table(
    "omray_transcript",
    metadata,
    Column("transcript_seq", Integer, primary_key=True, autoincrement=True),
    Column("event_id", Text, nullable=False, unique=True),
    Column("run_id", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    *_required(Text, "event_type", "timestamp", "content", "content_hash", "created_at"),
    UniqueConstraint("run_id", "seq"),
    CheckConstraint("seq >= 1"),
    CheckConstraint(f"timestamp GLOB '{_OBSERVATION_TIMESTAMP_GLOB}'"),
)
"""The searchable text of every event the Observer was shown (user and assistant messages, tool calls
and results), one row per event with text, written in the transaction of the coverage part that covers
it (or backfilled from ``events.jsonl`` for coverage written without it). A copy of the session's
events file, never its replacement: it keeps what the Observer covered findable by ``memory_search``
whatever the Observer chose to write down. ``transcript_seq`` (append order) is the semantic index's
cursor; ``event_id`` is the id ``recall`` takes."""

omray_transcript_through = Table(
    "omray_transcript_through",
    metadata,
    Column("run_id", Text, primary_key=True, nullable=False),
    Column("through_seq", Integer, nullable=False),
)
"""Per session, the seq through which its covered events are in ``omray_transcript`` (coverage written
before this table, or by the PHP extension, lies beyond it until the index job backfills it)."""

omray_observation_ref = Table(
    "omray_observation_ref",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("observation_id", Text, nullable=False),
    PrimaryKeyConstraint("run_id", "seq", "observation_id"),
    sqlite_with_rowid=False,
)
"""Which observations cite each event of their own session (kept by triggers on ``om_observation``):
a search hit in the transcript leads to the memory that covers it."""

omray_forgotten = Table(
    "omray_forgotten",
    metadata,
    Column("forgotten_id", Text, primary_key=True, nullable=False),
    *_required(Text, "run_id", "kind"),
    *_optional(Integer, "seq_start", "seq_end"),
    *_required(Text, "job_id", "forgotten_at"),
    CheckConstraint("kind IN ('observation', 'reflection', 'events', 'session')"),
    CheckConstraint("(kind IN ('events', 'session')) = (seq_start IS NOT NULL AND seq_end IS NOT NULL)"),
    Index("idx_omray_forgotten_job", "job_id"),
    Index("idx_omray_forgotten_run", "run_id", "kind"),
)
"""What was forgotten (``omray memory forget``), ids and seqs only, never text: an observation or
reflection (``forgotten_id`` its id), a range of a session's events (``events:<run>:<a>-<b>``), or a
whole session (``session:<run>``, ``seq_start..seq_end`` = 1..the last seq covered when it was
forgotten). Nothing forgotten is written again: an observation id here is never inserted, and no
transcript row inside a forgotten range (a replayed observe part, a backfill from the events file)."""

omray_forget_request = Table(
    "omray_forget_request",
    metadata,
    Column("job_id", Text, primary_key=True, nullable=False),
    *_required(Text, "run_id", "result_json", "finished_at"),
)
"""One row per forget job that ran (written in its transaction): how many rows it removed (counts
and ids only). The client waits for its job's row."""

omray_database_placement = Table(
    "omray_database_placement",
    metadata,
    Column("db_path", Text, primary_key=True, nullable=False),
    *_required(Text, "placement_json", "recorded_at"),
)
"""The node each memory database lives on (``protocol.placement.DataPlacement`` as JSON), chosen
when the database was first used and never changed; kept in the queue's own database."""

PHP_TABLES: tuple[Table, ...] = (
    om_observation,
    om_coverage,
    om_reflection,
    om_compaction_request,
    om_compaction_result,
    om_memory_generation,
    om_generation_reflection,
    om_generation_retained_observation,
    om_active_generation,
    om_current_activity,
    om_semantic_state,
)
"""The tables of the PHP extension's final schema (excluding ``om_schema_version``)."""

OMRAY_TABLES: tuple[Table, ...] = (omray_job, omray_runtime_event)
"""omray's additive tables."""
