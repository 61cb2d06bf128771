"""What a memory database holds, as comparable rows: "the same memory" made precise.

Two runs of the same input (an uninterrupted one and one whose actors were killed, or one per
placement of the actors) must end with the same memory. :func:`memory_snapshot` reads every table
that holds memory, read-only and after the writers are gone, and keeps each row without the
columns that legitimately differ between runs: wall-clock times (``created_at``, ``covered_at``,
``completed_at``) and the index's bookkeeping (labels, file checksums, its random manifest id,
batch counters, the events root path). Everything else must be equal:

- ``observations``: every ``om_observation`` row (id, session, boundary, seq range, source refs,
  text, content hash, relevance, timestamp, token count, model, schema version);
- ``coverage``: every ``om_coverage`` row (key, session, boundary, seq range, chunk key, part
  index and count, source and part digests, versions, observation count);
- ``reflections``: every ``om_reflection`` row (id, session, request, set hash, text, supporting
  ids, level, token count, model, schema version);
- ``generations``: every ``om_memory_generation`` row (id, session, trigger, status, set hash,
  model, schema version, threshold key, required seqs, request, failure code), with its
  reflections and retained observations in position order, and the active generation of each
  session;
- ``observe_pins``: unfinished observe plans (``omray_observe_start``, without the pin time);
  both runs must end with none;
- ``index_state``: ``om_semantic_state``'s dimensions, dirty and complete flags, whether its source
  hash is the one of the rows the database holds now, and whether its signature is the manifest's.
  The hash and signature themselves are not compared: the hash summarizes table rowids, which
  follow the order concurrent sessions happened to commit in, and the signature covers the
  embedding endpoint's URL, which differs between runs;
- ``index_memories`` and ``index_chunks``: the derived manifest's memories (parent key, digest)
  and chunks (chunk id, parent key, position, seq range) in ``<db>.semantic/manifest.sqlite``.

:func:`compare_memory` names the sections that differ and counts the rows one run has and the
other lacks, which is how the chaos benchmark reports ``lost`` and ``duplicated`` memory.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from persistence.semantic.sources import SemanticSourceReader

Row = tuple[Any, ...]
"""One row, as SQLite returns it."""

SECTIONS: dict[str, str] = {
    "observations": (
        "SELECT observation_id, run_id, boundary_key, source_start_seq, source_end_seq, source_refs_json,"
        " content, content_hash, relevance, timestamp, token_count, observer_model, observer_schema_version"
        " FROM om_observation"
    ),
    "coverage": (
        "SELECT coverage_key, run_id, boundary_key, source_start_seq, source_end_seq, chunk_key, part_index,"
        " part_count, source_digest, part_digest, renderer_version, observer_schema_version,"
        " observation_count FROM om_coverage"
    ),
    "reflections": (
        "SELECT reflection_id, run_id, compaction_request_id, observation_set_hash, content,"
        " supporting_observation_ids_json, compression_level, token_count, reflector_model,"
        " reflector_schema_version FROM om_reflection"
    ),
    "generations": (
        "SELECT generation_id, run_id, trigger_kind, status, observation_set_hash, reflector_model,"
        " reflector_schema_version, threshold_idempotency_key, required_start_seq, required_end_seq,"
        " compaction_request_id, request_fingerprint, failure_code FROM om_memory_generation"
    ),
    "generation_reflections": "SELECT generation_id, position, reflection_id FROM om_generation_reflection",
    "retained_observations": (
        "SELECT generation_id, position, observation_id FROM om_generation_retained_observation"
    ),
    "active_generations": "SELECT run_id, generation_id FROM om_active_generation",
    "observe_pins": "SELECT plan_key, run_id, job_id, start_seq, terminal_end_seq FROM omray_observe_start",
}
"""The memory tables and the columns compared (everything but wall-clock times)."""

STATE_QUERY = "SELECT signature, source_hash, dimensions, dirty, complete FROM om_semantic_state"
"""The semantic index's state row (reduced to comparable facts, see the module docstring)."""
MANIFEST_SECTIONS: dict[str, str] = {
    "index_memories": "SELECT parent_key, digest FROM memory",
    "index_chunks": "SELECT chunk_id, parent_key, position, seq_start, seq_end FROM chunk",
}
"""The semantic manifest's content (not its labels, checksums or counters)."""


