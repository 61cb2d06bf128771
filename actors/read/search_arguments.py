"""``memory_search`` arguments into a ``SearchRequest`` (reference §13.2).

The checks are the tool's typed model, :class:`protocol.read_arguments.MemorySearchArguments`
(unknown keys, then the reference's order: types, blank query, bound format, real calendar date,
``after <= before``, limit, then ``scope``, ``mode`` and ``query_date``); each failure is a typed
error answer the model can correct, and nothing is searched. This module turns the checked
arguments into the request exact and hybrid search read, with the date bounds normalized per table.
"""

from __future__ import annotations

from collections.abc import Mapping

from actors.read.answers import ToolResult, error_result
from persistence.search.request import DateBounds, SearchRequest
from protocol.read_arguments import (
    MemorySearchArguments,
    ReadArgumentsError,
    observation_lower_bound,
    observation_upper_bound,
    reflection_lower_bound,
    reflection_upper_bound,
)


def search_request(arguments: MemorySearchArguments) -> SearchRequest:
    """The request of checked arguments: each bound for each table (a day alone is its first or
    last minute), ``query_date`` as its first minute."""
    after, before = arguments.after, arguments.before
    return SearchRequest(
        query=arguments.query,
        limit=arguments.limit,
        bounds=DateBounds(
            observation_after=observation_lower_bound(after) if after else None,
            observation_before=observation_upper_bound(before) if before else None,
            reflection_after=reflection_lower_bound(after) if after else None,
            reflection_before=reflection_upper_bound(before) if before else None,
        ),
        sessions=arguments.scope,
        mode=arguments.mode,
        query_date=observation_lower_bound(arguments.query_date) if arguments.query_date else None,
    )


def validate_search_arguments(
    arguments: Mapping[str, object], current_session_id: str | None = None
) -> SearchRequest | ToolResult:
    """Validate ``memory_search`` arguments; the request or an error answer (nothing is searched).

    ``None`` values count as omitted; ``scope: "session"`` means ``current_session_id``.
    """
    try:
        checked = MemorySearchArguments.from_call(arguments, current_session_id)
    except ReadArgumentsError as exc:
        return error_result(exc.code, exc.message)
    return search_request(checked)
