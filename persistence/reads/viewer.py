"""Read-only queries of the memory viewer (``omray ui``): session summaries, one session's timeline,
token usage over time.

Every call runs in one read snapshot on the reused per-thread read-only connection
(:class:`persistence.database.read_connection.SnapshotReader`): never creates, migrates or writes the file;
a missing file or tables not created yet give empty answers. Rows come back as plain tuples of
:mod:`protocol`-free dataclasses; shaping them for the page is :mod:`actors.read.ui_views`.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from typing import Any, Final

from persistence.database.read_connection import SnapshotReader
from persistence.database.sql_values import in_batches, json_list
from persistence.reads.coverage_watermark import CoverageInterval, contiguous_end

EXCERPT_CHARS: Final[int] = 280
"""Characters of an event's text the timeline shows (the full text is one ``recall`` away)."""

TIMELINE_EVENT_LIMIT: Final[int] = 2000
"""Transcript events one timeline answer carries at most (the newest parts are cut first)."""


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One session of a memory database, as the sessions list shows it."""

    session_id: str
    """The session (``run_id`` in the tables)."""
    observations: int
    """Observations of the session."""
    observation_tokens: int
    """Tokens of those observations."""
    reflections: int
    """Reflections of the session."""
    reflection_tokens: int
    """Tokens of those reflections."""
    coverage_end: int | None
    """Contiguous covered end for the settings' versions (``None``: nothing covered)."""
    covered_through: int
    """The last seq any coverage part reaches, whatever its versions (0: none)."""
    last_activity: str | None
    """Latest time anything was written for the session (coverage, observation, reflection, usage)."""
    prompt_tokens: int
    """Prompt tokens the session's model calls spent."""
    completion_tokens: int
    """Completion tokens the session's model calls spent."""


@dataclass(frozen=True, slots=True)
class PartRow:
    """One committed coverage part."""

    coverage_key: str
    chunk_key: str
    part_index: int
    part_count: int
    source_start_seq: int
    source_end_seq: int
    observation_count: int
    covered_at: str
    renderer_version: str
    observer_schema_version: str


@dataclass(frozen=True, slots=True)
class ObservationRow:
    """One observation (dropped or not)."""

    observation_id: str
    boundary_key: str
    source_start_seq: int
    source_end_seq: int
    source_seqs: tuple[int, ...]
    content: str
    relevance: str
    timestamp: str
    token_count: int
    observer_model: str
    created_at: str


@dataclass(frozen=True, slots=True)
class EventRow:
    """One covered event's searchable text (the transcript), cut to :data:`EXCERPT_CHARS`."""

    event_id: str
    seq: int
    event_type: str
    timestamp: str
    excerpt: str
    chars: int


@dataclass(frozen=True, slots=True)
class GenerationRow:
    """One reflection generation with its reflections and retained observations."""

    generation_id: str
    trigger_kind: str
    status: str
    required_end_seq: int | None
    reflector_model: str
    failure_code: str | None
    created_at: str
    completed_at: str | None
    reflection_ids: tuple[str, ...]
    retained_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReflectionRow:
    """One reflection."""

    reflection_id: str
    content: str
    supporting_ids: tuple[str, ...]
    token_count: int
    reflector_model: str
    created_at: str


