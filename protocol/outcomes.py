"""What a worker returns to the queue across the actor boundary, and the job-failed event.

Workers never raise across the actor boundary: every job ends in a :data:`JobOutcome` value and
the queue's pure retry policy (``actors.queue.retry``) decides what happens next. Failure values carry
a short category code and, at most, an exception class name, never exception text, so they are
safe to persist, log and show (DESIGN.md invariant 8).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    StringConstraints,
    TypeAdapter,
    model_serializer,
)

_REASON_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"

FailureReason = Annotated[str, StringConstraints(pattern=_REASON_PATTERN)]
"""A short snake_case failure category (``transient_runtime``, ``invalid_payload``, …); never raw text."""

ErrorClassName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.]{0,199}$")]
"""A (possibly dotted) exception class name such as ``ConflictError``."""

REASON_TRANSIENT_RUNTIME = "transient_runtime"
"""A model, provider, network or database error that may pass on its own."""
REASON_INVALID_PAYLOAD = "invalid_payload"
"""The job payload failed validation (the original still retries it, §15)."""
REASON_CONFLICT = "conflict"
"""A content-derived id already exists with different content."""
REASON_WORKER_CRASHED = "worker_crashed"
"""The worker process died mid-job; the queue counts it as one failed attempt."""
REASON_INTERRUPTED = "interrupted"
"""The queue itself restarted while the attempt was running; the attempt counts."""
REASON_RETRY_EXHAUSTED = "retry_exhausted"
"""Event reason when every allowed attempt failed (reference §2.4)."""

REASON_EVENTS_FILE_CORRUPT = "events_file_corrupt"
"""A line the job needs in ``events.jsonl`` is corrupt; the failure says where (:class:`EventsLocation`)."""

REASON_EVENTS_MISSING = "events_missing"
"""The job's ``events.jsonl`` does not exist (retried: an agent or a copy may still bring it)."""
REASON_EVENTS_MISMATCH = "events_mismatch"
"""The job's ``events.jsonl`` holds another session's events (not retryable until the file is fixed)."""
REASON_INVALID_INPUT = "invalid_input"
"""A value the job carries or reads failed validation inside the worker (not retryable)."""
REASON_DATABASE_MISSING = "database_missing"
"""The memory database file was removed or replaced under the runtime; nothing was written."""
REASON_DATA_NODE_LOST = "data_node_lost"
"""The node that holds the memory database is not in the cluster (down or gone); nothing was written."""

REASON_SETTINGS = "settings"
"""The settings file is missing, invalid, or names a model or provider that is not defined."""
REASON_MODEL_AUTH = "model_auth"
"""The model endpoint refused the credentials (HTTP 401 or 403)."""
REASON_MODEL_API_KEY_MISSING = "model_api_key_missing"
"""The environment variable a provider names for its API key is unset where the worker runs."""
REASON_MODEL_UNREACHABLE = "model_unreachable"
"""The model endpoint could not be reached (connection refused, DNS, timeout)."""
REASON_MODEL_NOT_FOUND = "model_not_found"
"""The endpoint answered 404: no such model (or path)."""

REASON_MODEL_CLI_MISSING = "model_cli_missing"
"""The agent CLI a provider runs (``claude``) is not installed where the worker runs."""
REASON_MODEL_CLI_LOGIN = "model_cli_login"
"""The agent CLI is not logged in (or its login was refused) for the user the runtime runs as."""
REASON_MODEL_QUOTA = "model_quota"
"""The plan's usage allowance or the account's credit is used up."""
REASON_MODEL_CALL_BUDGET = "model_call_budget"
"""One model call would have spent more than the provider's ``max_budget_usd``."""
REASON_MODEL_CLI_TIMEOUT = "model_cli_timeout"
"""A run of the agent CLI did not finish within the provider's ``timeout_s``."""
REASON_MODEL_CLI_FAILED = "model_cli_failed"
"""The agent CLI ended without a usable result (refused its command line, crashed)."""
REASON_MODEL_BAD_ANSWER = "model_bad_answer"
"""The model's answer was not the structured answer asked for."""

