"""What the memory viewer (``omray ui``) shows, as JSON-able dicts: pure functions of rows already read.

No I/O, no clock: the rows come from :mod:`persistence.reads.viewer`, the queue's status and the
settings come in as arguments. The one piece of logic here beyond shaping is which observations
each reflection generation retired (:func:`retired_by`), the same rule the projection applies
(reference §8): once a succeeded generation with watermark ``R`` is active, an observation ending at
or before ``R`` stays only if the generation retained it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from persistence.reads.viewer import (
    GenerationRow,
    ObservationRow,
    PartRow,
    SessionRow,
    TimelineRows,
    UsageRow,
)
from protocol.ids import display_id
from protocol.settings import PriceTable

JSON = dict[str, Any]


def retired_by(
    observations: Sequence[ObservationRow], generations: Sequence[GenerationRow]
) -> dict[str, str]:
    """Observation id -> the first succeeded generation (in creation order) that did not keep it.

    A generation with watermark ``R`` keeps an observation that ends after ``R`` or that it
    retained; the first one that keeps neither retired it (dropped observations never come back).
    """
    retired: dict[str, str] = {}
    for generation in generations:
        if generation.status != "succeeded" or generation.required_end_seq is None:
            continue
        kept = set(generation.retained_ids)
        for observation in observations:
            if observation.observation_id in retired or observation.observation_id in kept:
                continue
            if observation.source_end_seq <= generation.required_end_seq:
                retired[observation.observation_id] = generation.generation_id
    return retired


def active_ids(
    observations: Sequence[ObservationRow],
    generations: Sequence[GenerationRow],
    active_generation: str | None,
) -> set[str]:
    """Ids of the active observation pool (reference §8), as the projection selects it."""
    generation = next((g for g in generations if g.generation_id == active_generation), None)
    if generation is None or generation.status != "succeeded" or generation.required_end_seq is None:
        return {o.observation_id for o in observations}
    kept = set(generation.retained_ids)
    return {
        o.observation_id
        for o in observations
        if o.observation_id in kept or o.source_end_seq > generation.required_end_seq
    }


def _part_of(observation: ObservationRow, parts: Sequence[PartRow]) -> PartRow | None:
    """The coverage part that produced ``observation``: same chunk, written at the same time."""
    same_chunk = [part for part in parts if part.chunk_key == observation.boundary_key]
    for part in same_chunk:
        if part.covered_at == observation.created_at:
            return part
    return same_chunk[0] if same_chunk else None


def _observation_json(observation: ObservationRow, active: bool, retired: str | None) -> JSON:
    return {
        "id": observation.observation_id,
        "display_id": display_id(observation.observation_id),
        "timestamp": observation.timestamp,
        "importance": observation.relevance,
        "content": observation.content,
        "source_seqs": list(observation.source_seqs),
        "tokens": observation.token_count,
        "model": observation.observer_model,
        "active": active,
        "retired_by": retired,
    }


def timeline_json(
    session_id: str,
    rows: TimelineRows,
    projection: str,
    versions: tuple[str, str],
) -> JSON:
    """One session's timeline: coverage parts in source order, each with the events it covered and
    the observations it produced; the generations with their reflections and what they retired; the
    active generation; the compaction text an agent gets now (``projection``)."""
    active = active_ids(rows.observations, rows.generations, rows.active_generation_id)
    retired = retired_by(rows.observations, rows.generations)
    produced: dict[str, list[JSON]] = {}
    orphans: list[JSON] = []
    for observation in rows.observations:
        item = _observation_json(
            observation, observation.observation_id in active, retired.get(observation.observation_id)
        )
        part = _part_of(observation, rows.parts)
        (produced.setdefault(part.coverage_key, []) if part else orphans).append(item)
    events = list(rows.events)
    parts = []
    for part in rows.parts:
        inside = [e for e in events if part.source_start_seq <= e.seq <= part.source_end_seq]
        parts.append(
            {
                "coverage_key": part.coverage_key,
                "seq_start": part.source_start_seq,
                "seq_end": part.source_end_seq,
                "part": f"{part.part_index}/{part.part_count}",
                "covered_at": part.covered_at,
                "current_versions": (part.renderer_version, part.observer_schema_version) == versions,
                "events": [
                    {
                        "id": e.event_id,
                        "seq": e.seq,
                        "type": e.event_type,
                        "timestamp": e.timestamp,
                        "excerpt": e.excerpt,
                        "truncated": e.chars > len(e.excerpt),
                    }
                    for e in inside
                ],
                "observations": produced.get(part.coverage_key, []),
            }
        )
    reflections = {r.reflection_id: r for r in rows.reflections}
    generations = []
    for generation in rows.generations:
        generations.append(
            {
                "id": generation.generation_id,
                "display_id": display_id(generation.generation_id),
                "trigger": generation.trigger_kind,
                "status": generation.status,
                "watermark": generation.required_end_seq,
                "model": generation.reflector_model,
                "failure": generation.failure_code,
                "created_at": generation.created_at,
                "completed_at": generation.completed_at,
                "active": generation.generation_id == rows.active_generation_id,
                "retained": len(generation.retained_ids),
                "retired": sorted(i for i, g in retired.items() if g == generation.generation_id),
                "reflections": [
                    {
                        "id": r.reflection_id,
                        "display_id": display_id(r.reflection_id),
                        "content": r.content,
                        "supporting_ids": list(r.supporting_ids),
                        "tokens": r.token_count,
                    }
                    for r in (reflections.get(i) for i in generation.reflection_ids)
                    if r is not None
                ],
            }
        )
    return {
        "session_id": session_id,
        "parts": parts,
        "unplaced_observations": orphans,
        "events_truncated": rows.events_truncated,
        "generations": generations,
        "active_generation": rows.active_generation_id,
        "counts": {
            "observations": len(rows.observations),
            "active_observations": len(active),
            "retired_observations": len(retired),
            "reflections": len(rows.reflections),
            "events": len(rows.events),
        },
        "projection": projection,
    }


def job_state(session_id: str, queue_status: Mapping[str, Any] | None) -> JSON | None:
    """The session's jobs in the queue now (pending, running, retrying), or ``None`` when unknown."""
    if queue_status is None:
        return None
    jobs = [j for j in (queue_status.get("state") or {}).get("jobs", []) if j.get("session_id") == session_id]
    return {
        "pending": sum(1 for j in jobs if j.get("status") != "running"),
        "running": sum(1 for j in jobs if j.get("status") == "running"),
        "retrying": sum(1 for j in jobs if int(j.get("attempts") or 0) > 0 and j.get("status") != "running"),
        "last_reason": next((str(j["last_reason"]) for j in jobs if j.get("last_reason")), None),
    }


