"""``omray demo``: a real end-to-end run on the embedded defaults, offline, with no API key.

In a temporary project it writes a sample coding session turn by turn, starts (or joins) Ray,
runs omray's actors, calls ``after_turn_commit`` after each turn as an agent would, waits for the
queue to drain, and shows what memory now holds: observations, coverage, generations and
reflections, the compaction projection and one search. The model is ``builtin/extractive``, an
offline stand-in for a real model (see ``actors/models/builtin.py``).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray

import actors.read.service as read_service
from actors.models.tokens import token_counter
from cluster.client import OmrayClient, init_ray
from cluster.commands.demo_session import commit_turn, demo_session
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime, remove_runtime
from cluster.naming import RuntimeNames
from persistence.reads.memory_reader import MemoryReader
from persistence.settings.parse import apply_overrides, settings_from_mapping
from protocol.errors import OmrayError

DEMO_SESSION_ID = "demo-session"
DEMO_QUERY = "dates.py"
DEMO_SETTINGS: dict[str, Any] = {
    "model": "builtin/extractive",
    # The sample session is small (a few hundred tokens of observations), so the demo lowers the
    # reflection threshold and the pool target to let the Reflector and Dropper run too.
    "reflector": {"reflect_after_observation_tokens": 200},
    "pools": {"observations_max_tokens": 200},
    # Hybrid search with the offline embedder (all-MiniLM-L6-v2 on onnxruntime).
    "semantic": {"embedding_api": {"model_id": "builtin/all-minilm-l6-v2"}},
}
HYBRID_QUERY = "why did importing invoices fail on timestamps"


def _start_ray() -> bool:
    """Join the runtime's cluster (``RAY_ADDRESS``, else the one ``omray up`` recorded), or start a
    small private one; True when this process started it. Never joins another cluster by guess."""
    try:
        init_ray(None)
        return False
    except OmrayError:
        ray.init(
            address="local",  # a private cluster, never a stale or foreign one found on the machine
            num_cpus=2,
            namespace="omray",
            include_dashboard=False,
            object_store_memory=256 * 1024 * 1024,
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
        return True


def run_demo(overrides: Sequence[str] = (), keep: bool = False) -> dict[str, Any]:
    """Run the demo and return what it found (also the ``--json`` output)."""
    started = time.monotonic()
    project = Path(tempfile.mkdtemp(prefix="omray-demo-"))
    block = apply_overrides(
        {**DEMO_SETTINGS, "storage": {"database": str(project / "om.sqlite")}}, list(overrides)
    )
    settings = settings_from_mapping(block)
    started_ray = _start_ray()
    names = RuntimeNames(prefix=f"omray-demo-{uuid.uuid4().hex[:6]}")
    try:
        ensure_runtime(names, queue_db=str(project / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
        client = OmrayClient(names, settings=block, cwd=project)
        events_path = client.events_path(DEMO_SESSION_ID)
        events_path.parent.mkdir(parents=True, exist_ok=True)
        turns = demo_session(DEMO_SESSION_ID)
        client.session_started(DEMO_SESSION_ID)
        for number, turn in enumerate(turns, start=1):
            context = commit_turn(events_path, turn, session_end=number == len(turns))
            client.after_turn_commit(context, events_path=events_path)
        drained = client.wait_idle(timeout_s=100)
        db_path = client.db_path
        reader = MemoryReader(db_path)
        observations = reader.all_observations(DEMO_SESSION_ID)
        counts = reader.memory_counts(DEMO_SESSION_ID)
        coverage_end = reader.contiguous_covered_end(
            DEMO_SESSION_ID, settings.renderer_version, settings.observer_schema_version
        )
        generation = reader.active_generation(DEMO_SESSION_ID)
        reflections = reader.active_reflections(DEMO_SESSION_ID)
        projection = read_service.project(db_path, DEMO_SESSION_ID)
        search = read_service.memory_search(db_path, {"query": DEMO_QUERY, "limit": 3})
        hybrid = client.memory_search({"query": HYBRID_QUERY, "limit": 3}) if settings.semantic else None
        _, status = read_service.memory_status(
            db_path, DEMO_SESSION_ID, settings, token_counter(settings.token_encoding).count
        )
        failures = client.runtime_events(DEMO_SESSION_ID)
        return {
            "session_id": DEMO_SESSION_ID,
            "project_dir": str(project),
            "drained": drained,
            "events": sum(len(t) for t in turns),
            "last_seq": turns[-1][-1]["seq"],
            "turns": len(turns),
            "observations": len(observations),
            "coverage_end": coverage_end,
            "generations": 1 if generation is not None else 0,
            "generation_status": generation.status if generation else None,
            "reflections": len(reflections),
            "recorded_reflections": counts.recorded_reflections,
            "projection_chars": len(projection),
            "projection": projection,
            "observation_list": [
                {"timestamp": o.timestamp, "relevance": o.relevance, "content": o.content}
                for o in observations
            ],
            "reflection_list": [r.content for r in reflections],
            "search_query": DEMO_QUERY,
            "search": search,
            "hybrid_query": HYBRID_QUERY if hybrid is not None else None,
            "hybrid_search": hybrid,
            "status": status,
            "job_failed_events": len(failures),
            "seconds": round(time.monotonic() - started, 2),
        }
    finally:
        remove_runtime(names)
        if started_ray:
            ray.shutdown()
        if not keep:
            shutil.rmtree(project, ignore_errors=True)


def render_demo(result: dict[str, Any]) -> str:
    """Human-readable report of a demo run."""
    lines = [
        f"omray demo — session {result['session_id']!r}: {result['turns']} turns, {result['events']} events "
        f"(seq 1..{result['last_seq']}), finished in {result['seconds']} s",
        "",
        f"Observations ({result['observations']}):",
    ]
    lines += [f"  {o['timestamp']} [{o['relevance']}] {o['content']}" for o in result["observation_list"]]
    lines += [
        "",
        f"Coverage: events 1..{result['coverage_end']} observed (last seq {result['last_seq']})",
        f"Generations: {result['generations']}  Reflections: {result['reflections']}",
    ]
    lines += [f"  - {text}" for text in result["reflection_list"]]
    status = result["status"]
    lines.append(
        f"Active pool: {status['active_observations']} of {status['recorded_observations']} observations "
        f"({status['dropped_observations']} retired by the Dropper), ~{status['active_tokens']} tokens"
    )
    lines += ["", f"Compaction projection ({result['projection_chars']} chars):", result["projection"], ""]
    search = result["search"]
    lines.append(f"memory_search({result['search_query']!r}) -> {search.get('count', 0)} result(s):")
    lines += [f"  [{r['display_id']}] {r['content']}" for r in search.get("results", [])]
    hybrid = result.get("hybrid_search")
    if hybrid is not None:
        lines.append("")
        if hybrid.get("ok"):
            partial = " (index still catching up)" if hybrid.get("partial") else ""
            lines.append(
                f"hybrid memory_search({result['hybrid_query']!r}){partial} -> {hybrid['count']} result(s):"
            )
            lines += [f"  [{r['display_id']}] {r['content']}" for r in hybrid.get("results", [])]
        else:
            lines.append(f"hybrid memory_search({result['hybrid_query']!r}) -> error {hybrid.get('error')!r}")
    return "\n".join(lines)


def demo_json(result: dict[str, Any]) -> str:
    """The ``--json`` output (without the bulky lists)."""
    keep = {k: v for k, v in result.items() if k not in {"projection", "observation_list", "reflection_list"}}
    return json.dumps(keep, indent=2, sort_keys=True)