REASON_BUDGET_TOKENS = "budget_tokens"
"""A job held (not failed): the project's ``budget.daily_tokens`` for the UTC day is used up."""
REASON_BUDGET_USD = "budget_usd"
"""A job held (not failed): the project's ``budget.daily_usd`` for the UTC day is used up."""
REASON_PROMPT_OVER_CAP = "prompt_over_cap"
"""One model call would be sent more than ``budget.max_prompt_tokens``; it was not sent."""

HOLD_REASONS = frozenset({REASON_BUDGET_TOKENS, REASON_BUDGET_USD})
"""Why a job can be held (:class:`JobHeld`)."""

_BUDGET_HELP: dict[str, tuple[str, str]] = {
    REASON_BUDGET_TOKENS: (
        "the project's daily model budget in tokens (budget.daily_tokens) is used up",
        "nothing: observing resumes at 00:00 UTC; or raise observational_memory.budget.daily_tokens in "
        "omray.yaml (null: no cap), picked up within a minute, at the next turn, or at once with "
        "`omray retry`. The turns wait in the queue, nothing is lost; search and compaction keep working",
    ),
    REASON_BUDGET_USD: (
        "the project's daily model budget in US dollars (budget.daily_usd) is used up",
        "nothing: observing resumes at 00:00 UTC; or raise observational_memory.budget.daily_usd in "
        "omray.yaml (null: no cap), picked up within a minute, at the next turn, or at once with "
        "`omray retry`. The turns wait in the queue, nothing is lost; search and compaction keep working",
    ),
    REASON_PROMPT_OVER_CAP: (
        "one model call would be sent more prompt tokens than budget.max_prompt_tokens, so it was not sent "
        "(the Reflector is sent the whole active pool)",
        "raise observational_memory.budget.max_prompt_tokens in omray.yaml, or lower "
        "reflector.reflect_after_observation_tokens; the job runs again once the settings change",
    ),
}

_CLI_HELP: dict[str, tuple[str, str]] = {
    REASON_MODEL_CLI_MISSING: (
        "the agent CLI the model's provider runs (`claude` for claude-code, `codex` for codex) is not "
        "installed where the memory runtime runs",
        "install it (`npm install -g @anthropic-ai/claude-code` or `@openai/codex`) or set "
        "providers.<provider>.command to its absolute path in omray.yaml, then `omray down && omray up`",
    ),
    REASON_MODEL_CLI_LOGIN: (
        "the agent CLI (`claude` or `codex`) is not logged in for the user who runs the memory runtime",
        "log in as that user, with the same CLAUDE_CONFIG_DIR or CODEX_HOME as the shell that runs "
        "`omray up`: `claude` then `/login`, or `codex login`",
    ),
    REASON_MODEL_QUOTA: (
        "the model's usage allowance (plan limit or credit balance) is used up",
        "wait until the allowance resets, or choose another model in omray.yaml; the turns wait, nothing is "
        "lost",
    ),
    REASON_MODEL_CALL_BUDGET: (
        "one Observer or Reflector call would cost more than providers.claude-code.max_budget_usd",
        "raise max_budget_usd in omray.yaml, or lower providers.claude-code.context_window so each call is "
        "sent less",
    ),
    REASON_MODEL_CLI_TIMEOUT: (
        "a run of the agent CLI did not finish within providers.<provider>.timeout_s",
        "check that `claude -p hello` (or `codex exec hello`) answers as the user who runs `omray up`; "
        "raise timeout_s, or lower context_window so each call is smaller",
    ),
    REASON_MODEL_CLI_FAILED: (
        "the agent CLI ended without a result",
        "check its version (claude 2.1 or later, with --json-schema and --no-session-persistence; codex "
        "0.171 or later, with --output-schema and --ephemeral) and that `claude -p hello` (or `codex "
        "exec hello`) works as the user who runs `omray up`",
    ),
    REASON_MODEL_BAD_ANSWER: (
        "the model did not give the structured answer omray asked for",
        "this usually passes on the next attempt; if it persists, choose a stronger model in omray.yaml",
    ),
}

