"""Read-only queries of the compaction projection (reference §8, §10.2), on a plain ``sqlite3`` connection.

The selection is that of ``persistence.reads.memory_reader.select_active_candidate_set``: the active
generation's reflections; its retained observations plus those past its watermark, or every
observation of the session before the first generation succeeded. Observations come in source
order (``persistence.reads.projection_sql``: first source seq, then recorded order).

Standard library only (``sqlite3``), so an agent hook can render the projection without loading
SQLAlchemy or pydantic.

Two shapes: :class:`ProjectionRows` (the shown columns of each memory) and :class:`ProjectionLines`
(the entry lines already rendered, compaction's path). The observation lines come from
``omray_projection_line`` (migrations ``omray_006``, ``omray_012``: each line rendered once, when
its row was written, stored in projection order and clustered by session), or are rendered by
SQLite per row on a database without that table (one the PHP extension wrote, or one no omray of
this version has opened for writing yet). Both follow ``actors.read.projector.render_active_memory``,
which a differential test keeps them equal to.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from persistence.reads.projection_sql import (
    FIRST_SOURCE_SEQ_SQL,
    OBSERVATION_LINE_SQL,
    OBSERVATION_LINE_TABLE,
    OBSERVATION_ORDER_SQL,
    PROJECTION_BUILT_TABLE,
    PROJECTION_CACHE_TABLE,
    PROJECTION_DIRTY_TABLE,
    SESSION_VERSION_TABLE,
)

if TYPE_CHECKING:
    from protocol.records import Relevance

ACTIVE_MEMORY_TABLES: Final = (
    "om_observation",
    "om_reflection",
    "om_active_generation",
    "om_memory_generation",
    "om_generation_reflection",
    "om_generation_retained_observation",
)
"""The tables the active-memory selection reads."""


@dataclass(frozen=True, slots=True)
class ProjectedObservation:
    """What the projection shows of an active observation."""

    observation_id: str
    """Observation id."""
    timestamp: str
    """``YYYY-MM-DD HH:MM``."""
    relevance: Relevance
    """Observer's rating."""
    content: str
    """Text."""
    first_source_seq: int
    """The first event of its session it cites (``persistence.reads.projection_sql.FIRST_SOURCE_SEQ_SQL``)."""


@dataclass(frozen=True, slots=True)
class ProjectedReflection:
    """What the projection shows of an active reflection."""

    reflection_id: str
    """Reflection id."""
    position: int
    """Position in the active generation."""
    content: str
    """Text."""


@dataclass(frozen=True, slots=True)
class ProjectionLines:
    """A session's active memory as rendered entry lines, in projection order, from one snapshot.

    For tens of thousands of active memories, building one Python object per column (or per
    row) costs more than the query, so the observations come as one text.
    """

    reflection_lines: tuple[str, ...]
    """``[<display id>] <content>``, by position, then id."""
    observation_text: str
    """The lines ``[<display id>] <timestamp> [<relevance>] <content>``, in source order, joined by
    ``"\\n"`` (``""`` when there are none)."""


@dataclass(frozen=True, slots=True)
class ProjectionRows:
    """A session's active reflections and observations, in projection order, from one snapshot."""

    reflections: tuple[ProjectedReflection, ...]
    """By position, then id."""
    observations: tuple[ProjectedObservation, ...]
    """In source order (first source seq, then recorded order)."""