@dataclass(frozen=True, slots=True)
class TimelineRows:
    """Everything one session's timeline shows, from one snapshot."""

    parts: tuple[PartRow, ...]
    observations: tuple[ObservationRow, ...]
    events: tuple[EventRow, ...]
    events_truncated: bool
    generations: tuple[GenerationRow, ...]
    reflections: tuple[ReflectionRow, ...]
    active_generation_id: str | None


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Token usage of one session, job kind and model in one time bucket."""

    session_id: str
    job_kind: str
    model: str
    bucket: str
    """``YYYY-MM-DDTHH`` (UTC hour) the usage was recorded in."""
    requests: int
    prompt_tokens: int
    cached_prompt_tokens: int
    completion_tokens: int


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float | str) and str(value) != "" else 0


def _seqs(raw: str, session_id: str) -> tuple[int, ...]:
    seqs: set[int] = set()
    for item in json_list(raw):
        if isinstance(item, dict) and item.get("run_id", item.get("runId")) == session_id:
            seq = item.get("seq")
            if isinstance(seq, int) and not isinstance(seq, bool):
                seqs.add(seq)
    return tuple(sorted(seqs))


def _ids(raw: str) -> tuple[str, ...]:
    return tuple(str(item) for item in json_list(raw))


class UiReader:
    """The memory viewer's reads of one database file (read-only, one snapshot per call)."""

    def __init__(self, db_path: str | os.PathLike[str]) -> None:
        self._snapshots = SnapshotReader(db_path)

    def close(self) -> None:
        """Close this thread's connection."""
        self._snapshots.close()

    def sessions(self, renderer_version: str, observer_schema_version: str) -> list[SessionRow]:
        """Every session with memory, coverage or usage, newest activity first."""

        def query(conn: sqlite3.Connection, names: frozenset[str]) -> list[SessionRow]:
            return _sessions(conn, names, renderer_version, observer_schema_version)

        return self._snapshots.run(query, [])

    def timeline(self, session_id: str) -> TimelineRows:
        """One session's coverage parts, observations, covered events, generations and reflections."""

        def query(conn: sqlite3.Connection, names: frozenset[str]) -> TimelineRows:
            return _timeline(conn, names, session_id)

        empty = TimelineRows((), (), (), False, (), (), None)
        return self._snapshots.run(query, empty)

    def usage_over_time(self, session_id: str | None = None) -> list[UsageRow]:
        """Token usage per session, job kind, model and UTC hour (one session's, or every session's)."""

        def query(conn: sqlite3.Connection, names: frozenset[str]) -> list[UsageRow]:
            where, params = ("WHERE run_id = ?", (session_id,)) if session_id is not None else ("", ())
            rows = conn.execute(
                "SELECT run_id, job_kind, model, substr(recorded_at, 1, 13) AS bucket, sum(requests),"
                " sum(prompt_tokens), sum(cached_prompt_tokens), sum(completion_tokens)"
                f" FROM omray_token_usage {where} GROUP BY run_id, job_kind, model, bucket"
                " ORDER BY bucket, run_id, job_kind, model",
                params,
            ).fetchall()
            return [UsageRow(str(r[0]), str(r[1]), str(r[2]), str(r[3]), *map(_int, r[4:8])) for r in rows]

        return self._snapshots.run(query, [], ("omray_token_usage",))

    def last_seq(self, session_id: str) -> int:
        """The last seq the database knows of the session (coverage or transcript; 0: none)."""

        def query(conn: sqlite3.Connection, names: frozenset[str]) -> int:
            found = [0]
            if "om_coverage" in names:
                row = conn.execute(
                    "SELECT max(source_end_seq) FROM om_coverage WHERE run_id = ?", (session_id,)
                ).fetchone()
                found.append(_int(row[0]))
            if "omray_transcript" in names:
                row = conn.execute(
                    "SELECT max(seq) FROM omray_transcript WHERE run_id = ?", (session_id,)
                ).fetchone()
                found.append(_int(row[0]))
            return max(found)

        return self._snapshots.run(query, 0)

    def source_excerpts(self, observation_ids: list[str]) -> dict[str, tuple[int, str]]:
        """For each observation id, ``(seq, excerpt)`` of the first event it cites that has text."""
        if not observation_ids:
            return {}
        return self._snapshots.run(
            lambda conn, names: _source_excerpts(conn, observation_ids),
            {},
            ("omray_observation_ref", "omray_transcript"),
        )


def _grouped(conn: sqlite3.Connection, sql: str) -> dict[str, tuple[object, ...]]:
    return {str(row[0]): tuple(row[1:]) for row in conn.execute(sql)}


