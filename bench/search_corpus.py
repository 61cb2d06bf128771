"""The memory corpus of the search benchmarks: observation texts and a memory database built from them.

Texts come from the real transcripts in ``../shared/data/transcripts`` (user and assistant sentences
and file paths of the pi-mono and claude-code sessions) when that folder exists, else from a small
built-in vocabulary. The database is written through :class:`persistence.writers.store.Store` (observer
parts, plus one promoted generation per session so projections have reflections and a retained
pool). ``omray bench search`` (:mod:`bench.search_bench`), the hybrid, UI and hook benchmarks build
their corpora here.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench.shared_data import shared_data_dir
from persistence.writers.store import Store
from protocol.identities import (
    content_hash,
    observation_id,
    observation_set_hash,
    reflection_id,
    source_refs_json,
    threshold_generation_id,
)
from protocol.records import CoveragePart, ObservationRecord, ReflectionRecord, Relevance, SourceRef
from testkit.records import coverage_part

TRANSCRIPTS_DIR = shared_data_dir() / "transcripts"
"""Real agent transcripts (third-party data; optional)."""

OBSERVATIONS_PER_SESSION = 1000
"""Corpus sessions hold this many observations each (the last session may hold fewer)."""

OBSERVATIONS_PER_PART = 250
"""Observations committed per observer part (one transaction)."""

ACTIVE_REFLECTIONS = 20
"""Reflections in the active generation of the large active-memory session."""

_RENDERER = "bench-renderer-v1"
_OBSERVER_SCHEMA = "bench-observer-v1"
_REFLECTOR_SCHEMA = "bench-reflector-v1"
_MODEL = "bench/model"
_PATH = re.compile(r"(?:[\w.-]+/)+[\w.-]+\.(?:py|ts|tsx|js|json|md|php|yaml|toml|sh|css)\b")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")

_FALLBACK_SENTENCES = (
    "User asked to port the selector component to the new theme system.",
    "Assistant ran the test suite and 3 tests failed with a timeout error.",
    "User prefers hyphenated command names for the memory tools.",
    "Assistant fixed the off-by-one error in the pagination helper.",
    "Build failed because the lockfile was out of date; regenerating it fixed the build.",
    "User wants compaction to never wait for a model call.",
    "Assistant renamed MapToolArguments to ToolArgumentMap across the codebase.",
    "Deployment to staging succeeded after the migration 2510 was applied.",
)
_FALLBACK_PATHS = (
    "src/theme/theme.ts",
    "packages/coding-agent/docs/theme.md",
    "actors/read/service.py",
    "persistence/search/reader.py",
    "tests/unit/read_service/test_search.py",
)


# ------------------------------------------------------------------------------------- corpus text


def _texts_of(content: object) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for item in content:
            if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
                yield item["text"]


def _transcript_texts(directory: Path) -> Iterator[tuple[str, str]]:
    """``(role, text)`` of user and assistant messages in the pi-mono and claude-code JSONL files."""
    files = sorted((directory / "pi-mono").glob("*.jsonl")) + sorted(
        (directory / "claude-code").rglob("*.jsonl")
    )
    for file in files:
        with file.open(encoding="utf-8") as handle:
            for line in handle:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                message = entry.get("message") if isinstance(entry, dict) else None
                if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
                    continue
                for text in _texts_of(message.get("content")):
                    yield str(message["role"]), text


def corpus_material(directory: Path = TRANSCRIPTS_DIR) -> tuple[list[str], list[str], str]:
    """Observation-like sentences, file paths, and where they came from (``transcripts``/``fixtures``)."""
    sentences: list[str] = []
    paths: set[str] = set()
    if directory.is_dir():
        for role, text in _transcript_texts(directory):
            paths.update(_PATH.findall(text))
            for raw in _SENTENCE_SPLIT.split(text):
                sentence = " ".join(raw.split())
                if 24 <= len(sentence) <= 280 and not sentence.startswith(("<", "{", "```")):
                    sentences.append(f"{'User' if role == 'user' else 'Assistant'}: {sentence}")
    if len(sentences) < 50:
        return list(_FALLBACK_SENTENCES), list(_FALLBACK_PATHS), "fixtures"
    return sentences, sorted(paths) or list(_FALLBACK_PATHS), "transcripts"


# ------------------------------------------------------------------------------------- corpus build


def corpus_timestamp(minute: int) -> str:
    """A corpus memory's ``YYYY-MM-DD HH:MM`` time, ``minute`` minutes into 2026 (28-day months)."""
    day, rest = divmod(minute, 24 * 60)
    month, day = divmod(day, 28)
    return f"2026-{1 + month % 12:02d}-{1 + day:02d} {rest // 60:02d}:{rest % 60:02d}"


