"""A real temporary memory database, committed observations and ports for the reflector pipeline tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from actors.models.chat import ChatModel, ChatResponse, Messages
from actors.reflector.core import CandidatePool, threshold_check
from actors.reflector.pipeline import ReflectorPorts
from persistence.queries import MemoryReader
from persistence.store import Store
from protocol.errors import StorageError
from protocol.identities import (
    chunk_key,
    content_hash,
    coverage_key,
    observation_id,
    part_digest,
    source_digest,
)
from protocol.jobs import ReflectGenerationJob
from protocol.records import ActivityRecord, CoveragePart, ObservationRecord, Relevance, SourceRef
from protocol.settings import OmSettings

RUN = "run-reflect"
RENDERER = "1"
OBSERVER_SCHEMA = "1"
SCRIPTED_MODEL = "scripted/test-model"
BUILTIN = "builtin/extractive"


def words(text: str) -> int:
    """Deterministic token counter: one token per whitespace-separated word."""
    return len(text.split())


def settings(model: str = SCRIPTED_MODEL, threshold: int = 20, max_tokens: int = 15) -> OmSettings:
    return OmSettings(
        model=model, reflect_after_observation_tokens=threshold, observations_max_tokens=max_tokens
    )


class Clock:
    """UTC ISO-8601 clock that advances ``step_s`` seconds per sample."""

    def __init__(self, start: str = "2026-07-23T12:00:00+00:00", step_s: int = 1) -> None:
        self.moment = datetime.fromisoformat(start)
        self.step = timedelta(seconds=step_s)
        self.samples: list[str] = []

    def __call__(self) -> str:
        value = self.moment.astimezone(UTC).isoformat()
        self.samples.append(value)
        self.moment += self.step
        return value


def commit_observation(
    store: Store,
    seq: int,
    content: str,
    *,
    relevance: Relevance = "medium",
    timestamp: str | None = None,
    run_id: str = RUN,
) -> ObservationRecord:
    """Commit one single-event chunk part ``seq..seq`` holding one observation (like the Observer)."""
    stamp = timestamp or f"2026-07-23 10:{seq:02d}"
    digest = source_digest([{"run_id": run_id, "seq": seq, "kind": "user", "rendered_text": content}])
    key = chunk_key(run_id, seq, seq, RENDERER, OBSERVER_SCHEMA, digest, 1)
    p_digest = part_digest(f"part-{seq}-{content}")
    covered_at = "2026-07-23T11:00:00+00:00"
    part = CoveragePart(
        coverage_key=coverage_key(key, 1, p_digest),
        run_id=run_id,
        boundary_key=key,
        source_start_seq=seq,
        source_end_seq=seq,
        chunk_key=key,
        part_index=1,
        part_count=1,
        source_digest=digest,
        part_digest=p_digest,
        renderer_version=RENDERER,
        observer_schema_version=OBSERVER_SCHEMA,
        covered_at=covered_at,
    )
    refs = (SourceRef(run_id=run_id, seq=seq),)
    record = ObservationRecord(
        observation_id=observation_id(run_id, OBSERVER_SCHEMA, stamp, content, refs),
        run_id=run_id,
        boundary_key=key,
        source_start_seq=seq,
        source_end_seq=seq,
        source_refs=refs,
        content=content,
        content_hash=content_hash(content),
        relevance=relevance,
        timestamp=stamp,
        token_count=words(content),
        observer_model=SCRIPTED_MODEL,
        observer_schema_version=OBSERVER_SCHEMA,
        created_at=covered_at,
    )
    store.commit_observer_part(part, [record])
    return record


def threshold_job(reader: MemoryReader, om_settings: OmSettings, run_id: str = RUN) -> ReflectGenerationJob:
    """The job the threshold check would dispatch for the session's live active set."""
    candidate = reader.active_candidate_set(run_id)
    pool = CandidatePool.from_observations(run_id, candidate.observations, words)
    prior = reader.active_generation(run_id)
    payload = threshold_check(pool, prior.generation_id if prior else None, False, om_settings)
    assert payload is not None, "the session is not over the threshold"
    return payload.to_job(reader.db_path)


def ports(
    reader: MemoryReader,
    store: Any,
    model: ChatModel,
    *,
    clock: Callable[[], str] | None = None,
    resolved: list[str] | None = None,
) -> ReflectorPorts:
    def resolve(name: str) -> tuple[ChatModel, int]:
        if resolved is not None:
            resolved.append(name)
        return model, 32768

    return ReflectorPorts(
        memory=reader, store=store, resolve_model=resolve, count_tokens=words, now_utc=clock or Clock()
    )


def no_model(_name: str) -> tuple[ChatModel, int]:
    raise AssertionError("no model may be resolved on this path")


@dataclass
class HookedModel:
    """A ChatModel that runs ``hooks[i]`` after its i-th request (0-based) and records what it saw."""

    inner: ChatModel
    hooks: Mapping[int, Callable[[], object]] = field(default_factory=dict)
    calls: int = 0
    tools_seen: list[list[str]] = field(default_factory=list)

    def complete(
        self,
        model_name: str,
        messages: Messages,
        tools: Sequence[Mapping[str, Any]],
        timeout_s: float,
        *,
        thinking_off: bool = False,
    ) -> ChatResponse:
        index = self.calls
        self.calls += 1
        self.tools_seen.append([str(spec["function"]["name"]) for spec in tools])
        response = self.inner.complete(model_name, messages, tools, timeout_s, thinking_off=thinking_off)
        hook = self.hooks.get(index)
        if hook is not None:
            hook()
        return response


class FlakyStatusStore:
    """A Store whose activity writes and clears always fail (every other write goes through)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.activity_attempts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def upsert_activity(self, activity: ActivityRecord) -> None:
        self.activity_attempts += 1
        raise StorageError("activity table is locked")

    def clear_activity(self, run_id: str, job_id: str) -> bool:
        self.activity_attempts += 1
        raise StorageError("activity table is locked")


class ScriptedStore:
    """A Store wrapper with overridable methods for claim/promotion failure paths."""

    def __init__(self, store: Store, **overrides: Callable[..., Any]) -> None:
        self._store = store
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        if name in self._overrides:
            return self._overrides[name]
        return getattr(self._store, name)
