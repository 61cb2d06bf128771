"""Worker actor shell: runs one job handler and turns every result into an outcome value.

Workers never raise across the actor boundary (DESIGN.md): a handler's exception becomes a
:class:`protocol.outcomes.JobFailed` with a short category and the exception's class name, never
its message (which may quote memory text). The queue's pure retry policy decides what happens next.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol

from pydantic import ValidationError

from protocol.errors import (
    BudgetReachedError,
    ConflictError,
    EventsFileError,
    EventsMismatchError,
    EventsMissingError,
    InvalidPayloadError,
    PromptOverCapError,
    SettingsError,
    StoreFileReplacedError,
)
from protocol.jobs import JobEnvelope
from protocol.outcomes import (
    REASON_DATA_NODE_LOST,
    REASON_DATABASE_MISSING,
    REASON_EVENTS_FILE_CORRUPT,
    REASON_EVENTS_MISMATCH,
    REASON_EVENTS_MISSING,
    REASON_INVALID_INPUT,
    REASON_MODEL_API_KEY_MISSING,
    REASON_MODEL_AUTH,
    REASON_MODEL_BAD_ANSWER,
    REASON_MODEL_CALL_BUDGET,
    REASON_MODEL_CLI_FAILED,
    REASON_MODEL_CLI_LOGIN,
    REASON_MODEL_CLI_MISSING,
    REASON_MODEL_CLI_TIMEOUT,
    REASON_MODEL_NOT_FOUND,
    REASON_MODEL_QUOTA,
    REASON_MODEL_UNREACHABLE,
    REASON_PROMPT_OVER_CAP,
    REASON_SETTINGS,
    EventsLocation,
    JobFailed,
    JobHeld,
    JobSucceeded,
)
from protocol.placement import DataNodeLostError

logger = logging.getLogger("omray.worker")


class StorePort(Protocol):
    """What a handler may call on the writer of one database (a local Store or a StoreActor proxy)."""

    def __getattr__(self, name: str) -> Callable[..., Any]: ...


class WorkerContext(Protocol):
    """Services a handler gets from the runtime around it."""

    def store_for(self, db_path: str) -> Any:
        """The single writer of ``db_path`` (the StoreActor in a cluster)."""
        ...

    def reader_for(self, db_path: str) -> Any:
        """The reads of ``db_path`` and of the files beside it
        (:class:`actors.store.reader.DataReader`, or a proxy to the one on the database's node)."""
        ...

    def dispatch(self, envelope: JobEnvelope) -> str:
        """Enqueue a follow-up job on the durable queue; returns its job id."""
        ...


JobHandler = Callable[[JobEnvelope, int, WorkerContext], Mapping[str, Any] | None]
"""``handler(envelope, attempt, context) -> detail``; raises to fail the attempt."""


def root_cause(exc: BaseException) -> BaseException:
    """The exception behind ``exc`` when another process raised it.

    An error raised in the StoreActor reaches a worker wrapped by Ray (``RayTaskError``, whose
    ``cause`` is the original and whose class name, ``RayTaskError(X)``, is no valid class name):
    the original decides the category. ``actors/`` never imports ray, so this goes by the attribute.
    """
    seen = 0
    while seen < 8:  # a cause chain, not a cycle
        cause = getattr(exc, "cause", None)
        if not isinstance(cause, BaseException) or cause is exc:
            return exc
        exc, seen = cause, seen + 1
    return exc


def error_class_name(exc: BaseException) -> str | None:
    """The exception's class name when it is a plain identifier (what a failure value may carry)."""
    name = type(exc).__name__
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]{0,199}", name) else None


CLI_FAILURE_REASONS: dict[str, str] = {
    "cli_missing": REASON_MODEL_CLI_MISSING,
    "not_logged_in": REASON_MODEL_CLI_LOGIN,
    "quota_exhausted": REASON_MODEL_QUOTA,
    "budget_exceeded": REASON_MODEL_CALL_BUDGET,
    "cli_timeout": REASON_MODEL_CLI_TIMEOUT,
    "cli_failed": REASON_MODEL_CLI_FAILED,
    "bad_answer": REASON_MODEL_BAD_ANSWER,
}
"""Failure category of each :class:`~actors.models.chat.ModelCallError` category of the agent-CLI
providers (each has its cause and fix in :data:`protocol.outcomes.FAILURE_HELP`)."""