def _sessions(
    conn: sqlite3.Connection, names: frozenset[str], renderer_version: str, observer_schema_version: str
) -> list[SessionRow]:
    observations = reflections = usage = {}
    if "om_observation" in names:
        observations = _grouped(
            conn,
            "SELECT run_id, count(*), sum(token_count), max(created_at) FROM om_observation GROUP BY run_id",
        )
    if "om_reflection" in names:
        reflections = _grouped(
            conn,
            "SELECT run_id, count(*), sum(token_count), max(created_at) FROM om_reflection GROUP BY run_id",
        )
    if "omray_token_usage" in names:
        usage = _grouped(
            conn,
            "SELECT run_id, sum(prompt_tokens), sum(completion_tokens), max(recorded_at)"
            " FROM omray_token_usage GROUP BY run_id",
        )
    intervals: dict[str, list[CoverageInterval]] = {}
    covered: dict[str, tuple[int, str]] = {}
    if "om_coverage" in names:
        for row in conn.execute(
            "SELECT run_id, chunk_key, part_index, part_count, source_start_seq, source_end_seq,"
            " source_digest, renderer_version, observer_schema_version, covered_at FROM om_coverage"
        ):
            session_id = str(row[0])
            through, latest = covered.get(session_id, (0, ""))
            covered[session_id] = (max(through, int(row[5])), max(latest, str(row[9])))
            if row[7] == renderer_version and row[8] == observer_schema_version:
                intervals.setdefault(session_id, []).append(CoverageInterval(*row[1:7]))
    sessions = set(observations) | set(reflections) | set(usage) | set(covered)
    result = []
    for session_id in sessions:
        obs = observations.get(session_id, (0, 0, None))
        ref = reflections.get(session_id, (0, 0, None))
        use = usage.get(session_id, (0, 0, None))
        times = [str(t) for t in (obs[2], ref[2], use[2], covered.get(session_id, (0, ""))[1]) if t]
        result.append(
            SessionRow(
                session_id=session_id,
                observations=_int(obs[0]),
                observation_tokens=_int(obs[1]),
                reflections=_int(ref[0]),
                reflection_tokens=_int(ref[1]),
                coverage_end=contiguous_end(intervals.get(session_id, ())),
                covered_through=covered.get(session_id, (0, ""))[0],
                last_activity=max(times) if times else None,
                prompt_tokens=_int(use[0]),
                completion_tokens=_int(use[1]),
            )
        )
    result.sort(key=lambda row: (row.last_activity or "", row.session_id), reverse=True)
    return result


