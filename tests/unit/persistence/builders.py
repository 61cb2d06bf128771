"""Builders of valid records for the persistence tests (ids computed with protocol.identities)."""

from __future__ import annotations

from protocol.identities import (
    chunk_key,
    content_hash,
    coverage_key,
    observation_id,
    part_digest,
    reflection_id,
    source_digest,
)
from protocol.records import CoveragePart, ObservationRecord, ReflectionRecord, SourceRef

RENDERER = "renderer-v1"
OBSERVER_SCHEMA = "observer-v1"
REFLECTOR_SCHEMA = "reflector-v1"
MODEL = "fake/model"
COVERED_AT = "2026-07-23T10:00:00+00:00"


def make_part(
    run_id: str,
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
    digest = source_digest([{"run_id": run_id, "seq": start, "kind": digest_seed, "rendered_text": "t"}])
    key = chunk_key(run_id, start, end, RENDERER, OBSERVER_SCHEMA, digest, part_count)
    p_digest = part_digest(f"{part_text}-{part_index}")
    return CoveragePart(
        coverage_key=coverage_key(key, part_index, p_digest),
        run_id=run_id,
        boundary_key=key,
        source_start_seq=start,
        source_end_seq=end,
        chunk_key=key,
        part_index=part_index,
        part_count=part_count,
        source_digest=digest,
        part_digest=p_digest,
        renderer_version=RENDERER,
        observer_schema_version=OBSERVER_SCHEMA,
        covered_at=covered_at,
    )


def make_observation(
    run_id: str,
    content: str,
    *,
    seq: int = 1,
    timestamp: str = "2026-07-23 10:00",
    relevance: str = "medium",
    content_hash_value: str | None = None,
    end_seq: int | None = None,
) -> ObservationRecord:
    """An observation citing event ``seq`` (range fields are overwritten by the part on commit)."""
    refs = (SourceRef(run_id=run_id, seq=seq),)
    return ObservationRecord.model_validate(
        {
            "observation_id": observation_id(run_id, OBSERVER_SCHEMA, timestamp, content, refs),
            "run_id": run_id,
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


def make_reflection(run_id: str, content: str, supporting: tuple[str, ...] = ()) -> ReflectionRecord:
    """A reflection with its content-derived id."""
    ordered = tuple(sorted(set(supporting)))
    return ReflectionRecord(
        reflection_id=reflection_id(run_id, REFLECTOR_SCHEMA, content, ordered),
        run_id=run_id,
        observation_set_hash="0" * 64,
        content=content,
        supporting_observation_ids=ordered,
        token_count=len(content) // 2,
        reflector_model=MODEL,
        reflector_schema_version=REFLECTOR_SCHEMA,
        created_at=COVERED_AT,
    )
