"""Job handlers for benchmarks and runtime tests: they exercise the queue, not memory.

Each execution appends one JSON line to a ledger file (``O_APPEND`` writes of one short line are
atomic on local filesystems), so a test or benchmark can count how often each job's handler ran
and in what order jobs started. Ledger lines carry ids and counters only.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Any

from protocol.jobs import (
    OBSERVE_BOUNDARY_HANDLER,
    REFLECT_GENERATION_HANDLER,
    SEMANTIC_INDEX_HANDLER,
    JobEnvelope,
)

HANDLER_IDS = (OBSERVE_BOUNDARY_HANDLER, REFLECT_GENERATION_HANDLER, SEMANTIC_INDEX_HANDLER)
"""Every stable handler id of the runtime."""

LEDGER_ENV = "OMRAY_BENCH_LEDGER"
"""Environment variable naming the ledger file (set on the worker actors' runtime env)."""


def _ledger_path(envelope: JobEnvelope) -> str | None:
    return os.environ.get(LEDGER_ENV)


def _append(envelope: JobEnvelope, attempt: int, event: str) -> None:
    path = _ledger_path(envelope)
    if not path:
        return
    line = json.dumps(
        {"job_id": envelope.job_id, "attempt": attempt, "event": event, "pid": os.getpid(), "t": time.time()}
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def noop(envelope: JobEnvelope, attempt: int, context: Any) -> Mapping[str, Any]:
    """Record the start and return at once."""
    _append(envelope, attempt, "start")
    return {}


def slow(envelope: JobEnvelope, attempt: int, context: Any) -> Mapping[str, Any]:
    """Record the start, hold the worker for ``OMRAY_BENCH_SLOW_S`` seconds (default 0.2), record the end."""
    _append(envelope, attempt, "start")
    time.sleep(float(os.environ.get("OMRAY_BENCH_SLOW_S", "0.2")))
    _append(envelope, attempt, "end")
    return {}


GATE_ENV = "OMRAY_BENCH_GATE"
"""Environment variable naming the file whose existence lets :func:`gated` jobs finish."""


def gated(envelope: JobEnvelope, attempt: int, context: Any) -> Mapping[str, Any]:
    """Record the start, hold the worker until the file named by ``OMRAY_BENCH_GATE`` exists (at
    most 120 s), record the end: a load that stays put while a test looks at it."""
    _append(envelope, attempt, "start")
    gate = os.environ.get(GATE_ENV, "")
    deadline = time.monotonic() + 120.0
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)
    _append(envelope, attempt, "end")
    return {}


class AlwaysFailsError(RuntimeError):
    """Raised by :func:`always_fail` on every attempt."""


def always_fail(envelope: JobEnvelope, attempt: int, context: Any) -> Mapping[str, Any]:
    """Record the start and fail every attempt."""
    _append(envelope, attempt, "start")
    raise AlwaysFailsError("this handler always fails")


def read_ledger(path: str) -> list[dict[str, Any]]:
    """All ledger lines, in write order."""
    try:
        with open(path, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except FileNotFoundError:
        return []


def for_every_role(handler_path: str) -> dict[str, str]:
    """``handler_paths`` that run ``handler_path`` in the observer, reflector and indexer alike."""
    return {hid: handler_path for hid in HANDLER_IDS}
