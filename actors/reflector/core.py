"""Pure decisions of the threshold Reflector (reference §8, §9.1–§9.6, §9.8, §11.1).

Everything here is deterministic and does no I/O: time, the token counter and every row read
from the store are arguments. The ``ReflectorActor`` shell reads the store, calls these
functions, runs the model and executes what they decide. The order of one reflect job:

1. :func:`validate_reflect_payload` (typed :class:`ReflectPayloadError`, the original's messages).
2. :func:`claim_required_end_seq`, then ``Store.claim_generation`` (it owns the claim's branches,
   in one transaction) and :func:`claim_reaction` on its outcome.
3. :func:`pre_work_decision` on the live pool: ``succeed_noop`` / ``stale`` / ``proceed``.
4. :func:`build_reflector_input` + :class:`RecordReflectionsHandler` for the model call.
5. The Dropper (``actors.reflector.dropper``) when it should run.
6. :func:`post_model_recheck`, then :func:`promotion_plan` -> ``Store.promote_generation``.

Exceptions are mapped by :func:`failure_decision`. Observation ids never reach the models:
prompts use the request-local decimal ids of :class:`RequestLocalIdMap`.

Length: one module on purpose, past 600 lines. The steps above share the payload, pool and claim
types, and they read best in the order a job runs them. The Dropper's decisions are already apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from protocol.canonical import canonical_json
from protocol.errors import ConflictError, InvalidPayloadError, OmrayError
from protocol.identities import observation_set_hash, reflection_id, threshold_generation_id
from protocol.jobs import ReflectGeneration, ReflectGenerationJob
from protocol.records import (
    ActiveReflection,
    ActivityRecord,
    ObservationRecord,
    ReflectionRecord,
)
from protocol.settings import AGENT_HTTP_MAX_DURATION_SECONDS, DEFAULT_AGENT_MAX_TOOL_CALLS, OmSettings
from protocol.tools import (
    InvalidArgumentsReceipt,
    ReflectionReceipt,
    parse_reflection_draft,
    reflection_items,
    reflection_receipt,
)

CountTokens = Callable[[str], int]
"""Token counter (``actors.models.tokens.TokenCounter`` in production)."""

GenerationFailureCode = Literal["stale_observation_set", "no_active_memory", "transient_runtime"]
"""Failure codes omray stores in ``om_memory_generation.failure_code``."""

ClaimOutcome = Literal["claimed", "already_running", "already_succeeded", "conflict"]
"""What ``Store.claim_generation`` returns (same values as ``persistence.writers.store.ClaimOutcome``)."""


ClaimReaction = Literal["work", "noop", "noop_schedule_index", "conflict"]
"""What the handler does after the claim."""

PreWorkDecision = Literal["proceed", "succeed_noop", "stale"]
"""First re-check after the claim (§9.4 steps 2–3)."""

RecheckResult = Literal["ok", "stale"]
"""Whether the observation set is still the one the generation was claimed for."""

CoverageTier = Literal["none", "partial", "strong"]
"""How many reflections cite an observation: 0, exactly 1, 2 or more."""

THRESHOLD_TRIGGER: Final = "threshold"
"""Trigger kind of every generation omray creates."""
REQUIRED_START_SEQ: Final = 1
"""Threshold generations always start at seq 1."""
REFLECTOR_MAX_TOOL_CALLS: Final = DEFAULT_AGENT_MAX_TOOL_CALLS
"""Tool-call budget of one Reflector agent call (16)."""
REFLECTOR_MAX_DURATION_SECONDS: Final = AGENT_HTTP_MAX_DURATION_SECONDS
"""Wall-clock budget of one Reflector agent call (300 s)."""
REFLECTOR_THINKING_LEVEL: Final = None
"""The Reflector runs at the model's default thinking level."""

NO_ACTIVE_MEMORY_MESSAGE: Final = "Reflector invoked with empty active memory."
"""Message of the ``no_active_memory`` failure."""
REFLECTOR_CLOSING_LINE: Final = (
    "Crystallize any missing durable facts or patterns into new reflections. "
    "If nothing is stable enough, do not call the tool."
)
"""Last line of the Reflector user message."""

