"""Read-only queries of ``omray memory forget``: which memory an id names, what was forgotten, and
whether a forget job finished (any process; the writes are in :mod:`persistence.writers.forget`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection, text

from persistence.reads.memory_reader import MemoryReader

MemoryKind = Literal["observation", "reflection"]


@dataclass(frozen=True)
class LocatedId:
    """What one id given to ``forget`` names."""

    given: str
    status: Literal["found", "forgotten", "unknown", "ambiguous"]
    memory_id: str | None = None
    kind: MemoryKind | None = None
    session_id: str | None = None


_FIND = (
    "SELECT observation_id, 'observation', run_id FROM om_observation WHERE observation_id >= :lo"
    " AND observation_id < :hi UNION ALL SELECT reflection_id, 'reflection', run_id FROM om_reflection"
    " WHERE reflection_id >= :lo AND reflection_id < :hi LIMIT 2"
)
_FORGOTTEN = (
    "SELECT forgotten_id, kind, run_id FROM omray_forgotten WHERE forgotten_id >= :lo AND forgotten_id < :hi"
    " AND kind IN ('observation', 'reflection') LIMIT 2"
)


class ForgetReader(MemoryReader):
    """Read-only lookups for forgetting (never creates or writes the file)."""

    def locate(self, ids: Sequence[str]) -> list[LocatedId]:
        """Each id (lower-case hex, the full 64 characters or a prefix of 12 or more) as found, already
        forgotten, unknown, or ambiguous (a prefix of more than one memory)."""

        def query(conn: Connection) -> list[LocatedId]:
            has_forgotten = bool(
                conn.execute(
                    text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'omray_forgotten'")
                ).first()
            )
            return [_locate_one(conn, given, has_forgotten) for given in ids]

        return self._run(
            query, [LocatedId(given, "unknown") for given in ids], ("om_observation", "om_reflection")
        )

    def session_known(self, session_id: str) -> bool:
        """Whether the database holds anything of ``session_id`` (memory, coverage or transcript)."""

        def query(conn: Connection) -> bool:
            for table in ("om_observation", "om_reflection", "om_coverage", "omray_transcript"):
                if conn.execute(
                    text(f"SELECT 1 FROM {table} WHERE run_id = :r LIMIT 1"), {"r": session_id}
                ).first():
                    return True
            return False

        return self._run(query, False, ("om_observation", "om_reflection", "om_coverage", "omray_transcript"))

    def forgotten_ranges(self, session_id: str) -> list[tuple[int, int]]:
        """The forgotten event ranges of ``session_id`` (recall leaves their events out)."""
        from persistence.writers.forget import forgotten_ranges

        return self._run(lambda conn: forgotten_ranges(conn, session_id), [], ("omray_forgotten",))

    def forget_result(self, job_id: str) -> dict[str, Any] | None:
        """The result of forget job ``job_id`` once its transaction committed, else ``None``."""

        def query(conn: Connection) -> dict[str, Any] | None:
            row = conn.execute(
                text("SELECT result_json FROM omray_forget_request WHERE job_id = :job"), {"job": job_id}
            ).first()
            return None if row is None else dict(json.loads(row[0]))

        return self._run(query, None, ("omray_forget_request",))


def _bounds(prefix: str) -> dict[str, str]:
    return {"lo": prefix, "hi": prefix + "g"}  # ids are lower-case hex: every extension sorts below "g"


def _locate_one(conn: Connection, given: str, has_forgotten: bool) -> LocatedId:
    rows = conn.execute(text(_FIND), _bounds(given)).all()
    if len(rows) > 1:
        return LocatedId(given, "ambiguous")
    if rows:
        memory_id, kind, session_id = rows[0]
        return LocatedId(given, "found", str(memory_id), kind, str(session_id))
    if has_forgotten:
        gone = conn.execute(text(_FORGOTTEN), _bounds(given)).all()
        if len(gone) == 1:
            memory_id, kind, session_id = gone[0]
            return LocatedId(given, "forgotten", str(memory_id), kind, str(session_id))
    return LocatedId(given, "unknown")