def failure_reason(exc: BaseException) -> tuple[str, bool]:
    """Short category code for an exception and whether retrying can help."""
    exc = root_cause(exc)
    if isinstance(exc, EventsFileError):
        return REASON_EVENTS_FILE_CORRUPT, True  # the user may repair the line before the next attempt
    if isinstance(exc, EventsMissingError):
        return REASON_EVENTS_MISSING, True  # the agent (or a copy to this node) may still bring the file
    if isinstance(exc, EventsMismatchError):
        return REASON_EVENTS_MISMATCH, False
    if isinstance(exc, StoreFileReplacedError):
        return REASON_DATABASE_MISSING, True  # the next attempt writes to the file now at the path
    if isinstance(exc, DataNodeLostError):
        return REASON_DATA_NODE_LOST, True  # the node may come back with its disk
    if isinstance(exc, ValidationError):
        # A value the job carries or reads that pydantic refuses: the same input fails the same way.
        return REASON_INVALID_INPUT, False
    if isinstance(exc, InvalidPayloadError):
        return "invalid_payload", True
    if isinstance(exc, ConflictError):
        return "conflict", True
    if isinstance(exc, PromptOverCapError):
        return REASON_PROMPT_OVER_CAP, False  # the same prompt is over the same cap: fix the settings
    # By class name: the model clients are imported only by the jobs that call a model.
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "MissingApiKeyError" in names:
        return REASON_MODEL_API_KEY_MISSING, True
    if isinstance(exc, SettingsError):
        return REASON_SETTINGS, True
    if "ModelCallError" in names:
        cli_reason = CLI_FAILURE_REASONS.get(str(getattr(exc, "category", "")))
        if cli_reason is not None:
            return cli_reason, True  # retried, and re-driven once the user fixed the cause
        status = getattr(exc, "status_code", None)
        if status in (401, 403):
            return REASON_MODEL_AUTH, True
        if status == 404:
            return REASON_MODEL_NOT_FOUND, True
        if getattr(exc, "category", None) in ("connection", "timeout"):
            return REASON_MODEL_UNREACHABLE, True
    return "transient_runtime", True


def events_location(exc: BaseException) -> EventsLocation | None:
    """Where an events failure is (file, line, seq), for the failure value; ``None`` for others."""
    try:
        if isinstance(exc, EventsFileError):
            return EventsLocation(path=exc.path, line_no=exc.line_no, seq=exc.seq, after_seq=exc.after_seq)
        if isinstance(exc, EventsMismatchError):
            return EventsLocation(path=exc.path, line_no=exc.line_no, seq=exc.seq)
        if isinstance(exc, EventsMissingError):
            return EventsLocation(path=exc.path)
    except ValidationError:
        return None
    return None


def utc_now() -> str:
    """UTC ISO-8601 now, second precision (the original's ATOM format)."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def local_now() -> str:
    """Local ``YYYY-MM-DD HH:MM`` now (the Observer's fallback time)."""
    return datetime.now().astimezone().strftime("%Y-%m-%d %H:%M")


def lower_priority(niceness: int) -> bool:
    """Give this process at least ``niceness`` (never less than it has); True if it changed.

    ``os.setpriority`` sets the value, so a second call adds nothing; a platform or sandbox without
    it leaves the process as it is.
    """
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) >= niceness:
            return False
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
    except (OSError, AttributeError):
        return False
    return True


def warm_model_clients(encoding: str) -> None:
    """Import the model client library and load the ``encoding`` tokenizer, as a first job would.

    Both cost about 0.8 s of CPU and some 100 MB per process, once; a worker pays them before its
    first job only when asked (``RoleActor.warm``), so idle workers stay small.
    """
    import openai.types.chat  # noqa: F401  (the chat client's import, done once per process)

    from actors.models.tokens import TokenCounter

    TokenCounter(encoding).count("warm")


def load_handler(path: str) -> JobHandler:
    """Import ``module:function``; raises ``SettingsError`` naming the path when it cannot."""
    module_name, _, attr = path.partition(":")
    try:
        handler = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError):
        raise SettingsError(f"cannot load job handler {path!r}") from None
    if not callable(handler):
        raise SettingsError(f"job handler {path!r} is not callable")
    return handler  # type: ignore[no-any-return]


