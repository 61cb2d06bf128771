"""Real Claude Code transcripts replayed line by line through `omray hook claude-code`, on real Ray.

The transcript is written the way Claude Code writes it, one record at a time, and the hook is
run as Claude Code runs it (a fresh process, the hook JSON on stdin, with the next line already
half-written): ``Stop`` when the assistant's answer to a prompt is complete (twice at the first
one, as a repeated call), ``SubagentStop`` once mid-transcript, ``PreCompact`` at the end, then
``SessionStart`` with source ``compact``. The runtime observes with the builtin model. Each
transcript is capped at :data:`MAX_LINES` lines to keep the test to a few minutes.
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.read.service import project as project_memory
from cluster.client import OmrayClient
from cluster.naming import RuntimeNames
from cluster.runtime import DEFAULT_HANDLERS, ensure_runtime
from persistence.events_reader import iter_events
from persistence.importers.live import read_cursor, read_marks
from tests.integration.conftest import assert_eventually

pytestmark = pytest.mark.integration

MAX_LINES = 200
"""Transcript lines replayed per session (the largest shared transcript has 438, mostly sidechain)."""


def _real_transcripts() -> list[Path]:
    for parent in Path(__file__).resolve().parents:
        folder = parent / "shared" / "data" / "transcripts" / "claude-code"
        if folder.is_dir():
            return sorted(folder.glob("*/*.jsonl"))
    return []


TRANSCRIPTS = _real_transcripts()


def _is_prompt(record: Mapping[str, Any]) -> bool:
    """A user prompt of the main chain (a new turn), not a tool result or injected context."""
    if record.get("type") != "user" or record.get("isSidechain") or record.get("isMeta"):
        return False
    if record.get("isCompactSummary"):
        return False
    content = record.get("message", {}).get("content")
    return isinstance(content, str) or any(
        isinstance(part, dict) and part.get("type") == "text" for part in content or []
    )


def _is_main_assistant(record: Mapping[str, Any]) -> bool:
    return record.get("type") == "assistant" and not record.get("isSidechain")


class Replay:
    """One Claude Code session: its transcript file as it grows, and the hook calls."""

    def __init__(self, source: Path, project: Path, env: dict[str, str]) -> None:
        self.session_id = source.stem
        self.lines = source.read_bytes().splitlines(keepends=True)[:MAX_LINES]
        self.transcript = project / "claude" / f"{self.session_id}.jsonl"
        self.transcript.parent.mkdir(parents=True, exist_ok=True)
        self.transcript.write_bytes(b"")
        self.project = project
        self.env = env
        self.stops = 0

    def hook(self, event: str, next_line: bytes | None = None, **extra: Any) -> dict[str, Any] | None:
        if next_line is not None:  # Claude Code is already writing the next record
            with self.transcript.open("ab") as handle:
                handle.write(next_line[: len(next_line) // 2])
        payload = {
            "session_id": self.session_id,
            "transcript_path": str(self.transcript),
            "cwd": str(self.project),
            "permission_mode": "default",
            "hook_event_name": event,
            **extra,
        }
        result = subprocess.run(
            [sys.executable, "-m", "cluster.cli", "hook", "claude-code"],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.project,
            timeout=120,
        )
        assert result.returncode == 0 and result.stderr == "", result.stderr[-2000:]
        if next_line is not None:
            with self.transcript.open("ab") as handle:
                handle.write(next_line[len(next_line) // 2 :])
        return json.loads(result.stdout) if result.stdout.strip() else None

    def run(self) -> None:
        answered = False
        middle = len(self.lines) // 2
        for index, line in enumerate(self.lines):
            record = json.loads(line)
            if _is_prompt(record) and answered:
                self._stop(line)  # the prompt is being written while the Stop hook runs
                answered = False
            elif index == middle:
                assert self.hook("SubagentStop", line, stop_hook_active=False) is None
            else:
                with self.transcript.open("ab") as handle:
                    handle.write(line)
            answered = answered or _is_main_assistant(record)
        if answered:
            self._stop(None)
        assert self.hook("PreCompact", trigger="auto", custom_instructions="") is None

    def _stop(self, next_line: bytes | None) -> None:
        calls = 2 if self.stops == 0 else 1  # the first Stop arrives twice
        for _ in range(calls):
            assert self.hook("Stop", next_line, stop_hook_active=False) is None
            next_line = None
        self.stops += 1

    @property
    def session_dir(self) -> Path:
        return self.project / ".hatfield" / "sessions" / self.session_id


def _coverage_ranges(db_path: Path, session_id: str) -> list[tuple[int, int]]:
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT DISTINCT source_start_seq, source_end_seq FROM om_coverage WHERE run_id = ? ORDER BY 1",
            (session_id,),
        ).fetchall()
    return [(int(start), int(end)) for start, end in rows]


@pytest.mark.skipif(not TRANSCRIPTS, reason="shared/data/transcripts/claude-code is not present")
def test_real_sessions_replayed_through_the_hook_are_observed_once(
    names: RuntimeNames, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "omray.yaml").write_text(
        "observational_memory:\n  model: builtin/extractive\n  storage:\n    database: om.sqlite\n"
    )
    ensure_runtime(names, queue_db=str(tmp_path / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
    env = {
        **os.environ,
        "RAY_ADDRESS": ray.get_runtime_context().gcs_address,
        "OMRAY_PREFIX": names.prefix,
        "CLAUDE_PROJECT_DIR": str(project),
    }
    replays = [Replay(source, project, env) for source in TRANSCRIPTS]
    for replay in replays:
        replay.run()
        assert replay.stops >= 1

    def all_dispatched() -> bool:
        for replay in replays:
            cursor = read_cursor(replay.session_dir)
            if cursor.pending or cursor.marks_applied < len(read_marks(replay.session_dir)):
                return False
        return True

    assert_eventually(all_dispatched, timeout_s=240, interval_s=0.5, message="hook turns not dispatched")
    db_path = project / "om.sqlite"
    client = OmrayClient(
        names, settings={"model": "builtin/extractive", "storage": {"database": str(db_path)}}, cwd=project
    )
    assert client.wait_idle(timeout_s=240)

    for replay in replays:
        events = list(iter_events(replay.session_dir / "events.jsonl"))
        seqs = [event.seq for event in events]
        assert seqs == list(range(1, len(events) + 1))
        turn_ends = [event.seq for event in events if event.type == "agent_end"]
        assert turn_ends and turn_ends[-1] == seqs[-1]  # PreCompact closed the last turn
        ranges = _coverage_ranges(db_path, replay.session_id)
        # Observed once: coverage ranges never overlap, leave no hole, and reach the last event.
        assert ranges[0][0] == 1 and ranges[-1][1] == seqs[-1]
        assert all(later[0] == earlier[1] + 1 for earlier, later in itertools.pairwise(ranges))
        assert not [e for e in client.runtime_events(replay.session_id) if "failed" in str(e.get("type"))]

        projection = project_memory(db_path, replay.session_id)
        assert projection.strip()
        output = replay.hook("SessionStart", source="compact", model="claude-sonnet-4-5")
        assert output is not None
        context = output["hookSpecificOutput"]
        assert context["hookEventName"] == "SessionStart" and projection in context["additionalContext"]
