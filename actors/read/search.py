"""Pure logic of ``memory_search`` answers in exact mode (reference §13.3): hits, merging, scope.

The SQL that fetches the rows lives in ``persistence.search.reader``; the argument validation in
:mod:`actors.read.search_arguments`. :func:`search_in_memory` (with :func:`like_matches`) is a
reference model of the whole exact search over in-memory rows, which the tests hold the SQL to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Literal

from actors.read.answers import ToolResult
from persistence.search.reader import ObservationHit, ReflectionHit, TranscriptHit
from persistence.search.request import LIKE_ESCAPE, SearchRequest
from protocol.canonical import condense
from protocol.ids import display_id
from protocol.read_arguments import sort_key
from protocol.records import ObservationRecord, ReflectionRecord

SearchedObservation = ObservationHit | ObservationRecord
"""What a search answer shows of an observation: a slim hit of the SQL path or a full record."""

SearchedReflection = ReflectionHit | ReflectionRecord
"""What a search answer shows of a reflection: a slim hit of the SQL path or a full record."""

SearchedEvent = TranscriptHit
"""What a search answer shows of a transcript event."""


EXCERPT_CHARS: Final[int] = 600
"""Characters of transcript text an exact hit's excerpt shows around the match."""


def excerpt_around(content: str, query: str, width: int = EXCERPT_CHARS) -> str:
    """About ``width`` characters of ``content`` around the first match of ``query`` (ASCII case
    folded, as ``LIKE`` folds it), whitespace condensed; the start of the text when it is not found."""
    flags = re.IGNORECASE | re.ASCII
    found = re.search(re.escape(query), content, flags) if query else None
    if found is None:
        return condense(content[:width])
    room = max(0, width - (found.end() - found.start())) // 2
    start = max(0, found.start() - room)
    return condense(content[start : start + width])


def source_item(seq: int, excerpt: str) -> ToolResult:
    """The ``source`` field of a hit in the transcript: where the matching text is."""
    return {"seq_start": seq, "seq_end": seq, "excerpt": excerpt}


def _widen_source(item: ToolResult, seq: int, excerpt: str) -> None:
    """Another matching event that ``item`` covers: its ``source`` range grows to include it (the
    excerpt stays the first one's)."""
    source = item.get("source")
    if not isinstance(source, dict):
        item["source"] = source_item(seq, excerpt)
        return
    source["seq_start"] = min(int(source["seq_start"]), seq)
    source["seq_end"] = max(int(source["seq_end"]), seq)


def result_item(
    kind: str, session_id: str, memory_id: str, timestamp: str, content: str, importance: str | None = None
) -> ToolResult:
    """One ``memory_search`` result, exact or hybrid: ``{kind, session_id, id, display_id, timestamp,
    importance?, content}`` (``importance`` only when given: an observation's)."""
    item: ToolResult = {
        "kind": kind,
        "session_id": session_id,
        "id": memory_id,
        "display_id": display_id(memory_id),
        "timestamp": timestamp,
    }
    if importance is not None:
        item["importance"] = importance
    item["content"] = content
    return item


def event_search_item(event: SearchedEvent, excerpt: str) -> ToolResult:
    """A transcript hit that no observation covers: the event itself (``recall`` takes its id)."""
    item = result_item("event", event.session_id, event.event_id, event.timestamp, excerpt)
    item["source"] = source_item(event.seq, excerpt)
    return item


def _fold(char: str) -> str:
    # SQLite's default LIKE folds ASCII letters only; every other character must match exactly.
    return char.lower() if "A" <= char <= "Z" else char


_LikeToken = tuple[Literal["any", "one", "char"], str]


def _like_tokens(pattern: str) -> list[_LikeToken] | None:
    """Tokens of a LIKE pattern with escape ``\\``; ``None`` when it ends in a lone escape (no match)."""
    tokens: list[_LikeToken] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == LIKE_ESCAPE:
            index += 1
            if index >= len(pattern):
                return None
            tokens.append(("char", _fold(pattern[index])))
        elif char == "%":
            tokens.append(("any", ""))
        elif char == "_":
            tokens.append(("one", ""))
        else:
            tokens.append(("char", _fold(char)))
        index += 1
    return tokens


def like_matches(pattern: str, text: str) -> bool:
    """Whether ``text LIKE pattern ESCAPE '\\'`` holds under SQLite's default (ASCII-case-folding) LIKE.

    SQLite reads both strings as NUL-terminated, so each is cut at its first NUL character.
    """
    pattern = pattern.split("\0", 1)[0]
    text = text.split("\0", 1)[0]
    tokens = _like_tokens(pattern)
    if tokens is None:
        return False
    folded = [_fold(char) for char in text]
    # reachable[i]: the tokens consumed so far can match exactly text[:i].
    reachable = [True] + [False] * len(folded)
    for kind, char in tokens:
        if kind == "any":
            seen = False
            for position in range(len(reachable)):
                seen = seen or reachable[position]
                reachable[position] = seen
            continue
        following = [False] * len(reachable)
        for position in range(len(folded)):
            if reachable[position] and (kind == "one" or folded[position] == char):
                following[position + 1] = True
        reachable = following
    return reachable[-1]


