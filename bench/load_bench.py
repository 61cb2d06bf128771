"""``omray bench load``: many agent sessions at once, through the public client, with a real model delay.

``sessions`` concurrent agents, spread over ``projects`` project directories (each its own memory
database; session ids repeat across projects, as they do in real use), each append ``turns``
turns to their ``events.jsonl`` one every ``turn_interval_s`` seconds and call
``after_turn_commit`` after each, as a host agent would. The model is the scripted
OpenAI-compatible server on 127.0.0.1, through the real ``openai`` client in the observer workers;
it answers every request after ``model_latency_ms`` plus ``model_ms_per_100_tokens`` for every 100
prompt tokens (estimated as characters / 4), so a coalesced prompt of many turns costs more model
time than one turn's, as with a real model. The same workload runs with the runtime's pools
(``observers`` workers, fixed: autoscaling off), and serially: one ObserverActor with one slot and
one job in flight, in two variants (``serial_baseline``):

- ``coalescing`` (``serial_makespan_s``, ``speedup_vs_serial``): the single worker coalescing like
  the runtime does (a session's waiting observe jobs run as one; §7.3 coverage makes that safe).
  ``speedup_vs_serial`` is what lanes and pools give on top of coalescing; ``lane_ceiling`` the most
  they could give to every turn observed, beside ``speedup_observed_vs_serial`` (:func:`lane_ceiling`).
- ``original`` (``serial_no_coalescing_makespan_s``, ``speedup_vs_serial_no_coalescing``): every
  boundary's job on its own, one model run per turn, as the original ran them. At the default
  sizes that is 640 model runs, over 11 minutes. This speedup mixes two effects (coalescing, and
  lanes and pools), so it is reported as its own figure, never as the headline.

``coalescing`` is the default, so a default run takes about two minutes here; ``both`` runs the two
(``--serial-baseline both``, some 15 minutes at the default sizes).

Figures (per run):

- ``makespan_s``: first turn to the moment every turn's observations are durable (coverage of
  every session reaches its last event) and the queue is idle (the hybrid index caught up too).
- ``observed_s``: first turn to the moment every turn's observations are durable (exact search
  and the compaction text have them), the index possibly still catching up.
- ``index``: the default settings' hybrid index on (``--no-index``: ``semantic: null``, the same
  workload without its embedding).
- ``ideal_parallel_s``: the last turn's time plus one observe job's model time (one request: the
  tool call, every call accepted so no receipt round) -- what unlimited, instant workers would
  achieve.
- ``visible_lag_p50_s`` / ``p95``: per turn, from ``after_turn_commit`` to the moment the
  session's coverage first reaches that turn's last event (polled every 100 ms).
- ``after_turn_commit_p95_ms``: how long the hook held the agent.
- ``phases``: ``staggered`` (the default) starts agent ``i`` of ``n`` ``i / n`` of an interval after
  the first, as independent agents would be; ``synchronized`` starts them all in the same instant,
  so every turn is a burst of ``sessions`` hooks at once (the worst case, also reported).
- ``lost`` (turns never covered), ``duplicated`` (observations recorded twice for one source
  event, or a coverage row written twice), ``lane_order_violations`` (coverage of a session that
  ever moved backwards or left a hole), ``busy_errors`` (jobs that failed or hooks that raised).
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import ray

from bench.measure import percentile
from bench.queue_bench import fixed_pools
from cluster.client import OmrayClient
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime, remove_runtime
from cluster.naming import RuntimeNames
from cluster.pools import PoolSizes
from protocol.events import AfterTurnCommit, EventSummary
from testkit.scripted_models import ScriptedMemoryModel
from testkit.scripted_server import ScriptedServerProcess

SCHEMA_VERSION = "1.0"
REQUESTS_PER_OBSERVE_JOB = 1
"""The tool call; no receipt round follows when every call was accepted in full (issue 13), as the
scripted model's always are."""


Phases = Literal["staggered", "synchronized"]
"""How the agents' turns line up in time (see the module docstring)."""

SerialBaseline = Literal["original", "coalescing", "both"]
"""Which serial runs ``run_load_bench`` makes (see the module docstring)."""