def corpus_observation(
    session_id: str, seq: int, content: str, timestamp: str, relevance: Relevance = "medium"
) -> ObservationRecord:
    """One corpus observation citing event ``seq`` of ``session_id``."""
    refs = (SourceRef(run_id=session_id, seq=seq),)
    return ObservationRecord(
        observation_id=observation_id(session_id, _OBSERVER_SCHEMA, timestamp, content, refs),
        session_id=session_id,
        boundary_key="pending",
        source_start_seq=seq,
        source_end_seq=seq,
        source_refs=refs,
        content=content,
        content_hash=content_hash(content),
        relevance=relevance,
        timestamp=timestamp,
        token_count=max(1, len(content) // 4),
        observer_model=_MODEL,
        observer_schema_version=_OBSERVER_SCHEMA,
        created_at=timestamp.replace(" ", "T") + ":00+00:00",
    )


def corpus_part(session_id: str, start: int, end: int, covered_at: str) -> CoveragePart:
    """The coverage row committed with a batch of corpus observations of ``start..end``."""
    return coverage_part(
        session_id,
        start,
        end,
        source_kind="bench",
        source_text=str(end),
        part_text=f"{session_id}:{start}:{end}",
        renderer_version=_RENDERER,
        observer_schema_version=_OBSERVER_SCHEMA,
        covered_at=covered_at,
    )


def _content(sentences: Sequence[str], paths: Sequence[str], rng: random.Random) -> str:
    sentence = rng.choice(sentences)
    roll = rng.random()
    if roll < 0.25:
        return f"{sentence} (touched {rng.choice(paths)})"
    if roll < 0.35:
        return f"{sentence} [ref {rng.randint(1000, 99999)}]"
    return sentence


def _reflections(
    session_id: str, set_hash: str, facts: Sequence[tuple[str, tuple[str, ...]]], now: str
) -> list[ReflectionRecord]:
    """Reflection rows of ``(content, supporting ids)`` facts, one per distinct id, in order."""
    rows = [
        ReflectionRecord(
            reflection_id=reflection_id(session_id, _REFLECTOR_SCHEMA, content, support),
            session_id=session_id,
            observation_set_hash=set_hash,
            content=content,
            supporting_observation_ids=support,
            token_count=max(1, len(content) // 4),
            reflector_model=_MODEL,
            reflector_schema_version=_REFLECTOR_SCHEMA,
            created_at=now,
        )
        for content, support in facts
    ]
    return list({row.reflection_id: row for row in rows}.values())


def _promote(
    store: Store, session_id: str, observations: Sequence[ObservationRecord], rng: random.Random
) -> None:
    """One generation covering the first 80% of the session, retaining 50 of them, with 5 reflections."""
    covered = observations[: int(len(observations) * 0.8)]
    if not covered:
        return
    ids = sorted(o.observation_id for o in covered)
    set_hash = observation_set_hash(session_id, ids)
    generation = threshold_generation_id(session_id, None, set_hash, _MODEL, _REFLECTOR_SCHEMA)
    end_seq = max(o.source_end_seq for o in covered)
    now = covered[-1].created_at
    store.claim_generation(generation, session_id, set_hash, _MODEL, _REFLECTOR_SCHEMA, 1, end_seq, now)
    facts = []
    for index in range(5):
        content = f"Durable fact {index}: {rng.choice(covered).content}"
        facts.append((content, tuple(sorted({rng.choice(covered).observation_id for _ in range(3)}))))
    unique = _reflections(session_id, set_hash, facts, now)
    retained = [o.observation_id for o in covered[-50:]]
    store.promote_generation(generation, session_id, unique, retained, now)


_OBSERVATION_COLUMNS = (
    "observation_id, run_id, boundary_key, source_start_seq, source_end_seq, source_refs_json, content, "
    "content_hash, relevance, timestamp, token_count, observer_model, observer_schema_version, created_at"
)


def bulk_commit_parts(
    db_path: Path, parts: Sequence[tuple[CoveragePart, Sequence[ObservationRecord]]]
) -> None:
    """Write observer parts straight into a database the Store created (the bench's bulk loader).

    The same rows ``Store.commit_observer_part`` writes (observations with their part's boundary,
    range and covered time; one coverage row per part), in one transaction, with ``executemany``:
    building a 500,000-row corpus through the Store's per-row path would take most of an hour on
    two cores. The trigram index triggers fire as for any insert.
    """
    connection = sqlite3.connect(db_path, isolation_level=None)
    try:
        connection.execute("PRAGMA busy_timeout = 5000")
        connection.execute("BEGIN IMMEDIATE")
        for part, observations in parts:
            connection.executemany(
                f"INSERT INTO om_observation ({_OBSERVATION_COLUMNS}) VALUES ({', '.join('?' * 14)})",
                [
                    (
                        o.observation_id,
                        o.session_id,
                        part.boundary_key,
                        part.source_start_seq,
                        part.source_end_seq,
                        source_refs_json(o.source_refs),
                        o.content,
                        o.content_hash,
                        o.relevance,
                        o.timestamp,
                        o.token_count,
                        o.observer_model,
                        o.observer_schema_version,
                        part.covered_at,
                    )
                    for o in observations
                ],
            )
            values = {
                **part.model_dump(by_alias=True, exclude={"observation_count"}),
                "observation_count": len(observations),
            }
            connection.execute(
                f"INSERT INTO om_coverage ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                tuple(values.values()),
            )
        connection.execute("COMMIT")
    finally:
        connection.close()


def build_corpus(db_path: Path, size: int, seed: int) -> tuple[list[str], list[str], list[str], str]:
    """Write ``size`` observations (and reflections) to ``db_path``: sessions, texts, paths, source."""
    rng = random.Random(seed)
    sentences, paths, source = corpus_material()
    sessions: list[str] = []
    Store(db_path).close()  # creates and migrates the file
    remaining, session_index, minute = size, 0, 0
    while remaining > 0:
        session_id = f"bench-session-{session_index:04d}"
        count = min(OBSERVATIONS_PER_SESSION, remaining)
        observations: list[ObservationRecord] = []
        parts: list[tuple[CoveragePart, Sequence[ObservationRecord]]] = []
        for start in range(1, count + 1, OBSERVATIONS_PER_PART):
            batch = []
            for seq in range(start, min(count, start + OBSERVATIONS_PER_PART - 1) + 1):
                minute += rng.randint(1, 7)
                batch.append(
                    corpus_observation(
                        session_id,
                        seq,
                        _content(sentences, paths, rng),
                        corpus_timestamp(minute),
                        rng.choice(("low", "medium", "medium", "high", "critical")),
                    )
                )
            parts.append(
                (corpus_part(session_id, start, batch[-1].source_end_seq, batch[-1].created_at), batch)
            )
            observations.extend(batch)
        bulk_commit_parts(db_path, parts)
        with Store(db_path) as store:
            _promote(store, session_id, observations, rng)
        sessions.append(session_id)
        remaining -= count
        session_index += 1
    return sessions, sentences, paths, source


ACTIVE_SESSION = "bench-active-session"
"""The session of the large active-memory projection corpus."""


def build_active_session(db_path: Path, size: int, seed: int) -> None:
    """One session whose active memory holds ``size`` observations and ``ACTIVE_REFLECTIONS`` reflections.

    Its active generation covers nothing yet (watermark 0), so every observation stays in the pool.
    """
    rng = random.Random(seed + 2)
    sentences, paths, _ = corpus_material()
    Store(db_path).close()
    observations = []
    for seq in range(1, size + 1):
        observations.append(
            corpus_observation(
                ACTIVE_SESSION,
                seq,
                _content(sentences, paths, rng),
                corpus_timestamp(seq * 3),
                rng.choice(("low", "medium", "high", "critical")),
            )
        )
    parts = [
        (corpus_part(ACTIVE_SESSION, start, min(size, start + 999), observations[-1].created_at), chunk)
        for start, chunk in ((s + 1, observations[s : s + 1000]) for s in range(0, size, 1000))
    ]
    bulk_commit_parts(db_path, parts)
    now = observations[-1].created_at
    set_hash = observation_set_hash(ACTIVE_SESSION, [])
    generation = threshold_generation_id(ACTIVE_SESSION, None, set_hash, _MODEL, _REFLECTOR_SCHEMA)
    facts = [
        (
            f"Durable fact {index}: {rng.choice(observations).content}",
            (observations[index % size].observation_id,),
        )
        for index in range(ACTIVE_REFLECTIONS)
    ]
    unique = _reflections(ACTIVE_SESSION, set_hash, facts, now)
    with Store(db_path) as store:
        store.claim_generation(generation, ACTIVE_SESSION, set_hash, _MODEL, _REFLECTOR_SCHEMA, 1, 0, now)
        store.promote_generation(generation, ACTIVE_SESSION, unique, [], now)
