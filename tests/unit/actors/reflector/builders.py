"""Record builders and settings shared by the reflector/dropper unit tests."""

from __future__ import annotations

from protocol.records import (
    ActiveReflection,
    GenerationRecord,
    GenerationStatus,
    ObservationRecord,
    Relevance,
)
from protocol.settings import OmSettings

SESSION_ID = "5"
MODEL = "local/test-model"
NOW = "2026-07-26T12:00:00+00:00"


def hex_id(prefix: str) -> str:
    """A full 64-character lowercase hex id starting with ``prefix``."""
    return prefix + "0" * (64 - len(prefix))


def words(text: str) -> int:
    """Deterministic stand-in token counter: one token per whitespace-separated word."""
    return len(text.split())


def settings(
    threshold: int = 10, max_tokens: int = 5, model: str | None = MODEL, schema: str = "1"
) -> OmSettings:
    return OmSettings(
        model=model,
        reflect_after_observation_tokens=threshold,
        observations_max_tokens=max_tokens,
        reflector_schema_version=schema,
    )


def observation(
    prefix: str,
    content: str = "one two three",
    *,
    timestamp: str = "2026-07-26 12:00",
    relevance: Relevance = "medium",
    end_seq: int = 1,
) -> ObservationRecord:
    return ObservationRecord(
        observation_id=hex_id(prefix),
        session_id=SESSION_ID,
        boundary_key="b" * 64,
        source_start_seq=1,
        source_end_seq=end_seq,
        source_refs=(),
        content=content,
        content_hash="c" * 64,
        relevance=relevance,
        timestamp=timestamp,
        token_count=len(content),
        observer_model=MODEL,
        observer_schema_version="1",
        created_at=NOW,
    )


def active_reflection(
    prefix: str, content: str, supports: tuple[str, ...], position: int
) -> ActiveReflection:
    return ActiveReflection(
        reflection_id=hex_id(prefix),
        content=content,
        supporting_observation_ids=supports,
        token_count=words(content),
        position=position,
    )


def generation(status: GenerationStatus, generation_id: str = "9" * 64) -> GenerationRecord:
    return GenerationRecord(
        generation_id=generation_id,
        session_id=SESSION_ID,
        status=status,
        observation_set_hash="a" * 64,
        reflector_model=MODEL,
        reflector_schema_version="1",
        created_at=NOW,
    )