END_SEQ_NEGATIVE_MESSAGE: Final = "reflect_generation required_end_seq must be non-negative."
MISSING_IDENTITY_MESSAGE: Final = "reflect_generation payload missing identity fields."
KEY_MISMATCH_MESSAGE: Final = "threshold generation_id must equal threshold_idempotency_key."
MALFORMED_MESSAGE: Final = "reflect_generation payload is malformed."
FORMULA_MISMATCH_MESSAGE: Final = "reflect_generation generation_id does not match threshold formula."
SETTINGS_MISMATCH_MESSAGE: Final = "reflect_generation model/schema mismatch with current settings."


class ReflectPayloadError(InvalidPayloadError):
    """A ``reflect_generation`` payload failed validation (§9.2); the message is the original's."""


class ReflectorError(OmrayError):
    """A terminal failure of one generation: the handler marks it failed and returns normally."""

    def __init__(self, failure_code: GenerationFailureCode, message: str) -> None:
        self.failure_code: GenerationFailureCode = failure_code
        super().__init__(message)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- active candidate set (§8) ------------------------------------------------------------------


def _candidate_order(observations: Iterable[ObservationRecord]) -> list[ObservationRecord]:
    # Python str order is code-point order, which equals SQLite BINARY order for UTF-8 (§19.2).
    return sorted(observations, key=lambda o: (o.timestamp, o.observation_id))


class CandidatePool(_Frozen):
    """The session's active observation pool with its token total (§8), as the threshold sees it."""

    session_id: str = Field(min_length=1)
    """Session."""
    observations: tuple[ObservationRecord, ...]
    """Active observations in source order (first source seq, then recorded order)."""
    observation_ids: tuple[str, ...]
    """Ids of ``observations``, unique and sorted ascending."""
    observation_set_hash: str
    """``observation_set_hash(session_id, observation_ids)``."""
    token_count: int = Field(ge=0)
    """Sum of the token counts of the observations' content."""
    max_source_end_seq: int = Field(ge=0)
    """Largest ``source_end_seq`` of the observations, or 0."""

    @classmethod
    def from_observations(
        cls, session_id: str, observations: Iterable[ObservationRecord], count_tokens: CountTokens
    ) -> CandidatePool:
        """Pool of ``observations`` (the active candidate set read from the store)."""
        ordered = _candidate_order(observations)
        ids = tuple(sorted({o.observation_id for o in ordered}))
        return cls(
            session_id=session_id,
            observations=tuple(ordered),
            observation_ids=ids,
            observation_set_hash=observation_set_hash(session_id, ids),
            token_count=sum(count_tokens(o.content) for o in ordered),
            max_source_end_seq=max((o.source_end_seq for o in ordered), default=0),
        )


# --- threshold dispatch (§9.1) and payload validation (§9.2) ------------------------------------


