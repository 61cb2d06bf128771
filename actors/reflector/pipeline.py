"""The Reflector's job: reflect (and maybe drop) one threshold generation (reference §9.2–§9.8).

Pure orchestration over injected ports (memory reader, store writer, chat model, token counter,
clock), so it runs the same inside the ReflectorActor and in unit tests. The decisions live in
:mod:`actors.reflector.core` and :mod:`actors.reflector.dropper`; this module only sequences them:

validate -> claim -> (re-check -> Reflector -> Dropper -> re-check -> promote), with the claimed
generation always left ``succeeded`` or ``failed`` unless the error is a ``ConflictError``.
No transaction spans a model call: the set is re-checked after the models and promotion is one
``Store.promote_generation`` call (reflections + retained set + active pointer). A redelivered job
whose generation already ran, or is running elsewhere, makes no model call.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from actors.activity import clear_activity, set_activity
from actors.models.budget import BudgetGate, is_metered
from actors.models.chat import ChatModel, PromptCap, ToolLoopResult, run_tool_loop
from actors.models.prompts import DROPPER_SYSTEM_PROMPT, REFLECTOR_SYSTEM_PROMPT
from actors.models.usage import ModelSpend, record_loop_usage
from actors.reflector.core import (
    REFLECTOR_MAX_DURATION_SECONDS,
    REFLECTOR_MAX_TOOL_CALLS,
    AcceptedReflection,
    CandidatePool,
    RecordReflectionsHandler,
    ReflectorError,
    ReflectorInput,
    RequestLocalIdMap,
    build_reflector_input,
    claim_conflict_error,
    claim_reaction,
    claim_required_end_seq,
    failure_decision,
    post_model_recheck,
    pre_work_decision,
    promotion_plan,
    reflector_activity,
    validate_reflect_payload,
)
from actors.reflector.dropper import (
    DROPPER_MAX_DURATION_SECONDS,
    DROPPER_MAX_TOOL_CALLS,
    DropObservationsHandler,
    ReflectionLike,
    build_dropper_input,
    dropper_activity,
    max_drop_count,
    pool_token_count,
    select_drop_candidates,
    should_run_dropper,
)
from persistence.reads.memory_reader import MemoryReader
from persistence.writers.store import Store
from protocol.errors import BudgetReachedError, PromptOverCapError
from protocol.jobs import ReflectGeneration, ReflectGenerationJob
from protocol.outcomes import REASON_PROMPT_OVER_CAP
from protocol.records import UsageJobKind
from protocol.settings import OmSettings
from protocol.tool_specs import drop_observations_spec, record_reflections_spec

logger = logging.getLogger("omray.reflector")

ReflectStatus = Literal["promoted", "noop_redelivery", "succeeded_noop", "stale", "failed"]
"""How one reflect job ended (an exception that propagates has no status)."""

STALE_BEFORE_MODEL_MESSAGE = (
    "Observation set of generation {generation_id!r} changed before the Reflector ran."
)
STALE_AFTER_MODEL_MESSAGE = "Observation set of generation {generation_id!r} changed during the model calls."


@dataclass
class ReflectorPorts:
    """Everything a reflect job touches outside pure code."""

    memory: MemoryReader
    """Read-only queries."""
    store: Store
    """The single writer of the database: a :class:`~persistence.writers.store.Store`, or in a cluster the
    StoreActor proxy, which forwards the same calls (typed by the Store's own signatures)."""
    resolve_model: Callable[[str], tuple[ChatModel, int]]
    """``provider/model`` -> (chat model, context window); called only when a model is needed."""
    count_tokens: Callable[[str], int]
    """Token counter (tiktoken)."""
    now_utc: Callable[[], str]
    """UTC ISO-8601 now; sampled afresh for every timestamp written."""
    schedule_index: Callable[[str], object] | None = None
    """Schedule a semantic index job for a session after a success; ``None`` when search is exact."""
    new_id: Callable[[], str] = field(default=lambda: uuid.uuid4().hex)
    """A fresh id (one per model tool loop, the key of its token usage row)."""
    clock: Callable[[], float] = time.time
    """Epoch seconds now (the daily budget's day)."""


def prompt_cap_for(settings: OmSettings, model: str, count_tokens: Callable[[str], int]) -> PromptCap | None:
    """``budget.max_prompt_tokens`` for calls of ``model`` (``None``: no cap, or the free built-in model)."""
    cap = settings.budget.max_prompt_tokens
    return PromptCap(cap, count_tokens) if cap is not None and is_metered(model) else None


@dataclass
class ReflectResult(ModelSpend):
    """Counts of one reflect job; never content (the model counters, Reflector + Dropper, are
    :class:`ModelSpend`'s)."""

    status: ReflectStatus
    """How the job ended."""
    generation_id: str
    """Generation the job was for."""
    failure_code: str | None = None
    """Code the generation was failed with (``stale`` / ``failed``)."""
    new_reflections: int = 0
    """Reflections added by the Reflector and promoted."""
    dropped: int = 0
    """Observations left out of the promoted generation."""
    retained: int = 0
    """Observations linked to the promoted generation."""
    usage_by_kind: dict[str, dict[str, float]] = field(default_factory=dict)
    """The token counts above split by stage (``reflect``, ``drop``), for the token metrics."""
    dropper_skipped: str | None = None
    """Why the Dropper was due but not called: the day's budget (``budget_tokens``, ``budget_usd``)
    or the per-call cap (``prompt_over_cap``); the generation is promoted without drops."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-able counters."""
        return {**self.__dict__, "usage_by_kind": {kind: dict(n) for kind, n in self.usage_by_kind.items()}}

    def add_loop(
        self, loop: ToolLoopResult, ports: ReflectorPorts, payload: ReflectGeneration, kind: UsageJobKind
    ) -> None:
        """Add one tool loop's model counters and store its token usage."""
        self.add_spend(loop, payload.reflector_model)
        counts = self.usage_by_kind.setdefault(
            kind, {"prompt_tokens": 0, "cached_prompt_tokens": 0, "completion_tokens": 0}
        )
        counts["prompt_tokens"] += loop.prompt_tokens
        counts["cached_prompt_tokens"] += loop.cached_prompt_tokens
        counts["completion_tokens"] += loop.completion_tokens
        if loop.cost_usd is not None:
            counts["cost_usd"] = counts.get("cost_usd", 0.0) + loop.cost_usd
        record_loop_usage(
            ports.store,
            loop,
            usage_id=ports.new_id(),
            session_id=payload.session_id,
            job_kind=kind,
            model=payload.reflector_model,
            recorded_at=ports.now_utc(),
        )


# --- the job ------------------------------------------------------------------------------------------


def _live_pool(ports: ReflectorPorts, session_id: str) -> CandidatePool:
    candidate = ports.memory.active_candidate_set(session_id)
    return CandidatePool.from_observations(session_id, candidate.observations, ports.count_tokens)


def _live_prior(ports: ReflectorPorts, session_id: str) -> str | None:
    active = ports.memory.active_generation(session_id)
    return None if active is None else active.generation_id


def reflect_generation(
    job: ReflectGenerationJob, job_id: str, settings: OmSettings, ports: ReflectorPorts, *, attempt: int = 1
) -> ReflectResult:
    """Run one ``reflect_generation`` job (§9.2–§9.8).

    Raises ``ReflectPayloadError`` / ``ModelSettingsError`` before claiming anything, and
    ``ConflictError`` on a claim conflict; both leave the database unchanged. Terminal generation
    failures (stale set, no active memory) are recorded and returned; any other error marks the
    generation ``transient_runtime`` and propagates so the queue retries (the retry reclaims it).
    """
    payload = validate_reflect_payload(job, settings)
    # At the day's cap nothing is claimed or sent: the queue holds the job until the budget allows it.
    BudgetGate(settings, ports.memory.spend_since, ports.clock).check(payload.reflector_model)
    pool = _live_pool(ports, payload.session_id)
    prior = ports.memory.active_generation(payload.session_id)
    required_end_seq = claim_required_end_seq(
        pool.max_source_end_seq, payload.required_end_seq, None if prior is None else prior.required_end_seq
    )
    outcome = ports.store.claim_generation(
        payload.generation_id,
        payload.session_id,
        payload.observation_set_hash,
        payload.reflector_model,
        payload.reflector_schema_version,
        payload.required_start_seq,
        required_end_seq,
        ports.now_utc(),
        take_over_running=attempt > 1,  # a redelivered attempt takes over its dead predecessor's row
    )
    reaction = claim_reaction(outcome)
    if reaction == "conflict":
        raise claim_conflict_error(payload.generation_id)
    if reaction != "work":
        logger.info(
            "reflect redelivery no-op",
            extra={
                "session_id": payload.session_id,
                "generation_id": payload.generation_id,
                "claim": outcome,
            },
        )
        if reaction == "noop_schedule_index":
            _schedule_index(ports, payload.session_id)
        return ReflectResult(status="noop_redelivery", generation_id=payload.generation_id)

    result = ReflectResult(status="failed", generation_id=payload.generation_id)
    succeeded = False
    try:
        succeeded = _work(payload, job_id, settings, ports, result)
    except Exception as exc:
        _handle_failure(exc, payload, ports, result)
    finally:
        if job_id:
            clear_activity(ports.store, payload.session_id, job_id, logger)
    if succeeded:
        _schedule_index(ports, payload.session_id)
    logger.info(
        "reflect job finished",
        extra={"session_id": payload.session_id, "job_id": job_id, **result.as_dict()},
    )
    return result


def _schedule_index(ports: ReflectorPorts, session_id: str) -> None:
    # Outside the generation's try: a failure here fails the job attempt, and the retry (claim
    # ``already_succeeded``) schedules the index again without touching the generation.
    if ports.schedule_index is not None:
        ports.schedule_index(session_id)


def _handle_failure(
    error: Exception, payload: ReflectGeneration, ports: ReflectorPorts, result: ReflectResult
) -> None:
    """Apply §9.4's exception rules; returns normally only for terminal generation failures."""
    decision = failure_decision(error)
    code = decision.failure_code
    logger.warning(
        "reflect generation failed",
        extra={
            "session_id": payload.session_id,
            "generation_id": payload.generation_id,
            "failure_code": code,
            "error_class": type(error).__name__,
        },
    )
    if not decision.rethrow:
        if code is not None:
            ports.store.fail_generation(payload.generation_id, code, ports.now_utc())
        result.status = "stale" if code == "stale_observation_set" else "failed"
        result.failure_code = code
        return
    if code is not None:
        try:
            ports.store.fail_generation(payload.generation_id, code, ports.now_utc())
        except Exception as mark_error:
            # The original error is what the queue must see; the generation stays running.
            logger.warning(
                "marking generation failed did not work",
                extra={"generation_id": payload.generation_id, "error_class": type(mark_error).__name__},
            )
    raise error


def _work(
    payload: ReflectGeneration,
    job_id: str,
    settings: OmSettings,
    ports: ReflectorPorts,
    result: ReflectResult,
) -> bool:
    """Work on a claimed generation; True when it ends promoted (the semantic index is then due)."""
    session_id, generation_id = payload.session_id, payload.generation_id
    pool = _live_pool(ports, session_id)
    decision = pre_work_decision(payload, pool, _live_prior(ports, session_id), settings)
    if decision == "succeed_noop":
        ports.store.succeed_generation_without_promotion(generation_id, ports.now_utc())
        result.status = "succeeded_noop"
        return False
    if decision == "stale":
        raise ReflectorError(
            "stale_observation_set", STALE_BEFORE_MODEL_MESSAGE.format(generation_id=generation_id)
        )

    if job_id:
        set_activity(
            ports.store, reflector_activity(session_id, job_id, pool.token_count, ports.now_utc()), logger
        )
    reflector_input = build_reflector_input(
        ports.memory.active_reflections(session_id),
        pool.observations,
        RequestLocalIdMap.for_session(ports.memory.all_observations(session_id)),
    )
    chat_model, _context_window = ports.resolve_model(payload.reflector_model)
    cap = prompt_cap_for(settings, payload.reflector_model, ports.count_tokens)
    new_reflections = _run_reflector(payload, reflector_input, chat_model, ports, result, cap)
    drops = _run_dropper(
        payload, job_id, settings, reflector_input, new_reflections, chat_model, ports, result
    )

    live = _live_pool(ports, session_id)
    if post_model_recheck(payload, live, _live_prior(ports, session_id)) == "stale":
        raise ReflectorError(
            "stale_observation_set", STALE_AFTER_MODEL_MESSAGE.format(generation_id=generation_id)
        )
    stored = ports.memory.generation(generation_id)
    required_end_seq = (
        stored.required_end_seq
        if stored is not None and stored.required_end_seq is not None
        else pool.max_source_end_seq
    )
    now = ports.now_utc()
    plan = promotion_plan(
        payload,
        reflector_input.prior_reflections,
        new_reflections,
        reflector_input.observations,
        drops,
        required_end_seq,
        now,
    )
    outcome = ports.store.promote_generation(
        generation_id, session_id, plan.reflections, plan.retained_observation_ids, now
    )
    result.status = "promoted" if outcome == "promoted" else "noop_redelivery"
    result.new_reflections = plan.new_reflection_count
    result.dropped = len(plan.dropped_observation_ids)
    result.retained = len(plan.retained_observation_ids)
    # ``noop``: the generation already succeeded (e.g. a replayed promotion whose reply was lost),
    # so it is promoted all the same and still needs its index job.
    return True


def _run_reflector(
    payload: ReflectGeneration,
    reflector_input: ReflectorInput,
    chat_model: ChatModel,
    ports: ReflectorPorts,
    result: ReflectResult,
    prompt_cap: PromptCap | None = None,
) -> tuple[AcceptedReflection, ...]:
    """The Reflector's accepted reflections; a first request over ``prompt_cap`` raises
    :class:`~protocol.errors.PromptOverCapError` (nothing sent, the job fails with ``prompt_over_cap``)."""
    handler = RecordReflectionsHandler.for_input(
        reflector_input, payload.session_id, payload.reflector_schema_version, ports.count_tokens
    )
    loop = run_tool_loop(
        chat_model,
        model=payload.reflector_model,
        instructions=REFLECTOR_SYSTEM_PROMPT,
        input_text=reflector_input.user_message,
        tools=[(record_reflections_spec(), handler.handle)],
        max_tool_calls=REFLECTOR_MAX_TOOL_CALLS,
        max_duration_s=REFLECTOR_MAX_DURATION_SECONDS,
        skip_receipt_round=True,
        prompt_cap=prompt_cap,
    )
    result.add_loop(loop, ports, payload, "reflect")
    return handler.accepted


def _run_dropper(
    payload: ReflectGeneration,
    job_id: str,
    settings: OmSettings,
    reflector_input: ReflectorInput,
    new_reflections: tuple[AcceptedReflection, ...],
    chat_model: ChatModel,
    ports: ReflectorPorts,
    result: ReflectResult,
) -> tuple[str, ...]:
    """The drops the server accepts (§9.7); empty when the Dropper does not run."""
    observations = reflector_input.observations
    pool_tokens = pool_token_count(observations, ports.count_tokens)
    target = settings.observations_max_tokens
    if not should_run_dropper(len(new_reflections), pool_tokens, target):
        return ()
    max_drops = max_drop_count(len(reflector_input.id_map), pool_tokens, target)
    if max_drops == 0:
        logger.info("dropper skipped: not over target", extra={"session_id": payload.session_id})
        return ()
    # The Dropper is optional: past the day's budget (the Reflector's call may have reached it) or
    # the per-call cap it is skipped, and the generation is promoted without drops.
    gate = BudgetGate(settings, ports.memory.spend_since, ports.clock)
    try:
        gate.check(payload.reflector_model)
    except BudgetReachedError as reached:
        return _skip_dropper(payload, result, reached.reason)
    if job_id:
        activity = dropper_activity(payload.session_id, job_id, pool_tokens, target, ports.now_utc())
        set_activity(ports.store, activity, logger)
    reflections: list[ReflectionLike] = [*reflector_input.prior_reflections, *new_reflections]
    handler = DropObservationsHandler(reflector_input.id_map, max_drops)
    try:
        loop = run_tool_loop(
            chat_model,
            model=payload.reflector_model,
            instructions=DROPPER_SYSTEM_PROMPT,
            input_text=build_dropper_input(
                reflections, observations, reflector_input.id_map, pool_tokens, target, max_drops
            ),
            tools=[(drop_observations_spec(), handler.handle)],
            max_tool_calls=DROPPER_MAX_TOOL_CALLS,
            max_duration_s=DROPPER_MAX_DURATION_SECONDS,
            thinking_off=True,
            skip_receipt_round=True,
            prompt_cap=prompt_cap_for(settings, payload.reflector_model, ports.count_tokens),
        )
    except PromptOverCapError:
        return _skip_dropper(payload, result, REASON_PROMPT_OVER_CAP)
    result.add_loop(loop, ports, payload, "drop")
    return select_drop_candidates(handler.proposals, observations, reflections, max_drops)


def _skip_dropper(payload: ReflectGeneration, result: ReflectResult, reason: str) -> tuple[str, ...]:
    logger.info("dropper skipped", extra={"session_id": payload.session_id, "reason": reason})
    result.dropper_skipped = reason
    return ()
