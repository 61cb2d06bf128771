"""A worker's failure is reported as what it is, never as a crash (issue 40 item 9).

An exception the StoreActor raised reaches a worker wrapped by Ray under a class name such as
``RayTaskError(InvalidPayloadError)``; a failure value built from that name did not validate, the
worker raised across the actor boundary, and the queue counted a ``worker_crashed`` attempt.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from actors.worker import WorkerActor
from protocol.errors import InvalidPayloadError, StoreFileReplacedError
from protocol.jobs import JobEnvelope
from protocol.outcomes import JOB_OUTCOME_ADAPTER, JobFailed, explain_failure

from .helpers import envelope


class _Wrapped(Exception):
    """Stands in for Ray's wrapper of an exception raised in another actor (``.cause`` is the original)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _as_ray_delivers(cause: BaseException) -> Exception:
    """``cause`` wrapped as Ray hands it over: a dual class named ``RayTaskError(X)`` when ``X`` can
    be subclassed, else the wrapper alone (pydantic's ``ValidationError`` cannot be)."""
    try:
        cls = type("_Dual", (_Wrapped, type(cause)), {})
        cls.__name__ = f"RayTaskError({type(cause).__name__})"
        wrapped = cls.__new__(cls)
    except TypeError:
        cls = type("RayTaskError", (_Wrapped,), {})
        wrapped = cls.__new__(cls)
    _Wrapped.__init__(wrapped, cause)
    return wrapped


def _raising(exc: BaseException) -> Any:
    def handler(_job: JobEnvelope, _attempt: int, _context: Any) -> dict[str, Any]:
        raise exc

    return handler


def _validation_error() -> ValidationError:
    class _Seq(BaseModel):
        seq: int

    try:
        _Seq.model_validate({"seq": "not a number"})
    except ValidationError as exc:
        return exc
    raise AssertionError("unreachable")


def _outcome(exc: BaseException) -> JobFailed:
    worker = WorkerActor("h", _raising(exc), context=None)  # type: ignore[arg-type]
    raw = worker.handle(envelope("job-1").model_dump(), 1)  # must not raise
    parsed = JOB_OUTCOME_ADAPTER.validate_python(raw)
    assert isinstance(parsed, JobFailed)
    return parsed


@pytest.mark.parametrize(
    ("cause", "reason", "retryable"),
    [
        (InvalidPayloadError("transcript seq 1 is not inside part"), "invalid_payload", True),
        (StoreFileReplacedError("om.sqlite was replaced"), "database_missing", True),
        (_validation_error(), "invalid_input", False),
    ],
)
def test_an_error_raised_in_another_actor_is_reported_by_its_cause(
    cause: Exception, reason: str, retryable: bool
) -> None:
    failed = _outcome(_as_ray_delivers(cause))
    assert (failed.reason, failed.retryable, failed.error_class) == (reason, retryable, type(cause).__name__)


def test_a_validation_error_inside_a_worker_is_invalid_input_not_a_crash() -> None:
    failed = _outcome(_validation_error())
    assert (failed.reason, failed.retryable) == ("invalid_input", False)
    assert failed.error_class == "ValidationError"
    cause, fix = explain_failure(failed.reason)
    assert "invalid_input" not in cause and fix  # a category of its own, with a fix


def test_an_exception_class_name_that_is_no_identifier_still_gives_a_failure_value() -> None:
    odd = type("Odd Name<>", (RuntimeError,), {})
    failed = _outcome(odd("x"))
    assert failed.reason == "transient_runtime" and failed.error_class is None
