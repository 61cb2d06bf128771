"""Job payloads of the durable ``extension_agent`` FIFO, discriminated by ``kind``.

Each job kind maps to one stable handler id (the id the original registers), and the queue
dispatches by that id. Payloads are plain JSON-safe values so a job survives any restart.

Observe and reflect jobs freeze only versions (and the reflector model the generation id is derived
from), never the settings: they say where the settings come from (``settings_file``) and the worker
reads them when the job runs, so a queued or retried job follows a changed model (reference §7.2,
§9.2). Without a file (settings given in code) the block travels inline in ``settings``; payloads
accepted before ``settings_file`` existed carry that inline block too and still load.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter

from protocol.canonical import sha256_hex
from protocol.events import MAX_SEQ
from protocol.forget import MAX_FORGET_IDS as MAX_FORGET_IDS  # callers took it from here
from protocol.forget import ForgetRequest
from protocol.ids import SESSION_ID_ALIASES, SessionId

OBSERVE_BOUNDARY_HANDLER = "observational_memory.observe_boundary"
"""Handler id of observe jobs (ObserverActor)."""
REFLECT_GENERATION_HANDLER = "observational_memory.reflect_generation"
"""Handler id of reflect jobs (ReflectorActor)."""
SEMANTIC_INDEX_HANDLER = "observational_memory.semantic_index"
"""Handler id of semantic index jobs (IndexerActor)."""
FORGET_HANDLER = "observational_memory.forget"
"""Handler id of forget jobs (run by the ReflectorActor pool: :data:`POOL_OF_HANDLER`). Forget jobs
queued before it existed carry the reflect handler id in their queue row; migration
``omray_016_forget_handler`` moves them to this one, and the queue reads a row's handler from its
payload's kind anyway."""

HandlerId = Literal[
    "observational_memory.observe_boundary",
    "observational_memory.reflect_generation",
    "observational_memory.semantic_index",
    "observational_memory.forget",
]
"""The stable handler ids."""

POOL_OF_HANDLER: dict[str, str] = {FORGET_HANDLER: REFLECT_GENERATION_HANDLER}
"""Handler ids whose jobs run on another role's worker pool: forget jobs run on the reflector pool
(the role that rewrites memory) and share its capacity. Every other handler id has a pool of its own."""


def pool_of(handler_id: str) -> str:
    """The handler id of the worker pool that runs ``handler_id``'s jobs (itself, or its host role's)."""
    return POOL_OF_HANDLER.get(handler_id, handler_id)


ObserveSignal = Literal["turn_end", "checkpoint", "session_end", "compaction", "idle_flush"]
"""Why an observe job was sent: a turn ended; a batch inside a turn under context pressure; the
session ended; the host is about to compact its context (Claude Code's ``PreCompact``); or the idle
timer of a deferred tail (``actors.observer.trigger``)."""


