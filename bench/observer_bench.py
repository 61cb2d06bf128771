"""``omray bench observer``: the Observer pipeline on a real transcript, against the scripted server.

A real pi session (from ``../shared/data/transcripts/``, else the project's own fixture) is imported
into the ``events.jsonl`` envelope and observed boundary by boundary, as an agent's after-turn hook
would trigger it, through the real ``openai`` client talking to a local scripted model that records
one observation per source block. It reports how many prompt tokens the Observer spends per token of
source it observes (memory context, instructions, tool schema and the receipt round included) and
how many parts it needs per 1,000 events. No network, no Ray: the pipeline runs in-process.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from actors.models.registry import model_for
from actors.models.tokens import token_counter
from actors.observer.pipeline import ObserverPorts, observe_through
from bench.scripted_server import Reply, ScriptedServer, chat_text, chat_tool_calls
from persistence.events_reader import iter_events, read_event_window
from persistence.importers import import_transcript
from persistence.queries import MemoryReader
from persistence.store import Store
from protocol.jobs import ObserveBoundaryJob
from protocol.settings import settings_from_mapping

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_TRANSCRIPT = REPO_ROOT.parent / "shared" / "data" / "transcripts" / "pi-mono" / "large-session.jsonl"
FIXTURE_TRANSCRIPT = REPO_ROOT / "tests" / "fixtures" / "transcripts" / "pi-session.jsonl"

_LABEL = re.compile(r"\[Source entry id: ([^\]]+):(\d+)\]\n\[[^\]@]+ @ (\d{4}-\d{2}-\d{2} \d{2}:\d{2})\]")


def scripted_observer(body: Mapping[str, Any]) -> Reply:
    """A diligent scripted Observer: one observation per source block of the chunk, then stop."""
    messages = body["messages"]
    if messages[-1]["role"] == "tool":
        return chat_text("Recorded.")
    chunk = str(messages[-1]["content"]).split("NEW SOURCE-ADDRESSED CONVERSATION CHUNK:", 1)[-1]
    observations = [
        {
            "timestamp": ts,
            "content": f"Source entry {seq} was observed",
            "relevance": "medium",
            "source_refs": [{"run_id": run, "seq": int(seq)}],
        }
        for run, seq, ts in _LABEL.findall(chunk)
    ]
    return chat_tool_calls(("record_observations", {"observations": observations}))


def default_transcript() -> Path:
    """The real pi transcript when the shared folder is present, else the project's fixture."""
    return SHARED_TRANSCRIPT if SHARED_TRANSCRIPT.is_file() else FIXTURE_TRANSCRIPT


def run_observer_bench(
    transcript: Path | None = None, transcript_format: str = "pi", context_window: int = 32768
) -> dict[str, Any]:
    """Observe a real transcript boundary by boundary and report token and part ratios."""
    source = transcript or default_transcript()
    count = token_counter("o200k_base").count
    with (
        tempfile.TemporaryDirectory(prefix="omray-bench-observer-") as tmp,
        ScriptedServer(chat_default=scripted_observer) as server,
    ):
        work = Path(tmp)
        events_path = work / "events.jsonl"
        summary = import_transcript(transcript_format, source, "bench-session", events_path)  # type: ignore[arg-type]
        block = {
            "model": "scripted/observer",
            "providers": {"scripted": {"base_url": server.base_url, "context_window": context_window}},
            "storage": {"database": str(work / "om.sqlite")},
        }
        settings = settings_from_mapping(block)
        db_path = str(work / "om.sqlite")
        store = Store(db_path)
        ports = ObserverPorts(
            memory=MemoryReader(db_path),
            store=store,
            read_events=lambda start, end: read_event_window(events_path, start, end),
            resolve_model=lambda model: model_for(settings, model, max_retries=0),
            count_tokens=count,
            now_utc=lambda: "2026-11-30T00:00:00+00:00",
            now_local=lambda: "2026-11-30 00:00",
        )
        boundaries = [e.seq for e in iter_events(events_path) if e.type == "agent_end"]
        if not boundaries or boundaries[-1] != summary.last_seq:
            boundaries.append(summary.last_seq)
        started = time.monotonic()
        parts = source_tokens = observations = 0
        for end_seq in boundaries:
            job = ObserveBoundaryJob(
                run_id="bench-session",
                terminal_end_seq=end_seq,
                terminal_status="completed",
                renderer_version="1",
                observer_schema_version="1",
                db_path=db_path,
                events_path=str(events_path),
                settings=block,
            )
            result = observe_through(job, "bench", settings, ports)
            parts += result.parts_committed
            source_tokens += result.source_tokens
            observations += result.observations
        seconds = time.monotonic() - started
        prompt_tokens = sum(
            count(json.dumps(r.body.get("messages", []))) + count(json.dumps(r.body.get("tools", [])))
            for r in server.chat_requests
        )
        store.close()
    return {
        "transcript": source.name,
        "events": summary.events,
        "turns": summary.turns,
        "boundaries": len(boundaries),
        "parts": parts,
        "parts_per_1000_events": round(1000 * parts / max(1, summary.events), 2),
        "model_requests": len(server.chat_requests),
        "source_tokens": source_tokens,
        "prompt_tokens": prompt_tokens,
        "prompt_tokens_per_source_token": round(prompt_tokens / max(1, source_tokens), 3),
        "observations": observations,
        "context_window": context_window,
        "seconds": round(seconds, 2),
    }
