"""Exact ``memory_search`` benchmark: omray's planned search against the plain LIKE scan.

For each corpus size it builds a temporary memory database through :class:`persistence.store.Store`
(observer parts, plus one promoted generation per session so projections have reflections and a
retained pool), then measures, over the same query set (common and rare substrings, 1-2 character
queries, ``%``/``_`` literals, mixed case, date filters):

* ``exact_*``: :func:`actors.read.service.exact_search` with the default ``auto`` strategy (per
  table: trigram pre-filter for rare phrases, a walk of the result-order index for common ones and
  narrow date ranges, the scan otherwise; see ``persistence.search_queries``);
* ``like_*``: the same call forced to the plain escaped ``LIKE`` scan (the original's method);
* ``identical``: every query's answer was the same for both;
* ``by_class``: p50 of both per query class (``common``, ``rare``, ``short``, ``dated``);
* ``observation_plans``: how often ``auto`` chose each plan on ``om_observation``;
* ``projection_*``: :func:`actors.read.service.project` for the corpus's sessions.

Observation texts come from the real transcripts in ``../shared/data/transcripts`` (user and
assistant sentences and file paths of the pi-mono and claude-code sessions) when that folder
exists, else from a small built-in vocabulary. Figures are printed, never asserted.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from actors.read.projector import render_active_memory
from actors.read.search_arguments import validate_search_arguments
from actors.read.service import exact_search, project, reader_for
from bench.measure import percentile
from bench.shared_data import shared_data_dir
from persistence.search_queries import SearchReader
from persistence.search_request import SearchRequest
from persistence.store import Store
from protocol.identities import (
    chunk_key,
    content_hash,
    coverage_key,
    observation_id,
    observation_set_hash,
    part_digest,
    reflection_id,
    source_digest,
    source_refs_json,
    threshold_generation_id,
)
from protocol.records import CoveragePart, ObservationRecord, ReflectionRecord, Relevance, SourceRef

TRANSCRIPTS_DIR = shared_data_dir() / "transcripts"
"""Real agent transcripts (third-party data; optional)."""

OBSERVATIONS_PER_SESSION = 1000
"""Corpus sessions hold this many observations each (the last session may hold fewer)."""

OBSERVATIONS_PER_PART = 250
"""Observations committed per observer part (one transaction)."""

QUERY_REPEATS = 3
"""Executions of each query per strategy."""

PROJECTION_SESSIONS = 10
"""Sessions projected per size (each projected ``QUERY_REPEATS`` times)."""

PROJECTION_REPEATS = 20
"""Warm projections of the large active-memory session, per size."""

COLD_PROCESSES = 5
"""Fresh processes started per size for the cold projection (one projection each)."""

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
    "persistence/search_queries.py",
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
    run_id: str, seq: int, content: str, timestamp: str, relevance: Relevance = "medium"
) -> ObservationRecord:
    """One corpus observation citing event ``seq`` of ``run_id``."""
    refs = (SourceRef(run_id=run_id, seq=seq),)
    return ObservationRecord(
        observation_id=observation_id(run_id, _OBSERVER_SCHEMA, timestamp, content, refs),
        run_id=run_id,
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


def corpus_part(run_id: str, start: int, end: int, covered_at: str) -> CoveragePart:
    """The coverage row committed with a batch of corpus observations of ``start..end``."""
    digest = source_digest([{"run_id": run_id, "seq": start, "kind": "bench", "rendered_text": str(end)}])
    key = chunk_key(run_id, start, end, _RENDERER, _OBSERVER_SCHEMA, digest, 1)
    p_digest = part_digest(f"{run_id}:{start}:{end}")
    return CoveragePart(
        coverage_key=coverage_key(key, 1, p_digest),
        run_id=run_id,
        boundary_key=key,
        source_start_seq=start,
        source_end_seq=end,
        chunk_key=key,
        part_index=1,
        part_count=1,
        source_digest=digest,
        part_digest=p_digest,
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
    run_id: str, set_hash: str, facts: Sequence[tuple[str, tuple[str, ...]]], now: str
) -> list[ReflectionRecord]:
    """Reflection rows of ``(content, supporting ids)`` facts, one per distinct id, in order."""
    rows = [
        ReflectionRecord(
            reflection_id=reflection_id(run_id, _REFLECTOR_SCHEMA, content, support),
            run_id=run_id,
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
    store: Store, run_id: str, observations: Sequence[ObservationRecord], rng: random.Random
) -> None:
    """One generation covering the first 80% of the session, retaining 50 of them, with 5 reflections."""
    covered = observations[: int(len(observations) * 0.8)]
    if not covered:
        return
    ids = sorted(o.observation_id for o in covered)
    set_hash = observation_set_hash(run_id, ids)
    generation = threshold_generation_id(run_id, None, set_hash, _MODEL, _REFLECTOR_SCHEMA)
    end_seq = max(o.source_end_seq for o in covered)
    now = covered[-1].created_at
    store.claim_generation(generation, run_id, set_hash, _MODEL, _REFLECTOR_SCHEMA, 1, end_seq, now)
    facts = []
    for index in range(5):
        content = f"Durable fact {index}: {rng.choice(covered).content}"
        facts.append((content, tuple(sorted({rng.choice(covered).observation_id for _ in range(3)}))))
    unique = _reflections(run_id, set_hash, facts, now)
    retained = [o.observation_id for o in covered[-50:]]
    store.promote_generation(generation, run_id, unique, retained, now)


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
                        o.run_id,
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
                **part.model_dump(exclude={"observation_count"}),
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
        run_id = f"bench-session-{session_index:04d}"
        count = min(OBSERVATIONS_PER_SESSION, remaining)
        observations: list[ObservationRecord] = []
        parts: list[tuple[CoveragePart, Sequence[ObservationRecord]]] = []
        for start in range(1, count + 1, OBSERVATIONS_PER_PART):
            batch = []
            for seq in range(start, min(count, start + OBSERVATIONS_PER_PART - 1) + 1):
                minute += rng.randint(1, 7)
                batch.append(
                    corpus_observation(
                        run_id,
                        seq,
                        _content(sentences, paths, rng),
                        corpus_timestamp(minute),
                        rng.choice(("low", "medium", "medium", "high", "critical")),
                    )
                )
            parts.append((corpus_part(run_id, start, batch[-1].source_end_seq, batch[-1].created_at), batch))
            observations.extend(batch)
        bulk_commit_parts(db_path, parts)
        with Store(db_path) as store:
            _promote(store, run_id, observations, rng)
        sessions.append(run_id)
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


# ------------------------------------------------------------------------------------------ queries


def _rare_substring(sentences: Sequence[str], rng: random.Random) -> str:
    sentence = rng.choice(sentences)
    length = min(len(sentence), 16)
    start = rng.randint(0, len(sentence) - length)
    return sentence[start : start + length].strip() or sentence


QueryClass = Literal["common", "rare", "short", "dated"]
"""What a benchmark query exercises: a frequent substring, a rare one, 1-2 characters, date bounds."""


def classified_query_set(
    sentences: Sequence[str], paths: Sequence[str], seed: int
) -> list[tuple[QueryClass, dict[str, object]]]:
    """The benchmark's ``memory_search`` argument objects, each with its class."""
    rng = random.Random(seed + 1)
    common = ["the", "error", "file", "test", "User:", "Assistant: I'll", "README"]
    rare = [_rare_substring(sentences, rng) for _ in range(6)] + [rng.choice(paths), "zqxj-no-such-text"]
    rare += ["100%", "tool_name", "MapToolArguments", "2510"]
    short = ["a", "ts", "é", "%", "_", "x_"]
    queries: list[tuple[QueryClass, dict[str, object]]] = [("common", {"query": q}) for q in common]
    queries += [("rare", {"query": q}) for q in rare]
    queries += [("short", {"query": q}) for q in short]
    queries += [
        ("dated", {"query": "the", "after": "2026-02-01", "before": "2026-03-15"}),
        ("dated", {"query": "error", "after": "2026-04-01 12:00"}),
        ("dated", {"query": "a", "before": "2026-01-10"}),
        ("dated", {"query": rare[0], "after": "2026-01-01", "before": "2026-12-31", "limit": 50}),
        ("common", {"query": "file", "limit": 5}),
    ]
    return queries