_ACTIVE_GENERATION_SQL: Final = (
    "SELECT g.generation_id, g.status, g.required_end_seq FROM om_memory_generation g "
    "JOIN om_active_generation a ON a.generation_id = g.generation_id WHERE a.run_id = :run_id"
)
_REFLECTIONS_SQL: Final = (
    "SELECT {columns} FROM om_reflection r "
    "JOIN om_generation_reflection l ON l.reflection_id = r.reflection_id "
    "JOIN om_active_generation a ON a.generation_id = l.generation_id "
    "WHERE a.run_id = :run_id ORDER BY l.position ASC, r.reflection_id ASC"
)
_OBSERVATIONS_SQL: Final = "SELECT {columns} FROM {source} WHERE run_id = :run_id{pool} ORDER BY {order}"
_LINE_ORDER: Final = "order_key ASC, observation_id ASC"
_ROW_ORDER: Final = OBSERVATION_ORDER_SQL.format(row="om_observation.")
_POOL_AFTER_GENERATION: Final = (
    # The cheap test first: SQLite stops at the first true term, so an observation past the
    # watermark (most of a busy pool) costs no lookup in the retained set.
    " AND (source_end_seq > :required_end_seq OR observation_id IN (SELECT observation_id"
    " FROM om_generation_retained_observation WHERE generation_id = :generation_id))"
)
_REFLECTION_LINE: Final = "'[' || lower(substr(r.reflection_id, 1, 12)) || '] ' || r.content"


def _pool(conn: sqlite3.Connection, params: dict[str, Any]) -> str:
    """The pool filter of the session's active generation (``""``: every observation), binding its values."""
    generation = conn.execute(_ACTIVE_GENERATION_SQL, params).fetchone()
    if generation is None or generation[1] != "succeeded" or not isinstance(generation[2], int):
        return ""
    params["generation_id"], params["required_end_seq"] = generation[0], generation[2]
    return _POOL_AFTER_GENERATION


_CURRENT_PIECES_SQL: Final = (
    f"SELECT 1 FROM {PROJECTION_BUILT_TABLE} b JOIN {SESSION_VERSION_TABLE} v"
    " ON v.run_id = b.run_id AND v.version = b.version WHERE b.run_id = :run_id"
)
_PIECES_TEXT_SQL: Final = (
    f"SELECT group_concat(lines, char(10)) FROM (SELECT lines FROM {PROJECTION_CACHE_TABLE}"
    " WHERE run_id = :run_id ORDER BY piece)"
)
PIECE_LINES: Final = 256
"""Lines per rendered piece: an append rewrites at most this many."""


def select_projection_lines(
    conn: sqlite3.Connection, session_id: str, names: Collection[str]
) -> ProjectionLines:
    """The session's active memory as :class:`ProjectionLines` (``names``: the database's table names).

    The observation text is the one rendered at write time (migration ``omray_012``) when its
    pieces show the session's current version; otherwise it is rendered here from the lines.
    """
    params: dict[str, Any] = {"run_id": session_id}
    reflections = conn.execute(_REFLECTIONS_SQL.format(columns=_REFLECTION_LINE), params).fetchall()
    if _pieces_present(names) and conn.execute(_CURRENT_PIECES_SQL, params).fetchone() is not None:
        observation_text = conn.execute(_PIECES_TEXT_SQL, params).fetchone()[0] or ""
    else:
        observation_text = render_observation_text(conn, session_id, names)
    return ProjectionLines(
        reflection_lines=tuple(row[0] for row in reflections), observation_text=observation_text
    )


Assemble = Callable[[Sequence[str], Sequence[str]], str]
"""Builds the projection from reflection and observation lines (``actors.read.projector``'s format)."""


def select_projection_text(
    conn: sqlite3.Connection, session_id: str, names: Collection[str], assemble: Assemble
) -> str:
    """The session's projection as one text, built by ``assemble`` (``names``: the database's tables).

    With current pieces (migration ``omray_012``) the frame that ``assemble`` writes before the
    observations and every piece are joined as bytes and decoded once, the cheapest way out for a
    large projection (a fresh 600 KB string costs about a millisecond on a small VM).
    """
    params: dict[str, Any] = {"run_id": session_id}
    reflections = [row[0] for row in conn.execute(_REFLECTIONS_SQL.format(columns=_REFLECTION_LINE), params)]
    if _pieces_present(names) and conn.execute(_CURRENT_PIECES_SQL, params).fetchone() is not None:
        # The pieces as bytes, joined as bytes and decoded once: a text value per piece, or one
        # built by group_concat, costs a decode (or a copy inside SQLite) more on this path.
        pieces = conn.execute(
            f"SELECT CAST(lines AS BLOB) FROM {PROJECTION_CACHE_TABLE} WHERE run_id = :run_id ORDER BY piece",
            params,
        ).fetchall()
        if not pieces:
            return assemble(reflections, ())
        # The frame with one empty observation line ends in the newline the first piece follows.
        frame = assemble(reflections, ("",))[:-1]
        return b"\n".join([frame.encode(), *(row[0] for row in pieces)]).decode()
    observation_text = render_observation_text(conn, session_id, names)
    return assemble(reflections, (observation_text,) if observation_text else ())