def _turn_events(session_id: str, turn_no: int, first_seq: int) -> list[dict[str, Any]]:
    """One coding turn: user prompt, assistant tool call, tool result, assistant answer, turn end."""
    when = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    call_id = f"call-{turn_no}"
    parts: list[tuple[str, dict[str, Any]]] = [
        (
            "agent_command_applied",
            {"text": f"Turn {turn_no}: please check module_{turn_no % 7}.py for the bug."},
        ),
        (
            "llm_step_completed",
            {
                "assistant_message": {
                    "role": "assistant",
                    "content": f"Reading module_{turn_no % 7}.py.",
                    "tool_calls": [
                        {"id": call_id, "name": "read", "arguments": {"path": f"module_{turn_no % 7}.py"}}
                    ],
                }
            },
        ),
        (
            "tool_execution_end",
            {
                "tool_result": {
                    "tool_call_id": call_id,
                    "result": {
                        "tool_name": "read",
                        "content": [{"type": "text", "text": f"def f{turn_no}(): return {turn_no}"}],
                    },
                    "is_error": False,
                }
            },
        ),
        (
            "llm_step_completed",
            {"assistant_message": {"role": "assistant", "content": f"Fixed f{turn_no} in turn {turn_no}."}},
        ),
        ("agent_end", {"reason": "completed"}),
    ]
    return [
        {
            "schema_version": SCHEMA_VERSION,
            "run_id": session_id,
            "seq": first_seq + i,
            "turn_no": turn_no,
            "type": kind,
            "payload": payload,
            "ts": when,
        }
        for i, (kind, payload) in enumerate(parts)
    ]


def _coverage_ends(db_path: Path) -> dict[str, int]:
    """Highest contiguous covered seq of every session of one database (read-only, one query)."""
    if not db_path.exists():
        return {}
    try:
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5) as conn:
            rows = conn.execute(
                "SELECT run_id, source_start_seq, source_end_seq FROM om_coverage"
                " ORDER BY run_id, source_start_seq"
            ).fetchall()
    except sqlite3.Error:
        return {}
    ends: dict[str, int] = {}
    broken: set[str] = set()
    for session_id, start, stop in rows:
        end = ends.get(session_id, 0)
        if session_id in broken or start > end + 1:
            broken.add(session_id)
            continue
        ends[session_id] = max(end, stop)
    return ends


def _coverage_end(db_path: Path, session_id: str) -> int:
    """Highest contiguous covered seq of one session (0 when none)."""
    return _coverage_ends(db_path).get(session_id, 0)


class _Agent(threading.Thread):
    """One agent session: a turn every ``interval_s``, each followed by ``after_turn_commit``."""

    def __init__(
        self, client: OmrayClient, project: Path, session_id: str, turns: int, interval_s: float, t0: float
    ) -> None:
        super().__init__(name=f"agent-{session_id}", daemon=True)
        self.client, self.project, self.session_id = client, project, session_id
        self.turns, self.interval_s, self.t0 = turns, interval_s, t0
        self.events_path = project / "sessions" / session_id / "events.jsonl"
        self.hook_ms: list[float] = []
        self.turn_ends: list[tuple[int, float]] = []  # (last seq of the turn, time of the hook call)
        self.hook_errors = 0
        self.script = self._script()

    def _script(self) -> list[tuple[str, AfterTurnCommit, int]]:
        """Every turn's events lines, hook context and last seq: the agent's own work, done ahead so
        that 32 agents sharing this process's GIL do not bill one another's model building to the hook
        (real agents are processes of their own)."""
        script, seq = [], 1
        for turn_no in range(1, self.turns + 1):
            events = _turn_events(self.session_id, turn_no, seq)
            seq += len(events)
            lines = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events)
            context = AfterTurnCommit(
                session_id=self.session_id,
                turn_no=turn_no,
                status="completed",
                events=tuple(
                    EventSummary(seq=e["seq"], type=e["type"], payload=e["payload"]) for e in events
                ),
            )
            script.append((lines, context, events[-1]["seq"]))
        return script

    def run(self) -> None:
        self.events_path.parent.mkdir(parents=True, exist_ok=True)
        for turn_no, (lines, context, last_seq) in enumerate(self.script, start=1):
            due = self.t0 + (turn_no - 1) * self.interval_s
            time.sleep(max(0.0, due - time.monotonic()))
            with self.events_path.open("a", encoding="utf-8") as handle:
                handle.write(lines)
            started = time.monotonic()
            try:
                self.client.after_turn_commit(context, events_path=self.events_path)
            except Exception:  # the hook must never raise; count it if it does
                self.hook_errors += 1
            self.hook_ms.append((time.monotonic() - started) * 1000.0)
            self.turn_ends.append((last_seq, started))