def query_set(sentences: Sequence[str], paths: Sequence[str], seed: int) -> list[dict[str, object]]:
    """The benchmark's ``memory_search`` argument objects."""
    return [arguments for _, arguments in classified_query_set(sentences, paths, seed)]


def _timed(call: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return (time.perf_counter() - started) * 1000, result


def _measure_size(db_path: Path, size: int, seed: int) -> dict[str, object]:
    build_started = time.perf_counter()
    sessions, sentences, paths, source = build_corpus(db_path, size, seed)
    build_s = time.perf_counter() - build_started
    requests: list[tuple[QueryClass, SearchRequest]] = []
    for query_class, arguments in classified_query_set(sentences, paths, seed):
        request = validate_search_arguments(arguments)
        if isinstance(request, SearchRequest):
            requests.append((query_class, request))
    exact_ms: dict[QueryClass, list[float]] = {}
    like_ms: dict[QueryClass, list[float]] = {}
    plans: Counter[str] = Counter()
    identical = True
    for query_class, request in requests:
        exact_search(db_path, request)  # warm the page cache for both strategies alike
        plans[reader_for(db_path).exact_search(request).observation_strategy] += 1
        for _ in range(QUERY_REPEATS):
            fast_time, fast = _timed(lambda r=request: exact_search(db_path, r))
            scan_time, scan = _timed(lambda r=request: exact_search(db_path, r, "scan"))
            exact_ms.setdefault(query_class, []).append(fast_time)
            like_ms.setdefault(query_class, []).append(scan_time)
            identical = identical and fast == scan
    projection_ms: list[float] = []
    for run_id in sessions[:PROJECTION_SESSIONS]:
        for _ in range(QUERY_REPEATS):
            elapsed, _text = _timed(lambda s=run_id: project(db_path, s))
            projection_ms.append(elapsed)
    active = (
        measure_active_projection(db_path.with_name("active.sqlite"), size, seed) if size <= 50_000 else {}
    )
    all_exact = [value for values in exact_ms.values() for value in values]
    all_like = [value for values in like_ms.values() for value in values]
    return {
        "size": size,
        "sessions": len(sessions),
        "queries": len(requests),
        "corpus_source": source,
        "build_s": round(build_s, 2),
        "exact_p50_ms": round(percentile(all_exact, 0.5), 3),
        "exact_p99_ms": round(percentile(all_exact, 0.99), 3),
        "like_p50_ms": round(percentile(all_like, 0.5), 3),
        "like_p99_ms": round(percentile(all_like, 0.99), 3),
        "exact_mean_ms": round(statistics.fmean(all_exact), 3),
        "like_mean_ms": round(statistics.fmean(all_like), 3),
        "identical": identical,
        "by_class": {
            query_class: {
                "queries": len(exact_ms[query_class]) // QUERY_REPEATS,
                "exact_p50_ms": round(percentile(exact_ms[query_class], 0.5), 3),
                "like_p50_ms": round(percentile(like_ms[query_class], 0.5), 3),
            }
            for query_class in exact_ms
        },
        "observation_plans": dict(sorted(plans.items())),
        "projection_p50_ms": round(percentile(projection_ms, 0.5), 3),
        "projection_p99_ms": round(percentile(projection_ms, 0.99), 3),
        **active,
    }


_COLD_SCRIPT = (
    "import sys, time\n"
    "from actors.read.service import project\n"
    "started = time.perf_counter()\n"
    "project(sys.argv[1], sys.argv[2])\n"
    "print((time.perf_counter() - started) * 1000)\n"
)


def _cold_projection_ms(db_path: Path) -> float:
    """One projection in a fresh process (imports done before the clock starts), in ms."""
    done = subprocess.run(
        [sys.executable, "-c", _COLD_SCRIPT, str(db_path), ACTIVE_SESSION],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return float(done.stdout.strip().splitlines()[-1])


def full_record_projection(db_path: Path, run_id: str) -> str:
    """The projection as main computed it: a fresh reader, SQLAlchemy, full pydantic records (baseline)."""
    memory = SearchReader(db_path).active_memory(run_id)
    return render_active_memory(memory.reflections, memory.candidates.observations)


def _commit_elsewhere(db_path: Path) -> None:
    """A commit by another connection (a row in a bench-only table): every memoized read is stale."""
    connection = sqlite3.connect(db_path)
    try:
        with connection:
            connection.execute("CREATE TABLE IF NOT EXISTS bench_tick (tick INTEGER)")
            connection.execute("INSERT INTO bench_tick (tick) VALUES (1)")
    finally:
        connection.close()


def _after_commit_ms(db_path: Path) -> float:
    _commit_elsewhere(db_path)
    return _timed(lambda: project(db_path, ACTIVE_SESSION))[0]


def measure_active_projection(db_path: Path, size: int, seed: int) -> dict[str, object]:
    """Projection of one session with ``size`` active memories: cold process, warm process, baseline.

    Warm: repeated calls in this process (answered from the per-snapshot memo); after a commit: the
    same process and connection right after another connection committed, so it reads again.
    """
    build_active_session(db_path, size, seed)
    cold = [_cold_projection_ms(db_path) for _ in range(COLD_PROCESSES)]
    first_ms, text = _timed(lambda: project(db_path, ACTIVE_SESSION))
    warm = [_timed(lambda: project(db_path, ACTIVE_SESSION))[0] for _ in range(PROJECTION_REPEATS)]
    after_commit = [_after_commit_ms(db_path) for _ in range(PROJECTION_REPEATS)]
    baseline_ms, baseline_text = _timed(lambda: full_record_projection(db_path, ACTIVE_SESSION))
    baseline = [baseline_ms] + [
        _timed(lambda: full_record_projection(db_path, ACTIVE_SESSION))[0] for _ in range(4)
    ]
    return {
        "active_memories": size + ACTIVE_REFLECTIONS,
        "active_projection_identical": text == baseline_text,
        "active_projection_cold_p50_ms": round(percentile(cold, 0.5), 3),
        "active_projection_cold_max_ms": round(percentile(cold, 1.0), 3),
        "active_projection_first_in_process_ms": round(first_ms, 3),
        "active_projection_warm_p50_ms": round(percentile(warm, 0.5), 3),
        "active_projection_warm_p99_ms": round(percentile(warm, 0.99), 3),
        "active_projection_after_commit_p50_ms": round(percentile(after_commit, 0.5), 3),
        "active_projection_after_commit_p99_ms": round(percentile(after_commit, 0.99), 3),
        "active_projection_baseline_p50_ms": round(percentile(baseline, 0.5), 3),
        "active_projection_baseline_max_ms": round(percentile(baseline, 1.0), 3),
    }


def run_search_bench(sizes: list[int], seed: int = 0) -> list[dict[str, object]]:
    """Build one corpus per size in a temporary directory and measure it (see the module docstring)."""
    results: list[dict[str, object]] = []
    for size in sizes:
        if size < 1:
            raise ValueError(f"corpus size must be positive, got {size!r}")
        with tempfile.TemporaryDirectory(prefix="omray-search-bench-") as directory:
            results.append(_measure_size(Path(directory) / "om.sqlite", size, seed))
    return results


def _parse_sizes(raw: str) -> list[int]:
    try:
        sizes = [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter("sizes must be comma-separated integers, e.g. 5000,50000") from None
    if not sizes or any(size < 1 for size in sizes):
        raise typer.BadParameter("sizes must be positive integers")
    return sizes


def bench_search_command(
    sizes: Annotated[str, typer.Option("--sizes", help="Comma-separated corpus sizes.")] = "5000,50000",
    seed: Annotated[int, typer.Option("--seed", help="Random seed of corpus and queries.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Exact memory_search: planned search vs the plain LIKE scan, per query class; projection latency."""
    results = run_search_bench(_parse_sizes(sizes), seed)
    if as_json:
        typer.echo(json.dumps(results, indent=2))
        return
    for row in results:
        typer.echo(
            f"size={row['size']:>7} exact p50/p99={row['exact_p50_ms']}/{row['exact_p99_ms']} ms  "
            f"like p50/p99={row['like_p50_ms']}/{row['like_p99_ms']} ms  identical={row['identical']}  "
            f"projection p50/p99={row['projection_p50_ms']}/{row['projection_p99_ms']} ms  "
            f"({row['corpus_source']}, built in {row['build_s']} s)"
        )
        by_class = row["by_class"]
        for query_class, figures in by_class.items() if isinstance(by_class, dict) else ():
            typer.echo(
                f"    {query_class:<6} p50 exact/like={figures['exact_p50_ms']}/{figures['like_p50_ms']} ms "
                f"({figures['queries']} queries)"
            )
        typer.echo(f"    observation plans: {row['observation_plans']}")
        if "active_memories" in row:
            figures = {key.removeprefix("active_projection_"): value for key, value in row.items()}
            typer.echo(
                f"    projection of {row['active_memories']} active memories: "
                f"cold p50/max={figures['cold_p50_ms']}/{figures['cold_max_ms']} ms  "
                f"warm p50/p99={figures['warm_p50_ms']}/{figures['warm_p99_ms']} ms  "
                f"after a commit p50/p99={figures['after_commit_p50_ms']}/"
                f"{figures['after_commit_p99_ms']} ms  "
                f"baseline (full records) p50={figures['baseline_p50_ms']} ms  "
                f"identical={figures['identical']}"
            )


if __name__ == "__main__":
    typer.run(bench_search_command)