class WorkerActor:
    """Runs jobs of one handler id, one at a time, and reports outcomes as values.

    Holds no durable state: everything a handler produces goes through the StoreActor of its
    database, and every unit of work is idempotent, so a redelivered job never duplicates anything.

    Two attempts of one job id never run at once here: a QueueActor that restarted re-dispatches
    the job it lost track of while the old attempt may still be running in this worker, so the new
    attempt waits for the old one to end (handlers assume attempt N+1 starts after attempt N).
    """

    def __init__(
        self,
        handler_id: str,
        handler: JobHandler,
        context: WorkerContext,
        hosted: Mapping[str, JobHandler] | None = None,
    ) -> None:
        self.handler_id = handler_id
        self._handler = handler
        # Handlers of other job kinds this worker's pool runs too, by handler id (forget jobs on
        # the reflector pool: ``protocol.jobs.POOL_OF_HANDLER``).
        self._hosted: dict[str, JobHandler] = dict(hosted or {})
        self._context = context
        self.jobs_run = 0
        self._job_ended = threading.Condition()
        self._running_jobs: set[str] = set()

    def handle(self, envelope_data: Mapping[str, Any], attempt: int) -> dict[str, Any]:
        """Run one attempt of one job; returns a ``JobSucceeded`` or ``JobFailed`` as a dict."""
        started = time.monotonic()
        try:
            envelope = JobEnvelope.model_validate(envelope_data)
        except Exception as exc:  # a malformed envelope is a failure value, not a crash
            job_id = str(envelope_data.get("job_id", "")) if isinstance(envelope_data, Mapping) else ""
            return JobFailed(
                job_id=job_id, retryable=True, reason="invalid_payload", error_class=type(exc).__name__
            ).model_dump()
        with self._job_ended:
            while envelope.job_id in self._running_jobs:
                self._job_ended.wait()
            self._running_jobs.add(envelope.job_id)
        try:
            return self._run(envelope, attempt, started)
        finally:
            with self._job_ended:
                self._running_jobs.discard(envelope.job_id)
                self._job_ended.notify_all()

    def handle_many(self, items: Sequence[tuple[Mapping[str, Any], int]]) -> list[dict[str, Any]]:
        """Run several attempts one after the other; their outcomes, in order (one per item).

        The queue sends a batch only to a pool whose attempts are short. An item that is not an
        ``(envelope, attempt)`` pair gets a ``JobFailed`` of its own; the others still run.
        """
        outcomes: list[dict[str, Any]] = []
        for item in items:
            try:
                envelope_data, attempt = item
                if not isinstance(attempt, int) or isinstance(attempt, bool):
                    raise TypeError("attempt")
            except (TypeError, ValueError) as exc:
                job_id = "unknown"  # outcomes are matched by position; an id is only for logs
                if isinstance(item, Sequence) and item and isinstance(item[0], Mapping):
                    job_id = str(item[0].get("job_id") or job_id)
                outcomes.append(
                    JobFailed(
                        job_id=job_id,
                        retryable=True,
                        reason="invalid_payload",
                        error_class=type(exc).__name__,
                    ).model_dump()
                )
                continue
            outcomes.append(self.handle(envelope_data, attempt))
        return outcomes

    def _run(self, envelope: JobEnvelope, attempt: int, started: float) -> dict[str, Any]:
        self.jobs_run += 1
        try:
            handler = self._hosted.get(envelope.handler_id, self._handler)
            detail = handler(envelope, attempt, self._context) or {}
        except BudgetReachedError as reached:  # not a failure: the queue holds the job
            return self._held(envelope.job_id, attempt, reached)
        except Exception as exc:  # never raise across the actor boundary
            return self._failure(envelope.job_id, attempt, exc)
        elapsed_ms = (time.monotonic() - started) * 1000.0
        return JobSucceeded(
            job_id=envelope.job_id, detail={**dict(detail), "elapsed_ms": round(elapsed_ms, 3)}
        ).model_dump()

    def _held(self, job_id: str, attempt: int, reached: BudgetReachedError) -> dict[str, Any]:
        """The held value of an attempt that found the project's daily budget used up (nothing was
        sent); a failure value if it cannot be built (it must not raise)."""
        logger.info(
            "job held by the daily budget",
            extra={
                "job_id": job_id,
                "handler_id": self.handler_id,
                "attempt": attempt,
                "reason": reached.reason,
            },
        )
        try:
            return JobHeld(
                job_id=job_id,
                reason=reached.reason,
                until=reached.until,
                spent=reached.spent,
                cap=reached.cap,
                settings_fingerprint=reached.settings_fingerprint,
            ).model_dump()
        except ValidationError:
            return JobFailed(job_id=job_id, retryable=True, reason="transient_runtime").model_dump()

    def _failure(self, job_id: str, attempt: int, exc: Exception) -> dict[str, Any]:
        """The failure value of an attempt that raised ``exc`` (built so that it cannot raise itself:
        an exception here would cross the actor boundary and count as a crash)."""
        reason, retryable = failure_reason(exc)
        cause = root_cause(exc)
        location = events_location(cause)
        logger.warning(
            "job attempt failed",
            extra={
                "job_id": job_id,
                "handler_id": self.handler_id,
                "attempt": attempt,
                "reason": reason,
                "error_class": type(cause).__name__,
                **(location.model_dump() if location is not None else {}),
            },
        )
        try:
            failure = JobFailed(
                job_id=job_id,
                retryable=retryable,
                reason=reason,
                error_class=error_class_name(cause),
                events_location=location,
            )
        except ValidationError:  # e.g. an events path pydantic refuses: keep the category only
            failure = JobFailed(job_id=job_id, retryable=retryable, reason=reason)
        return failure.model_dump()

    def shutdown(self) -> int:
        """Close the model, embedding and rerank clients of this process; returns how many were open.

        Called before the actor is killed (``omray down``, :func:`cluster.named_actors.remove_runtime`),
        since a killed process runs no exit hooks. A job still running builds a new client if it
        needs one.
        """
        from actors.models.clients import worker_clients

        pool = worker_clients()
        opened = len(pool)
        pool.close()
        return opened

    def ping(self) -> dict[str, Any]:
        """Liveness, a count of attempts run by this process, and the job ids of attempts running now
        (a restarted queue sends a job it redelivers to the worker still running its old attempt)."""
        with self._job_ended:
            running = sorted(self._running_jobs)
        return {
            "handler_id": self.handler_id,
            "jobs_run": self.jobs_run,
            "pid": os.getpid(),
            "running": running,
        }