FAILURE_HELP: dict[str, tuple[str, str]] = {
    **_CLI_HELP,
    **_BUDGET_HELP,
    REASON_SETTINGS: (
        "the settings are invalid or name a model or provider that is not defined",
        "fix the project's omray.yaml (`omray integrate <agent> --check` says what is wrong); jobs read it "
        "when they run",
    ),
    REASON_MODEL_AUTH: (
        "the model endpoint rejected the API key",
        "export the provider's API key variable (providers.<name>.api_key_env) in the shell that runs "
        "`omray up`, then `omray down && omray up`",
    ),
    REASON_MODEL_API_KEY_MISSING: (
        "the provider's API key variable is not set where the memory runtime runs",
        "export it in the shell that runs `omray up`, then `omray down && omray up`",
    ),
    REASON_MODEL_UNREACHABLE: (
        "the model endpoint cannot be reached",
        "check the provider's base_url in omray.yaml and that the model server is running",
    ),
    REASON_MODEL_NOT_FOUND: (
        "the model endpoint does not know the model",
        "check the model name in omray.yaml (provider/model)",
    ),
    REASON_EVENTS_FILE_CORRUPT: (
        "a line of the session's events.jsonl is corrupt",
        "`omray status --json` names the file and line; repair or remove that line",
    ),
    REASON_EVENTS_MISSING: (
        "the session's events.jsonl does not exist (was the project's .hatfield/ folder removed or moved?)",
        "restore .hatfield/sessions/<session>/events.jsonl (the job_failed event names the file); the job "
        "is retried, and `omray retry` runs it again once the file is back",
    ),
    REASON_EVENTS_MISMATCH: (
        "the session's events.jsonl holds another session's events",
        "put the session's own events back in its .hatfield/sessions/<session>/events.jsonl (the job_failed "
        "event names the file and line); one file holds one session",
    ),
    REASON_INVALID_INPUT: (
        "a memory job carries or reads a value omray cannot accept",
        "see `omray status --json` for the job; the job will not succeed as it is",
    ),
    REASON_DATABASE_MISSING: (
        "the memory database (om.sqlite) was removed or replaced while a memory job wrote to it",
        "nothing to do: the next attempt writes to the file now at its path (created again when missing); "
        "`omray retry` runs a job that gave up",
    ),
    REASON_DATA_NODE_LOST: (
        "the cluster node that holds this project's memory database is down or gone",
        "start that node again with the same disk (and its omray-node label or resource): its jobs "
        "resume once it is back; `omray status --json` names each database's node (`placements`)",
    ),
}
"""Per failure category, what stops the memory and how to fix it (shown by ``omray status`` and
the agent hooks; fixed text, never exception text)."""


def explain_failure(category: str, key_variable: str | None = None) -> tuple[str, str]:
    """``(cause, fix)`` of a failure category (a generic pair for categories without help).

    ``key_variable`` is the environment variable the model's provider reads its API key from
    (``providers.<name>.api_key_env``), when the caller knows it: the two key categories then name
    it, so the user knows what to export. A variable's name is settings, never the key itself.
    """
    if key_variable is not None and category == REASON_MODEL_API_KEY_MISSING:
        return (
            f"the provider's API key variable {key_variable} is not set where the memory runtime runs",
            f"export {key_variable} in the shell that runs `omray up`, then `omray down && omray up`",
        )
    if key_variable is not None and category == REASON_MODEL_AUTH:
        return (
            f"the model endpoint rejected the API key in {key_variable}",
            f"export the right key as {key_variable} in the shell that runs `omray up`, then "
            "`omray down && omray up`",
        )
    return FAILURE_HELP.get(
        category,
        (
            f"memory jobs fail ({category})",
            "see `omray status` and the runtime's logs (`omray up --dashboard` shows them)",
        ),
    )


_LAST_FAILURE_RE = re.compile(r"last failure: ([a-z][a-z0-9_]{0,63})\.")


