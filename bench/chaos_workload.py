"""The real work of ``omray bench chaos --real``: agent sessions, the scripted model, and a driver.

``sessions`` sessions of one project (one memory database) each commit ``turns`` turns of the
sample coding session (``cluster/commands/demo_session.py``, repeated with later seqs and times when
``turns`` exceeds it) through the public client's ``after_turn_commit``, as a host agent would.
The model is :class:`testkit.scripted_models.ScriptedMemoryModel` behind the scripted
OpenAI-compatible server, called through the real ``openai`` client in the workers, with
``model_latency_s`` per answer; embeddings come from the same server (``hash_vector``), so real
observe, reflect (with the Dropper) and index jobs run.

The driver goes in rounds: in round ``k`` every session commits its turn ``k`` at once (their
jobs run in parallel lanes), then the driver waits until the round has settled (the client's
outbox is empty, the queue is idle, every session's coverage reaches its last event). Waiting
observe jobs of one session are coalesced by design, so memory depends on how turns are batched;
settling each round makes every run see the same jobs, whatever happens to the actors meanwhile.
After the last round every session asks for an index batch (``session_started``) and the driver
settles once more, so the semantic index ends complete.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cluster.client import OmrayClient
from cluster.commands.demo_session import commit_turn, demo_session
from persistence.reads.memory_reader import MemoryReader
from persistence.settings.parse import settings_from_mapping
from testkit.scripted_models import ScriptedMemoryModel
from testkit.scripted_server import Reply, ScriptedServer

logger = logging.getLogger("omray.bench")

RequestKind = str
"""``observer``, ``reflector`` (Reflector and Dropper) or ``embeddings``."""


@dataclass(frozen=True)
class Workload:
    """The input of one run; two runs with equal workloads must end with equal memory."""

    sessions: int = 2
    """Sessions (lanes) of the project, committing their turns in parallel."""
    turns: int = 5
    """Turns per session (the sample session has 5; more repeat it with later seqs and times)."""
    model_latency_s: float = 0.15
    """Delay of every model answer, so kills land while model calls are in flight."""
    context_window: int = 1900
    """The scripted model's context window: small, so one turn's job has several parts."""
    settle_timeout_s: float = 240.0
    """Longest wait for one round to settle."""

    def settings(self, project: Path, base_url: str) -> dict[str, Any]:
        """The ``observational_memory`` block: the scripted model, low thresholds, hybrid search."""
        return {
            "model": "scripted/memory",
            "providers": {"scripted": {"base_url": base_url, "context_window": self.context_window}},
            "storage": {"database": str(project / "om.sqlite")},
            # Every turn end observes (the original policy): each round settles on its own turn's
            # coverage, and kills land in observer calls of every turn, not the trigger policy's.
            "observer": {"observe_after_tokens": 0},
            "reflector": {"reflect_after_observation_tokens": 150},
            "pools": {"observations_max_tokens": 100},
            "semantic": {"embedding_api": {"base_url": base_url, "model_id": "hash-embedder"}},
        }

    def session_ids(self) -> list[str]:
        """The sessions' ids."""
        return [f"chaos-{n:02d}" for n in range(self.sessions)]


def session_turns(session_id: str, turns: int) -> list[list[dict[str, Any]]]:
    """``turns`` turns of the sample session, renumbered past its fifth turn (seqs, turn numbers, times)."""
    start = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    result: list[list[dict[str, Any]]] = []
    seq = 0
    cycle = 0
    while len(result) < turns:
        for turn in demo_session(session_id, start + timedelta(hours=cycle)):
            if len(result) == turns:
                break
            renumbered = []
            for event in turn:
                seq += 1
                renumbered.append({**event, "seq": seq, "turn_no": len(result) + 1})
            result.append(renumbered)
        cycle += 1
    return result


def request_kind(path: str, body: Mapping[str, Any]) -> RequestKind | None:
    """Which worker role sent a request to the scripted server (``None``: another route)."""
    if path.endswith("/embeddings"):
        return "embeddings"
    if not path.endswith("/chat/completions"):
        return None
    tools = body.get("tools") or [{}]
    name = str(tools[0].get("function", {}).get("name", ""))
    return "observer" if name == "record_observations" else "reflector"


