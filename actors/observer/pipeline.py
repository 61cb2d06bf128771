"""The Observer's job: observe a session's uncovered events through a terminal boundary (§7.2–§7.8).

Pure orchestration over injected ports (memory reader, store writer, events reader, chat model,
clocks), so it runs the same inside the ObserverActor and in unit tests. Each chunk part commits its
observations and coverage row in one transaction; parts already committed are skipped without a
model call, so a redelivered job never duplicates anything and resumes where it stopped.

Replay is deterministic: the first attempt pins the seq it plans from (``Store.pin_observe_start``,
one pin per session and versions until a job finishes), and every attempt plans from that seq with
the memory as it was then (observations that end before it), so a retry after a crash sends the same
remaining parts with the same memory as an uninterrupted run would. Coverage never claims what was
not read: when the events file does not reach the terminal seq yet (a half-written last line, a
terminal seq beyond the file), the job fails before any model call and the queue retries it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.activity import clear_activity, set_activity
from actors.models.budget import BudgetGate, is_metered
from actors.models.chat import ChatModel, PromptCap, run_tool_loop
from actors.models.prompts import OBSERVER_SYSTEM_PROMPT
from actors.models.usage import ModelSpend, record_loop_usage
from actors.observer.blocks import build_source_blocks, empty_source_block
from actors.observer.packer import ChunkPart, memory_context_lines, normalize_coverage, pack_parts
from actors.observer.tool import RecordObservationsHandler
from actors.observer.transcript import backfill_transcript, entries_in, transcript_entries
from actors.observer.trigger import Defer, ObserveNow, TriggerPolicy, decide_observe
from actors.reflector.core import CandidatePool, RequestLocalIdMap, threshold_check
from persistence.reads.memory_reader import MemoryReader
from persistence.writers.store import Store
from protocol.canonical import canonical_json, sha256_hex
from protocol.errors import ConflictError, OmrayError
from protocol.events import EventWindow
from protocol.identities import signalled_observe_job_id
from protocol.jobs import JobEnvelope, ObserveBoundaryJob, ReflectGenerationJob
from protocol.records import (
    ActivityRecord,
    TranscriptEntry,
)
from protocol.settings import AGENT_HTTP_MAX_DURATION_SECONDS, OBSERVER_MAX_TOOL_CALLS, OmSettings
from protocol.tool_specs import record_observations_spec

logger = logging.getLogger("omray.observer")

FIXED_OVERHEAD_SLACK_TOKENS = 32
"""Tokens added to the prompt and tool schema for message framing (§7.3 step 5)."""
PROMPT_CAP_MARGIN_TOKENS = 64
"""Under ``budget.max_prompt_tokens``, the part envelope leaves this much room: a part's message is
counted as a whole and its pieces apart, which can differ by a few tokens at the seams."""


class ObserverError(OmrayError):
    """A durable configuration or input problem of one observe job (the queue retries it)."""


@dataclass
class ObserverPorts:
    """Everything an observe job touches outside pure code."""

    memory: MemoryReader
    """Read-only queries."""
    store: Store
    """The single writer of the database: a :class:`~persistence.writers.store.Store`, or in a cluster the
    StoreActor proxy, which forwards the same calls (typed by the Store's own signatures)."""
    read_events: Callable[[int, int], EventWindow]
    """Inclusive seq range of the session's ``events.jsonl`` and how far the file was read
    (``persistence.files.events_reader.read_event_window``)."""
    resolve_model: Callable[[str], tuple[ChatModel, int]]
    """``provider/model`` -> (chat model, context window); called only when a model is needed."""
    count_tokens: Callable[[str], int]
    """Token counter (tiktoken)."""
    now_utc: Callable[[], str]
    """UTC ISO-8601 now."""
    now_local: Callable[[], str]
    """Local ``YYYY-MM-DD HH:MM`` now (fallback time shown to the model)."""
    dispatch: Callable[[JobEnvelope], str] | None = None
    """Enqueue a follow-up job (reflect, idle flush); ``None`` disables both."""
    clock: Callable[[], float] = time.time
    """Epoch seconds now (the idle flush's ``not_before``)."""
    new_id: Callable[[], str] = field(default=lambda: uuid.uuid4().hex)
    """A fresh id (one per model tool loop, the key of its token usage row)."""


@dataclass
class ObserveResult(ModelSpend):
    """Counts of one observe job; never content (the model counters are :class:`ModelSpend`'s)."""

    status: str
    """``already_covered``, ``deferred``, ``inserted`` or ``noop``."""
    trigger: str = ""
    """Why the model was called (``actors.observer.trigger.ObserveReason``), empty when it was not."""
    uncovered_tokens: int = 0
    """Source tokens of the uncovered range when the job decided."""
    source_start_seq: int = 0
    """First seq observed."""
    source_end_seq: int = 0
    """Terminal seq."""
    parts: int = 0
    """Parts in the range."""
    parts_committed: int = 0
    """Parts committed by this run."""
    parts_skipped: int = 0
    """Parts already committed earlier (no model call)."""
    observations: int = 0
    """Observations committed by this run."""
    source_tokens: int = 0
    """Tokens of the rendered source sent (parts that called the model)."""
    reflect_job_id: str | None = None
    """Reflect job dispatched by the threshold check, if any."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Other counters."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-able counters."""
        data = {k: v for k, v in self.__dict__.items() if k != "extra"}
        data.update(self.extra)
        return data


def fixed_overhead_tokens(count_tokens: Callable[[str], int]) -> int:
    """Tokens of the system prompt and the tool schema, plus framing slack (§7.3 step 5)."""
    schema = record_observations_spec()["function"]["parameters"]
    return (
        count_tokens(OBSERVER_SYSTEM_PROMPT)
        + count_tokens(canonical_json(schema))
        + FIXED_OVERHEAD_SLACK_TOKENS
    )


class EventsNotReadyError(ObserverError):
    """The events file does not reach the job's terminal seq yet; coverage must not claim unread seqs."""


def read_range(job: ObserveBoundaryJob, ports: ObserverPorts, start: int) -> EventWindow:
    """The events ``start..terminal_end_seq``; raises unless the file was read through the terminal seq."""
    window = ports.read_events(start, job.terminal_end_seq)
    if window.through < job.terminal_end_seq:
        raise EventsNotReadyError(
            f"events of run {job.session_id!r} are readable through seq {window.through}, "
            f"not yet through the terminal seq {job.terminal_end_seq}."
        )
    if not window.events:
        raise ObserverError(
            f"Observer received empty event range {start}..{job.terminal_end_seq} for run {job.session_id!r}."
        )
    return window


@dataclass(frozen=True)
class ObservePlan:
    """The parts of one observe run and the transcript rows of the events they cover."""

    parts: list[ChunkPart]
    """Normalized parts, in order."""
    transcript: list[TranscriptEntry]
    """One row per event of the range that carries text, in seq order."""

    def transcript_of(self, part: ChunkPart) -> list[TranscriptEntry]:
        """The rows of the events ``part`` covers (the parts of one chunk share its range)."""
        return entries_in(self.transcript, part.source_start_seq, part.source_end_seq)


def part_envelope(settings: OmSettings, context_window: int, prompt_cap: int | None) -> int:
    """Tokens one Observer call may be sent: the original's share of the context window, and under
    ``budget.max_prompt_tokens`` (less :data:`PROMPT_CAP_MARGIN_TOKENS`) when the model is capped."""
    envelope = settings.envelope(context_window)
    if prompt_cap is None:
        return envelope
    return min(envelope, prompt_cap - PROMPT_CAP_MARGIN_TOKENS)


def plan_parts(
    job: ObserveBoundaryJob,
    settings: OmSettings,
    ports: ObserverPorts,
    start: int,
    context_window: int,
    prompt_cap: int | None = None,
) -> ObservePlan:
    """Render and pack the range ``start..terminal_end_seq`` into normalized parts.

    The memory context is the memory as it was before ``start``: active reflections and the active
    observations that end before ``start`` (so observations this job committed itself never change
    its own plan). ``prompt_cap``: the most prompt tokens one call may be sent (``budget``), if any.
    """
    if context_window <= 0:
        raise ObserverError(f"Observer model context_window is missing or nonpositive ({context_window}).")
    envelope = part_envelope(settings, context_window, prompt_cap)
    events = list(read_range(job, ports, start).events)
    blocks = build_source_blocks(events, ports.now_local(), ports.count_tokens)
    if not blocks:
        blocks = [empty_source_block(job.session_id, start)]
    candidate = ports.memory.active_candidate_set(job.session_id)
    before = [o for o in candidate.observations if o.source_end_seq < start]
    # Stable short ids in source order: consecutive calls of a session share the memory section as a
    # prefix (new observations are appended at its end), so a provider's prompt cache applies.
    session_ids = RequestLocalIdMap.for_session(ports.memory.all_observations(job.session_id))
    lines = memory_context_lines(
        ports.memory.active_reflections(job.session_id), session_ids.order(before), session_ids.local_ids
    )
    parts = pack_parts(
        session_id=job.session_id,
        blocks=blocks,
        envelope_tokens=envelope,
        fixed_overhead_tokens=fixed_overhead_tokens(ports.count_tokens),
        memory_lines=lines,
        local_time=ports.now_local(),
        renderer_version=job.renderer_version,
        observer_schema_version=job.observer_schema_version,
        count_tokens=ports.count_tokens,
    )
    return ObservePlan(
        normalize_coverage(parts, start, job.terminal_end_seq), transcript_entries(events, ports.now_local())
    )


def _replayable(parts: Sequence[ChunkPart], ports: ObserverPorts, covered: int) -> bool:
    """True when the committed parts are a prefix of ``parts`` that ends exactly at ``covered``."""
    end = parts[0].source_start_seq - 1 if parts else covered
    for part in parts:
        if not _already_committed(part, ports):
            break
        end = max(end, part.source_end_seq)
    return end == covered


def observe_plan_key(job: ObserveBoundaryJob) -> str:
    """One unfinished observe plan per session and versions: a session's observe jobs run one at a time
    (FIFO lane), and a retry may be coalesced into a later boundary's job with another job id."""
    return sha256_hex(
        canonical_json(["observe-plan", job.session_id, job.renderer_version, job.observer_schema_version])
    )


def _pinned_start(job: ObserveBoundaryJob, job_id: str, ports: ObserverPorts, start: int) -> int:
    pinned = ports.store.pin_observe_start(
        observe_plan_key(job), job.session_id, job_id, start, job.terminal_end_seq, ports.now_utc()
    )
    return min(pinned, start)


def _already_committed(part: ChunkPart, ports: ObserverPorts) -> bool:
    stored = ports.memory.stored_coverage_part(part.coverage_key)
    if stored is None:
        return False
    if stored.source_digest != part.source_digest or stored.part_digest != part.part_digest:
        raise ConflictError(f"Coverage conflict for key {part.coverage_key!r}: digest mismatch.")
    return True


def _set_activity(ports: ObserverPorts, job_id: str, session_id: str, tokens: int) -> None:
    activity = ActivityRecord(
        session_id=session_id,
        job_id=job_id,
        stage="observer",
        current_tokens=tokens,
        updated_at=ports.now_utc(),
    )
    set_activity(ports.store, activity, logger)


def observe_through(
    job: ObserveBoundaryJob, job_id: str, settings: OmSettings, ports: ObserverPorts
) -> ObserveResult:
    """Observe ``job.session_id`` from its contiguous coverage end through ``job.terminal_end_seq``."""
    try:
        result = _observe(job, job_id, settings, ports)
        if result.status == "deferred":
            return result  # nothing observed: a pinned plan (an earlier attempt's) stays for the next job
        result.reflect_job_id = maybe_dispatch_reflect(job, settings, ports)
        ports.store.release_observe_start(observe_plan_key(job))
        return result
    finally:
        if job_id:
            clear_activity(ports.store, job.session_id, job_id, logger)


def _observe(
    job: ObserveBoundaryJob, job_id: str, settings: OmSettings, ports: ObserverPorts
) -> ObserveResult:
    # Coverage committed before the transcript existed gets its rows first (a no-op afterwards).
    backfill_transcript(
        job.session_id, ports.memory, ports.store, ports.read_events, ports.now_local(), ports.now_utc()
    )
    covered = ports.memory.contiguous_covered_end(
        job.session_id, job.renderer_version, job.observer_schema_version
    )
    start = 1 if covered is None else covered + 1
    if start > job.terminal_end_seq:
        return ObserveResult(
            status="already_covered", source_start_seq=start, source_end_seq=job.terminal_end_seq
        )
    # At the day's cap nothing is sent: the queue holds the job (and the database's other model jobs).
    # Checked before the trigger reads the range, so a held job re-checking costs one small read.
    gate = BudgetGate(settings, ports.memory.spend_since, ports.clock)
    gate.check(settings.model or "")
    decision = _trigger_decision(job, settings, ports, start)
    if isinstance(decision, Defer):
        _schedule_idle_flush(job, job_id, settings, ports)
        return ObserveResult(
            status="deferred",
            source_start_seq=start,
            source_end_seq=job.terminal_end_seq,
            uncovered_tokens=decision.uncovered_tokens,
        )
    model = settings.require_model()
    chat_model, context_window = ports.resolve_model(model)
    cap = settings.budget.max_prompt_tokens if is_metered(model) else None
    prompt_cap = PromptCap(cap, ports.count_tokens) if cap is not None else None
    plan_start = _pinned_start(job, job_id, ports, start)
    plan = plan_parts(job, settings, ports, plan_start, context_window, cap)
    if plan_start < start and not _replayable(plan.parts, ports, start - 1):
        # The plan changed since the first attempt (another context window, a rewritten file): what is
        # committed stays, and the rest is planned from the coverage end.
        logger.warning(
            "observe plan changed between attempts",
            extra={
                "session_id": job.session_id,
                "job_id": job_id,
                "pinned_start": plan_start,
                "start": start,
            },
        )
        plan_start = start
        plan = plan_parts(job, settings, ports, start, context_window, cap)
    parts = plan.parts
    result = ObserveResult(
        status="noop",
        source_start_seq=plan_start,
        source_end_seq=job.terminal_end_seq,
        parts=len(parts),
        trigger=decision.reason,
        uncovered_tokens=decision.uncovered_tokens,
    )
    spec = record_observations_spec()
    for part in parts:
        if _already_committed(part, ports):
            result.parts_skipped += 1
            continue
        # Parts committed so far stay (coverage is contiguous); the rest waits for the budget.
        gate.check(model)
        handler = RecordObservationsHandler(
            job.session_id, job.observer_schema_version, part.source_refs, ports.count_tokens, model
        )
        if job_id:
            _set_activity(ports, job_id, job.session_id, part.token_estimate)
        loop = run_tool_loop(
            chat_model,
            model=model,
            instructions=OBSERVER_SYSTEM_PROMPT,
            input_text=part.user_message,
            tools=[(spec, handler.handle)],
            max_tool_calls=OBSERVER_MAX_TOOL_CALLS,
            max_duration_s=AGENT_HTTP_MAX_DURATION_SECONDS,
            skip_receipt_round=True,
            prompt_cap=prompt_cap,
        )
        covered_at = ports.now_utc()
        record_loop_usage(
            ports.store,
            loop,
            usage_id=ports.new_id(),
            session_id=job.session_id,
            job_kind="observe",
            model=model,
            recorded_at=covered_at,
        )
        records = handler.to_records(part, covered_at)
        commit = ports.store.commit_observer_part(
            part.to_coverage_part(covered_at), records, plan.transcript_of(part)
        )
        result.parts_committed += 1
        result.observations += int(getattr(commit, "observation_count", len(records)))
        result.add_spend(loop, model)
        result.source_tokens += ports.count_tokens(part.rendered_part)
    result.status = "inserted" if result.parts_committed else "noop"
    logger.info(
        "observe job finished",
        extra={
            "session_id": job.session_id,
            "job_id": job_id,
            **{k: v for k, v in result.as_dict().items() if k != "status"},
        },
    )
    return result


def _trigger_decision(
    job: ObserveBoundaryJob, settings: OmSettings, ports: ObserverPorts, start: int
) -> ObserveNow | Defer:
    """The trigger policy over the uncovered range's rendered source (a read of the range, no model)."""
    policy = TriggerPolicy(settings.observe_after_tokens, settings.pressure_context_fill)
    if policy.observe_after_tokens <= 0:  # per boundary: nothing to measure
        return ObserveNow("every_boundary")
    events = list(read_range(job, ports, start).events)
    blocks = build_source_blocks(events, ports.now_local(), ports.count_tokens)
    uncovered = sum(ports.count_tokens(block.rendered_text) for block in blocks)
    return decide_observe(uncovered, job.signal, job.context_fill, policy)


def _schedule_idle_flush(
    job: ObserveBoundaryJob, job_id: str, settings: OmSettings, ports: ObserverPorts
) -> None:
    """Queue the deferred tail's idle flush; the lane's next observe job absorbs it (coalescing)."""
    if ports.dispatch is None:
        return
    flush = job.model_copy(update={"signal": "idle_flush"})
    envelope = JobEnvelope(
        job_id=signalled_observe_job_id(job_id or job.session_id, "idle_flush"),
        session_id=job.session_id,
        payload=flush,
        not_before=ports.clock() + settings.idle_flush_seconds,
    )
    ports.dispatch(envelope)


def maybe_dispatch_reflect(job: ObserveBoundaryJob, settings: OmSettings, ports: ObserverPorts) -> str | None:
    """The threshold check at the end of every observe job (§9.1); returns the reflect job id if sent."""
    if ports.dispatch is None:
        return None
    candidate = ports.memory.active_candidate_set(job.session_id)
    pool = CandidatePool.from_observations(job.session_id, candidate.observations, ports.count_tokens)
    if not pool.observation_ids or pool.token_count <= settings.reflect_after_observation_tokens:
        return None
    prior = ports.memory.active_generation(job.session_id)
    exists = ports.memory.generation_exists_for_set(job.session_id, pool.observation_set_hash)
    payload = threshold_check(pool, prior.generation_id if prior else None, exists, settings)
    if payload is None:
        return None
    reflect = payload.to_job(job.db_path)
    # The reflect job reads its settings where this job does, when it runs (never a snapshot).
    source = {"settings_file": job.settings_file, "settings": job.settings}
    reflect = ReflectGenerationJob.model_validate({**reflect.model_dump(), **source})
    envelope = JobEnvelope(job_id=reflect.generation_id, session_id=job.session_id, payload=reflect)
    return ports.dispatch(envelope)
