"""Builders of valid records for the persistence tests (ids computed with protocol.identities)."""

from __future__ import annotations

from protocol.identities import (
    content_hash,
    observation_id,
    reflection_id,
)
from protocol.records import CoveragePart, ObservationRecord, ReflectionRecord, SourceRef
from testkit.records import coverage_part

RENDERER = "renderer-v1"
OBSERVER_SCHEMA = "observer-v1"
REFLECTOR_SCHEMA = "reflector-v1"
MODEL = "fake/model"
COVERED_AT = "2026-07-23T10:00:00+00:00"


def make_part(
    session_id: str,
    start: int,
    end: int,
    *,
    part_index: int = 1,
    part_count: int = 1,
    part_text: str = "rendered",
    digest_seed: str = "blocks",
    covered_at: str = COVERED_AT,
) -> CoveragePart:
    """A coverage part of the chunk ``start..end`` (same chunk for every index of one seed)."""
    return coverage_part(
        session_id,
        start,
        end,
        source_kind=digest_seed,
        source_text="t",
        part_text=f"{part_text}-{part_index}",
        renderer_version=RENDERER,
        observer_schema_version=OBSERVER_SCHEMA,
        covered_at=covered_at,
        part_index=part_index,
        part_count=part_count,
    )


def make_observation(
    session_id: str,
    content: str,
    *,
    seq: int = 1,
    timestamp: str = "2026-07-23 10:00",
    relevance: str = "medium",
    content_hash_value: str | None = None,
    end_seq: int | None = None,
) -> ObservationRecord:
    """An observation citing event ``seq`` (range fields are overwritten by the part on commit)."""
    refs = (SourceRef(run_id=session_id, seq=seq),)
    return ObservationRecord.model_validate(
        {
            "observation_id": observation_id(session_id, OBSERVER_SCHEMA, timestamp, content, refs),
            "run_id": session_id,
            "boundary_key": "boundary",
            "source_start_seq": seq,
            "source_end_seq": end_seq if end_seq is not None else seq,
            "source_refs": refs,
            "content": content,
            "content_hash": content_hash_value if content_hash_value is not None else content_hash(content),
            "relevance": relevance,
            "timestamp": timestamp,
            "token_count": len(content) // 2,
            "observer_model": MODEL,
            "observer_schema_version": OBSERVER_SCHEMA,
            "created_at": COVERED_AT,
        }
    )


def make_reflection(session_id: str, content: str, supporting: tuple[str, ...] = ()) -> ReflectionRecord:
    """A reflection with its content-derived id."""
    ordered = tuple(sorted(set(supporting)))
    return ReflectionRecord(
        reflection_id=reflection_id(session_id, REFLECTOR_SCHEMA, content, ordered),
        session_id=session_id,
        observation_set_hash="0" * 64,
        content=content,
        supporting_observation_ids=ordered,
        token_count=len(content) // 2,
        reflector_model=MODEL,
        reflector_schema_version=REFLECTOR_SCHEMA,
        created_at=COVERED_AT,
    )
