"""A real temporary memory database, committed observations and ports for the reflector pipeline tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from actors.models.chat import ChatModel, ChatRequest, ChatResponse
from actors.reflector.core import CandidatePool, threshold_check
from actors.reflector.pipeline import ReflectorPorts
from persistence.reads.memory_reader import MemoryReader
from persistence.writers.store import Store
from protocol.errors import StorageError
from protocol.identities import (
    content_hash,
    observation_id,
)
from protocol.jobs import ReflectGenerationJob
from protocol.records import ActivityRecord, ObservationRecord, Relevance, SourceRef
from protocol.settings import OmSettings
from testkit.records import coverage_part

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
    session_id: str = RUN,
) -> ObservationRecord:
    """Commit one single-event chunk part ``seq..seq`` holding one observation (like the Observer)."""
    stamp = timestamp or f"2026-07-23 10:{seq:02d}"
    covered_at = "2026-07-23T11:00:00+00:00"
    part = coverage_part(
        session_id,
        seq,
        seq,
        source_kind="user",
        source_text=content,
        part_text=f"part-{seq}-{content}",
        renderer_version=RENDERER,
        observer_schema_version=OBSERVER_SCHEMA,
        covered_at=covered_at,
    )
    key = part.chunk_key
    refs = (SourceRef(run_id=session_id, seq=seq),)
    record = ObservationRecord(
        observation_id=observation_id(session_id, OBSERVER_SCHEMA, stamp, content, refs),
        session_id=session_id,
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


def threshold_job(
    reader: MemoryReader, om_settings: OmSettings, session_id: str = RUN
) -> ReflectGenerationJob:
    """The job the threshold check would dispatch for the session's live active set."""
    candidate = reader.active_candidate_set(session_id)
    pool = CandidatePool.from_observations(session_id, candidate.observations, words)
    prior = reader.active_generation(session_id)
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

    def complete(self, request: ChatRequest) -> ChatResponse:
        index = self.calls
        self.calls += 1
        self.tools_seen.append([str(spec["function"]["name"]) for spec in request.tools])
        response = self.inner.complete(request)
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

    def clear_activity(self, session_id: str, job_id: str) -> bool:
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
