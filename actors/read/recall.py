"""Pure logic of ``recall`` (reference §13.6): argument validation, source refs, event hydration
and the answer shapes of an observation, a reflection or transcript events.

The lookups live in ``persistence.search.reader``, the reading of ``events.jsonl`` in
``actors.read.service``; answers pass through :func:`actors.read.answers.json_safe` there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from actors.read.answers import ToolResult, error_result
from protocol.read_arguments import ReadArgumentsError, RecallArguments, is_int
from protocol.records import ObservationRecord, ReflectionRecord, SourceRef


def validate_recall_arguments(
    arguments: Mapping[str, object], current_session_id: str
) -> RecallArguments | ToolResult:
    """Validate ``recall`` arguments (:meth:`protocol.read_arguments.RecallArguments.from_call`); the
    request or an error answer. Recall stays in the current session unless ``session_id`` is given."""
    try:
        return RecallArguments.from_call(arguments, current_session_id)
    except ReadArgumentsError as exc:
        return error_result(exc.code, exc.message)


def recall_ambiguous(kind: Literal["observation", "reflection", "event"], session_id: str) -> ToolResult:
    """Answer for a prefix that matches several memories of one kind."""
    return error_result(
        "ambiguous_id",
        f"Multiple {kind}s match that id prefix in session {session_id!r}; pass more characters of the id.",
    )


def recall_not_found(memory_id: str, session_id: str) -> ToolResult:
    """Answer for an id that matches nothing in the target session."""
    return error_result(
        "not_found",
        f"No observation, reflection or transcript event with id {memory_id!r} in session {session_id!r}. "
        "For a memory from another session, pass the session_id that memory_search returned.",
    )


def _ref_session_id(ref: Mapping[str, object]) -> str | None:
    value = ref.get("run_id", ref.get("runId"))
    if isinstance(value, str):
        return value
    if is_int(value):
        return str(value)
    return None


def _ref_seq(value: object) -> int | None:
    if is_int(value):
        assert isinstance(value, int)
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[0-9]+", value.strip()):
        return int(value.strip())
    return None


def _session_refs(refs: Iterable[Mapping[str, object] | SourceRef], session_id: str) -> list[tuple[str, int]]:
    kept: list[tuple[str, int]] = []
    for ref in refs:
        if isinstance(ref, SourceRef):
            ref_session: str | None = ref.run_id
            seq: int | None = ref.seq
        else:
            ref_session = _ref_session_id(ref)
            seq = _ref_seq(ref.get("seq"))
        if ref_session == session_id and seq is not None and seq >= 1:
            kept.append((ref_session, seq))
    return kept


def refs_for_session(refs: Iterable[Mapping[str, object] | SourceRef], session_id: str) -> list[ToolResult]:
    """Source refs of ``session_id`` as ``{"run_id", "seq"}`` dicts, in input order.

    Accepts ``run_id`` or the legacy ``runId`` key and numeric seqs >= 1; refs of other sessions and
    malformed refs are dropped, so a recall never shows another session's events.
    """
    return [{"run_id": ref_session, "seq": seq} for ref_session, seq in _session_refs(refs, session_id)]


def hydration_range(refs: Iterable[Mapping[str, object]]) -> tuple[int, int] | None:
    """``(min seq, max seq)`` of the refs (already filtered to the target session), or ``None``."""
    seqs = [seq for ref in refs if (seq := _ref_seq(ref.get("seq"))) is not None and seq >= 1]
    if not seqs:
        return None
    return (min(seqs), max(seqs))


def _first_present(event: Mapping[str, object], *keys: str) -> object:
    for key in keys:
        if key in event:
            return event[key]
    return None


def hydrate_events(
    events: Iterable[Mapping[str, object]], refs: Iterable[Mapping[str, object]], session_id: str
) -> list[ToolResult]:
    """The events the refs point at, from the events read for :func:`hydration_range`, sorted by seq.

    Only events of ``session_id`` whose seq is referenced are kept, each as
    ``{run_id, seq, type, created_at, payload}``.
    """
    wanted = {seq for _, seq in _session_refs(refs, session_id)}
    hydrated: list[tuple[int, ToolResult]] = []
    for event in events:
        seq = _ref_seq(event.get("seq"))
        if _ref_session_id(event) != session_id or seq is None or seq not in wanted:
            continue
        hydrated.append(
            (
                seq,
                {
                    "run_id": session_id,
                    "seq": seq,
                    "type": event.get("type"),
                    "created_at": _first_present(event, "created_at", "createdAt", "ts"),
                    "payload": event.get("payload"),
                },
            )
        )
    hydrated.sort(key=lambda pair: pair[0])
    return [item for _, item in hydrated]


def observation_recall_result(
    observation: ObservationRecord, session_id: str, events: Iterable[Mapping[str, object]]
) -> ToolResult:
    """Recall answer for one observation; ``events`` are those read for its refs' hydration range."""
    source_refs = refs_for_session(observation.source_refs, session_id)
    return {
        "ok": True,
        "kind": "observation",
        "session_id": session_id,
        "id": observation.observation_id,
        "content": observation.content,
        "timestamp": observation.timestamp,
        "importance": observation.relevance,
        "source_refs": source_refs,
        "events": hydrate_events(events, source_refs, session_id),
    }