def _audit(db_path: Path, session_id: str, last_seq: int) -> dict[str, int]:
    """Duplicates and holes in one session's memory."""
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        refs = [
            row[0]
            for row in conn.execute(
                "SELECT source_refs_json FROM om_observation WHERE run_id = ?", (session_id,)
            )
        ]
        coverage = conn.execute(
            "SELECT source_start_seq, source_end_seq FROM om_coverage WHERE run_id = ?"
            " ORDER BY source_start_seq",
            (session_id,),
        ).fetchall()
    seen: dict[int, int] = {}
    for raw in refs:
        for ref in json.loads(raw):
            if isinstance(ref, Mapping) and ref.get("run_id") == session_id:
                seq = int(ref["seq"])
                seen[seq] = seen.get(seq, 0) + 1
    duplicated = sum(1 for count in seen.values() if count > 1)
    overlaps = sum(1 for (_, end), (start, _) in itertools.pairwise(coverage) if start <= end)
    holes = sum(1 for (_, end), (start, _) in itertools.pairwise(coverage) if start > end + 1)
    covered_to = _coverage_end(db_path, session_id)
    return {
        "duplicated": duplicated + overlaps,
        "order_violations": holes,
        "lost_events": max(0, last_seq - covered_to),
    }


def run_load(
    *,
    sessions: int,
    projects: int,
    turns: int,
    model_latency_ms: float,
    turn_interval_s: float,
    pools: PoolSizes,
    max_in_flight: int | None,
    timeout_s: float,
    phases: Phases = "staggered",
    coalesce: bool = True,
    model_ms_per_100_tokens: float = 0.0,
    index: bool = True,
) -> dict[str, Any]:
    """One run of the workload on a fresh runtime; returns its figures. ``index``: the default
    settings' hybrid index (``False``: ``semantic: null``, no index jobs)."""
    if not ray.is_initialized():
        raise RuntimeError("not connected to Ray: use `omray bench load`, or call ray.init() first")
    names = RuntimeNames(prefix=f"load{uuid.uuid4().hex[:8]}")
    with (
        tempfile.TemporaryDirectory(prefix="omray-bench-load-") as tmp,
        # The model in a process of its own, like a real one: its answers never hold the agents' GIL.
        ScriptedServerProcess(
            ScriptedMemoryModel, model_latency_ms / 1000.0, model_ms_per_100_tokens / 1000.0 / 100.0
        ) as server,
    ):
        work = Path(tmp)
        ensure_runtime(
            names,
            queue_db=str(work / "queue.sqlite"),
            handler_paths=DEFAULT_HANDLERS,
            retry_base_delay_s=0.2,
            pools=pools,
            max_in_flight=max_in_flight,
            coalesce=coalesce,
        )
        try:
            # Worker processes start, and load the model client and tokenizer, once: a runtime that
            # serves agents is past that, so it is not billed to their turns (nor to the baseline's).
            workers = [
                ray.get_actor(names.worker(role, index), namespace=names.namespace)
                for role in ("observer", "reflector", "indexer")
                for index in range(pools.observers if role == "observer" else 1)
            ]
            ray.get([worker.warm.remote() for worker in workers])
            clients = []
            for p in range(projects):
                project = work / f"project-{p}"
                settings: dict[str, Any] = {
                    "model": "scripted/memory",
                    # Every turn end observes: this bench loads the queue, not the trigger policy.
                    "observer": {"observe_after_tokens": 0},
                    "providers": {"scripted": {"base_url": server.base_url, "context_window": 32768}},
                    "storage": {"database": str(project / "om.sqlite")},
                }
                if not index:
                    settings["semantic"] = None
                clients.append((project, OmrayClient(names, settings=settings, cwd=project)))
            t0 = time.monotonic() + 0.5
            agents = [
                _Agent(
                    clients[i % projects][1],
                    clients[i % projects][0],
                    f"s{i // projects:03d}",
                    turns,
                    turn_interval_s,
                    t0 + _phase(i, sessions, turn_interval_s, phases),
                )
                for i in range(sessions)
            ]
            for agent in agents:
                agent.start()
            visible: dict[tuple[str, int], float] = {}
            pending = {(id(agent), n) for agent in agents for n in range(turns)}
            deadline = t0 + timeout_s
            while pending and time.monotonic() < deadline:
                now = time.monotonic()
                ends = {project: _coverage_ends(client.db_path) for project, client in clients}
                for agent in agents:
                    covered = ends[agent.project].get(agent.session_id, 0)
                    for n, (last_seq, at) in enumerate(list(agent.turn_ends)):
                        key = (id(agent), n)
                        if key in pending and covered >= last_seq:
                            visible[(agent.name, n)] = now - at
                            pending.discard(key)
                time.sleep(0.1)
            covered_s = time.monotonic() - t0
            for agent in agents:
                agent.join(timeout=5)
            clients[0][1].wait_idle(timeout_s=max(5.0, deadline - time.monotonic()))
            makespan = time.monotonic() - t0
            status = clients[0][1].job_counts()
            audits = [
                _audit(
                    agent.client.db_path, agent.session_id, agent.turn_ends[-1][0] if agent.turn_ends else 0
                )
                for agent in agents
            ]
            model_requests = server.chat_request_count()
        finally:
            remove_runtime(names)
    lags = sorted(visible.values())
    hooks = sorted(ms for agent in agents for ms in agent.hook_ms)
    last_turn_s = (turns - 1) * turn_interval_s + _phase(sessions - 1, sessions, turn_interval_s, phases)
    return {
        "makespan_s": round(makespan, 2),
        "observed_s": round(covered_s, 2),
        "ideal_parallel_s": round(last_turn_s + REQUESTS_PER_OBSERVE_JOB * model_latency_ms / 1000.0, 2),
        "jobs": int(status.get("succeeded", 0)) + int(status.get("failed", 0)),
        "visible_lag_p50_s": round(percentile(lags, 0.5), 3),
        "visible_lag_p95_s": round(percentile(lags, 0.95), 3),
        "after_turn_commit_p50_ms": round(percentile(hooks, 0.5), 2),
        "after_turn_commit_p95_ms": round(percentile(hooks, 0.95), 2),
        "lost": len(pending) + sum(1 for a in audits if a["lost_events"]),
        "duplicated": sum(a["duplicated"] for a in audits),
        "lane_order_violations": sum(a["order_violations"] for a in audits),
        "busy_errors": int(status.get("failed", 0)) + sum(agent.hook_errors for agent in agents),
        "model_requests": model_requests,
    }


