"""OpenAI function-calling specs of every tool omray exposes (reference §7.7, §9.5, §9.7, §13.1, §13.5).

Parameter schemas are the original's, byte for byte; descriptions and guidance are omray's own.
Each function returns a fresh dict, so callers may mutate what they get.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from protocol.formats import TIMESTAMP_PATTERN

RECORD_OBSERVATIONS = "record_observations"
"""Observer tool name."""
RECORD_REFLECTIONS = "record_reflections"
"""Reflector tool name."""
DROP_OBSERVATIONS = "drop_observations"
"""Dropper tool name."""
MEMORY_SEARCH = "memory_search"
"""Agent search tool name."""
RECALL = "recall"
"""Agent provenance tool name."""
MEMORY_STATUS = "memory_status"
"""Status of one session's memory (``/om-status``), for MCP clients."""
MEMORY_VIEW = "memory_view"
"""Active memory of one session (``/om-view``), for MCP clients."""

MEMORY_SEARCH_DEFAULT_LIMIT = 20
"""Results returned when ``limit`` is omitted."""
MEMORY_SEARCH_MAX_LIMIT = 50
"""Largest ``limit``; larger values are clamped."""

SearchMode = Literal["auto", "exact", "hybrid"]
"""How ``memory_search`` matches: ``auto`` (hybrid when configured, else exact), ``exact``, ``hybrid``."""
MEMORY_SEARCH_MODES: Final[tuple[SearchMode, ...]] = ("auto", "exact", "hybrid")
"""Accepted ``mode`` values."""
MEMORY_SEARCH_ARGUMENTS: Final[tuple[str, ...]] = (
    "query",
    "after",
    "before",
    "limit",
    "scope",
    "mode",
    "query_date",
)
"""Every argument ``memory_search`` takes; any other key is corrected, never ignored."""
MEMORY_SEARCH_MAX_QUERY_BYTES = 10_000
"""Longest ``query`` in UTF-8 bytes (either mode); a longer one is ``invalid_query``. SQLite refuses
``LIKE`` patterns over 50,000 bytes, and no exact quote worth finding is this long."""
MEMORY_SEARCH_MAX_SCOPE_SESSIONS = 50
"""Most session ids one ``scope`` list may name."""

_DATE_BOUND_PATTERN = r"^\d{4}-\d{2}-\d{2}( \d{2}:\d{2})?$"
_DATE_BOUND_TAIL = "(YYYY-MM-DD or YYYY-MM-DD HH:MM). Omit to search all retained history."


def _strict_object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """A JSON-schema object that allows no other keys (every tool argument object is one)."""
    schema: dict[str, Any] = {"type": "object", "additionalProperties": False}
    if required is not None:
        schema["required"] = required
    schema["properties"] = properties
    return schema


def _id_list(description: str | None = None) -> dict[str, Any]:
    """A non-empty array of non-empty id strings."""
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}
    if description is not None:
        schema["description"] = description
    return schema


def _function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def record_observations_spec() -> dict[str, Any]:
    """Spec of ``record_observations`` (Observer)."""
    source_ref = _strict_object(
        {
            "run_id": {"type": "string", "minLength": 1},
            "seq": {"type": "integer", "minimum": 1},
        },
        ["run_id", "seq"],
    )
    observation = _strict_object(
        {
            "timestamp": {"type": "string", "pattern": TIMESTAMP_PATTERN},
            "content": {
                "type": "string",
                "minLength": 1,
                "description": "Single-line plain prose. No markdown/tags/embedded timestamp.",
            },
            "relevance": {"type": "string", "enum": ["low", "medium", "high", "critical"]},
            "source_refs": {"type": "array", "minItems": 1, "items": source_ref},
        },
        ["timestamp", "content", "relevance", "source_refs"],
    )
    parameters = _strict_object({"observations": {"type": "array", "items": observation}}, ["observations"])
    return _function(
        RECORD_OBSERVATIONS,
        "Save dated, rated observations about the conversation chunk you were given. Each one cites the "
        "[Source entry id: ...] labels it came from. You may call this several times; each call adds to the "
        "observations already saved.",
        parameters,
    )