def last_failure(event_payload: dict[str, Any]) -> str:
    """The last failure category of a ``job_failed`` payload (its ``reason`` when the message has none)."""
    found = _LAST_FAILURE_RE.search(str(event_payload.get("message", "")))
    return found.group(1) if found else str(event_payload.get("reason", "unknown"))


JOB_FAILED_EVENT_TYPE = "extension_agent.job_failed"
"""Runtime event type emitted once for a job that gave up (reference §2.4)."""


class _Outcome(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EventsLocation(_Outcome):
    """Where a corrupt (or foreign) ``events.jsonl`` line is, or which file is missing: file, line
    and seq, never the line's content."""

    path: str = Field(min_length=1)
    """The events file."""
    line_no: int | None = Field(default=None, ge=1)
    """1-based line number of the line (``None`` for a missing file)."""
    seq: int | None = None
    """The line's seq when it could be read."""
    after_seq: int = Field(default=0, ge=0)
    """Seq of the last good event before the line (0 when there is none)."""


class JobSucceeded(_Outcome):
    """The handler finished the job (including "nothing to do": handlers are idempotent)."""

    kind: Literal["succeeded"] = "succeeded"
    """Discriminator."""
    job_id: str = Field(min_length=1)
    """Id of the job that finished."""
    detail: dict[str, JsonValue] = Field(default_factory=dict)
    """Counts and ids for logs and status (e.g. ``{"parts_committed": 2}``); never memory text."""


class JobFailed(_Outcome):
    """One attempt of the job failed; the queue's retry policy decides whether to try again."""

    kind: Literal["failed"] = "failed"
    """Discriminator."""
    job_id: str = Field(min_length=1)
    """Id of the job whose attempt failed."""
    retryable: bool
    """The worker's opinion: could another attempt succeed? (The default policy retries anyway.)"""
    reason: FailureReason
    """Short failure category code."""
    error_class: ErrorClassName | None = None
    """Class name of the exception behind the failure, if any."""
    events_location: EventsLocation | None = None
    """Where the events file or its bad line is, for ``events_*`` failures."""

    @classmethod
    def from_exception(
        cls, job_id: str, error: BaseException, *, reason: str, retryable: bool = True
    ) -> JobFailed:
        """A failure value for ``error`` that keeps only its class name, never its message."""
        return cls(job_id=job_id, retryable=retryable, reason=reason, error_class=type(error).__name__)


class JobHeld(_Outcome):
    """The job did not run: the project's daily model budget is used up (nothing was sent, nothing
    written). The queue holds it in its lane, with the database's other model jobs, until ``until``
    or until the cap is raised; a held run does not count as an attempt."""

    kind: Literal["held"] = "held"
    """Discriminator."""
    job_id: str = Field(min_length=1)
    """Id of the job that was held."""
    reason: FailureReason
    """``budget_tokens`` or ``budget_usd`` (:data:`HOLD_REASONS`)."""
    until: float = Field(allow_inf_nan=False)
    """Epoch seconds when the cap resets: the next UTC day."""
    spent: float = Field(ge=0, allow_inf_nan=False)
    """Spent this UTC day, in the cap's unit (tokens or US dollars)."""
    cap: float = Field(gt=0, allow_inf_nan=False)
    """The cap, in its unit."""
    settings_fingerprint: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """The settings the budget said no under (``protocol.jobs.settings_fingerprint``): a job accepted
    for the database under other settings re-checks the hold at once."""


JobOutcome = Annotated[JobSucceeded | JobFailed | JobHeld, Field(discriminator="kind")]
"""What a worker returns for one attempt of a job."""

JOB_OUTCOME_ADAPTER: TypeAdapter[JobSucceeded | JobFailed | JobHeld] = TypeAdapter(JobOutcome)
"""Validates/serializes any job outcome from/to JSON."""


class _JobEvent(_Outcome):
    """What every runtime event about one job carries first: a fixed summary, its reason, the job."""

    event_type: ClassVar[str]
    """Runtime event type (not part of the payload)."""

    message: str = Field(min_length=1)
    """Short, fixed, human-readable summary (category codes and counts only; the fix, when there is one)."""
    reason: FailureReason
    """Category code: the failure the queue gave up on (``retry_exhausted`` after the last attempt), or
    the budget cap a hold is for (``budget_tokens`` or ``budget_usd``)."""
    handler_id: str = Field(min_length=1)
    """Stable handler id of the job."""
    job_id: str = Field(min_length=1)
    """Id of the job."""


class JobFailedEvent(_JobEvent):
    """Sanitized payload of the transient ``extension_agent.job_failed`` runtime event (reference §2.4).

    Emitted once, for the job's session (``payload.session_id``), when the queue gives up on a job. It
    is not appended to ``events.jsonl`` and does not fail the agent's run. The message is built
    only from category codes and counts, so it never carries memory text or exception text.
    """

    event_type: ClassVar[str] = JOB_FAILED_EVENT_TYPE

    retry_count: int = Field(ge=0)
    """Retries made after the first attempt (``attempts - 1``)."""
    attempts: int = Field(ge=1)
    """Attempts made in total."""
    events_location: EventsLocation | None = None
    """Where the events file or its bad line is, when the last failure was ``events_file_corrupt``,
    ``events_mismatch`` or ``events_missing`` (only then is the key in the payload, so other events
    keep exactly the reference's keys)."""

    @model_serializer(mode="wrap")
    def _reference_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("events_location") is None:
            data.pop("events_location", None)
        return data

    @classmethod
    def for_job(
        cls,
        *,
        job_id: str,
        handler_id: str,
        attempts: int,
        event_reason: str,
        last_failure: str,
        events_location: EventsLocation | None = None,
    ) -> JobFailedEvent:
        """The event for a job that gave up after ``attempts`` attempts; ``last_failure`` is a category."""
        if re.fullmatch(_REASON_PATTERN, last_failure) is None:
            last_failure = "unknown"  # only category codes may reach the message
        message = f"Background memory job gave up after {attempts} attempt(s); last failure: {last_failure}."
        return cls(
            message=message,
            reason=event_reason,
            handler_id=handler_id,
            job_id=job_id,
            retry_count=attempts - 1,
            attempts=attempts,
            events_location=events_location,
        )


JOB_HELD_EVENT_TYPE = "extension_agent.memory_held"
"""Runtime event emitted for a session when the queue starts holding its database's model jobs."""


class JobHeldEvent(_JobEvent):
    """Sanitized payload of the ``extension_agent.memory_held`` runtime event: why observing paused
    (the job that found the budget used up), until when, and how to resume it. Built from category
    codes and counts only."""

    event_type: ClassVar[str] = JOB_HELD_EVENT_TYPE

    until: str = Field(min_length=1)
    """UTC ISO-8601 time the cap resets (the next UTC day)."""
    spent: float = Field(ge=0, allow_inf_nan=False)
    """Spent this UTC day, in the cap's unit."""
    cap: float = Field(gt=0, allow_inf_nan=False)
    """The cap, in its unit."""

    @classmethod
    def for_hold(
        cls, *, job_id: str, handler_id: str, reason: str, until: str, spent: float, cap: float
    ) -> JobHeldEvent:
        """The event for a hold that started; ``reason`` is a category code."""
        if reason not in HOLD_REASONS:
            reason = REASON_BUDGET_TOKENS
        key, unit = ("daily_usd", "USD") if reason == REASON_BUDGET_USD else ("daily_tokens", "tokens")
        message = (
            f"Observing paused: the project's daily model budget budget.{key} ({cap:g} {unit}) is used up "
            f"({spent:g} spent today, UTC). The turns wait in the queue, nothing is lost, and search and "
            f"compaction keep working. Observing resumes at {until[:16].replace('T', ' ')} UTC, or within a "
            f"minute of raising observational_memory.budget.{key} in the settings (`omray retry`: at once)."
        )
        return cls(
            message=message,
            reason=reason,
            handler_id=handler_id,
            job_id=job_id,
            until=until,
            spent=spent,
            cap=cap,
        )
