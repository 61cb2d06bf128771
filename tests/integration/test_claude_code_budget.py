"""A daily budget reached holds the jobs and releases them after the cap is raised, with every turn
observed once: the REAL ``claude`` CLI, run by a real runtime's Observer, against the mock Messages API.

The project's settings file caps the day's spend in US dollars below what one CLI run costs (the CLI
reports each run's ``total_cost_usd``, which omray records and counts). The first turn is observed;
the next turns find the budget used up: their jobs wait in the session's lane (nothing sent, coverage
where it was, no failure), a ``memory_held`` event says why and how to resume, ``omray status`` lists
the held project, and search and the projection keep working. The user raises the cap in the file;
the next turn is sent under the new settings, the hold re-checks at once, and every waiting turn is
observed, each exactly once.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.client import OmrayClient
from cluster.commands.demo_session import commit_turn, demo_session
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.naming import RuntimeNames
from persistence.reads.memory_reader import MemoryReader
from protocol.outcomes import JOB_HELD_EVENT_TYPE
from testkit.anthropic_messages import StructuredMemoryModel, offered_tool, prompt_text
from testkit.scripted_models import ScriptedMemoryModel
from testkit.scripted_server import ScriptedServer
from tests.integration.conftest import assert_eventually
from tests.integration.test_claude_code_observer import _project, _user_config, claude_cli, cli_env

pytestmark = pytest.mark.integration

SESSION = "s-budget"
SOURCE_ENTRY = "[Source entry id: "


def _settings(command: str, db: Path, daily_usd: float | None) -> dict[str, Any]:
    return {
        "observational_memory": {
            "model": "claude-code/haiku",
            "providers": {"claude-code": {"command": command, "timeout_s": 120, "max_budget_usd": 0.2}},
            "storage": {"database": str(db)},
            "observer": {"observe_after_tokens": 0},  # every turn end observes
            "semantic": None,
            "budget": {"daily_tokens": None, "daily_usd": daily_usd},
        }
    }


def _client(names: RuntimeNames, project_dir: Path, settings_file: Path) -> OmrayClient:
    block = yaml.safe_load(settings_file.read_text())["observational_memory"]
    return OmrayClient(names, settings=block, cwd=project_dir, settings_file=settings_file)


def _coverage(db: Path) -> list[tuple[int, int]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT source_start_seq, source_end_seq FROM om_coverage WHERE run_id = ?"
            " ORDER BY source_start_seq",
            (SESSION,),
        ).fetchall()
    return [(int(a), int(b)) for a, b in rows]


def _observer_entries(requests: list[Any]) -> list[set[int]]:
    """The seqs of the source entries each Observer request was sent (a first request offering
    record_observations; an event may be rendered as more than one entry)."""
    entries: list[set[int]] = []
    for request in requests:
        body = request.body
        if offered_tool(body) != "record_observations":
            continue
        prompt = prompt_text((body.get("messages") or [{}])[-1].get("content"))
        if "YOUR EARLIER ANSWERS" in prompt:
            continue
        chunk = prompt.split("NEW SOURCE-ADDRESSED CONVERSATION CHUNK:", 1)[-1]
        ids = (part.split("]", 1)[0] for part in chunk.split(SOURCE_ENTRY)[1:])
        entries.append({int(entry.rsplit(":", 1)[1]) for entry in ids})
    return entries


def test_a_budget_reached_holds_the_jobs_and_releases_them_after_the_cap_is_raised(
    names: RuntimeNames, tmp_path: Path
) -> None:
    command = claude_cli()
    markers = tmp_path / "markers"
    markers.mkdir()
    config = _user_config(tmp_path, markers)
    project_dir = _project(tmp_path, markers)
    events_path = project_dir / ".hatfield" / "sessions" / SESSION / "events.jsonl"
    events_path.parent.mkdir(parents=True)
    db = tmp_path / "data" / "om.sqlite"
    settings_file = project_dir / "omray.yaml"
    settings_file.write_text(yaml.safe_dump(_settings(command, db, daily_usd=1e-9)))
    turns = demo_session(SESSION)[:4]
    ends = [int(turn[-1]["seq"]) for turn in turns]
    reader = MemoryReader(db)

    with ScriptedServer(messages_default=StructuredMemoryModel(ScriptedMemoryModel())) as server:
        ensure_runtime(
            names,
            queue_db=str(tmp_path / "queue.sqlite"),
            handler_paths=DEFAULT_HANDLERS,
            worker_env=cli_env(server, config),
        )
        client = _client(names, project_dir, settings_file)

        # Turn 1 is observed: the day's spend was 0, under the cap; the CLI reports what the run cost.
        client.after_turn_commit(commit_turn(events_path, turns[0]), events_path=events_path)
        assert_eventually(
            lambda: reader.contiguous_covered_end(SESSION, "1", "1") == ends[0],
            timeout_s=240,
            interval_s=0.5,
            message="the first turn was not observed",
        )
        [usage] = reader.token_usage(SESSION)
        assert usage.cost_usd is not None and usage.cost_usd > 1e-9, "the CLI reported no cost"

        # Turns 2 and 3 find the budget used up: held in the lane, nothing sent, nothing failed.
        requests_before = len(server.messages_requests)
        for turn in turns[1:3]:
            client.after_turn_commit(commit_turn(events_path, turn), events_path=events_path)

        def held() -> list[dict[str, Any]]:
            return [
                h for h in client.status().get("held_by_project", []) if h["db_path"] == str(db.resolve())
            ]

        [hold] = assert_eventually(held, timeout_s=240, interval_s=0.5, message="the jobs were not held")
        assert hold["reason"] == "budget_usd" and hold["jobs"] >= 1
        assert len(server.messages_requests) == requests_before  # nothing was sent at the cap
        assert reader.contiguous_covered_end(SESSION, "1", "1") == ends[0]  # coverage did not advance
        assert client.job_counts().get("failed", 0) == 0 and not client.queue_is_idle()
        events = client.runtime_events(SESSION)
        held_events = [e for e in events if e["event_type"] == JOB_HELD_EVENT_TYPE]
        assert len(held_events) == 1 and "budget.daily_usd" in held_events[0]["payload"]["message"]
        # Search and the projection keep working while observing is held.
        assert "Entry 1 of s-budget" in client.project(SESSION)
        found = client.memory_search({"query": "Entry 1 of s-budget", "mode": "exact"})
        assert found.get("results"), "search stopped while observing was held"
        budget = client.budget()
        assert budget["reached"] == "budget_usd" and float(budget["usd"]) >= usage.cost_usd  # type: ignore[arg-type]

        # The user raises the cap; the next turn is sent under the new settings and releases the hold.
        settings_file.write_text(yaml.safe_dump(_settings(command, db, daily_usd=100.0)))
        raised = _client(names, project_dir, settings_file)
        raised.after_turn_commit(commit_turn(events_path, turns[3]), events_path=events_path)
        assert_eventually(
            lambda: reader.contiguous_covered_end(SESSION, "1", "1") == ends[-1],
            timeout_s=240,
            interval_s=0.5,
            message="the held turns were not observed after the cap was raised",
        )
        assert raised.wait_idle(timeout_s=120)
        assert held() == [] and raised.job_counts().get("failed", 0) == 0
        requests = list(server.messages_requests)

    # Every turn observed once: coverage tiles 1..N without overlap, each source entry went to exactly
    # one Observer call, and each event has one observation.
    coverage = _coverage(db)
    assert coverage[0][0] == 1 and coverage[-1][1] == ends[-1]
    assert all(later[0] == earlier[1] + 1 for earlier, later in itertools.pairwise(coverage))
    sent = _observer_entries(requests)
    # Turn 1 alone, then turns 2-4 in one run once the hold was released (two runs, when the minute's
    # re-check came after the cap was raised and before turn 4 was sent).
    assert 2 <= len(sent) <= 3
    assert sum(len(seqs) for seqs in sent) == len(set().union(*sent))  # no event in two calls
    cited = {ref.seq for o in reader.all_observations(SESSION) for ref in o.source_refs}
    assert cited == set().union(*sent) and max(cited) <= ends[-1]
    assert json.dumps(held_events[0]["payload"]).count("Entry") == 0  # the event holds no memory text
