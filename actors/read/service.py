"""The read side, callable from any process: projection, compaction hook, status, view, search, recall.

Everything here reads durable memory through read-only connections (``persistence.search.reader``)
and, for ``recall`` only, one range of the session's ``events.jsonl``. Nothing here writes,
dispatches a job, calls a model, polls or sleeps, so the agent's own process can call it at any
time, concurrently with the writer (WAL), and compaction never waits on the queue or a model.

Tool answers (``memory_search``, ``recall``, :func:`call_tool`) are JSON-able dicts; bad arguments
are ``{"ok": False, "error": <code>, "message": <text>}`` answers, never exceptions. ``recall``
answers are always valid strict JSON (event payloads pass through :func:`json_safe`). Both tools
take an optional :class:`actors.read.interrupt.ToolInterrupt` and answer ``{"cancelled": True}`` /
``{"timed_out": True}`` at the first checkpoint past it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from actors.models.budget import format_budget, project_budget, report_since, usage_by_day_json
from actors.read.answers import ToolResult, error_result, json_safe
from actors.read.fusion import FUSED_CANDIDATE_LIMIT
from actors.read.interrupt import NO_INTERRUPT, Interrupted, ToolInterrupt, checkpoint
from actors.read.projector import assemble_active_memory
from actors.read.recall import (
    event_recall_result,
    hydration_range,
    observation_recall_result,
    recall_ambiguous,
    recall_not_found,
    recall_source_refs,
    reflection_recall_result,
    supporting_observations_in_session,
    validate_recall_arguments,
)
from actors.read.search import merge_search_results, restrict_to_scope
from actors.read.search_arguments import validate_search_arguments
from actors.read.status_view import (
    StatusInputs,
    format_status,
    format_view,
    status_json,
    usage_json,
    view_json,
)
from persistence.files.events_reader import iter_events
from persistence.reads.forgotten import ForgetReader
from persistence.search.plans import SearchStrategy
from persistence.search.reader import SearchReader
from persistence.search.request import SearchRequest
from persistence.writers.forget import in_ranges
from protocol.canonical import php_trim
from protocol.errors import EventsFileError, EventsUnreadableError, OmrayError
from protocol.events import (
    BeforeCompactionContext,
    CompactionDecision,
    coverage_incomplete_reason,
    projection_failure_reason,
    projection_metadata,
)
from protocol.read_arguments import INVALID_SESSION_ID_MESSAGE
from protocol.records import ObservationRecord, ReflectionRecord
from protocol.redact import DEFAULT_REDACTOR, Redactor, redactor_for
from protocol.settings import DEFAULT_VERSION, OmSettings
from protocol.tool_specs import MEMORY_SEARCH, MEMORY_STATUS, MEMORY_VIEW, RECALL

logger = logging.getLogger("omray.read")

DbPath = str | os.PathLike[str]
"""Path of a memory database file."""

CountTokens = Callable[[str], int]
"""Token counter of one text (``actors.models.tokens.token_counter(encoding)``)."""

EventsPathFor = Callable[[str], Path]
"""Where the ``events.jsonl`` of a session id lives."""

HybridSearch = Callable[[SearchRequest], ToolResult]
"""Hybrid search (reference §13.4): a validated request in, a complete tool answer out."""


@functools.lru_cache(maxsize=32)
def _reader(db_path: str) -> SearchReader:
    # One reader per path for every thread: search and projection reuse one read-only connection
    # per thread (persistence.database.read_connection), the other reads open one per call.
    return SearchReader(db_path)


def reader_for(db_path: DbPath) -> SearchReader:
    """The shared read-only reader of a database file."""
    return _reader(os.path.abspath(os.fspath(db_path)))


# ----------------------------------------------------------------------------------- projection


def project(db_path: DbPath, session_id: str) -> str:
    """The session's active memory rendered as compaction text (``''`` when there is none).

    Reflections and observations come from one read snapshot, so the text always matches some
    committed state of the database.
    """
    return reader_for(db_path).projection_text(session_id, assemble_active_memory)


def before_compaction(
    db_path: DbPath,
    ctx: BeforeCompactionContext,
    renderer_version: str = DEFAULT_VERSION,
    observer_schema_version: str = DEFAULT_VERSION,
) -> CompactionDecision:
    """Answer the before-compaction hook from durable memory only (reference §10.1).

    Non-empty memory -> ``replace_summary`` with the projection metadata; empty -> ``continue``;
    any exception -> ``cancel`` naming only the exception class (fail closed: the host must not
    fall back to a model summary). Never dispatches, calls a model, reads events, polls or sleeps.

    When the host names the range the summary replaces (``required_end_seq``) and the session's
    contiguous coverage (of these versions) does not reach it yet, memory would silently lose the
    unobserved events: the hook cancels (fail closed, reason :data:`COVERAGE_INCOMPLETE_PREFIX` with
    the two seqs), and the host compacts on a later turn, once the Observer has caught up. The
    trigger policy (``actors.observer.trigger``) keeps this rare: under context pressure the
    uncovered tail stays short.
    """
    try:
        text = php_trim(project(db_path, ctx.session_id))
        if text == "":
            return CompactionDecision.continue_()
        if ctx.required_end_seq is not None:
            covered = reader_for(db_path).contiguous_covered_end(
                ctx.session_id, renderer_version, observer_schema_version
            )
            if (covered or 0) < ctx.required_end_seq:
                logger.warning(
                    "om.compaction.coverage_incomplete",
                    extra={
                        "session_id": ctx.session_id,
                        "covered_end": covered,
                        "required_end": ctx.required_end_seq,
                    },
                )
                return CompactionDecision.cancel(
                    coverage_incomplete_reason(covered or 0, ctx.required_end_seq)
                )
        return CompactionDecision.replace_summary(text, projection_metadata(ctx.has_coverage_watermark))
    except Exception as exc:  # fail closed on anything, by design (§10.1)
        exception_class = type(exc).__name__
        # getattr: the failure path must not raise itself, whatever the caller passed as ``ctx``.
        session_id = getattr(ctx, "session_id", None)
        logger.warning(
            "om.compaction.hook_failed", extra={"session_id": session_id, "exception_class": exception_class}
        )
        return CompactionDecision.cancel(projection_failure_reason(exception_class))


# ---------------------------------------------------------------------------------- status/view


def memory_status(
    db_path: DbPath, session_id: str, settings: OmSettings, count_tokens: CountTokens
) -> tuple[str, dict[str, object]]:
    """``/om-status`` for a session as ``(markdown, json)``; pool tokens are counted, not read."""
    reader = reader_for(db_path)
    memory = reader.active_memory(session_id)
    counts = reader.memory_counts(session_id)
    coverage_end = reader.contiguous_covered_end(
        session_id, settings.renderer_version, settings.observer_schema_version
    )
    inputs = StatusInputs(
        recorded_observations=counts.recorded_observations,
        active_observations=len(memory.candidates.observations),
        visible_observations=counts.visible_retained_observations,
        recorded_reflections=counts.recorded_reflections,
        visible_reflections=len(memory.reflections),
        reflection_tokens=sum(item.token_count for item in memory.reflections),
        coverage_end=coverage_end,
        active_tokens=sum(count_tokens(item.content) for item in memory.candidates.observations),
        reflect_after_tokens=settings.reflect_after_observation_tokens,
        observations_max_tokens=settings.observations_max_tokens,
    )
    usage = usage_json(reader.token_usage(session_id), settings.prices)
    # Spend per day and model of this session, and the project's budget today (issue 41 item 3).
    now = time.time()
    by_day = usage_by_day_json(reader.token_usage_by_day(report_since(now), session_id), settings.prices)
    budget = project_budget(reader.spend_since, settings, now)
    data = {"session_id": session_id, **status_json(inputs), "token_usage": usage}
    text = f"{format_status(inputs)}\n- project budget today: {format_budget(budget)}"
    return text, {**data, "usage_by_day": by_day, "budget": budget}


def memory_view(db_path: DbPath, session_id: str) -> tuple[str, dict[str, object]]:
    """``/om-view`` for a session as ``(markdown, json)``."""
    reader = reader_for(db_path)
    memory = reader.active_memory(session_id)
    known = reader.observation_ids_in_session(session_id)
    observations = memory.candidates.observations
    return (
        format_view(memory.reflections, observations, session_id, known),
        view_json(memory.reflections, observations, session_id, known),
    )


# ---------------------------------------------------------------------------------------- search


def exact_search(db_path: DbPath, request: SearchRequest, strategy: SearchStrategy = "auto") -> ToolResult:
    """Exact search (reference §13.3) in the request's scope; ``strategy="scan"`` forces the plain LIKE."""
    reader = reader_for(db_path)
    rows = reader.exact_search(request, strategy)
    covering = reader.covering_observations([(event.session_id, event.seq) for event in rows.transcript])
    return merge_search_results(
        request.query, request.limit, rows.observations, rows.reflections, rows.transcript, covering
    )