@dataclass(frozen=True)
class MemorySnapshot:
    """Sorted rows of every section of :data:`SECTIONS` and :data:`MANIFEST_SECTIONS`, and ``index_state``."""

    sections: Mapping[str, tuple[Row, ...]]
    """Section name -> its rows, sorted."""

    def count(self, section: str) -> int:
        """Rows in ``section``."""
        return len(self.sections.get(section, ()))

    def to_json(self) -> dict[str, list[list[Any]]]:
        """The rows as JSON lists (to pass a snapshot between processes)."""
        return {name: [list(row) for row in rows] for name, rows in self.sections.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Sequence[Sequence[Any]]]) -> MemorySnapshot:
        """The inverse of :meth:`to_json`."""
        return cls({name: _sorted(tuple(row) for row in rows) for name, rows in data.items()})


@dataclass(frozen=True)
class MemoryDiff:
    """How a run's memory differs from a reference run's."""

    differing: tuple[str, ...]
    """Sections whose rows are not equal."""
    missing: Mapping[str, int]
    """Rows the reference has and the run lacks, by section (only sections with some)."""
    extra: Mapping[str, int]
    """Rows the run has and the reference lacks, by section (only sections with some)."""

    @property
    def identical(self) -> bool:
        """Every section equal."""
        return not self.differing


def _sorted(rows: Iterable[Row]) -> tuple[Row, ...]:
    return tuple(sorted(rows, key=lambda row: json.dumps(row, default=str)))


def _sorted_rows(conn: sqlite3.Connection, query: str) -> tuple[Row, ...]:
    return _sorted(conn.execute(query).fetchall())


def _read_only(path: Path) -> sqlite3.Connection:
    # A post-run read: the runtime that wrote the file is gone, nothing writes it any more.
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def memory_snapshot(db_path: str | Path) -> MemorySnapshot:
    """Read the memory of ``db_path`` (and its semantic manifest, if any); call it after the run."""
    path = Path(db_path)
    sections: dict[str, tuple[Row, ...]] = {}
    with _read_only(path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for name, query in SECTIONS.items():
            table = query.rsplit(" FROM ", 1)[1].split()[0]
            sections[name] = _sorted_rows(conn, query) if table in tables else ()
        state = conn.execute(STATE_QUERY).fetchall() if "om_semantic_state" in tables else []
    manifest = path.with_name(path.name + ".semantic") / "manifest.sqlite"
    manifest_signature = None
    if manifest.is_file():
        with _read_only(manifest) as conn:
            for name, query in MANIFEST_SECTIONS.items():
                sections[name] = _sorted_rows(conn, query)
            found = conn.execute("SELECT value FROM meta WHERE key = 'signature'").fetchone()
            manifest_signature = found[0] if found else None
    else:
        sections.update(dict.fromkeys(MANIFEST_SECTIONS, ()))
    current_hash = SemanticSourceReader(path).fingerprint().digest() if state else None
    sections["index_state"] = tuple(
        (dimensions, dirty, complete, source_hash == current_hash, signature == manifest_signature)
        for signature, source_hash, dimensions, dirty, complete in state
    )
    return MemorySnapshot(sections)


def compare_memory(run: MemorySnapshot, reference: MemorySnapshot) -> MemoryDiff:
    """Which sections of ``run`` differ from ``reference``, and how many rows each lacks or adds."""
    differing: list[str] = []
    missing: dict[str, int] = {}
    extra: dict[str, int] = {}
    for name in sorted(set(run.sections) | set(reference.sections)):
        ours = Counter(run.sections.get(name, ()))
        theirs = Counter(reference.sections.get(name, ()))
        if ours == theirs:
            continue
        differing.append(name)
        if lacking := sum((theirs - ours).values()):
            missing[name] = lacking
        if added := sum((ours - theirs).values()):
            extra[name] = added
    return MemoryDiff(tuple(differing), missing, extra)
