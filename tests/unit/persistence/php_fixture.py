"""A database shaped like one written by the PHP extension, built with raw sqlite3 DDL.

The DDL is written by hand from the reference's schema description (§4.3), independently of
``persistence.database.schema``, with index names of its own where the reference gives none.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

PHP_VERSIONS = (
    ("20260722_001_domain", "OM domain tables: observation, coverage, reflection, compaction request/result"),
    (
        "20260725_002_reflection_multi_and_indexes",
        "Allow multiple reflections per request; add coverage/observation/request indexes",
    ),
    (
        "20260726_003_active_generation_and_relevance_text",
        "Relevance TEXT + timestamp; chunk/part coverage; request_fingerprint; active generation tables",
    ),
    ("20260729_004_current_activity", "Ephemeral om_current_activity for live TUI status notices"),
    ("20260922_005_semantic_health", "Durable health and restart state for derived semantic storage"),
)

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS om_schema_version (version TEXT PRIMARY KEY NOT NULL,
  description TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TEXT NOT NULL);
"""

_DDL_001_003 = """
CREATE TABLE om_observation (
  observation_id TEXT PRIMARY KEY NOT NULL, run_id TEXT NOT NULL, boundary_key TEXT NOT NULL,
  source_start_seq INTEGER NOT NULL, source_end_seq INTEGER NOT NULL, source_refs_json TEXT NOT NULL,
  content TEXT NOT NULL, content_hash TEXT NOT NULL,
  relevance TEXT NOT NULL CHECK (relevance IN ('low','medium','high','critical')),
  timestamp TEXT NOT NULL
    CHECK (timestamp GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]'),
  token_count INTEGER NOT NULL, observer_model TEXT NOT NULL, observer_schema_version TEXT NOT NULL,
  created_at TEXT NOT NULL);
CREATE INDEX idx_om_observation_run_created ON om_observation(run_id, created_at);
CREATE INDEX idx_om_observation_run_boundary ON om_observation(run_id, boundary_key);
CREATE INDEX idx_om_observation_run_range ON om_observation(run_id, source_start_seq, source_end_seq);
CREATE INDEX idx_om_observation_run_timestamp ON om_observation(run_id, timestamp, observation_id);
CREATE TABLE om_coverage (
  coverage_key TEXT PRIMARY KEY NOT NULL, run_id TEXT NOT NULL, boundary_key TEXT NOT NULL,
  source_start_seq INTEGER NOT NULL CHECK (source_start_seq >= 1),
  source_end_seq INTEGER NOT NULL CHECK (source_end_seq >= source_start_seq),
  chunk_key TEXT NOT NULL, part_index INTEGER NOT NULL CHECK (part_index >= 1),
  part_count INTEGER NOT NULL CHECK (part_count >= part_index), source_digest TEXT NOT NULL,
  part_digest TEXT NOT NULL, renderer_version TEXT NOT NULL, observer_schema_version TEXT NOT NULL,
  observation_count INTEGER NOT NULL CHECK (observation_count >= 0), covered_at TEXT NOT NULL,
  UNIQUE (run_id, chunk_key, part_index, renderer_version, observer_schema_version));
CREATE INDEX idx_om_coverage_run_versions_range
  ON om_coverage(run_id, renderer_version, observer_schema_version, source_start_seq, source_end_seq);
CREATE INDEX idx_om_coverage_run_chunk_part ON om_coverage(run_id, chunk_key, part_index);
CREATE TABLE om_reflection (
  reflection_id TEXT PRIMARY KEY NOT NULL, run_id TEXT NOT NULL, compaction_request_id TEXT NOT NULL,
  observation_set_hash TEXT NOT NULL, content TEXT NOT NULL, supporting_observation_ids_json TEXT NOT NULL,
  compression_level TEXT NOT NULL, token_count INTEGER NOT NULL, reflector_model TEXT NOT NULL,
  reflector_schema_version TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE INDEX idx_om_reflection_request ON om_reflection(compaction_request_id, created_at);
CREATE INDEX idx_om_reflection_run ON om_reflection(run_id, created_at);
CREATE TABLE om_compaction_request (request_id TEXT PRIMARY KEY NOT NULL, run_id TEXT NOT NULL,
  required_start_seq INTEGER, required_end_seq INTEGER, required_watermark INTEGER,
  request_fingerprint TEXT NOT NULL, observation_set_hash TEXT NULL, status TEXT NOT NULL,
  requested_at TEXT NOT NULL, updated_at TEXT NOT NULL, completed_at TEXT, failure_code TEXT,
  failure_metadata_json TEXT);
CREATE INDEX php_om_compaction_request_status ON om_compaction_request(run_id, status, updated_at);
CREATE TABLE om_compaction_result (result_id TEXT PRIMARY KEY NOT NULL, request_id TEXT NOT NULL UNIQUE,
  run_id TEXT NOT NULL, required_watermark INTEGER, observation_set_hash TEXT, status TEXT NOT NULL,
  replacement_text TEXT, metadata_json TEXT, failure_code TEXT, failure_metadata_json TEXT,
  created_at TEXT NOT NULL, completed_at TEXT);
CREATE TABLE om_memory_generation (
  generation_id TEXT PRIMARY KEY NOT NULL, run_id TEXT NOT NULL,
  trigger_kind TEXT NOT NULL CHECK (trigger_kind IN ('threshold','compaction')),
  status TEXT NOT NULL CHECK (status IN ('running','succeeded','failed')),
  observation_set_hash TEXT NOT NULL, reflector_model TEXT NOT NULL, reflector_schema_version TEXT NOT NULL,
  threshold_idempotency_key TEXT NULL, required_start_seq INTEGER NULL, required_end_seq INTEGER NULL,
  compaction_request_id TEXT NULL, request_fingerprint TEXT NULL, failure_code TEXT NULL,
  created_at TEXT NOT NULL, completed_at TEXT NULL);
CREATE INDEX php_gen_run_created ON om_memory_generation(run_id, created_at);
CREATE INDEX php_gen_run_set_status ON om_memory_generation(run_id, observation_set_hash, status);
CREATE UNIQUE INDEX php_gen_threshold_key ON om_memory_generation(threshold_idempotency_key)
  WHERE threshold_idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX php_gen_compaction ON om_memory_generation(compaction_request_id,
  reflector_schema_version, reflector_model) WHERE compaction_request_id IS NOT NULL;
CREATE TABLE om_generation_reflection (
  generation_id TEXT NOT NULL REFERENCES om_memory_generation(generation_id),
  reflection_id TEXT NOT NULL, position INTEGER NOT NULL, PRIMARY KEY (generation_id, reflection_id),
  UNIQUE (generation_id, position));
CREATE TABLE om_generation_retained_observation (
  generation_id TEXT NOT NULL REFERENCES om_memory_generation(generation_id),
  observation_id TEXT NOT NULL, position INTEGER NOT NULL, PRIMARY KEY (generation_id, observation_id),
  UNIQUE (generation_id, position));
CREATE TABLE om_active_generation (run_id TEXT PRIMARY KEY NOT NULL,
  generation_id TEXT NOT NULL REFERENCES om_memory_generation(generation_id));
"""

