"""Names and SQL of the projection's derived tables, with the standard library only.

The projection lists a session's observations in the order of their source: by the first event
they cite (:data:`FIRST_SOURCE_SEQ_SQL`), then in the order they were recorded (the row's
``rowid`` in ``om_observation``: insertion order, so a part's observations keep the order the
Observer gave them). Never by id, never by the minute the Observer wrote: two observations of
one minute are shown in the order of the events they describe.

This module imports nothing but the standard library, so an agent hook can read the projection
(``persistence.reads.projection``) without loading SQLAlchemy or pydantic.
"""

from __future__ import annotations

from typing import Final

OBSERVATION_LINE_TABLE: Final = "omray_projection_line"
"""Each observation's projection entry line, clustered by ``(run_id, order_key)``."""

OBSERVATION_LINE_SQL: Final = (
    "'[' || lower(substr({row}observation_id, 1, 12)) || '] ' || {row}timestamp || ' [' || {row}relevance"
    " || '] ' || {row}content"
)
"""An observation's projection line in SQL (``{row}``: a row prefix such as ``new.``), the format of
``actors.read.projector.render_active_memory``; a differential test keeps the two equal."""

PROJECTION_CACHE_TABLE: Final = "omray_projection_piece"
"""Per session, its projection's observation text as last rendered, in pieces of consecutive lines."""

PROJECTION_BUILT_TABLE: Final = "omray_projection_piece_built"
"""Per session, the session version its rendered pieces show."""

SESSION_VERSION_TABLE: Final = "omray_session_version"
"""Per session, a counter that every write to what its projection shows increments (by triggers)."""

PROJECTION_DIRTY_TABLE: Final = "omray_projection_piece_dirty"
"""Sessions whose pieces a writer has not rendered again since they changed, each with the first
``(order_key, observation_id)`` a change touched (``''``: everything)."""

_REF_SEQ: Final = (
    "CASE json_type(r.value, '$.seq') WHEN 'integer' THEN json_extract(r.value, '$.seq')"
    " WHEN 'real' THEN CAST(json_extract(r.value, '$.seq') AS INTEGER)"
    " WHEN 'text' THEN CASE WHEN json_extract(r.value, '$.seq') GLOB '[0-9]*'"
    " AND json_extract(r.value, '$.seq') NOT GLOB '*[^0-9]*'"
    " THEN CAST(json_extract(r.value, '$.seq') AS INTEGER) END END"
)
_REF_SESSION_ID: Final = (
    "CAST(CASE WHEN json_type(r.value, '$.run_id') IS NOT NULL THEN json_extract(r.value, '$.run_id')"
    " ELSE json_extract(r.value, '$.runId') END AS TEXT)"
)

FIRST_SOURCE_SEQ_SQL: Final = (
    "coalesce((SELECT min(s) FROM (SELECT " + _REF_SEQ + " AS s FROM json_each(CASE WHEN"
    " json_valid({row}source_refs_json) AND json_type({row}source_refs_json) = 'array'"
    " THEN {row}source_refs_json ELSE '[]' END) r WHERE r.type = 'object' AND "
    + _REF_SESSION_ID
    + " = {row}run_id) WHERE s >= 1), {row}source_start_seq)"
)
"""An observation's first source seq in SQL (``{row}``: a row prefix): the smallest seq it cites in
its own session (refs read as ``protocol.identities.normalize_source_refs`` reads them, the PHP
``runId`` spelling included), else the start of its part. A malformed ``source_refs_json`` counts
as no refs, so a trigger never fails on another writer's row.
``protocol.records.ObservationRecord.first_source_seq`` is the same rule in Python."""

ORDER_KEY_SQL: Final = "printf('%020d.%020d', " + FIRST_SOURCE_SEQ_SQL + ", {row}rowid)"
"""An observation's place in the projection as text that sorts like ``(first source seq, rowid)``."""

OBSERVATION_ORDER_SQL: Final = FIRST_SOURCE_SEQ_SQL + ", {row}rowid, {row}observation_id"
"""``ORDER BY`` terms of the projection order over ``om_observation`` rows (``{row}``: a prefix)."""
