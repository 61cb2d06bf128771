"""Record builders shared by the read-side tests."""

from __future__ import annotations

from protocol.records import ActiveReflection, ObservationRecord, ReflectionRecord, Relevance, SourceRef


def hex_id(prefix: str) -> str:
    """A full 64-character id starting with ``prefix`` (padded with zeros)."""
    return prefix + "0" * (64 - len(prefix))


def observation(
    prefix: str,
    content: str = "An observation",
    *,
    timestamp: str = "2026-07-26 12:00",
    relevance: Relevance = "medium",
    session_id: str = "5",
    refs: tuple[tuple[str, int], ...] = (),
) -> ObservationRecord:
    return ObservationRecord(
        observation_id=hex_id(prefix),
        session_id=session_id,
        boundary_key="b" * 64,
        source_start_seq=1,
        source_end_seq=max((seq for _, seq in refs), default=1),
        source_refs=tuple(SourceRef(run_id=ref_run, seq=seq) for ref_run, seq in refs),
        content=content,
        content_hash="c" * 64,
        relevance=relevance,
        timestamp=timestamp,
        token_count=len(content),
        observer_model="local/test",
        observer_schema_version="1",
        created_at="2026-07-26T12:00:00+00:00",
    )


def active_reflection(
    prefix: str, content: str = "A reflection", *, position: int = 0, supports: tuple[str, ...] = ()
) -> ActiveReflection:
    return ActiveReflection(
        reflection_id=hex_id(prefix),
        content=content,
        supporting_observation_ids=supports,
        token_count=len(content),
        position=position,
    )


def reflection(
    prefix: str,
    content: str = "A reflection",
    *,
    created_at: str = "2026-07-26T12:00:00+00:00",
    session_id: str = "5",
    supports: tuple[str, ...] = (),
) -> ReflectionRecord:
    return ReflectionRecord(
        reflection_id=hex_id(prefix),
        session_id=session_id,
        observation_set_hash="d" * 64,
        content=content,
        supporting_observation_ids=supports,
        token_count=len(content),
        reflector_model="local/test",
        reflector_schema_version="1",
        created_at=created_at,
    )