def render_observation_text(conn: sqlite3.Connection, session_id: str, names: Collection[str]) -> str:
    """The session's active observations as projection lines joined by ``"\\n"``, read from the lines."""
    params: dict[str, Any] = {"run_id": session_id}
    pool = _pool(conn, params)
    if OBSERVATION_LINE_TABLE in names:
        # One text built by SQLite: a Python string per row costs more than the rest of the query.
        # The subquery's order is the stored lines' clustered primary key, the table's only access
        # path, so the rows reach group_concat in projection order.
        lines = _OBSERVATIONS_SQL.format(
            columns="line", source=OBSERVATION_LINE_TABLE, pool=pool, order=_LINE_ORDER
        )
        joined = conn.execute(f"SELECT group_concat(line, char(10)) FROM ({lines})", params).fetchone()[0]
        observation_text = joined or ""
    else:
        line = OBSERVATION_LINE_SQL.format(row="")
        sql = _OBSERVATIONS_SQL.format(columns=line, source="om_observation", pool=pool, order=_ROW_ORDER)
        observation_text = "\n".join([row[0] for row in conn.execute(sql, params).fetchall()])
    return observation_text


def _pieces_present(names: Collection[str]) -> bool:
    return {PROJECTION_CACHE_TABLE, PROJECTION_BUILT_TABLE, SESSION_VERSION_TABLE} <= set(names)


_Key = tuple[str, str]


def render_dirty_projections(conn: sqlite3.Connection, names: Collection[str]) -> int:
    """Render again the pieces of every session marked dirty, in the caller's transaction.

    Triggers (migration ``omray_012``) mark a session, with the first line a change touched, when
    anything its projection shows changed, in this transaction or in one by another writer (the PHP
    extension). The pieces before that line are kept; the first piece that may hold it (or the
    last piece, to fill it up) and every later one are rendered again from the lines, so an
    observation that arrives in source order rewrites one piece. The pieces are stored with the
    session's version, which readers check before using them. Returns how many were rendered.
    """
    if (
        PROJECTION_DIRTY_TABLE not in names
        or OBSERVATION_LINE_TABLE not in names
        or not _pieces_present(names)
    ):
        return 0
    dirty = conn.execute(f"SELECT run_id, from_key, from_id FROM {PROJECTION_DIRTY_TABLE}").fetchall()
    for session_id, from_key, from_id in dirty:
        _render_pieces(conn, session_id, (from_key, from_id))
    if dirty:
        conn.execute(f"DELETE FROM {PROJECTION_DIRTY_TABLE}")
    return len(dirty)