def observation_matches(request: SearchRequest, observation: ObservationRecord) -> bool:
    """Whether the exact search selects this observation (scope, timestamp bounds, content LIKE)."""
    return (
        request.in_scope(observation.session_id)
        and request.bounds.accepts("observation", observation.timestamp)
        and like_matches(request.like_pattern, observation.content)
    )


def reflection_matches(request: SearchRequest, reflection: ReflectionRecord) -> bool:
    """Whether the exact search selects this reflection (scope, ``created_at`` bounds, content LIKE)."""
    return (
        request.in_scope(reflection.session_id)
        and request.bounds.accepts("reflection", reflection.created_at)
        and like_matches(request.like_pattern, reflection.content)
    )


# ----------------------------------------------------------------------------- memory_search: output


def observation_search_item(observation: SearchedObservation) -> ToolResult:
    """One observation hit."""
    return result_item(
        "observation",
        observation.session_id,
        observation.observation_id,
        observation.timestamp,
        condense(observation.content),
        observation.relevance,
    )


def reflection_search_item(reflection: SearchedReflection) -> ToolResult:
    """One reflection hit (no importance; its time is ``created_at``)."""
    return result_item(
        "reflection",
        reflection.session_id,
        reflection.reflection_id,
        reflection.created_at,
        condense(reflection.content),
    )


def merge_search_results(
    query: str,
    limit: int,
    observation_rows: Iterable[SearchedObservation],
    reflection_rows: Iterable[SearchedReflection],
    transcript_rows: Sequence[SearchedEvent] = (),
    covering: Mapping[tuple[str, int], SearchedObservation] | None = None,
) -> ToolResult:
    """Merge the tables' hits: newest first, then events, observations, reflections, each kind in the
    order its rows come (observations of one minute in source order, the latest first; reflections
    by id: ``persistence.search.reader.ExactSearchRows``; observations standing for a transcript
    hit after the observation hits).

    A transcript hit stands for the observation covering its event (``covering``), with a
    ``source`` excerpt around the match; when that observation is already a hit, its ``source``
    range grows to include the event. An event no observation covers is its own ``event`` hit.
    ``truncated`` says more hits existed than ``limit``; each table should be fetched with
    ``LIMIT limit + 1`` so that it can be told.
    """
    items = [observation_search_item(row) for row in observation_rows]
    items.extend(reflection_search_item(row) for row in reflection_rows)
    shown = {str(item["id"]): item for item in items}
    for event in transcript_rows:
        excerpt = excerpt_around(event.content, query)
        cover = (covering or {}).get((event.session_id, event.seq))
        if cover is None:
            item = event_search_item(event, excerpt)
        elif cover.observation_id in shown:
            _widen_source(shown[cover.observation_id], event.seq, excerpt)
            continue
        else:
            item = {**observation_search_item(cover), "source": source_item(event.seq, excerpt)}
        shown[str(item["id"])] = item
        items.append(item)
    # Stable sorts: equal times keep the kind order, each kind in the order its rows came.
    items.sort(key=lambda item: str(item["kind"]))
    items.sort(key=lambda item: sort_key(str(item["timestamp"])), reverse=True)
    results = items[:limit]
    return {
        "ok": True,
        "query": query,
        "limit": limit,
        "truncated": len(items) > limit or len(transcript_rows) > limit,
        "count": len(results),
        "results": results,
    }


def restrict_to_scope(answer: ToolResult, request: SearchRequest) -> ToolResult:
    """A ranked (hybrid) answer cut to the request's sessions and ``limit``; errors pass unchanged.

    The answer should come from a search with a wider limit than ``request.limit``, so that hits of
    other sessions do not crowd the requested ones out; ``truncated`` stays true when that search
    was truncated or more in-scope hits remain.
    """
    results = answer.get("results")
    if answer.get("ok") is not True or not isinstance(results, list):
        return answer
    kept = [
        item for item in results if isinstance(item, dict) and request.in_scope(str(item.get("session_id")))
    ]
    return {
        **answer,
        "limit": request.limit,
        "truncated": bool(answer.get("truncated")) or len(kept) > request.limit,
        "count": min(len(kept), request.limit),
        "results": kept[: request.limit],
    }


def search_in_memory(
    request: SearchRequest,
    observations: Iterable[ObservationRecord],
    reflections: Iterable[ReflectionRecord],
) -> ToolResult:
    """The whole exact search over in-memory rows: a reference model of what the SQL path returns.

    ``observations`` come in the order they were recorded (the database's insertion order).
    """
    rows = list(observations)
    recorded = {row.observation_id: index for index, row in enumerate(rows)}
    observation_hits = sorted(
        (row for row in rows if observation_matches(request, row)),
        key=lambda row: row.observation_id,
    )
    observation_hits.sort(key=lambda row: row.timestamp, reverse=True)
    fetch = request.limit + 1
    # The page, then its hits of one minute in source order, the latest first.
    observation_hits = sorted(
        observation_hits[:fetch],
        key=lambda row: (row.session_id, -row.first_source_seq, -recorded[row.observation_id]),
    )
    observation_hits.sort(key=lambda row: row.timestamp, reverse=True)
    reflection_hits = sorted(
        (row for row in reflections if reflection_matches(request, row)),
        key=lambda row: row.reflection_id,
    )
    reflection_hits.sort(key=lambda row: row.created_at, reverse=True)
    return merge_search_results(
        request.query, request.limit, observation_hits[:fetch], reflection_hits[:fetch]
    )