class RoleActor(WorkerActor):
    """A worker of one role of the design card: its handler id is fixed, its handler defaults to the role's.

    ``ObserverActor``, ``ReflectorActor`` and ``IndexerActor`` subclass it, so the code, the docs
    and the Ray dashboard use the same names. Benchmarks and runtime tests may pass another handler
    (``module:function``) to exercise the queue without memory work.
    """

    role_handler_id: ClassVar[str]
    """The stable handler id this role serves."""
    default_handler: ClassVar[str]
    """``module:function`` of the role's production handler."""
    hosted_handlers: ClassVar[Mapping[str, str]] = {}
    """``module:function`` of the handler of each other handler id this role's pool runs (their
    jobs go to that handler, whatever handler the role itself was given)."""

    def __init__(
        self, context: WorkerContext, handler: JobHandler | str | None = None, *, niceness: int | None = None
    ) -> None:
        """``niceness``: run this process at least that nice (``cluster/`` sets it for its own
        actor processes: memory work is background work); ``None`` leaves the process alone."""
        chosen = handler or self.default_handler
        super().__init__(
            self.role_handler_id,
            load_handler(chosen) if isinstance(chosen, str) else chosen,
            context,
            {hid: load_handler(path) for hid, path in self.hosted_handlers.items()},
        )
        if niceness is not None:
            lower_priority(niceness)

    def warm(self, encoding: str | None = None) -> dict[str, Any]:
        """Load the model client library and a tokenizer now rather than in the first job.

        ``encoding``: the token encoding the settings name (default: the built-in default). Returns
        how long it took; a second call costs nothing.
        """
        from actors.models.tokens import DEFAULT_ENCODING

        started = time.monotonic()
        warm_model_clients(encoding or DEFAULT_ENCODING)
        return {"handler_id": self.handler_id, "warm_ms": round((time.monotonic() - started) * 1000.0, 1)}