HYBRID_UNAVAILABLE_MESSAGE = (
    "mode 'hybrid' needs hybrid search, which is not configured here (settings: semantic); "
    "use mode 'exact' or leave mode out."
)
"""Message of the ``hybrid_unavailable`` answer."""


AUTO_EXACT_WHEN: frozenset[object] = frozenset({"index_building", "index_busy"})
"""Hybrid answers for which ``mode: "auto"`` answers with exact search instead (visibly)."""


def scoped_hybrid_search(hybrid_search: HybridSearch, request: SearchRequest) -> ToolResult:
    """Hybrid search in the request's scope: the widest ranked search, then only in-scope hits.

    The hook searches every session, so a scoped request asks it for the fused candidate bound
    and keeps the hits of the requested sessions; another session's memory is never returned.
    """
    if request.sessions is None:
        return hybrid_search(request)
    wide = dataclasses.replace(request, limit=FUSED_CANDIDATE_LIMIT)
    return restrict_to_scope(hybrid_search(wide), request)


def memory_search(
    db_path: DbPath,
    arguments: Mapping[str, object],
    hybrid_search: HybridSearch | None = None,
    *,
    session_id: str | None = None,
    interrupt: ToolInterrupt = NO_INTERRUPT,
) -> ToolResult:
    """The ``memory_search`` tool: validate, then exact or hybrid search in the requested scope.

    ``hybrid_search`` is hybrid mode (reference §13.4), present when ``semantic`` is configured.
    ``mode`` ``auto`` uses it when present, else exact search; ``exact`` always searches exactly;
    ``hybrid`` without it is a ``hybrid_unavailable`` answer. ``hybrid`` never falls back to exact
    search; ``auto`` does while the index is not ready (``index_building``, ``index_busy``), and its
    answer then says ``"mode": "exact"`` and ``"hybrid_unavailable": <the code>``. Every other
    hybrid failure stays an error answer. ``session_id`` is the calling session
    (``scope: "session"``). ``interrupt`` is
    checked before the call starts and before the database is opened.
    """
    try:
        checkpoint(interrupt, "before search started")
        request = validate_search_arguments(arguments, session_id)
        if not isinstance(request, SearchRequest):
            return request
        checkpoint(interrupt, "before database open")
    except Interrupted as stop:
        return stop.answer
    if request.mode == "hybrid" and hybrid_search is None:
        return error_result("hybrid_unavailable", HYBRID_UNAVAILABLE_MESSAGE)
    if request.mode != "exact" and hybrid_search is not None:
        answer = scoped_hybrid_search(hybrid_search, request)
        if request.mode == "auto" and answer.get("error") in AUTO_EXACT_WHEN:
            # The index is not ready (never built, rebuilding, busy): ``auto`` answers with exact
            # search, and says so, rather than with no results. ``mode: "hybrid"`` keeps the error.
            exact = exact_search(db_path, request)
            return {**exact, "mode": "exact", "hybrid_unavailable": answer.get("error")}
        return answer
    return exact_search(db_path, request)