def _phase(index: int, sessions: int, interval_s: float, phases: Phases) -> float:
    """When agent ``index`` takes its first turn, after the first agent's."""
    return 0.0 if phases == "synchronized" else interval_s * index / sessions


def _ratio(serial_s: float, parallel_s: float) -> float:
    return round(serial_s / max(parallel_s, 1e-9), 2)


def _serial_figures(name: str, serial: Mapping[str, Any], parallel: Mapping[str, Any]) -> dict[str, Any]:
    """A serial run's figures under ``name`` (``serial`` -> ``serial_makespan_s``, ...), and the
    parallel run's speedup over it (``speedup_vs_serial``, ``speedup_vs_serial_no_coalescing``)."""
    figures = {
        f"{name}_{key}": serial[key]
        for key in ("makespan_s", "observed_s", "visible_lag_p95_s", "lost", "jobs", "model_requests")
    }
    figures[f"speedup_vs_{name}"] = _ratio(serial["makespan_s"], parallel["makespan_s"])
    return figures


def lane_ceiling(serial: Mapping[str, Any], parallel: Mapping[str, Any]) -> dict[str, Any]:
    """The most lanes and pools can give over the one coalescing worker on this workload, and what
    they gave, both to the moment every turn is observed.

    ``lane_ceiling``: the worker's time over ``ideal_parallel_s`` (every lane at once on unlimited,
    instant workers: no run of lanes and pools can observe every turn sooner).
    ``speedup_observed_vs_serial``: the worker's time over the lanes and pools' own. The share of the
    ceiling reached is their ratio, ``ideal_parallel_s / observed_s``. Index catch-up is left out of
    both: one indexer embeds on the same cores in either run, so no number of lanes changes it.
    """
    return {
        "lane_ceiling": _ratio(serial["observed_s"], parallel["ideal_parallel_s"]),
        "speedup_observed_vs_serial": _ratio(serial["observed_s"], parallel["observed_s"]),
    }


