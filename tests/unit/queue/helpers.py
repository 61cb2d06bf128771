"""Shared builders for the queue unit tests."""

from __future__ import annotations

from protocol.jobs import JobEnvelope, SemanticIndexJob


def envelope(job_id: str, run_id: str = "session-1") -> JobEnvelope:
    """A small valid job envelope (semantic index job) with the given ids."""
    return JobEnvelope(
        job_id=job_id,
        correlation_id=run_id,
        payload=SemanticIndexJob(run_id=run_id, db_path="/data/om.sqlite"),
    )