# ---------------------------------------------------------------------------------------- recall


@dataclasses.dataclass(frozen=True)
class _EventRead:
    """How recall reads a session's events: redacted (``protocol.redact``), forgotten ranges left out."""

    redactor: Redactor = DEFAULT_REDACTOR
    forgotten: tuple[tuple[int, int], ...] = ()

    def __call__(
        self, events_path: Path, refs: list[ToolResult], interrupt: ToolInterrupt
    ) -> list[Mapping[str, object]]:
        return _read_events(events_path, refs, interrupt, self)


def _read_events(
    events_path: Path, refs: list[ToolResult], interrupt: ToolInterrupt, how: _EventRead
) -> list[Mapping[str, object]]:
    """The events of one contiguous range covering ``refs`` (one read), as plain dicts."""
    span = hydration_range(refs)
    if span is None:
        return []
    checkpoint(interrupt, "before reading session events")
    events: list[Mapping[str, object]] = []
    try:
        for event in iter_events(events_path, span[0], span[1], redactor=how.redactor):
            checkpoint(interrupt, "while reading session events")
            if in_ranges(event.seq, how.forgotten):
                continue  # forgotten (omray memory forget): never shown again
            events.append(event.model_dump())
    except OSError as exc:  # permissions, a directory, an I/O error: the file exists but is unreadable
        raise EventsUnreadableError(str(events_path), type(exc).__name__) from None
    return events


def _recall_observation(
    observation: ObservationRecord,
    session_id: str,
    events_path_for: EventsPathFor,
    interrupt: ToolInterrupt,
    read: _EventRead,
) -> ToolResult:
    refs = recall_source_refs(observation, session_id)
    checkpoint(interrupt, "before observation event hydration")
    events = read(events_path_for(session_id), refs, interrupt)
    return observation_recall_result(observation, session_id, events)


