"""Every content-derived identity of reference §5.2, with source-ref normalization (§5.3).

Key order inside each hashed object is part of the formula: do not reorder.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from protocol.canonical import canonical_hash, canonical_json, php_trim, sha256_hex
from protocol.records import SourceRef

_TIMESTAMP_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}\Z")


def normalize_source_refs(refs: Iterable[SourceRef | Mapping[str, Any]]) -> list[SourceRef]:
    """Drop refs with an empty run id or seq < 1, dedupe, sort by run id (byte order) then seq."""
    unique: dict[tuple[str, int], SourceRef] = {}
    for ref in refs:
        if isinstance(ref, SourceRef):
            session_id, seq = ref.run_id, ref.seq
        else:
            session_id = str(ref.get("run_id") or "")
            raw_seq = ref.get("seq")
            if isinstance(raw_seq, bool) or not isinstance(raw_seq, int | float | str):
                continue
            try:
                seq = int(raw_seq)
            except ValueError:
                continue
        if session_id == "" or seq < 1:
            continue
        unique[(session_id, seq)] = SourceRef(run_id=session_id, seq=seq)
    return [unique[key] for key in sorted(unique, key=lambda k: (k[0].encode("utf-8"), k[1]))]


def source_refs_payload(refs: Sequence[SourceRef]) -> list[dict[str, Any]]:
    """Refs as plain ``{"run_id", "seq"}`` objects, in that key order."""
    return [{"run_id": ref.run_id, "seq": ref.seq} for ref in refs]


def source_refs_json(refs: Sequence[SourceRef]) -> str:
    """The stored ``source_refs_json`` column value: compact canonical JSON of normalized refs."""
    return canonical_json(source_refs_payload(normalize_source_refs(refs)))


def content_hash(content: str) -> str:
    """``sha256(content)``."""
    return sha256_hex(content)


def observation_id(
    session_id: str,
    observer_schema_version: str,
    timestamp: str,
    content: str,
    source_refs: Iterable[SourceRef | Mapping[str, Any]],
) -> str:
    """Id of an observation (``observation-v1``); content is trimmed and refs normalized first."""
    return canonical_hash(
        {
            "type": "observation-v1",
            "run_id": session_id,
            "observer_schema_version": observer_schema_version,
            "timestamp": timestamp,
            "content": php_trim(content),
            "source_refs": source_refs_payload(normalize_source_refs(source_refs)),
        }
    )


def _sorted_unique(ids: Iterable[str]) -> list[str]:
    return sorted(set(ids), key=lambda s: s.encode("utf-8"))


def observation_set_hash(session_id: str, observation_ids: Iterable[str]) -> str:
    """Hash of a set of observation ids (``observation-set-v1``); ids deduped and sorted."""
    return canonical_hash(
        {
            "type": "observation-set-v1",
            "run_id": session_id,
            "observation_ids": _sorted_unique(observation_ids),
        }
    )


def reflection_id(
    session_id: str, reflector_schema_version: str, content: str, supporting_observation_ids: Iterable[str]
) -> str:
    """Id of a reflection (``reflection-v1``); supporting ids deduped and sorted."""
    return canonical_hash(
        {
            "type": "reflection-v1",
            "run_id": session_id,
            "reflector_schema_version": reflector_schema_version,
            "content": content,
            "supporting_observation_ids": _sorted_unique(supporting_observation_ids),
        }
    )


def source_digest(blocks: Iterable[Mapping[str, Any]]) -> str:
    """Digest over a chunk's source blocks, each ``{run_id, seq, kind, rendered_text}`` in block order."""
    return canonical_hash(
        [
            {
                "run_id": block["run_id"],
                "seq": int(block["seq"]),
                "kind": block["kind"],
                "rendered_text": block["rendered_text"],
            }
            for block in blocks
        ]
    )


def chunk_key(
    session_id: str,
    source_start_seq: int,
    source_end_seq: int,
    renderer_version: str,
    observer_schema_version: str,
    source_digest_value: str,
    part_count: int,
) -> str:
    """Identity of one logical observer chunk (``observer-chunk-v1``)."""
    return canonical_hash(
        {
            "type": "observer-chunk-v1",
            "run_id": session_id,
            "source_start_seq": source_start_seq,
            "source_end_seq": source_end_seq,
            "renderer_version": renderer_version,
            "observer_schema_version": observer_schema_version,
            "source_digest": source_digest_value,
            "part_count": part_count,
        }
    )


def part_digest(part_text: str) -> str:
    """``sha256`` of the raw UTF-8 bytes of a part's rendered text (not JSON)."""
    return sha256_hex(part_text)


def coverage_key(chunk_key_value: str, part_index: int, part_digest_value: str) -> str:
    """Identity of one chunk part (``observer-chunk-part-v1``)."""
    return canonical_hash(
        {
            "type": "observer-chunk-part-v1",
            "chunk_key": chunk_key_value,
            "part_index": part_index,
            "part_digest": part_digest_value,
        }
    )


def threshold_generation_id(
    session_id: str,
    prior_active_generation_id: str | None,
    observation_set_hash_value: str,
    reflector_model: str,
    reflector_schema_version: str,
) -> str:
    """Id of a threshold generation (``threshold-generation-v1``); also the reflect job id."""
    return canonical_hash(
        {
            "type": "threshold-generation-v1",
            "run_id": session_id,
            "prior_active_generation_id": prior_active_generation_id,
            "observation_set_hash": observation_set_hash_value,
            "reflector_model": reflector_model,
            "reflector_schema_version": reflector_schema_version,
        }
    )


def observe_job_id(
    session_id: str,
    terminal_end_seq: int,
    terminal_status: str,
    renderer_version: str,
    observer_schema_version: str,
) -> str:
    """Deterministic observe job id: sha256 of the five values joined with ``|`` (plain string)."""
    return sha256_hex(
        "|".join(
            [session_id, str(terminal_end_seq), terminal_status, renderer_version, observer_schema_version]
        )
    )


def signalled_observe_job_id(base_job_id: str, signal: str) -> str:
    """Id of an observe job sent for another reason than a turn end (``checkpoint``, ``session_end``,
    ``idle_flush``): distinct from the turn-end job of the same seq, so neither absorbs the other."""
    return sha256_hex(canonical_json(["observe-signal-v1", base_job_id, signal]))


def semantic_chunk_id(kind: str, memory_id: str, position: int, chunk_text: str) -> str:
    """Id of one semantic index chunk: 32 hex chars; the separator is the two characters ``\\0``."""
    parent_key = f"{kind}:{memory_id}"
    return sha256_hex(parent_key + "\\0" + str(position) + "\\0" + chunk_text)[:32]


def transcript_event_id(session_id: str, seq: int) -> str:
    """Id of one transcript event (64 hex): ``recall`` takes it like a memory id."""
    return sha256_hex(canonical_json(["omray-transcript-event-v1", session_id, seq]))


def is_observation_timestamp(value: str) -> bool:
    """True when ``value`` has the ``YYYY-MM-DD HH:MM`` form (format only, like the original)."""
    return bool(_TIMESTAMP_RE.match(value))