def _session_rows(
    conn: sqlite3.Connection, names: frozenset[str], table: str, sql: str, session_id: str
) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` (its one parameter: the session) when ``table`` exists; none when not yet."""
    return conn.execute(sql, (session_id,)).fetchall() if table in names else []


def _timeline(conn: sqlite3.Connection, names: frozenset[str], session_id: str) -> TimelineRows:
    parts = tuple(
        PartRow(*row)
        for row in _session_rows(
            conn,
            names,
            "om_coverage",
            "SELECT coverage_key, chunk_key, part_index, part_count, source_start_seq, source_end_seq,"
            " observation_count, covered_at, renderer_version, observer_schema_version"
            " FROM om_coverage WHERE run_id = ? ORDER BY source_start_seq, part_index, covered_at",
            session_id,
        )
    )
    observations = tuple(
        ObservationRow(
            str(row[0]), str(row[1]), int(row[2]), int(row[3]), _seqs(str(row[4]), session_id), *row[5:]
        )
        for row in _session_rows(
            conn,
            names,
            "om_observation",
            "SELECT observation_id, boundary_key, source_start_seq, source_end_seq, source_refs_json,"
            " content, relevance, timestamp, token_count, observer_model, created_at"
            " FROM om_observation WHERE run_id = ? ORDER BY source_start_seq, rowid",
            session_id,
        )
    )
    events: tuple[EventRow, ...] = ()
    truncated = False
    if "omray_transcript" in names:
        rows = conn.execute(
            "SELECT event_id, seq, event_type, timestamp, substr(content, 1, ?), length(content)"
            " FROM omray_transcript WHERE run_id = ? ORDER BY seq LIMIT ?",
            (EXCERPT_CHARS, session_id, TIMELINE_EVENT_LIMIT + 1),
        ).fetchall()
        truncated = len(rows) > TIMELINE_EVENT_LIMIT
        events = tuple(EventRow(*row) for row in rows[:TIMELINE_EVENT_LIMIT])
    generations, reflections, active = _generations(conn, names, session_id)
    return TimelineRows(parts, observations, events, truncated, generations, reflections, active)


def _generations(
    conn: sqlite3.Connection, names: frozenset[str], session_id: str
) -> tuple[tuple[GenerationRow, ...], tuple[ReflectionRow, ...], str | None]:
    wanted = {
        "om_memory_generation",
        "om_generation_reflection",
        "om_generation_retained_observation",
        "om_active_generation",
        "om_reflection",
    }
    if not wanted <= names:
        return (), (), None
    members = _generation_members(conn, "om_generation_reflection", "reflection_id", session_id)
    retained = _generation_members(conn, "om_generation_retained_observation", "observation_id", session_id)
    generations = tuple(
        GenerationRow(
            generation_id=str(row[0]),
            trigger_kind=str(row[1]),
            status=str(row[2]),
            required_end_seq=None if row[3] is None else int(row[3]),
            reflector_model=str(row[4]),
            failure_code=None if row[5] is None else str(row[5]),
            created_at=str(row[6]),
            completed_at=None if row[7] is None else str(row[7]),
            reflection_ids=tuple(members.get(str(row[0]), ())),
            retained_ids=tuple(retained.get(str(row[0]), ())),
        )
        for row in conn.execute(
            "SELECT generation_id, trigger_kind, status, required_end_seq, reflector_model, failure_code,"
            " created_at, completed_at FROM om_memory_generation WHERE run_id = ?"
            " ORDER BY created_at, generation_id",
            (session_id,),
        )
    )
    reflections = tuple(
        ReflectionRow(str(row[0]), str(row[1]), _ids(str(row[2])), int(row[3]), str(row[4]), str(row[5]))
        for row in conn.execute(
            "SELECT reflection_id, content, supporting_observation_ids_json, token_count, reflector_model,"
            " created_at FROM om_reflection WHERE run_id = ? ORDER BY created_at, reflection_id",
            (session_id,),
        )
    )
    active = conn.execute(
        "SELECT generation_id FROM om_active_generation WHERE run_id = ?", (session_id,)
    ).fetchone()
    return generations, reflections, (str(active[0]) if active else None)


def _generation_members(
    conn: sqlite3.Connection, table: str, column: str, session_id: str
) -> dict[str, list[str]]:
    """The member ids of each generation in ``table`` (its ``column``), in position order."""
    members: dict[str, list[str]] = {}
    for generation_id, member_id in conn.execute(
        f"SELECT g.generation_id, r.{column} FROM {table} AS r"
        " JOIN om_memory_generation AS g ON g.generation_id = r.generation_id"
        " WHERE g.run_id = ? ORDER BY g.generation_id, r.position",
        (session_id,),
    ):
        members.setdefault(str(generation_id), []).append(str(member_id))
    return members


def _source_excerpts(conn: sqlite3.Connection, observation_ids: list[str]) -> dict[str, tuple[int, str]]:
    found: dict[str, tuple[int, str]] = {}
    for batch, marks in in_batches(observation_ids):
        for observation_id, seq, excerpt in conn.execute(
            "SELECT r.observation_id, r.seq, substr(t.content, 1, ?) FROM omray_observation_ref AS r"
            " JOIN omray_transcript AS t ON t.run_id = r.run_id AND t.seq = r.seq"
            f" WHERE r.observation_id IN ({marks}) ORDER BY r.observation_id, r.seq",
            (EXCERPT_CHARS, *batch),
        ):
            found.setdefault(str(observation_id), (int(seq), str(excerpt)))
    return found