class CountingServer(ScriptedServer):
    """The scripted server answering with :class:`ScriptedMemoryModel`, counting requests by kind.

    ``on_request(kind, count)`` is called as each request arrives (on the server's thread), with
    the number of requests of that kind so far, and with ``"any"`` and the total.
    """

    def __init__(
        self, latency_s: float, on_request: Callable[[RequestKind, int], None] | None = None
    ) -> None:
        super().__init__(chat_default=ScriptedMemoryModel(latency_s=latency_s))
        self.counts: Counter[str] = Counter()
        self._on_request = on_request
        self._count_lock = threading.Lock()

    def __enter__(self) -> CountingServer:
        super().__enter__()
        return self

    def reply_for(self, path: str, body: Any) -> Reply:
        kind = request_kind(path, body if isinstance(body, Mapping) else {})
        if kind is not None:
            with self._count_lock:
                self.counts[kind] += 1
                self.counts["any"] += 1
                counts = (self.counts[kind], self.counts["any"])
            if self._on_request is not None:
                self._on_request(kind, counts[0])
                self._on_request("any", counts[1])
        return super().reply_for(path, body)


def covered_end(client: OmrayClient, session_id: str) -> int:
    """The session's contiguous coverage end (0 while there is none or the file is being created)."""
    try:
        end = MemoryReader(client.db_path).contiguous_covered_end(
            session_id, client.settings.renderer_version, client.settings.observer_schema_version
        )
    except Exception:  # created or migrated right now: ask again
        return 0
    return end or 0


def settled(client: OmrayClient, last_seqs: Mapping[str, int]) -> bool:
    """Every hook job accepted, the queue idle, and every session covered through its last seq."""
    if len(client.outbox):
        return False
    try:
        if not client.queue_is_idle():
            return False
    except Exception:  # the queue (or the cluster) is restarting: not settled yet
        return False
    return all(covered_end(client, session) >= seq for session, seq in last_seqs.items())


def wait_settled(client: OmrayClient, last_seqs: Mapping[str, int], timeout_s: float) -> bool:
    """Poll :func:`settled` until it holds; False after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if settled(client, last_seqs):
            return True
        time.sleep(0.1)
    return False


@dataclass
class DriveResult:
    """What one drive of the workload did."""

    last_seqs: dict[str, int]
    """The last seq appended to each session."""
    rounds_settled: int
    """Rounds (plus the final index round) that settled in time."""
    seconds: float
    """First turn to the settled final round."""


def drive(client: OmrayClient, project: Path, workload: Workload) -> DriveResult:
    """Commit the workload's turns round by round, settling after each, then index every session."""
    started = time.monotonic()
    sessions = {session: session_turns(session, workload.turns) for session in workload.session_ids()}
    last_seqs: dict[str, int] = {}
    rounds_settled = 0
    for session in sessions:
        client.session_started(session)
    for turn_index in range(workload.turns):
        for session, turns in sessions.items():
            events_path = project / session / "events.jsonl"
            turn = turns[turn_index]
            client.after_turn_commit(commit_turn(events_path, turn), events_path=events_path)
            last_seqs[session] = turn[-1]["seq"]
        rounds_settled += wait_settled(client, last_seqs, workload.settle_timeout_s)
    for session in sessions:  # a last index batch after the final observations and reflections
        client.session_started(session)
    rounds_settled += wait_settled(client, last_seqs, workload.settle_timeout_s)
    return DriveResult(
        last_seqs=last_seqs,
        rounds_settled=rounds_settled,
        seconds=round(time.monotonic() - started, 2),
    )


def last_seqs(workload: Workload) -> dict[str, int]:
    """The last seq of every session of the workload."""
    return {
        session: session_turns(session, workload.turns)[-1][-1]["seq"] for session in workload.session_ids()
    }


def uncovered_events(project: Path, workload: Workload) -> int:
    """Input events of the workload that the project's coverage does not reach (read after the run)."""
    settings = settings_from_mapping(workload.settings(project, "http://127.0.0.1:1/v1"))
    reader = MemoryReader(project / "om.sqlite")
    missing = 0
    for session, last in last_seqs(workload).items():
        end = reader.contiguous_covered_end(
            session, settings.renderer_version, settings.observer_schema_version
        )
        missing += max(0, last - (end or 0))
    return missing