def record_reflections_spec() -> dict[str, Any]:
    """Spec of ``record_reflections`` (Reflector)."""
    reflection = _strict_object(
        {
            "content": {
                "type": "string",
                "minLength": 1,
                "description": "Single-line plain prose durable fact.",
            },
            "supporting_observation_ids": _id_list(),
        },
        ["content", "supporting_observation_ids"],
    )
    parameters = _strict_object(
        {
            "reflections": {
                "type": "array",
                "minItems": 1,
                "description": "New durable reflections only (delta). Existing reflections are retained "
                "automatically.",
                "items": reflection,
            }
        },
        ["reflections"],
    )
    return _function(
        RECORD_REFLECTIONS,
        "Add new long-lived reflections, each backed by the ids of the current observations it condenses. "
        "Send only what is not already a current reflection.",
        parameters,
    )


def drop_observations_spec() -> dict[str, Any]:
    """Spec of ``drop_observations`` (Dropper)."""
    parameters = _strict_object(
        {
            "ids": _id_list("Active observation ids to propose for drop."),
            "reason": {"type": "string", "description": "Optional unpersisted rationale for the proposal."},
        },
        ["ids"],
    )
    return _function(
        DROP_OBSERVATIONS,
        "Suggest ids of current observations that the reflections already preserve, so they can leave the "
        "active memory. Nothing is deleted; the final choice is capped and made by the system.",
        parameters,
    )


def _search_texts(hybrid: bool) -> tuple[str, str, str]:
    if hybrid:
        return (
            "Search past work in every session by meaning and by keywords at once: the saved memories "
            "and the transcript of everything observed (messages, tool calls and results). Results come "
            "back best match first, with their dates and session ids; a match in the transcript gives the "
            'memory that covers it with a "source" excerpt (seq range), or the event itself (kind '
            '"event") when no memory covers it. "no_match": true with no results means nothing stored '
            "is close to the query, or the query names someone or something never stored: it was most "
            'likely never discussed (try other words, or mode "exact" for a literal string).',
            "Keywords, identifiers, phrases, concepts or a paraphrase of what you are looking for "
            f"(at most {MEMORY_SEARCH_MAX_QUERY_BYTES:,} bytes).",
            f"How many ranked results to return (default {MEMORY_SEARCH_DEFAULT_LIMIT}, "
            f"at most {MEMORY_SEARCH_MAX_LIMIT}).",
        )
    return (
        "Search past work in every session for an exact piece of text, in the saved memories and in the "
        "transcript of everything observed (messages, tool calls and results). Results come back newest "
        "first, with their dates and session ids; a match in the transcript gives the memory that covers "
        'it with a "source" excerpt (seq range), or the event itself (kind "event").',
        "One contiguous piece of text to match literally (case-insensitive), such as a file name, "
        f"an identifier or an error code (at most {MEMORY_SEARCH_MAX_QUERY_BYTES:,} bytes).",
        f"How many results to return (default {MEMORY_SEARCH_DEFAULT_LIMIT}, "
        f"at most {MEMORY_SEARCH_MAX_LIMIT}).",
    )


def _scope_property() -> dict[str, Any]:
    return {
        "anyOf": [
            {"type": "string", "enum": ["all", "session"]},
            {
                "type": "array",
                "minItems": 1,
                "maxItems": MEMORY_SEARCH_MAX_SCOPE_SESSIONS,
                "items": {"type": "string", "minLength": 1},
            },
        ],
        "description": 'Which sessions to search. "all" (default): every session. "session": only the '
        "current session. A list of session ids (as memory_search returns them): only those, e.g. "
        '["2026-09-11-api-refactor"].',
    }


def _mode_property(hybrid: bool) -> dict[str, Any]:
    availability = (
        "Both are available here."
        if hybrid
        else 'Hybrid search is not configured here, so "hybrid" answers an error.'
    )
    return {
        "type": "string",
        "enum": list(MEMORY_SEARCH_MODES),
        "description": '"auto" (default): hybrid when it is configured, else exact. "exact": literal, '
        'case-insensitive substring match, newest first, e.g. for "parse_date" or an error code. '
        '"hybrid": keyword and meaning search, best match first. ' + availability,
    }