def event_recall_result(
    session_id: str,
    seq_start: int,
    seq_end: int,
    events: Iterable[Mapping[str, object]],
    event_id: str | None = None,
    covering: Sequence[str] = (),
) -> ToolResult:
    """Recall answer for transcript events: one event by its id, or a seq range of the session.

    ``events`` are those read for the range; ``covering`` the ids of the observations that cover
    it (``recall`` each for what the Observer wrote down).
    """
    refs = [{"run_id": session_id, "seq": seq} for seq in range(seq_start, seq_end + 1)]
    answer: ToolResult = {"ok": True, "kind": "event", "session_id": session_id}
    if event_id is not None:
        answer["id"] = event_id
    answer.update(
        {
            "seq_start": seq_start,
            "seq_end": seq_end,
            "covered_by": list(covering),
            "events": hydrate_events(events, refs, session_id),
        }
    )
    return answer


def supporting_observations_in_session(
    reflection: ReflectionRecord, observations: Iterable[ObservationRecord], session_id: str
) -> list[ObservationRecord]:
    """The reflection's supporting observations that exist in ``session_id``, in support-id order, deduped."""
    by_id = {row.observation_id: row for row in observations if row.session_id == session_id}
    kept: list[ObservationRecord] = []
    seen: set[str] = set()
    for observation_id in reflection.supporting_observation_ids:
        if observation_id in seen or observation_id not in by_id:
            continue
        seen.add(observation_id)
        kept.append(by_id[observation_id])
    return kept


def reflection_source_refs(observations: Iterable[ObservationRecord], session_id: str) -> list[ToolResult]:
    """Union of the observations' refs in ``session_id``, deduped, sorted by run id then seq."""
    unique: set[tuple[str, int]] = set()
    for observation in observations:
        unique.update(_session_refs(observation.source_refs, session_id))
    return [{"run_id": ref_session, "seq": seq} for ref_session, seq in sorted(unique)]


def reflection_recall_result(
    reflection: ReflectionRecord,
    session_id: str,
    supporting_observations: Iterable[ObservationRecord],
    events: Iterable[Mapping[str, object]],
) -> ToolResult:
    """Recall answer for one reflection.

    ``supporting_observations`` are the rows looked up for its supporting ids (others are ignored);
    ``events`` are those read for the hydration range of the resulting refs.
    """
    supported = supporting_observations_in_session(reflection, supporting_observations, session_id)
    source_refs = reflection_source_refs(supported, session_id)
    return {
        "ok": True,
        "kind": "reflection",
        "session_id": session_id,
        "id": reflection.reflection_id,
        "content": reflection.content,
        "supporting_observation_ids": [row.observation_id for row in supported],
        "source_refs": source_refs,
        "events": hydrate_events(events, source_refs, session_id),
    }


def recall_source_refs(
    observation_or_supported: ObservationRecord | Sequence[ObservationRecord], session_id: str
) -> list[ToolResult]:
    """Refs to hydrate for an observation, or for a reflection's supporting observations."""
    if isinstance(observation_or_supported, ObservationRecord):
        return refs_for_session(observation_or_supported.source_refs, session_id)
    return reflection_source_refs(observation_or_supported, session_id)
