"""One builder of valid coverage rows for tests, benches and the demo's fixtures (ids computed with
``protocol.identities`` exactly as the Observer computes them)."""

from __future__ import annotations

from protocol.identities import chunk_key, coverage_key, part_digest, source_digest
from protocol.records import CoveragePart


def coverage_part(
    session_id: str,
    start: int,
    end: int,
    *,
    source_kind: str,
    source_text: str,
    part_text: str,
    renderer_version: str,
    observer_schema_version: str,
    covered_at: str,
    part_index: int = 1,
    part_count: int = 1,
) -> CoveragePart:
    """The coverage part ``part_index`` of ``part_count`` of the chunk ``start..end``: its source digest
    is that of one block (``source_kind``, ``source_text``) at ``start``, its part digest that of
    ``part_text``; every index of one chunk shares the chunk key."""
    digest = source_digest(
        [{"run_id": session_id, "seq": start, "kind": source_kind, "rendered_text": source_text}]
    )
    key = chunk_key(session_id, start, end, renderer_version, observer_schema_version, digest, part_count)
    p_digest = part_digest(part_text)
    return CoveragePart(
        coverage_key=coverage_key(key, part_index, p_digest),
        session_id=session_id,
        boundary_key=key,
        source_start_seq=start,
        source_end_seq=end,
        chunk_key=key,
        part_index=part_index,
        part_count=part_count,
        source_digest=digest,
        part_digest=p_digest,
        renderer_version=renderer_version,
        observer_schema_version=observer_schema_version,
        covered_at=covered_at,
    )