def _recall_reflection(
    reader: SearchReader,
    reflection: ReflectionRecord,
    session_id: str,
    events_path_for: EventsPathFor,
    interrupt: ToolInterrupt,
    read: _EventRead,
) -> ToolResult:
    checkpoint(interrupt, "while hydrating supporting observations")
    rows = reader.observations_by_ids(reflection.supporting_observation_ids, session_id)
    supported = supporting_observations_in_session(reflection, rows, session_id)
    checkpoint(interrupt, "while collecting event refs")
    refs = recall_source_refs(supported, session_id)
    checkpoint(interrupt, "before reflection event hydration")
    events = read(events_path_for(session_id), refs, interrupt)
    return reflection_recall_result(reflection, session_id, rows, events)


def _recall_lookup(
    db_path: DbPath,
    events_path_for: EventsPathFor,
    session_id: str,
    memory_id: str,
    interrupt: ToolInterrupt,
    seq_range: tuple[int, int] | None = None,
    redactor: Redactor = DEFAULT_REDACTOR,
) -> ToolResult:
    checkpoint(interrupt, "before database open")
    reader = reader_for(db_path)
    read = _EventRead(redactor, tuple(ForgetReader(db_path).forgotten_ranges(session_id)))
    if memory_id == "" and seq_range is not None:
        return _recall_events(reader, events_path_for, session_id, seq_range, None, interrupt, read)
    checkpoint(interrupt, "before observation lookup")
    observations = reader.find_observations(session_id, memory_id)
    if len(observations) > 1:
        return recall_ambiguous("observation", session_id)
    if observations:
        return _recall_observation(observations[0], session_id, events_path_for, interrupt, read)
    checkpoint(interrupt, "before reflection lookup")
    reflections = reader.find_reflections(session_id, memory_id)
    if len(reflections) > 1:
        return recall_ambiguous("reflection", session_id)
    if reflections:
        return _recall_reflection(reader, reflections[0], session_id, events_path_for, interrupt, read)
    checkpoint(interrupt, "before event lookup")
    events = reader.find_events(session_id, memory_id)
    if len(events) > 1:
        return recall_ambiguous("event", session_id)
    if events:
        event_id, seq = events[0]
        return _recall_events(reader, events_path_for, session_id, (seq, seq), event_id, interrupt, read)
    return recall_not_found(memory_id, session_id)


def _recall_events(
    reader: SearchReader,
    events_path_for: EventsPathFor,
    session_id: str,
    seq_range: tuple[int, int],
    event_id: str | None,
    interrupt: ToolInterrupt,
    read: _EventRead,
) -> ToolResult:
    start, end = seq_range
    covering = reader.covering_ids(session_id, start, end)
    refs: list[ToolResult] = [{"run_id": session_id, "seq": seq} for seq in range(start, end + 1)]
    checkpoint(interrupt, "before event hydration")
    events = read(events_path_for(session_id), refs, interrupt)
    return event_recall_result(session_id, start, end, events, event_id, covering)


def recall(
    db_path: DbPath,
    events_path_for: EventsPathFor,
    current_session_id: str,
    arguments: Mapping[str, object],
    *,
    interrupt: ToolInterrupt = NO_INTERRUPT,
    redactor: Redactor = DEFAULT_REDACTOR,
) -> ToolResult:
    """The ``recall`` tool (reference §13.6): one memory by id or unique prefix, with its source events.

    Events are read through ``redactor`` (``<private>`` spans and secrets masked; pass the settings'
    ``redactor_for(settings.redact_patterns)``), and forgotten events are left out.

    The lookup stays in ``current_session_id`` unless ``arguments["session_id"]`` names another
    session; refs of any other session are never shown, and the target session's events file is
    read once (one range) at most. An events file that cannot be read or holds a corrupt line in
    the range gives the ``events_unreadable`` answer; the answer is always strict JSON (NaN,
    infinities and lone surrogates of event payloads are encoded by :func:`json_safe`).
    ``interrupt`` is checked between steps; a cancelled call never reads events.
    """
    try:
        checkpoint(interrupt, "before recall started")
        request = validate_recall_arguments(arguments, current_session_id)
        if isinstance(request, dict):
            return request
        seq_range = None
        if request.seq_start is not None and request.seq_end is not None:
            seq_range = (request.seq_start, request.seq_end)
        result = _recall_lookup(
            db_path, events_path_for, request.session_id, request.memory_id, interrupt, seq_range, redactor
        )
    except Interrupted as stop:
        return stop.answer
    except (EventsFileError, EventsUnreadableError) as exc:
        logger.warning(
            "om.tool.events_unreadable",
            extra={"tool": RECALL, "session_id": current_session_id, "exception_class": type(exc).__name__},
        )
        return _events_unreadable(exc)
    return json_safe_result(result)