class _Job(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ObserveBoundaryJob(_Job):
    """Observe a session up to a terminal event (reference §7.1–§7.2)."""

    kind: Literal["observe_boundary"] = "observe_boundary"
    """Discriminator."""
    session_id: SessionId = Field(validation_alias=SESSION_ID_ALIASES)
    """Session to observe."""
    terminal_end_seq: int = Field(ge=1, le=MAX_SEQ)
    """Seq of the terminal event; observation covers through it."""
    terminal_status: str = Field(min_length=1)
    """``completed``, ``cancelled`` or ``failed`` for a turn end; the batch's status (e.g. ``running``)
    for a checkpoint or a session end."""
    renderer_version: str = Field(min_length=1)
    """Renderer version frozen at dispatch."""
    observer_schema_version: str = Field(min_length=1)
    """Observer schema version frozen at dispatch."""
    db_path: str = Field(min_length=1)
    """Absolute path of the memory database."""
    events_path: str = Field(min_length=1)
    """Absolute path of the session's ``events.jsonl``."""
    settings_file: str | None = Field(default=None, min_length=1)
    """Absolute path of the settings file in effect at dispatch; the worker reads it when the job runs."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """Inline ``observational_memory`` block, used only when there is no ``settings_file`` (settings
    given in code, or a payload accepted before ``settings_file`` existed); names of API-key
    variables only, never keys."""
    signal: ObserveSignal = "turn_end"
    """Why the job was sent; the worker's trigger policy reads it (payloads without it: a turn end)."""
    context_fill: float | None = Field(default=None, ge=0)
    """The agent's context fill (0..1) when the job was sent, if the agent reported it."""
    settings_fingerprint: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """Hash of the settings block the client sent the job with (:func:`settings_fingerprint`): a
    failed job of a database is re-driven once a job with another fingerprint is accepted there."""

    @property
    def handler_id(self) -> str:
        """Stable handler id."""
        return OBSERVE_BOUNDARY_HANDLER


def settings_fingerprint(block: Mapping[str, Any]) -> str | None:
    """Fingerprint of an ``observational_memory`` settings block (SHA-256 of its JSON with sorted
    keys): equal blocks, equal fingerprints, whatever their key order. ``None`` for a block JSON
    cannot hold (a YAML date): its jobs then re-drive failed ones only by a success or ``omray retry``."""
    try:
        text = json.dumps(
            ["omray-settings-v1", block], sort_keys=True, separators=(",", ":"), allow_nan=False
        )
    except (TypeError, ValueError):
        return None
    return sha256_hex(text)


class ReflectGeneration(_Job):
    """A threshold generation to reflect: what §9.1 dispatches and §9.2 accepts, without where it
    runs. ``model_dump()`` gives the original's payload keys in its order (``session_id`` for its
    ``run_id``, which is still accepted)."""

    session_id: SessionId = Field(validation_alias=SESSION_ID_ALIASES)
    """Session."""
    trigger: Literal["threshold"] = "threshold"
    """Only threshold generations exist."""
    generation_id: str = Field(pattern=r"^[0-9a-f]{64}$")
    """Deterministic threshold-generation id (also the job id)."""
    threshold_idempotency_key: str | None = None
    """Equals ``generation_id`` (defaults to it when absent)."""
    observation_set_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    """Hash of the active candidate set at dispatch."""
    prior_active_generation_id: str | None = None
    """Active generation when the job was dispatched, or ``None`` before the first promotion."""
    reflector_model: str = Field(min_length=1)
    """``provider/model``."""
    reflector_schema_version: str = Field(min_length=1)
    """Reflector schema version."""
    token_count: int | None = Field(default=None, ge=0)
    """Active candidate tokens at dispatch (informational)."""
    required_end_seq: int | None = None
    """Source watermark at dispatch: max ``source_end_seq`` of the set (fallback for the claim when
    the live set has none)."""
    required_start_seq: int = 1
    """Always 1."""

    def to_job(self, db_path: str) -> ReflectGenerationJob:
        """The queue payload of this generation in database ``db_path`` (its job id is ``generation_id``)."""
        return ReflectGenerationJob(**self.model_dump(), db_path=db_path)


class ReflectGenerationJob(ReflectGeneration):
    """Reflect (and maybe drop) one threshold generation (reference §9): the generation, plus the
    database and settings it runs with."""

    kind: Literal["reflect_generation"] = "reflect_generation"
    """Discriminator."""
    db_path: str = Field(min_length=1)
    """Absolute path of the memory database."""
    settings_file: str | None = Field(default=None, min_length=1)
    """Absolute path of the settings file; the worker reads it when the job runs, and the job fails as
    specified (§9.2) when its model or schema no longer matches."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """Inline ``observational_memory`` block, used only when there is no ``settings_file``."""

    @property
    def handler_id(self) -> str:
        """Stable handler id."""
        return REFLECT_GENERATION_HANDLER

    def generation(self) -> ReflectGeneration:
        """The generation alone (without database and settings)."""
        return ReflectGeneration(**self.model_dump(include=set(ReflectGeneration.model_fields)))


class SemanticIndexJob(_Job):
    """Index one bounded batch of memories for hybrid search (reference §14.4)."""

    kind: Literal["semantic_index"] = "semantic_index"
    """Discriminator."""
    session_id: SessionId = Field(validation_alias=SESSION_ID_ALIASES)
    """Session that triggered the job (the index covers the whole database)."""
    db_path: str = Field(min_length=1)
    """Absolute path of the memory database."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """The ``observational_memory`` settings block in effect at dispatch (its ``semantic`` block
    says what to index with; without it the job has nothing to do)."""
    events_root: str | None = None
    """Absolute folder holding ``<session>/events.jsonl``: the cited events' text is indexed too
    (source-grounded search). ``None`` keeps the root an earlier job recorded."""

    @property
    def handler_id(self) -> str:
        """Stable handler id."""
        return SEMANTIC_INDEX_HANDLER


class ForgetJob(ForgetRequest):
    """Forget memory of one session (``omray memory forget``): a :class:`ForgetRequest`, plus the
    database and settings it runs with.

    It runs in the session's lane, after every job of the session accepted before it (an observe
    job in flight commits first, then is forgotten), on the reflector pool (the role that rewrites
    memory); one transaction of the StoreActor removes the canonical rows and their derived copies.
    """

    kind: Literal["forget"] = "forget"
    """Discriminator."""
    db_path: str = Field(min_length=1)
    """Absolute path of the memory database."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """The ``observational_memory`` block at dispatch: its ``semantic`` block says which index job
    compacts the forgotten rows out of the hybrid index afterwards."""

    @property
    def handler_id(self) -> str:
        """Stable handler id of forget jobs."""
        return FORGET_HANDLER

    def request(self) -> ForgetRequest:
        """What the job removes (without database and settings), as the StoreActor takes it."""
        # Already checked as part of this job: the same values, not validated again.
        return ForgetRequest.model_construct(
            **{name: getattr(self, name) for name in ForgetRequest.model_fields}
        )


JobPayload = Annotated[
    ObserveBoundaryJob | ReflectGenerationJob | SemanticIndexJob | ForgetJob, Field(discriminator="kind")
]
"""Any job payload."""

JOB_PAYLOAD_ADAPTER: TypeAdapter[ObserveBoundaryJob | ReflectGenerationJob | SemanticIndexJob | ForgetJob] = (
    TypeAdapter(JobPayload)
)
"""Validates/serializes any job payload from/to JSON."""

HANDLER_BY_KIND: dict[str, str] = {
    "observe_boundary": OBSERVE_BOUNDARY_HANDLER,
    "reflect_generation": REFLECT_GENERATION_HANDLER,
    "semantic_index": SEMANTIC_INDEX_HANDLER,
    "forget": FORGET_HANDLER,
}
"""Stable handler id of each job kind."""


class JobEnvelope(_Job):
    """A job as accepted by the queue: id, correlation and payload."""

    job_id: str = Field(min_length=1)
    """Deterministic for observe/reflect jobs; random 32-hex for index jobs."""
    session_id: str | None = Field(
        default=None, validation_alias=AliasChoices("session_id", "correlation_id")
    )
    """The payload's session, for the queue's records (its name was ``correlation_id``, still accepted)."""
    payload: JobPayload
    """What to do."""
    not_before: float | None = None
    """Earliest start, in epoch seconds (``None``: now). The queue holds the job until then, unless a
    later job of its lane coalesces with it first (the idle flush of a deferred observe tail)."""

    @property
    def handler_id(self) -> str:
        """Stable handler id of the payload's kind."""
        return HANDLER_BY_KIND[self.payload.kind]