def memory_search_spec(hybrid: bool) -> dict[str, Any]:
    """Spec of ``memory_search``: the schema is the same in both modes, the texts depend on ``hybrid``.

    The reference's four arguments come first, unchanged; ``scope``, ``mode`` and ``query_date`` are
    omray's.
    """
    description, query_text, limit_text = _search_texts(hybrid)
    parameters = _strict_object(
        {
            "query": {"type": "string", "minLength": 1, "description": query_text},
            "after": {
                "type": "string",
                "pattern": _DATE_BOUND_PATTERN,
                "description": "Optional inclusive lower bound on memory date " + _DATE_BOUND_TAIL,
            },
            "before": {
                "type": "string",
                "pattern": _DATE_BOUND_PATTERN,
                "description": "Optional inclusive upper bound on memory date " + _DATE_BOUND_TAIL,
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MEMORY_SEARCH_MAX_LIMIT,
                "description": limit_text,
            },
            "scope": _scope_property(),
            "mode": _mode_property(hybrid),
            "query_date": {
                "type": "string",
                "pattern": _DATE_BOUND_PATTERN,
                "description": "Optional: the date the question is asked from (YYYY-MM-DD or "
                'YYYY-MM-DD HH:MM, UTC), for phrases such as "last week" or "two days ago" in the query. '
                "Omit to use now. Memories dated in the time the query names rank higher; nothing is "
                "filtered out (use after and before for that).",
            },
        },
        ["query"],
    )
    return _function(MEMORY_SEARCH, description, parameters)


def recall_spec() -> dict[str, Any]:
    """Spec of ``recall``."""
    parameters = _strict_object(
        {
            "id": {
                "type": "string",
                "pattern": "^[a-f0-9]{12,64}$",
                "description": "Full lowercase hex id of an observation, reflection or transcript event, "
                "or a unique 12–64 character prefix from compacted memory, /om-view, memory_search, or a "
                "previous recall result. Not a topic search.",
            },
            "session_id": {
                "type": "string",
                "minLength": 1,
                "description": "Optional originating session id from memory_search. Omit to keep "
                "current-session recall.",
            },
            "seq_start": {
                "type": "integer",
                "minimum": 1,
                "description": "Instead of an id: the first seq of a range of the session's events to read "
                "(a memory_search result's source.seq_start).",
            },
            "seq_end": {
                "type": "integer",
                "minimum": 1,
                "description": "With seq_start: the last seq of the range (default seq_start; at most "
                "100 events).",
            },
        }
    )
    return _function(
        RECALL,
        "Fetch one memory by id with the exact events it came from: its full text, its sources and, for a "
        "reflection, the observations behind it. A transcript event's id (or a seq range of a session) "
        "gives those events and the observations that cover them. Pass id, or seq_start.",
        parameters,
    )


def _session_tool_spec(name: str, description: str) -> dict[str, Any]:
    parameters = _strict_object(
        {
            "session_id": {
                "type": "string",
                "minLength": 1,
                "description": "Session id, as memory_search returns it.",
            }
        },
        ["session_id"],
    )
    return _function(name, description, parameters)


def memory_status_spec() -> dict[str, Any]:
    """Spec of ``memory_status``: counts, coverage and thresholds of one session's memory."""
    return _session_tool_spec(
        MEMORY_STATUS,
        "Show how much of one session has been observed: memory counts, covered events, token pools "
        "and the reflection threshold.",
    )


def memory_view_spec() -> dict[str, Any]:
    """Spec of ``memory_view``: the active reflections and observations of one session."""
    return _session_tool_spec(
        MEMORY_VIEW,
        "Show one session's active memory: its reflections and observations, with their ids for recall.",
    )


FORGET = "forget"
"""Name of the MCP ``forget`` tool (served only by ``omray mcp --allow-forget``)."""