def _events_unreadable(exc: EventsFileError | EventsUnreadableError) -> ToolResult:
    # The OSError class for an unreadable file, the error class for a corrupt line; never content.
    reason = exc.reason if isinstance(exc, EventsUnreadableError) else type(exc).__name__
    return error_result("events_unreadable", f"Source events could not be read ({reason}).")


def json_safe_result(result: ToolResult) -> ToolResult:
    """``result`` with every value strict JSON can carry (see :func:`actors.read.answers.json_safe`)."""
    safe = json_safe(result)
    assert isinstance(safe, dict)
    return safe


# ------------------------------------------------------------------------------------- call_tool


def _decode_arguments(arguments: object) -> Mapping[str, object] | None:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
            return None
    return arguments if isinstance(arguments, Mapping) else None


def _session_answer(
    name: str,
    arguments: Mapping[str, object],
    db_path: DbPath,
    settings: OmSettings,
    count_tokens: CountTokens,
) -> ToolResult:
    """``memory_status`` / ``memory_view`` for one ``session_id``: markdown and JSON in one answer."""
    unknown = sorted(str(key)[:40] for key in arguments if key != "session_id")
    if unknown:
        return error_result(
            "unknown_arguments", f"{name} takes only session_id; got {', '.join(map(repr, unknown[:5]))}."
        )
    raw = arguments.get("session_id")
    session_id = php_trim(raw) if isinstance(raw, str) else ""
    if session_id == "":
        return error_result("invalid_session_id", INVALID_SESSION_ID_MESSAGE)
    if name == MEMORY_STATUS:
        text, data = memory_status(db_path, session_id, settings, count_tokens)
    else:
        text, data = memory_view(db_path, session_id)
    return json_safe_result({"ok": True, "session_id": session_id, "markdown": text, name: data})


def call_tool(
    name: str,
    arguments: Mapping[str, object] | str,
    session_id: str,
    *,
    db_path: DbPath,
    events_path_for: EventsPathFor,
    hybrid_search: HybridSearch | None = None,
    interrupt: ToolInterrupt = NO_INTERRUPT,
    status_settings: tuple[OmSettings, CountTokens] | None = None,
    redactor: Redactor | None = None,
) -> ToolResult:
    """Run ``memory_search`` or ``recall`` for an agent framework; always returns an answer dict.

    ``recall`` reads events through ``redactor`` (default: the one of ``status_settings``' patterns,
    else the built-in set).

    With ``status_settings`` (the settings and token counter in effect), ``memory_status`` and
    ``memory_view`` (argument ``session_id``) are served too, as MCP clients use them.
    ``arguments`` may be the decoded object or its JSON text. Unknown tool names get
    ``unknown_tool``; unreadable memory or events get ``storage_unavailable`` /
    ``events_unreadable`` (naming only the exception class); a cancelled or timed-out
    ``interrupt`` gets ``{"cancelled": True}`` / ``{"timed_out": True}``.
    """
    decoded = _decode_arguments(arguments)
    if decoded is None:
        return error_result("invalid_arguments", "arguments must be a JSON object.")
    try:
        if name == MEMORY_SEARCH:
            return memory_search(db_path, decoded, hybrid_search, session_id=session_id, interrupt=interrupt)
        if name == RECALL:
            if redactor is None:
                redactor = (
                    redactor_for(status_settings[0].redact_patterns) if status_settings else DEFAULT_REDACTOR
                )
            return recall(
                db_path, events_path_for, session_id, decoded, interrupt=interrupt, redactor=redactor
            )
        if name in (MEMORY_STATUS, MEMORY_VIEW) and status_settings is not None:
            return _session_answer(name, decoded, db_path, *status_settings)
    except (EventsFileError, EventsUnreadableError) as exc:
        logger.warning("om.tool.events_unreadable", extra={"tool": name, "session_id": session_id})
        return _events_unreadable(exc)
    except OmrayError as exc:
        logger.warning("om.tool.read_failed", extra={"tool": name, "exception_class": type(exc).__name__})
        return error_result("storage_unavailable", f"Memory could not be read ({type(exc).__name__}).")
    available = [MEMORY_SEARCH, RECALL, *((MEMORY_STATUS, MEMORY_VIEW) if status_settings else ())]
    return error_result(
        "unknown_tool", f"Unknown tool {name!r}; available: {', '.join(map(repr, available))}."
    )