_DDL_004 = """
CREATE TABLE om_current_activity (run_id TEXT PRIMARY KEY NOT NULL, job_id TEXT NOT NULL,
  stage TEXT NOT NULL CHECK (stage IN ('observer','reflector','dropper')),
  current_tokens INTEGER NOT NULL CHECK (current_tokens >= 0),
  target_tokens INTEGER DEFAULT NULL CHECK (target_tokens IS NULL OR target_tokens > 0),
  updated_at TEXT NOT NULL);
"""

_DDL_005 = """
CREATE TABLE om_semantic_state (id INTEGER PRIMARY KEY CHECK (id = 1), signature TEXT NOT NULL,
  source_hash TEXT NOT NULL, dimensions INTEGER NOT NULL, dirty INTEGER NOT NULL, complete INTEGER NOT NULL);
"""

RUN = "php-run"
GEN = "a" * 64
OBS_RETAINED = "1" * 64
OBS_DROPPED = "2" * 64
OBS_LATER = "3" * 64
REFLECTION = "4" * 64


def _observation(obs_id: str, end: int, timestamp: str, refs_json: str) -> tuple[object, ...]:
    return (
        obs_id,
        RUN,
        "chunk",
        1,
        end,
        refs_json,
        f"content {obs_id[:1]}",
        "h" * 64,
        "high",
        timestamp,
        5,
        "php/model",
        "obs-v1",
        "2026-07-23T10:00:00+00:00",
    )