def session_json(
    row: SessionRow, queue_status: Mapping[str, Any] | None, failures: Sequence[Mapping[str, Any]]
) -> JSON:
    """One line of the sessions list. ``failures`` are explained ``job_failed`` payloads of this session."""
    return {
        "session_id": row.session_id,
        "last_activity": row.last_activity,
        "coverage_end": row.coverage_end,
        "covered_through": row.covered_through,
        "observations": row.observations,
        "reflections": row.reflections,
        "memory_tokens": row.observation_tokens + row.reflection_tokens,
        "prompt_tokens": row.prompt_tokens,
        "completion_tokens": row.completion_tokens,
        "jobs": job_state(row.session_id, queue_status),
        "failures": [
            {
                "job_id": str(f.get("job_id", "")),
                "reason": str(f.get("last_failure", f.get("reason", ""))),
                "attempts": f.get("attempts"),
                "at": f.get("at"),
                "cause": f.get("cause"),
                "fix": f.get("fix"),
            }
            for f in failures
        ],
    }


def usage_json(rows: Iterable[UsageRow], prices: PriceTable | None) -> JSON:
    """Token usage (and money with a price table) per session and model, by UTC hour, for the chart."""
    points = []
    sessions: dict[str, JSON] = {}
    unpriced: set[str] = set()
    for row in rows:
        price = prices.models.get(row.model) if prices is not None else None
        cost = None
        if price is not None:
            cost = round(price.cost(row.prompt_tokens, row.cached_prompt_tokens, row.completion_tokens), 6)
        elif prices is not None:
            unpriced.add(row.model)
        points.append(
            {
                "bucket": row.bucket,
                "session_id": row.session_id,
                "job_kind": row.job_kind,
                "model": row.model,
                "requests": row.requests,
                "prompt_tokens": row.prompt_tokens,
                "cached_prompt_tokens": row.cached_prompt_tokens,
                "completion_tokens": row.completion_tokens,
                "cost": cost,
            }
        )
        key = f"{row.session_id}\x00{row.model}"
        total = sessions.setdefault(
            key,
            {"session_id": row.session_id, "model": row.model, "requests": 0, "tokens": 0, "cost": None},
        )
        total["requests"] += row.requests
        total["tokens"] += row.prompt_tokens + row.completion_tokens
        if cost is not None:
            total["cost"] = round((total["cost"] or 0.0) + cost, 6)
    return {
        "currency": prices.currency if prices is not None else None,
        "unpriced_models": sorted(unpriced),
        "points": points,
        "by_session_and_model": sorted(sessions.values(), key=lambda t: (t["session_id"], t["model"])),
    }


def queue_json(status: Mapping[str, Any] | None, age_s: float | None) -> JSON:
    """The queue and its pools now: depth, runs in flight and slots, lanes, each pool's workers and waits."""
    if status is None:
        return {"available": False}
    figures = dict(status.get("figures") or {})
    return {
        "available": True,
        "age_s": None if age_s is None else round(age_s, 2),
        "figures": figures,
        "in_flight": [
            {
                "job_id": str(j.get("job_id", "")),
                "handler_id": j.get("handler_id"),
                "attempt": j.get("attempt"),
                "running_s": j.get("running_s"),
            }
            for j in status.get("in_flight", [])
        ],
        "pools": {
            str(handler): {
                key: pool.get(key)
                for key in ("workers", "busy_workers", "minimum", "maximum", "slots", "waiting")
            }
            for handler, pool in sorted((status.get("pools") or {}).items())
        },
        "waiting": sum(int((p or {}).get("waiting") or 0) for p in (status.get("pools") or {}).values()),
    }
