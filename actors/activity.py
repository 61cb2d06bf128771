"""Status writes of a worker: a session's activity row, set while a job works on it and cleared after.

Status never hurts work (DESIGN invariant 7): a failed write is logged (ids and the error's class only,
never text) and ignored, so the job's outcome is the same whether the row was written or not.
"""

from __future__ import annotations

import logging

from persistence.writers.store import Store
from protocol.records import ActivityRecord


def set_activity(store: Store, activity: ActivityRecord, log: logging.Logger) -> None:
    """Write ``activity`` as its session's current stage; a failure is logged and ignored."""
    try:
        store.upsert_activity(activity)
    except Exception as exc:
        log.warning(
            "activity write failed",
            extra={
                "session_id": activity.session_id,
                "stage": activity.stage,
                "error_class": type(exc).__name__,
            },
        )


def clear_activity(store: Store, session_id: str, job_id: str, log: logging.Logger) -> None:
    """Remove the activity row ``job_id`` wrote for ``session_id``; a failure is logged and ignored."""
    try:
        store.clear_activity(session_id, job_id)
    except Exception as exc:
        log.warning(
            "activity clear failed", extra={"session_id": session_id, "error_class": type(exc).__name__}
        )