def build_php_database(path: Path, *, versions: int = 5, with_data: bool = True) -> None:
    """Create ``path`` like the PHP extension would after ``versions`` migrations (3, 4 or 5)."""
    conn = sqlite3.connect(path)
    try:
        conn.executescript(
            _VERSION_TABLE
            + _DDL_001_003
            + (_DDL_004 if versions >= 4 else "")
            + (_DDL_005 if versions >= 5 else "")
        )
        for version, description in PHP_VERSIONS[:versions]:
            conn.execute(
                "INSERT INTO om_schema_version VALUES (?, ?, ?, ?)",
                (version, description, "c" * 64, "2026-07-22T09:00:00+00:00"),
            )
        if with_data:
            _insert_data(conn)
        conn.commit()
    finally:
        conn.close()


def _insert_data(conn: sqlite3.Connection) -> None:
    conn.executemany(
        "INSERT INTO om_observation VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        [
            _observation(OBS_RETAINED, 3, "2026-07-23 09:00", '[{"run_id":"php-run","seq":2}]'),
            _observation(OBS_DROPPED, 3, "2026-07-23 09:01", '[{"runId":"php-run","seq":3}]'),
            _observation(OBS_LATER, 5, "2026-07-23 08:00", '[{"run_id":"php-run","seq":5}]'),
        ],
    )
    conn.execute(
        "INSERT INTO om_coverage VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            "cov-1",
            RUN,
            "chunk",
            1,
            5,
            "chunk",
            1,
            1,
            "sd",
            "pd",
            "rend-v1",
            "obs-v1",
            3,
            "2026-07-23T10:00:00+00:00",
        ),
    )
    conn.execute(
        "INSERT INTO om_memory_generation (generation_id, run_id, trigger_kind, status, observation_set_hash,"
        " reflector_model, reflector_schema_version, threshold_idempotency_key, required_start_seq,"
        " required_end_seq, created_at, completed_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            GEN,
            RUN,
            "threshold",
            "succeeded",
            "s" * 64,
            "php/model",
            "ref-v1",
            GEN,
            1,
            3,
            "2026-07-23T10:01:00+00:00",
            "2026-07-23T10:02:00+00:00",
        ),
    )
    conn.execute(
        "INSERT INTO om_reflection VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (
            REFLECTION,
            RUN,
            "",
            "s" * 64,
            "durable fact",
            f'["{OBS_RETAINED}"]',
            "0",
            6,
            "php/model",
            "ref-v1",
            "2026-07-23T10:02:00+00:00",
        ),
    )
    conn.execute("INSERT INTO om_generation_reflection VALUES (?,?,?)", (GEN, REFLECTION, 0))
    conn.execute("INSERT INTO om_generation_retained_observation VALUES (?,?,?)", (GEN, OBS_RETAINED, 0))
    conn.execute("INSERT INTO om_active_generation VALUES (?,?)", (RUN, GEN))


def build_legacy_database(path: Path, applied: tuple[str, ...]) -> None:
    """Only the version table with the given (pre-003) versions recorded."""
    conn = sqlite3.connect(path)
    try:
        conn.executescript(_VERSION_TABLE)
        for version in applied:
            conn.execute(
                "INSERT INTO om_schema_version VALUES (?, 'legacy', 'c', '2026-07-22T09:00:00+00:00')",
                (version,),
            )
        conn.commit()
    finally:
        conn.close()


def schema_objects(path: Path) -> set[tuple[str, str]]:
    """``(type, name)`` of every table and index in the file."""
    conn = sqlite3.connect(path)
    try:
        return {(t, n) for t, n in conn.execute("SELECT type, name FROM sqlite_master")}
    finally:
        conn.close()
