"""Durable token usage of every model tool loop, for the cost report (``omray_token_usage``).

The write is best effort, like the activity row: a failed usage write is logged (ids and the error
class only) and never fails the job whose tokens it counts. Rows carry counts and ids, never text.
"""

from __future__ import annotations

import logging
from typing import Any

from actors.models.chat import ToolLoopResult
from protocol.records import TokenUsageRecord, UsageJobKind

logger = logging.getLogger("omray.usage")


def record_loop_usage(
    store: Any,
    loop: ToolLoopResult,
    *,
    usage_id: str,
    run_id: str,
    job_kind: UsageJobKind,
    model: str,
    recorded_at: str,
) -> None:
    """Store what ``loop`` spent through ``store.record_token_usage``; nothing when it made no request."""
    if loop.rounds == 0:
        return
    record = TokenUsageRecord(
        usage_id=usage_id,
        run_id=run_id,
        job_kind=job_kind,
        model=model,
        requests=loop.rounds,
        prompt_tokens=loop.prompt_tokens,
        cached_prompt_tokens=min(loop.cached_prompt_tokens, loop.prompt_tokens),
        completion_tokens=loop.completion_tokens,
        recorded_at=recorded_at,
    )
    try:
        store.record_token_usage(record)
    except Exception as exc:  # cost reporting must never fail the work it reports on
        logger.warning(
            "token usage write failed",
            extra={"run_id": run_id, "job_kind": job_kind, "error_class": type(exc).__name__},
        )