def forget_spec() -> dict[str, Any]:
    """Spec of ``forget``: remove memory for good (listed only when the server allows it)."""
    return {
        "type": "function",
        "function": {
            "name": FORGET,
            "description": (
                "Permanently forget memory the user asks to remove: observations or reflections by id "
                "(`ids`: full ids or the 12-character ids shown by memory_view and memory_search), or "
                "everything of one session (`session_id`), or only the text of some of its events "
                "(`session_id` with `event_ranges`: [[first_seq, last_seq], ...]). Forgotten memory is "
                "gone from search, recall and the compaction summary at once and cannot be restored; "
                "coverage stays, so it is not observed again. Answers with what was forgotten and the "
                "ids that were unknown. Only call it when the user explicitly asks to forget."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "ids": {
                        "type": "array",
                        "items": {"type": "string", "pattern": "^[0-9a-f]{12,64}$"},
                        "maxItems": 1000,
                        "description": "Observation or reflection ids to forget.",
                    },
                    "session_id": {"type": "string", "minLength": 1, "description": "A session to forget."},
                    "event_ranges": {
                        "type": "array",
                        "maxItems": 100,
                        "items": {
                            "type": "array",
                            "items": {"type": "integer", "minimum": 1},
                            "minItems": 2,
                            "maxItems": 2,
                        },
                        "description": "With session_id: forget only these events' text, [first, last].",
                    },
                },
                "additionalProperties": False,
            },
        },
    }


def memory_tool_specs(hybrid: bool) -> list[dict[str, Any]]:
    """The agent-facing tools in registration order: ``memory_search`` then ``recall``."""
    return [memory_search_spec(hybrid), recall_spec()]


MEMORY_SEARCH_SUMMARY: dict[str, str] = {
    "exact": "Use memory_search(query) to find memories from earlier sessions that contain an exact piece of "
    "text.",
    "hybrid": "Use memory_search(query) to find memories from earlier sessions by keywords and by meaning.",
}
"""One-line prompt summary of ``memory_search`` per search mode."""

RECALL_SUMMARY = (
    "Use recall(id) or recall(id, session_id) to read one memory in full, with the events it came from."
)
"""One-line prompt summary of ``recall``."""

_SEARCH_COMMON_FIRST = (
    "Use memory_search when earlier work, decisions or conversations may matter and are not in your context."
)
_SEARCH_COMMON_LAST = (
    "An empty result does not prove something never happened; it may have been phrased differently.",
    "Observation results carry the importance rated when they were recorded; weigh them accordingly.",
    "memory_search reads saved memory and the observed transcript, not files, code or unobserved turns.",
)

_RECALL_GUIDANCE: tuple[str, ...] = (
    "Recall an id (or a result's source seq range) from compacted memory, /om-view, memory_search or recall.",
    "Use recall when you need the exact wording, the reasons or the source events behind a memory.",
    "Use recall when the user asks where a remembered fact came from.",
    "Observation results carry the importance rated when they were recorded; weigh them accordingly.",
    "recall is not a search: to find memories on a topic, use memory_search.",
    "Recall only the ids you need; do not fetch every id you see.",
)

MEMORY_TOOLS_GUIDANCE: dict[str, dict[str, tuple[str, ...]]] = {
    "exact": {
        MEMORY_SEARCH: (
            _SEARCH_COMMON_FIRST,
            "Pass one contiguous piece of literal text; short distinctive identifiers work best.",
            "If nothing matches, try a shorter or different piece of text before giving up.",
            "All sessions and dates are searched by default; scope narrows sessions, after/before dates.",
            *_SEARCH_COMMON_LAST,
        ),
        RECALL: _RECALL_GUIDANCE,
    },
    "hybrid": {
        MEMORY_SEARCH: (
            _SEARCH_COMMON_FIRST,
            "Mix exact identifiers or keywords with a short description of the idea you are looking for.",
            "A top result can still be off topic; check its content and date before relying on it.",
            "All sessions and dates are searched by default; scope and after/before filter, not rank.",
            *_SEARCH_COMMON_LAST,
        ),
        RECALL: _RECALL_GUIDANCE,
    },
}
"""Short guidance lines for the agent's prompt, per search mode (``exact``/``hybrid``) and per tool."""


def memory_tools_guidance(hybrid: bool) -> dict[str, tuple[str, ...]]:
    """Guidance lines per tool (``memory_search``, ``recall``) for the given search mode."""
    return dict(MEMORY_TOOLS_GUIDANCE["hybrid" if hybrid else "exact"])
