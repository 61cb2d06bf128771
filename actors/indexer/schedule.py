"""Scheduling ``semantic_index`` jobs: what observer, reflector and client call after a commit."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from protocol.jobs import JobEnvelope, SemanticIndexJob
from protocol.settings import SemanticSettings


def index_job(db_path: str, run_id: str, settings_block: Mapping[str, Any]) -> JobEnvelope:
    """A ``semantic_index`` job for one database; the id is 32 random hex chars (reference §5.2)."""
    payload = SemanticIndexJob(run_id=run_id, db_path=db_path, settings=dict(settings_block))
    return JobEnvelope(job_id=uuid.uuid4().hex, correlation_id=run_id, payload=payload)


def schedule_index(
    dispatch: Callable[[JobEnvelope], str] | None,
    semantic: SemanticSettings | None,
    db_path: str,
    run_id: str,
    settings_block: Mapping[str, Any],
) -> str | None:
    """Dispatch an index batch when hybrid retrieval is configured; returns its job id."""
    if dispatch is None or semantic is None:
        return None
    return dispatch(index_job(db_path, run_id, settings_block))