def threshold_check(
    pool: CandidatePool,
    prior_active_generation_id: str | None,
    set_has_generation: bool,
    settings: OmSettings,
) -> ReflectGeneration | None:
    """The reflect job to dispatch after an observe job, or ``None`` (§9.1).

    ``set_has_generation``: a generation row (any status) exists for ``(run, set hash)``; a failed
    set is never re-dispatched by later boundaries. The gate is strict: equal is not over.
    Raises ``ModelSettingsError`` (from ``settings.require_model``) only when a job would be sent.
    """
    if pool.token_count <= settings.reflect_after_observation_tokens or not pool.observation_ids:
        return None
    if set_has_generation:
        return None
    model = settings.require_model()
    generation_id = threshold_generation_id(
        pool.session_id,
        prior_active_generation_id,
        pool.observation_set_hash,
        model,
        settings.reflector_schema_version,
    )
    return ReflectGeneration(
        session_id=pool.session_id,
        generation_id=generation_id,
        threshold_idempotency_key=generation_id,
        observation_set_hash=pool.observation_set_hash,
        prior_active_generation_id=prior_active_generation_id,
        reflector_model=model,
        reflector_schema_version=settings.reflector_schema_version,
        token_count=pool.token_count,
        required_end_seq=pool.max_source_end_seq,
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _optional_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def validate_reflect_payload(
    payload: ReflectGenerationJob | Mapping[str, Any], settings: OmSettings
) -> ReflectGeneration:
    """Validate a reflect job payload against its own formula and the current settings (§9.2).

    Accepts the typed job or a plain mapping with the original's keys (``model`` is a fallback for
    ``reflector_model``; ``threshold_idempotency_key`` defaults to ``generation_id``; ``''`` prior ->
    ``None``; non-integer ``required_end_seq``/``token_count`` are ignored). Raises
    :class:`ReflectPayloadError`, or ``ModelSettingsError`` when no model is configured.
    """
    data = payload.generation().model_dump() if isinstance(payload, ReflectGenerationJob) else payload
    end_seq = _optional_int(data.get("required_end_seq"))
    if end_seq is not None and end_seq < 0:
        raise ReflectPayloadError(END_SEQ_NEGATIVE_MESSAGE)
    start_seq = _optional_int(data.get("required_start_seq"))
    token_count = _optional_int(data.get("token_count"))

    session_id = _text(data.get("session_id", data.get("run_id")))
    generation_id = _text(data.get("generation_id"))
    set_hash = _text(data.get("observation_set_hash"))
    model = _text(data.get("reflector_model")) or _text(data.get("model"))
    schema = _text(data.get("reflector_schema_version"))
    if "" in (session_id, generation_id, set_hash, model, schema):
        raise ReflectPayloadError(MISSING_IDENTITY_MESSAGE)
    key = _text(data.get("threshold_idempotency_key")) or generation_id
    if key != generation_id:
        raise ReflectPayloadError(KEY_MISMATCH_MESSAGE)
    prior = _text(data.get("prior_active_generation_id")) or None
    if threshold_generation_id(session_id, prior, set_hash, model, schema) != generation_id:
        raise ReflectPayloadError(FORMULA_MISMATCH_MESSAGE)
    if model != settings.require_model() or schema != settings.reflector_schema_version:
        raise ReflectPayloadError(SETTINGS_MISMATCH_MESSAGE)
    try:  # a set hash that is not hex fails here, though the formula matched
        return ReflectGeneration(
            session_id=session_id,
            generation_id=generation_id,
            threshold_idempotency_key=key,
            observation_set_hash=set_hash,
            prior_active_generation_id=prior,
            reflector_model=model,
            reflector_schema_version=schema,
            token_count=token_count if token_count is not None and token_count >= 0 else None,
            required_end_seq=end_seq,
            required_start_seq=REQUIRED_START_SEQ if start_seq is None else start_seq,
        )
    except ValidationError:
        raise ReflectPayloadError(MALFORMED_MESSAGE) from None


# --- claim (§9.3) ---------------------------------------------------------------------------------


def claim_required_end_seq(
    pool_max_source_end_seq: int,
    payload_required_end_seq: int | None,
    prior_required_end_seq: int | None = None,
) -> int:
    """Watermark stored on the claimed row: the live pool's, or the payload's when the pool has none.

    Never below the prior active generation's watermark: observations that generation dropped lie
    at or below it, and a lower watermark would bring them back into the active set (§8). This
    happens when a generation runs on a retained set whose newest observations were dropped.
    """
    watermark = pool_max_source_end_seq
    if watermark < 1 and payload_required_end_seq is not None and payload_required_end_seq > 0:
        watermark = payload_required_end_seq
    if prior_required_end_seq is not None:
        watermark = max(watermark, prior_required_end_seq)
    return watermark


def claim_reaction(outcome: ClaimOutcome) -> ClaimReaction:
    """What the handler does next: work, return (scheduling an index job after success), or raise."""
    if outcome == "claimed":
        return "work"
    if outcome == "already_running":
        return "noop"
    if outcome == "already_succeeded":
        return "noop_schedule_index"
    return "conflict"


def claim_conflict_error(generation_id: str) -> ConflictError:
    """The error raised on a ``conflict`` claim (not marked failed; the queue retries)."""
    return ConflictError(f"Threshold generation claim conflict for {generation_id!r}.")


# --- re-checks (§9.4) ---------------------------------------------------------------------------


def live_generation_id(payload: ReflectGeneration, live_pool: CandidatePool, live_prior: str | None) -> str:
    """Generation id the live state would produce now."""
    return threshold_generation_id(
        payload.session_id,
        live_prior,
        live_pool.observation_set_hash,
        payload.reflector_model,
        payload.reflector_schema_version,
    )


def recheck_set(claimed_hash: str, current_hash: str) -> RecheckResult:
    """``stale`` when the observation set changed since the claim."""
    return "ok" if claimed_hash == current_hash else "stale"


def post_model_recheck(
    payload: ReflectGeneration, live_pool: CandidatePool, live_prior: str | None
) -> RecheckResult:
    """Re-check after the model calls (no transaction spans them): same set and same generation id."""
    if live_generation_id(payload, live_pool, live_prior) != payload.generation_id:
        return "stale"
    return recheck_set(payload.observation_set_hash, live_pool.observation_set_hash)


def pre_work_decision(
    payload: ReflectGeneration, live_pool: CandidatePool, live_prior: str | None, settings: OmSettings
) -> PreWorkDecision:
    """First step after a claim: under the threshold (or empty) -> succeed without promotion;
    changed set or prior generation -> fail ``stale_observation_set``; else proceed.
    """
    if live_pool.token_count <= settings.reflect_after_observation_tokens or not live_pool.observation_ids:
        return "succeed_noop"
    if post_model_recheck(payload, live_pool, live_prior) == "stale":
        return "stale"
    return "proceed"


class FailureDecision(_Frozen):
    """How the handler treats an exception raised while working on a claimed generation."""

    failure_code: GenerationFailureCode | None
    """Code to mark the running generation failed with, or ``None`` to leave it as is."""
    rethrow: bool
    """Whether the job attempt fails (the queue retries and the retry reclaims the row)."""


def failure_decision(error: BaseException) -> FailureDecision:
    """``ReflectorError`` -> its code, job succeeds; ``ConflictError`` -> rethrow unmarked;
    anything else -> ``transient_runtime`` and rethrow.
    """
    if isinstance(error, ReflectorError):
        return FailureDecision(failure_code=error.failure_code, rethrow=False)
    if isinstance(error, ConflictError):
        return FailureDecision(failure_code=None, rethrow=True)
    return FailureDecision(failure_code="transient_runtime", rethrow=True)


def reflector_activity(session_id: str, job_id: str, current_tokens: int, now: str) -> ActivityRecord:
    """Live activity row written when the Reflector starts (§11.1)."""
    return ActivityRecord(
        session_id=session_id, job_id=job_id, stage="reflector", current_tokens=current_tokens, updated_at=now
    )


# --- request-local ids and coverage (§9.6) ------------------------------------------------------


class RequestLocalIdMap:
    """Decimal ids (``"1"``, ``"2"``, …) for the observations of one model request.

    Observations are numbered in ``timestamp``, then ``observation_id`` order; empty and repeated
    ids are skipped. Models only ever see these ids; handlers map them back before hashing,
    ranking or persisting.
    """

    def __init__(self, local_by_canonical: Mapping[str, str]) -> None:
        self._local = dict(local_by_canonical)
        self._canonical = {local: canonical for canonical, local in self._local.items()}

    @classmethod
    def for_observations(cls, observations: Iterable[ObservationRecord]) -> RequestLocalIdMap:
        """Number ``observations`` in candidate order."""
        mapping: dict[str, str] = {}
        for observation in _candidate_order(observations):
            if observation.observation_id == "" or observation.observation_id in mapping:
                continue
            mapping[observation.observation_id] = str(len(mapping) + 1)
        return cls(mapping)

    @classmethod
    def for_session(cls, session_observations: Iterable[ObservationRecord]) -> RequestLocalIdMap:
        """Number every observation of a session, dropped ones included, in source order.

        Order: ``source_start_seq``, ``timestamp``, ``observation_id``. Coverage is contiguous and
        parts commit in seq order, so a new observation always sorts after every earlier one: the
        numbers never change once given, and dropping an observation leaves a gap instead of
        renumbering the rest. Prompts of consecutive calls of a session therefore show the same
        observation under the same id, which keeps their shared prefix cacheable.
        """
        ordered = sorted(
            session_observations, key=lambda o: (o.source_start_seq, o.timestamp, o.observation_id)
        )
        mapping: dict[str, str] = {}
        for observation in ordered:
            if observation.observation_id and observation.observation_id not in mapping:
                mapping[observation.observation_id] = str(len(mapping) + 1)
        return cls(mapping)

    def restricted(self, observations: Iterable[ObservationRecord]) -> RequestLocalIdMap:
        """This map limited to ``observations`` (the ones one request shows)."""
        wanted = {o.observation_id for o in observations}
        return RequestLocalIdMap({k: v for k, v in self._local.items() if k in wanted})

    def order(self, observations: Iterable[ObservationRecord]) -> list[ObservationRecord]:
        """``observations`` in the order of their ids (unknown ones last, in candidate order)."""
        known = [o for o in observations if o.observation_id in self._local]
        unknown = [o for o in observations if o.observation_id not in self._local]
        known.sort(key=lambda o: int(self._local[o.observation_id]))
        return known + _candidate_order(unknown)

    @property
    def local_ids(self) -> Mapping[str, str]:
        """Canonical id -> request-local id."""
        return self._local

    def local_id(self, canonical_id: str) -> str | None:
        """Request-local id of a canonical observation id, or ``None``."""
        return self._local.get(canonical_id)

    def canonical_id(self, local_id: str) -> str | None:
        """Canonical observation id of a request-local id, or ``None``."""
        return self._canonical.get(local_id)

    def __len__(self) -> int:
        return len(self._local)


def support_counts(supporting_id_lists: Iterable[Iterable[str]]) -> dict[str, int]:
    """How many reflections cite each observation id (ids deduped within one reflection)."""
    counts: dict[str, int] = {}
    for ids in supporting_id_lists:
        for observation_id in set(ids):
            counts[observation_id] = counts.get(observation_id, 0) + 1
    return counts


def coverage_tier(count: int) -> CoverageTier:
    """``strong`` for 2 or more citing reflections, ``partial`` for exactly 1, else ``none``."""
    if count >= 2:
        return "strong"
    return "partial" if count == 1 else "none"


def observation_lines(
    observations: Iterable[ObservationRecord], id_map: RequestLocalIdMap, counts: Mapping[str, int]
) -> list[str]:
    """``[<local id>] <timestamp> [<relevance>] [coverage: <tier>] <content>`` per observation, in order."""
    lines: list[str] = []
    seen: set[str] = set()
    for observation in id_map.order(observations):
        local = id_map.local_id(observation.observation_id)
        if local is None or observation.observation_id in seen:
            continue
        seen.add(observation.observation_id)
        tier = coverage_tier(counts.get(observation.observation_id, 0))
        header = f"[{local}] {observation.timestamp} [{observation.relevance}] [coverage: {tier}]"
        lines.append(f"{header} {observation.content}")
    return lines


# --- Reflector input and tool handler (§9.5) ----------------------------------------------------


class ReflectorInput:
    """Everything one Reflector call needs: sorted memory, the id map and the user message."""

    def __init__(
        self,
        prior_reflections: tuple[ActiveReflection, ...],
        observations: tuple[ObservationRecord, ...],
        id_map: RequestLocalIdMap,
        user_message: str,
    ) -> None:
        self.prior_reflections = prior_reflections
        """Active reflections, by position then id."""
        self.observations = observations
        """Active observations, in candidate order."""
        self.id_map = id_map
        """Request-local ids of ``observations``."""
        self.user_message = user_message
        """The user message sent to the model."""


def build_reflector_input(
    prior_reflections: Iterable[ActiveReflection],
    active_observations: Iterable[ObservationRecord],
    session_ids: RequestLocalIdMap | None = None,
) -> ReflectorInput:
    """Build the Reflector request; raises ``ReflectorError('no_active_memory')`` when both are empty.

    ``session_ids`` (:meth:`RequestLocalIdMap.for_session`) numbers observations stably across the
    session's calls; without it they are numbered 1..n for this request (§9.6).
    """
    prior = tuple(sorted(prior_reflections, key=lambda r: (r.position, r.reflection_id)))
    observations = tuple(_candidate_order(active_observations))
    if not prior and not observations:
        raise ReflectorError("no_active_memory", NO_ACTIVE_MEMORY_MESSAGE)
    if session_ids is None:
        id_map = RequestLocalIdMap.for_observations(observations)
    else:
        id_map = session_ids.restricted(observations)
    counts = support_counts(r.supporting_observation_ids for r in prior)
    lines = ["CURRENT REFLECTIONS:"]
    lines += [f"[{r.reflection_id}] {r.content}" for r in prior] or ["(none yet)"]
    lines += ["", "CURRENT OBSERVATIONS:"]
    lines += observation_lines(observations, id_map, counts) or ["(none yet)"]
    lines += ["", REFLECTOR_CLOSING_LINE]
    return ReflectorInput(prior, observations, id_map, "\n".join(lines))


class AcceptedReflection(_Frozen):
    """A new reflection accepted from the model, with canonical supporting ids."""

    reflection_id: str = Field(pattern=r"^[0-9a-f]{64}$")
    """``reflection_id(run, schema, content, supporting ids)``."""
    content: str = Field(min_length=1)
    """Trimmed single-line text."""
    supporting_observation_ids: tuple[str, ...] = Field(min_length=1)
    """Canonical observation ids, unique and sorted."""
    token_count: int = Field(ge=0)
    """Token count of ``content``."""

    @property
    def supporting_observation_ids_json(self) -> str:
        """The stored ``supporting_observation_ids_json`` value (compact JSON list)."""
        return canonical_json(list(self.supporting_observation_ids))


class RecordReflectionsHandler:
    """Handles the ``record_reflections`` calls of one Reflector run.

    Each call validates its items one by one (a bad item is counted as rejected, never fails the
    call), maps request-local ids to canonical ids, derives the content id and skips duplicates of
    active reflections or of items accepted earlier in this run. It only accumulates; nothing is
    written until promotion. Receipts are always ``accepted`` once the arguments are a list.
    """

    max_tool_calls: Final = REFLECTOR_MAX_TOOL_CALLS
    """Tool-call budget of the run (16)."""

    def __init__(
        self,
        session_id: str,
        reflector_schema_version: str,
        id_map: RequestLocalIdMap,
        prior_reflection_ids: Iterable[str],
        count_tokens: CountTokens,
    ) -> None:
        self._session_id = session_id
        self._schema = reflector_schema_version
        self._id_map = id_map
        self._prior_ids = frozenset(prior_reflection_ids)
        self._count_tokens = count_tokens
        self._accepted: dict[str, AcceptedReflection] = {}

    @classmethod
    def for_input(
        cls,
        reflector_input: ReflectorInput,
        session_id: str,
        reflector_schema_version: str,
        count_tokens: CountTokens,
    ) -> RecordReflectionsHandler:
        """A handler for the request built by :func:`build_reflector_input`."""
        return cls(
            session_id,
            reflector_schema_version,
            reflector_input.id_map,
            (r.reflection_id for r in reflector_input.prior_reflections),
            count_tokens,
        )

    @property
    def accepted(self) -> tuple[AcceptedReflection, ...]:
        """New reflections accepted so far, in first-accepted order."""
        return tuple(self._accepted.values())

    def _canonical_ids(self, local_ids: Iterable[str]) -> list[str] | None:
        canonical: set[str] = set()
        for local in local_ids:
            found = self._id_map.canonical_id(local)
            if found is None:
                return None
            canonical.add(found)
        return sorted(canonical)

    def handle(self, arguments: object) -> ReflectionReceipt | InvalidArgumentsReceipt:
        """Process one tool call and return the receipt for the model."""
        items = reflection_items(arguments if isinstance(arguments, Mapping) else {})
        if isinstance(items, InvalidArgumentsReceipt):
            return items
        added = duplicates = rejected = 0
        for item in items:
            draft = parse_reflection_draft(item)
            canonical = None if draft is None else self._canonical_ids(draft.supporting_observation_ids)
            if draft is None or canonical is None:
                rejected += 1
                continue
            new_id = reflection_id(self._session_id, self._schema, draft.content, canonical)
            if new_id in self._prior_ids or new_id in self._accepted:
                duplicates += 1
                continue
            self._accepted[new_id] = AcceptedReflection(
                reflection_id=new_id,
                content=draft.content,
                supporting_observation_ids=tuple(canonical),
                token_count=self._count_tokens(draft.content),
            )
            added += 1
        return reflection_receipt(added, duplicates, rejected, len(self._accepted))


# --- promotion (§9.8) ---------------------------------------------------------------------------


class PromotionPlan(_Frozen):
    """What ``Store.promote_generation`` commits for one generation, in one transaction."""

    generation_id: str
    """Generation being promoted."""
    session_id: str
    """Session."""
    reflections: tuple[ReflectionRecord, ...]
    """Prior active reflections (active order) then new ones (accepted order); position = index."""
    retained_observation_ids: tuple[str, ...]
    """Active observations (candidate order) minus the applied drops."""
    dropped_observation_ids: tuple[str, ...]
    """Drops that take effect, in candidate order."""
    new_reflection_count: int = Field(ge=0)
    """How many of ``reflections`` are new."""
    required_end_seq: int = Field(ge=0)
    """The generation's source watermark: later observations stay active whatever was dropped."""


def promotion_plan(
    payload: ReflectGeneration,
    prior_reflections: Sequence[ActiveReflection],
    new_reflections: Sequence[AcceptedReflection],
    active_observations: Sequence[ObservationRecord],
    drops: Iterable[str],
    required_end_seq: int,
    now: str,
) -> PromotionPlan:
    """The promotion of a generation (§9.8). Zero new reflections still promotes (same reflections,
    everything retained). Drops outside the active set, or of observations past
    ``required_end_seq`` (which §8 keeps active anyway), have no effect.
    """
    drop_set = set(drops)
    reflections: dict[str, ReflectionRecord] = {}
    new_count = 0
    ordered_prior = sorted(prior_reflections, key=lambda r: (r.position, r.reflection_id))
    for reflection, is_new in [(r, False) for r in ordered_prior] + [(r, True) for r in new_reflections]:
        if reflection.reflection_id in reflections:
            continue
        new_count += is_new
        reflections[reflection.reflection_id] = ReflectionRecord(
            reflection_id=reflection.reflection_id,
            session_id=payload.session_id,
            observation_set_hash=payload.observation_set_hash,
            content=reflection.content,
            supporting_observation_ids=tuple(reflection.supporting_observation_ids),
            token_count=reflection.token_count,
            reflector_model=payload.reflector_model,
            reflector_schema_version=payload.reflector_schema_version,
            created_at=now,
        )
    retained: list[str] = []
    dropped: list[str] = []
    seen: set[str] = set()
    for observation in _candidate_order(active_observations):
        observation_id = observation.observation_id
        if observation_id in seen:
            continue
        seen.add(observation_id)
        if observation_id in drop_set and observation.source_end_seq <= required_end_seq:
            dropped.append(observation_id)
        else:
            retained.append(observation_id)
    return PromotionPlan(
        generation_id=payload.generation_id,
        session_id=payload.session_id,
        reflections=tuple(reflections.values()),
        retained_observation_ids=tuple(retained),
        dropped_observation_ids=tuple(dropped),
        new_reflection_count=new_count,
        required_end_seq=required_end_seq,
    )
