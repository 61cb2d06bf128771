"""Forgetting memory: the canonical rows and their derived copies, in one transaction.

Called by :meth:`persistence.writers.store.Store.forget` inside its transaction (the StoreActor is the only
writer). What each request removes:

- an **observation** id: the observation (its exact-search trigram row, projection line and
  citation rows go with it, by the triggers of ``omray_010``/``omray_011``/``omray_012``) and its
  place in any generation's retained set. The events it was written from stay in the transcript.
- a **reflection** id: the reflection and its place in its generation.
- an **event range** ``a..b`` of a session: the transcript rows of those events (and their trigram
  rows). Observations written from them stay unless forgotten too.
- a **whole session**: every observation, reflection, generation, transcript row, live activity
  row, legacy compaction row and unfinished observe-start pin of the session.

Coverage rows stay: coverage means "the Observer was shown these events", and a forgotten session
is never observed again from its events file (its coverage still reaches as far as it did; the
transcript watermark moves to the coverage end so no index job backfills the forgotten events from
the file). Every forgotten id and range is recorded in ``omray_forgotten`` (ids and seqs, never
text), and :func:`forgotten_observation_ids` / :func:`drop_forgotten_events` keep later writes
(a replayed observe part, a transcript backfill) from writing them again. The hybrid index is
derived: search drops every hit whose canonical row is gone at once, and the next index job
rebuilds the index without them. The exact-search trigram indexes are merged in the same
transaction, so no trigram of forgotten text stays in the file (:func:`purge_trigram_indexes`).

Token usage rows (counts only, no text) and coverage rows are kept.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, text

from protocol.forget import ForgetRequest

KILL_POINT_ENV = "OMRAY_TEST_KILL_IN_FORGET"
"""Test hook: when set to ``after_delete``, the process is killed (``os._exit``) inside the forget
transaction, after its deletes and before its commit (the crash-safety test uses it)."""


@dataclass
class ForgetResult:
    """What a forget removed (ids and counts only)."""

    observations: list[str] = field(default_factory=list)
    reflections: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    transcript_events: int = 0
    generations: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "observations": sorted(self.observations),
            "reflections": sorted(self.reflections),
            "unknown": sorted(self.unknown),
            "transcript_events": self.transcript_events,
            "generations": self.generations,
        }


def _ids(conn: Connection, sql: str, params: dict[str, Any]) -> list[str]:
    return [str(row[0]) for row in conn.execute(text(sql), params)]


def _in_list(values: Sequence[str]) -> tuple[str, dict[str, Any]]:
    names = {f"i{n}": value for n, value in enumerate(values)}
    return ", ".join(f":{name}" for name in names), names


def _tombstone(
    conn: Connection,
    forgotten_id: str,
    session_id: str,
    kind: str,
    job_id: str,
    now: str,
    seq_start: int | None = None,
    seq_end: int | None = None,
) -> None:
    conn.execute(
        text(
            "INSERT INTO omray_forgotten"
            " (forgotten_id, run_id, kind, seq_start, seq_end, job_id, forgotten_at)"
            " VALUES (:id, :run, :kind, :a, :b, :job, :now) ON CONFLICT (forgotten_id) DO UPDATE SET"
            " seq_start = excluded.seq_start, seq_end = max(coalesce(seq_end, 0), excluded.seq_end),"
            " job_id = excluded.job_id, forgotten_at = excluded.forgotten_at"
        ),
        {
            "id": forgotten_id,
            "run": session_id,
            "kind": kind,
            "a": seq_start,
            "b": seq_end,
            "job": job_id,
            "now": now,
        },
    )


def _forget_memories(
    conn: Connection, session_id: str, ids: Sequence[str], job_id: str, now: str
) -> ForgetResult:
    result = ForgetResult()
    if not ids:
        return result
    marks, params = _in_list(ids)
    params["run"] = session_id
    observations = _ids(
        conn,
        f"SELECT observation_id FROM om_observation WHERE run_id = :run AND observation_id IN ({marks})",
        params,
    )
    reflections = _ids(
        conn,
        f"SELECT reflection_id FROM om_reflection WHERE run_id = :run AND reflection_id IN ({marks})",
        params,
    )
    for observation_id in observations:
        _tombstone(conn, observation_id, session_id, "observation", job_id, now)
    for reflection_id in reflections:
        _tombstone(conn, reflection_id, session_id, "reflection", job_id, now)
    if observations:
        obs_marks, obs_params = _in_list(observations)
        conn.execute(
            text(f"DELETE FROM om_generation_retained_observation WHERE observation_id IN ({obs_marks})"),
            obs_params,
        )
        conn.execute(text(f"DELETE FROM om_observation WHERE observation_id IN ({obs_marks})"), obs_params)
    if reflections:
        ref_marks, ref_params = _in_list(reflections)
        conn.execute(
            text(f"DELETE FROM om_generation_reflection WHERE reflection_id IN ({ref_marks})"), ref_params
        )
        conn.execute(text(f"DELETE FROM om_reflection WHERE reflection_id IN ({ref_marks})"), ref_params)
    found = set(observations) | set(reflections)
    already = set(
        _ids(
            conn,
            f"SELECT forgotten_id FROM omray_forgotten WHERE run_id = :run AND forgotten_id IN ({marks})",
            params,
        )
    )
    result.observations = observations
    result.reflections = reflections
    result.unknown = [memory_id for memory_id in ids if memory_id not in found and memory_id not in already]
    return result


def _forget_events(
    conn: Connection,
    session_id: str,
    start: int,
    end: int,
    forgotten_id: str,
    kind: str,
    job_id: str,
    now: str,
) -> int:
    _tombstone(conn, forgotten_id, session_id, kind, job_id, now, start, end)
    removed = conn.execute(
        text("DELETE FROM omray_transcript WHERE run_id = :run AND seq BETWEEN :a AND :b"),
        {"run": session_id, "a": start, "b": end},
    )
    return int(removed.rowcount or 0)


def _forget_session(conn: Connection, session_id: str, job_id: str, now: str, result: ForgetResult) -> None:
    params = {"run": session_id}
    covered = conn.execute(
        text("SELECT max(source_end_seq) FROM om_coverage WHERE run_id = :run"), params
    ).scalar()
    transcribed = conn.execute(
        text("SELECT max(seq) FROM omray_transcript WHERE run_id = :run"), params
    ).scalar()
    end = max(int(covered or 0), int(transcribed or 0))
    memories = _ids(conn, "SELECT observation_id FROM om_observation WHERE run_id = :run", params)
    memories += _ids(conn, "SELECT reflection_id FROM om_reflection WHERE run_id = :run", params)
    found = _forget_memories(conn, session_id, memories, job_id, now)
    result.observations += found.observations
    result.reflections += found.reflections
    result.transcript_events += _forget_events(
        conn, session_id, 1, end, f"session:{session_id}", "session", job_id, now
    )
    generations = "SELECT generation_id FROM om_memory_generation WHERE run_id = :run"
    conn.execute(text(f"DELETE FROM om_generation_reflection WHERE generation_id IN ({generations})"), params)
    conn.execute(
        text(f"DELETE FROM om_generation_retained_observation WHERE generation_id IN ({generations})"), params
    )
    conn.execute(text("DELETE FROM om_active_generation WHERE run_id = :run"), params)
    result.generations = int(
        conn.execute(text("DELETE FROM om_memory_generation WHERE run_id = :run"), params).rowcount or 0
    )
    for table in (
        "om_current_activity",
        "om_compaction_result",
        "om_compaction_request",
        "omray_observe_start",
    ):
        conn.execute(text(f"DELETE FROM {table} WHERE run_id = :run"), params)
    if end < 1:
        return
    # No index job backfills the forgotten events from the events file: the watermark reaches the end.
    conn.execute(
        text(
            "INSERT INTO omray_transcript_through (run_id, through_seq) VALUES (:run, :end)"
            " ON CONFLICT (run_id) DO UPDATE SET through_seq = max(through_seq, excluded.through_seq)"
        ),
        {"run": session_id, "end": end},
    )


def forget_rows(conn: Connection, request: ForgetRequest, job_id: str, now: str) -> ForgetResult:
    """Remove what ``request`` names inside the caller's transaction; record it in ``omray_forgotten``
    and the request in ``omray_forget_request``. Idempotent: forgetting again removes nothing more
    and reports ids never stored as ``unknown``."""
    result = ForgetResult()
    if request.whole_session:
        _forget_session(conn, request.session_id, job_id, now, result)
    ids = [memory_id for memory_id in dict.fromkeys(request.memory_ids)]
    if ids and not request.whole_session:
        found = _forget_memories(conn, request.session_id, ids, job_id, now)
        result.observations += found.observations
        result.reflections += found.reflections
        result.unknown += found.unknown
    for start, end in request.event_ranges:
        result.transcript_events += _forget_events(
            conn,
            request.session_id,
            start,
            end,
            f"events:{request.session_id}:{start}-{end}",
            "events",
            job_id,
            now,
        )
    if result.observations or result.reflections or result.transcript_events:
        purge_trigram_indexes(conn, result)
    if os.environ.get(KILL_POINT_ENV) == "after_delete":
        os._exit(137)  # the crash-safety test: killed with the transaction open
    conn.execute(
        text(
            "INSERT INTO omray_forget_request (job_id, run_id, result_json, finished_at)"
            " VALUES (:job, :run, :r, :now) ON CONFLICT (job_id) DO NOTHING"
        ),
        {
            "job": job_id,
            "run": request.session_id,
            "r": json.dumps(result.as_dict(), sort_keys=True),
            "now": now,
        },
    )
    return result


_TRIGRAM_TABLES: dict[str, str] = {
    "observations": "omray_observation_trigram",
    "reflections": "omray_reflection_trigram",
    "transcript_events": "omray_transcript_trigram",
}
"""The exact-search FTS5 index of each kind of row a forget removes (``persistence.database.migrations``)."""


def purge_trigram_indexes(conn: Connection, result: ForgetResult) -> None:
    """Merge the FTS5 index of each kind of row ``result`` removed into one segment.

    An FTS5 delete only appends a delete marker: the forgotten text's trigrams (and positions, from
    which it can be read back) stay in the older segments until they are merged. ``optimize``
    merges them all, dropping the deleted entries, and ``secure_delete`` (set by the caller)
    overwrites the pages the old segments free. It rewrites the index, so it runs only for the kinds
    of rows this forget removed; SQLite's FTS5 ``secure-delete`` option (3.42) would avoid that.
    """
    present = {
        str(row[0]) for row in conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))
    }
    for kind, table in _TRIGRAM_TABLES.items():
        if getattr(result, kind) and table in present:  # absent when this SQLite has no trigram
            conn.execute(text(f"INSERT INTO {table}({table}) VALUES ('optimize')"))


def forgotten_observation_ids(conn: Connection, ids: Iterable[str]) -> set[str]:
    """Which of ``ids`` were forgotten (never to be inserted again)."""
    wanted = list(dict.fromkeys(ids))
    found: set[str] = set()
    for start in range(0, len(wanted), 500):
        marks, params = _in_list(wanted[start : start + 500])
        found.update(
            _ids(conn, f"SELECT forgotten_id FROM omray_forgotten WHERE forgotten_id IN ({marks})", params)
        )
    return found


def forgotten_ranges(conn: Connection, session_id: str) -> list[tuple[int, int]]:
    """The forgotten event ranges of a session (whole-session forgets included)."""
    rows = conn.execute(
        text(
            "SELECT seq_start, seq_end FROM omray_forgotten"
            " WHERE run_id = :run AND kind IN ('events', 'session')"
        ),
        {"run": session_id},
    )
    return [(int(row[0]), int(row[1])) for row in rows]


def in_ranges(seq: int, ranges: Sequence[tuple[int, int]]) -> bool:
    """Whether ``seq`` lies in one of ``ranges`` (inclusive)."""
    return any(start <= seq <= end for start, end in ranges)