def _render_pieces(conn: sqlite3.Connection, session_id: str, changed_from: _Key) -> None:
    params: dict[str, Any] = {"run_id": session_id}
    if (
        conn.execute(f"SELECT 1 FROM {PROJECTION_BUILT_TABLE} WHERE run_id = :run_id", params).fetchone()
        is None
    ):
        changed_from = ("", "")  # never rendered: from the start
    params["k"], params["i"] = changed_from
    first = conn.execute(
        f"SELECT piece FROM {PROJECTION_CACHE_TABLE} WHERE run_id = :run_id"
        " AND (last_key > :k OR (last_key = :k AND last_id >= :i)) ORDER BY piece LIMIT 1",
        params,
    ).fetchone()
    if first is None:  # every change lies past the last piece: fill that one up
        first = conn.execute(
            f"SELECT piece FROM {PROJECTION_CACHE_TABLE} WHERE run_id = :run_id ORDER BY piece DESC LIMIT 1",
            params,
        ).fetchone()
    start = 0 if first is None else int(first[0])
    kept = conn.execute(
        f"SELECT last_key, last_id FROM {PROJECTION_CACHE_TABLE} WHERE run_id = :run_id AND piece = :piece",
        {**params, "piece": start - 1},
    ).fetchone()
    conn.execute(
        f"DELETE FROM {PROJECTION_CACHE_TABLE} WHERE run_id = :run_id AND piece >= :start",
        {**params, "start": start},
    )
    pool = _pool(conn, params)
    after = ""
    if kept is not None:
        params["after_key"], params["after_id"] = kept
        after = " AND (order_key > :after_key OR (order_key = :after_key AND observation_id > :after_id))"
    rows = conn.execute(
        f"SELECT order_key, observation_id, line FROM {OBSERVATION_LINE_TABLE} WHERE run_id = :run_id"
        f"{pool}{after} ORDER BY {_LINE_ORDER}",
        params,
    ).fetchall()
    conn.executemany(
        f"INSERT INTO {PROJECTION_CACHE_TABLE}"
        " (run_id, piece, first_key, first_id, last_key, last_id, lines) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (
                session_id,
                start + n,
                part[0][0],
                part[0][1],
                part[-1][0],
                part[-1][1],
                "\n".join(r[2] for r in part),
            )
            for n, part in enumerate(rows[i : i + PIECE_LINES] for i in range(0, len(rows), PIECE_LINES))
        ],
    )
    conn.execute(
        f"INSERT INTO {PROJECTION_BUILT_TABLE} (run_id, version) SELECT run_id, version FROM"
        f" {SESSION_VERSION_TABLE} WHERE run_id = :run_id"
        " ON CONFLICT (run_id) DO UPDATE SET version = excluded.version",
        params,
    )


def select_projection(conn: sqlite3.Connection, session_id: str) -> ProjectionRows:
    """The session's active memory as :class:`ProjectionRows`."""
    params: dict[str, Any] = {"run_id": session_id}
    reflection_rows = conn.execute(
        _REFLECTIONS_SQL.format(columns="r.reflection_id, l.position, r.content"), params
    ).fetchall()
    pool = _pool(conn, params)
    columns = "observation_id, timestamp, relevance, content, " + FIRST_SOURCE_SEQ_SQL.format(
        row="om_observation."
    )
    rows = conn.execute(
        _OBSERVATIONS_SQL.format(columns=columns, source="om_observation", pool=pool, order=_ROW_ORDER),
        params,
    ).fetchall()
    return ProjectionRows(
        reflections=tuple(ProjectedReflection(*row) for row in reflection_rows),
        observations=tuple(ProjectedObservation(*row) for row in rows),
    )


def read_projection_lines(db_path: str, session_id: str) -> tuple[list[str], list[str]]:
    """The session's active memory as entry lines ``(reflections, observations)``, in projection
    order (:func:`select_projection_lines`, the lines of the text ``actors.read.service.project``
    returns), read on a read-only ``sqlite3`` connection; none when the file or its tables are
    missing. What an agent hook adds to a compacted session (``cluster.commands.hook_fast``)."""
    if not os.path.isfile(db_path):
        return [], []
    uri = "file:" + db_path.replace("?", "%3f").replace("#", "%23") + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=5.0)
    try:
        conn.execute("PRAGMA query_only = ON")
        conn.execute("BEGIN")
        names = frozenset(
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")
        )
        if not names.issuperset(ACTIVE_MEMORY_TABLES):
            return [], []
        lines = select_projection_lines(conn, session_id, names)
    finally:
        conn.close()
    observations = lines.observation_text.split("\n") if lines.observation_text else []
    return list(lines.reflection_lines), observations
