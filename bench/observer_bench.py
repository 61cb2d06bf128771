"""``omray bench observer``: what observing real transcripts costs, per trigger policy, in one run.

Each real transcript (``../shared/data/transcripts/``, else the project's own fixture) is imported into
the ``events.jsonl`` envelope and replayed batch by batch as an agent would commit it: every model step
with its tool results is one committed batch, whose after-turn context goes through the client's own
:meth:`OmrayClient.turn_envelope` (so the same code decides which batches send an observe job), and
each job runs the real Observer pipeline in-process against a local scripted model (one observation
per source block) through the real ``openai`` client. No Ray: jobs run one after another, as one lane
would, and each finishes before the next batch (the Observer keeps up with the agent).

The agent's context is replayed too: it grows by the rendered source of each batch, and when it passes
``agent_context_window - reserve`` the host compacts, keeping the most recent ``keep_recent`` tokens
(pi's defaults: 16,384 and 20,000). A compaction is *fully covered* when the Observer's contiguous
coverage reaches the last seq the summary replaces, which is what ``before_compaction`` requires.

Policies, in the same run: ``per_boundary`` (the original: every turn end observes, the agent reports
no context fill), ``default`` (the new default settings, the agent reports its context fill and the
end of the session) and ``default_without_fill`` (the new default, an agent that reports neither).
Prompt tokens count everything sent (tools first, then the messages, tiktoken ``o200k_base``); the
uncached ones are those after the longest prefix shared with the previous request of the lane, which
the scripted model also reports as ``cached_tokens``, so the cost report sees them.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.models.registry import model_for
from actors.models.tokens import token_counter
from actors.observer.blocks import build_source_blocks
from actors.observer.pipeline import ObserverPorts, observe_through
from cluster.client import OmrayClient
from persistence.files.events_reader import iter_events, read_event_window
from persistence.importers import detect_format, import_transcript
from persistence.reads.memory_reader import MemoryReader
from persistence.settings.parse import settings_from_mapping
from persistence.writers.store import Store
from protocol.events import AfterTurnCommit, EventSummary, SessionEvent
from protocol.jobs import ObserveBoundaryJob
from testkit.scripted_server import Reply, ScriptedServer, chat_text, chat_tool_calls

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURE_TRANSCRIPT = REPO_ROOT / "tests" / "fixtures" / "transcripts" / "pi-session.jsonl"
MAIN_TRANSCRIPT = Path("pi-mono") / "large-session.jsonl"
SESSION = "bench-session"
PROMPT_ENCODING = "o200k_base"

AGENT_CONTEXT_WINDOW = 128_000
"""Default context window of the replayed agent (a common size of today's models)."""
COMPACTION_RESERVE = 16_384
"""The host compacts once its context passes ``window - reserve`` (pi's default reserve)."""
KEEP_RECENT = 20_000
"""Tokens of recent context the host keeps verbatim at compaction (pi's default)."""
AGENT_BASE_CONTEXT = 6_000
"""System prompt and tool definitions of the replayed agent, always in its context."""
SUMMARY_TOKENS = 2_000
"""Context a compaction summary takes afterwards."""

POLICIES: dict[str, tuple[dict[str, Any], bool]] = {
    "per_boundary": ({"observe_after_tokens": 0}, False),
    "default": ({}, True),
    "default_without_fill": ({}, False),
}
"""Policy name -> (``observer`` settings, whether the agent reports its context fill and session end)."""

_LABEL = re.compile(r"\[Source entry id: ([^\]]+):(\d+)\]\n\[[^\]@]+ @ (\d{4}-\d{2}-\d{2} \d{2}:\d{2})\]")
_SOURCE_SPLIT = "NEW SOURCE-ADDRESSED CONVERSATION CHUNK:"


def shared_data_dir() -> Path | None:
    """``shared/data`` next to the checkout or one of its parents (worktrees live one level deeper)."""
    for parent in REPO_ROOT.parents:
        candidate = parent / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return None


def default_transcripts() -> list[Path]:
    """Every transcript an importer reads under ``shared/data/transcripts``, the main one first."""
    data = shared_data_dir()
    root = data / "transcripts" if data else None
    if root is None or not (root / MAIN_TRANSCRIPT).is_file():
        return [FIXTURE_TRANSCRIPT]
    others = sorted(p for p in root.rglob("*.jsonl") if p != root / MAIN_TRANSCRIPT)
    return [root / MAIN_TRANSCRIPT, *others]


def shared_prefix(previous: Sequence[int], current: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    limit = min(len(previous), len(current))
    index = 0
    while index < limit and previous[index] == current[index]:
        index += 1
    return index


def observations_for(prompt: str) -> list[dict[str, Any]]:
    """What the scripted Observer records for a prompt: one observation per source block of its chunk."""
    return [
        {
            "timestamp": ts,
            "content": f"Source entry {seq} was observed",
            "relevance": "medium",
            "source_refs": [{"run_id": run, "seq": int(seq)}],
        }
        for run, seq, ts in _LABEL.findall(prompt.split(_SOURCE_SPLIT, 1)[-1])
    ]


class PrefixCachingObserver:
    """A diligent scripted Observer with a provider-style prompt cache.

    It records one observation per source block of the chunk and stops at a receipt; its usage
    reports the request's tokens and, as ``cached_tokens``, those of the longest prefix shared with
    the previous request (one lane, so the previous request is the lane's).
    """

    def __init__(self) -> None:
        self.encoding = token_counter(PROMPT_ENCODING)
        self.previous: list[int] = []
        self.prompt_tokens = 0
        self.uncached_prompt_tokens = 0
        self.requests = 0
        self.source_blocks_seen = 0

    def __call__(self, body: Mapping[str, Any]) -> Reply:
        messages = body["messages"]
        tokens = self.encoding.encode(json.dumps(body.get("tools", [])) + json.dumps(messages))
        cached = shared_prefix(self.previous, tokens)
        self.previous = tokens
        self.requests += 1
        self.prompt_tokens += len(tokens)
        self.uncached_prompt_tokens += len(tokens) - cached
        if messages[-1]["role"] == "tool":
            reply = chat_text("Recorded.", usage=(len(tokens), 5))
        else:
            observations = observations_for(str(messages[-1]["content"]))
            self.source_blocks_seen += len(observations)
            completion = 12 * len(observations) + 5
            reply = chat_tool_calls(
                ("record_observations", {"observations": observations}), usage=(len(tokens), completion)
            )
        body_out = dict(reply.body)
        body_out["usage"] = {**body_out["usage"], "prompt_tokens_details": {"cached_tokens": cached}}
        return Reply(status=reply.status, body=body_out, delay_s=reply.delay_s)


@dataclass
class AgentContext:
    """The replayed agent's context: rendered source tokens per seq since the last compaction."""

    window: int
    tokens_by_seq: list[tuple[int, int]] = field(default_factory=list)
    base: int = AGENT_BASE_CONTEXT

    @property
    def used(self) -> int:
        return self.base + sum(tokens for _, tokens in self.tokens_by_seq)

    @property
    def fill(self) -> float:
        return self.used / self.window

    def needs_compaction(self) -> bool:
        return self.used > self.window - COMPACTION_RESERVE

    def compact(self) -> int:
        """Keep the most recent ``KEEP_RECENT`` tokens; returns the last seq the summary replaces."""
        kept = 0
        index = len(self.tokens_by_seq)
        while index > 0 and kept < KEEP_RECENT:
            index -= 1
            kept += self.tokens_by_seq[index][1]
        required_end = self.tokens_by_seq[index - 1][0] if index > 0 else 0
        self.tokens_by_seq = self.tokens_by_seq[index:]
        self.base = AGENT_BASE_CONTEXT + SUMMARY_TOKENS
        return required_end


def committed_batches(events: Sequence[SessionEvent]) -> list[list[SessionEvent]]:
    """Events as an agent commits them: a batch starts at each user command and each model step."""
    batches: list[list[SessionEvent]] = []
    for event in events:
        if not batches or event.type in ("agent_command_applied", "llm_step_completed"):
            batches.append([])
        batches[-1].append(event)
    return batches


def tokens_per_seq(events: Sequence[SessionEvent], count: Any) -> dict[int, int]:
    """Rendered source tokens that enter the agent's context with each seq (a tool group with its result)."""
    per_seq: dict[int, int] = {}
    for block in build_source_blocks(list(events), "2026-11-30 00:00", count):
        seq = max(ref.seq for ref in block.source_refs) if block.source_refs else block.seq
        per_seq[seq] = per_seq.get(seq, 0) + count(block.rendered_text)
    return per_seq


def replay_policy(
    events_path: Path,
    work: Path,
    model_block: Mapping[str, Any],
    observer: Mapping[str, Any],
    reports_fill: bool,
    agent_window: int,
) -> dict[str, Any]:
    """Replay one transcript under one policy; returns its cost and compaction figures."""
    count = token_counter(PROMPT_ENCODING).count
    events = list(iter_events(events_path))
    per_seq = tokens_per_seq(events, count)
    db_path = work / "om.sqlite"
    block = {**model_block, "observer": dict(observer), "storage": {"database": str(db_path)}}
    settings = settings_from_mapping(block)
    client = OmrayClient(settings=block, cwd=work)
    store = Store(db_path)
    reader = MemoryReader(db_path)
    ports = ObserverPorts(
        memory=reader,
        store=store,
        read_events=lambda start, end: read_event_window(events_path, start, end),
        resolve_model=lambda model: model_for(settings, model, max_retries=0),
        count_tokens=count,
        now_utc=lambda: "2026-11-30T00:00:00+00:00",
        now_local=lambda: "2026-11-30 00:00",
    )
    context = AgentContext(agent_window)
    totals = {"jobs": 0, "deferred": 0, "parts": 0, "source_tokens": 0, "observations": 0}
    compactions = covered = 0
    batches = committed_batches(events)
    started = time.monotonic()
    for number, batch in enumerate(batches, start=1):
        if batch[0].type == "llm_step_completed" and context.needs_compaction():
            required_end = context.compact()
            compactions += 1
            covered_end = reader.contiguous_covered_end(SESSION, "1", "1") or 0
            covered += covered_end >= required_end
        context.tokens_by_seq.extend((e.seq, per_seq.get(e.seq, 0)) for e in batch)
        last = number == len(batches)
        ctx = AfterTurnCommit(
            session_id=SESSION,
            turn_no=batch[0].turn_no,
            status="completed" if any(e.type == "agent_end" for e in batch) else "running",
            events=tuple(EventSummary(seq=e.seq, type=e.type, payload=e.payload) for e in batch),
            context_fill=round(context.fill, 4) if reports_fill else None,
            session_end=last and reports_fill,
        )
        envelope = client.turn_envelope(ctx, events_path)
        if envelope is None:
            continue
        assert isinstance(envelope.payload, ObserveBoundaryJob)
        job = envelope.payload
        if last and not reports_fill:  # an agent that never says the session ended: the idle flush
            job = job.model_copy(update={"signal": "idle_flush"})
        result = observe_through(job, envelope.job_id, settings, ports)
        totals["jobs"] += 1
        totals["deferred"] += result.status == "deferred"
        totals["parts"] += result.parts_committed
        totals["source_tokens"] += result.source_tokens
        totals["observations"] += result.observations
    seconds = time.monotonic() - started
    covered_end = reader.contiguous_covered_end(SESSION, "1", "1") or 0
    store.close()
    client.close()
    return {
        **totals,
        "covered_through": covered_end,
        "last_seq": events[-1].seq if events else 0,
        "compactions": compactions,
        "compactions_covered": covered,
        "seconds": round(seconds, 2),
    }


def _ratios(figures: dict[str, Any], model: PrefixCachingObserver) -> dict[str, Any]:
    source = max(1, figures["source_tokens"])
    return {
        **figures,
        "model_requests": model.requests,
        "source_blocks_seen": model.source_blocks_seen,
        "prompt_tokens": model.prompt_tokens,
        "uncached_prompt_tokens": model.uncached_prompt_tokens,
        "prompt_tokens_per_source_token": round(model.prompt_tokens / source, 3),
        "uncached_prompt_tokens_per_source_token": round(model.uncached_prompt_tokens / source, 3),
    }


def run_one(source: Path, policy: str, context_window: int, agent_window: int) -> dict[str, Any]:
    """One transcript under one policy, with a fresh database and scripted model."""
    observer, reports_fill = POLICIES[policy]
    scripted = PrefixCachingObserver()
    with (
        tempfile.TemporaryDirectory(prefix="omray-bench-observer-") as tmp,
        ScriptedServer(chat_default=scripted) as server,
    ):
        work = Path(tmp)
        events_path = work / "events.jsonl"
        import_transcript(detect_format(source), source, SESSION, events_path)  # type: ignore[arg-type]
        model_block = {
            "model": "scripted/observer",
            "providers": {"scripted": {"base_url": server.base_url, "context_window": context_window}},
        }
        figures = replay_policy(events_path, work, model_block, observer, reports_fill, agent_window)
    return _ratios(figures, scripted)


def _share(covered: int, total: int) -> float | None:
    return round(covered / total, 3) if total else None


def run_observer_bench(
    transcripts: Sequence[Path] | None = None,
    context_window: int = 32768,
    agent_context_window: int = AGENT_CONTEXT_WINDOW,
) -> dict[str, Any]:
    """Every policy on every transcript; cost figures of the first transcript, compactions of all."""
    sources = list(transcripts or default_transcripts())
    runs = {
        policy: [run_one(source, policy, context_window, agent_context_window) for source in sources]
        for policy in POLICIES
    }
    policies: dict[str, Any] = {}
    for policy, results in runs.items():
        main = results[0]
        compactions = sum(r["compactions"] for r in results)
        covered = sum(r["compactions_covered"] for r in results)
        policies[policy] = {
            **{k: v for k, v in main.items() if k not in ("compactions", "compactions_covered")},
            "compactions": compactions,
            "compactions_fully_covered": _share(covered, compactions),
            "compactions_covered": covered,
        }
    return {
        "transcript": sources[0].name,
        "transcripts": [s.name for s in sources],
        "context_window": context_window,
        "agent_context_window": agent_context_window,
        "policies": policies,
        "per_transcript": {
            source.name: {
                policy: {
                    k: runs[policy][index][k]
                    for k in ("compactions", "compactions_covered", "model_requests", "source_tokens")
                }
                for policy in POLICIES
            }
            for index, source in enumerate(sources)
        },
    }
