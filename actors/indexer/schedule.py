"""Scheduling ``semantic_index`` jobs: what observer, reflector and client call after a commit."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from protocol.jobs import JobEnvelope, SemanticIndexJob
from protocol.settings import SemanticSettings


def events_root_of(events_path: str, session_id: str) -> str | None:
    """The events root of a session's ``<root>/<session>/events.jsonl``; ``None`` for another layout."""
    path = Path(events_path)
    if path.name != "events.jsonl" or path.parent.name != session_id:
        return None
    return str(path.parent.parent)


def events_path(root: str, session_id: str) -> Path | None:
    """``<root>/<session>/events.jsonl``, or ``None`` for a session id that is not a plain name."""
    if session_id in ("", ".", "..") or any(mark in session_id for mark in ("/", "\\", "\0")):
        return None
    return Path(root) / session_id / "events.jsonl"


def index_job(
    db_path: str, session_id: str, settings_block: Mapping[str, Any], events_root: str | None = None
) -> JobEnvelope:
    """A ``semantic_index`` job for one database; the id is 32 random hex chars (reference §5.2)."""
    payload = SemanticIndexJob(
        session_id=session_id, db_path=db_path, settings=dict(settings_block), events_root=events_root
    )
    return JobEnvelope(job_id=uuid.uuid4().hex, session_id=session_id, payload=payload)


def schedule_index(
    dispatch: Callable[[JobEnvelope], str] | None,
    semantic: SemanticSettings | None,
    db_path: str,
    session_id: str,
    settings_block: Mapping[str, Any],
    events_root: str | None = None,
) -> str | None:
    """Dispatch an index batch when hybrid retrieval is configured; returns its job id."""
    if dispatch is None or semantic is None:
        return None
    return dispatch(index_job(db_path, session_id, settings_block, events_root))