def run_load_bench(
    *,
    sessions: int = 32,
    projects: int = 2,
    turns: int = 20,
    model_latency_ms: float = 1000.0,
    turn_interval_s: float = 0.5,
    observers: int = 8,
    observer_slots: int = 4,
    serial: bool = True,
    timeout_s: float = 900.0,
    phases: Phases = "staggered",
    serial_baseline: SerialBaseline = "coalescing",
    model_ms_per_100_tokens: float = 1.0,
    index: bool = True,
) -> dict[str, Any]:
    """The workload with the runtime's pools and (``serial``) with one worker, one job in flight."""
    parallel_pools = PoolSizes(
        observers=observers,
        max_observers=observers,
        reflectors=2,
        max_reflectors=2,
        indexers=1,
        observer_slots=observer_slots,
    )
    common = {
        "sessions": sessions,
        "projects": projects,
        "turns": turns,
        "model_latency_ms": model_latency_ms,
        "turn_interval_s": turn_interval_s,
        "timeout_s": timeout_s,
        "phases": phases,
        "model_ms_per_100_tokens": model_ms_per_100_tokens,
        "index": index,
    }
    parallel = run_load(pools=parallel_pools, max_in_flight=None, **common)  # type: ignore[arg-type]
    result: dict[str, Any] = {
        "sessions": sessions,
        "projects": projects,
        "turns": turns,
        "model_latency_ms": model_latency_ms,
        "model_ms_per_100_tokens": model_ms_per_100_tokens,
        "turn_interval_s": turn_interval_s,
        "observers": observers,
        "observer_slots": observer_slots,
        "phases": phases,
        "index": index,
        **parallel,
    }
    if serial:
        one = fixed_pools(workers=1, slots=1)
        if serial_baseline in ("coalescing", "both"):
            # One worker that coalesces as the runtime does: what lanes and pools add on top of it.
            merged = run_load(pools=one, max_in_flight=1, **common)  # type: ignore[arg-type]
            result |= _serial_figures("serial", merged, parallel) | lane_ceiling(merged, parallel)
            result["serial_baseline"] = (
                "one ObserverActor, one slot, one job in flight, coalescing like the runtime"
                " (a session's waiting observe jobs run as one)"
            )
        if serial_baseline in ("original", "both"):
            # One model run per turn, in turn: allow for every one of them, and then some.
            runs = sessions * turns
            own = {**common, "timeout_s": max(timeout_s, runs * (model_latency_ms / 1000.0 + 0.5) + 120.0)}
            original = run_load(pools=one, max_in_flight=1, coalesce=False, **own)  # type: ignore[arg-type]
            result |= _serial_figures("serial_no_coalescing", original, parallel)
    result["makespan_vs_ideal"] = round(parallel["makespan_s"] / max(parallel["ideal_parallel_s"], 1e-9), 2)
    result["observed_vs_ideal"] = round(parallel["observed_s"] / max(parallel["ideal_parallel_s"], 1e-9), 2)
    result["machine"] = {"cores": os.cpu_count()}
    return result
