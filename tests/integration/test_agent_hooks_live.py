"""Agent sessions replayed through `omray hook claude-code` / `omray hook codex`, on real Ray.

Claude Code: the real transcripts of ``shared/data/transcripts/claude-code``.

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
from cluster.commands.hook_fast import COMPACT_HEADER, CONTEXT_LIMIT
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.naming import RuntimeNames
from persistence.files.events_reader import iter_events
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
            [sys.executable, "-m", "cluster.commands.cli", "hook", "claude-code"],
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


def _assert_observed_once(db_path: Path, session_id: str, events_path: Path) -> list[int]:
    """Events count 1..N, the last one ends a turn, and coverage ranges tile 1..N (each event once)."""
    seqs = [event.seq for event in iter_events(events_path)]
    assert seqs == list(range(1, len(seqs) + 1)) and seqs
    assert [e.type for e in iter_events(events_path, seqs[-1], seqs[-1])] == ["agent_end"]
    ranges = _coverage_ranges(db_path, session_id)
    assert ranges[0][0] == 1 and ranges[-1][1] == seqs[-1]
    assert all(later[0] == earlier[1] + 1 for earlier, later in itertools.pairwise(ranges))
    return seqs


def _project(
    names: RuntimeNames, tmp_path: Path, extra_yaml: str = ""
) -> tuple[Path, dict[str, str], OmrayClient]:
    """A project observed with the builtin model, the hook environment, and a client to wait with."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "omray.yaml").write_text(
        "observational_memory:\n  model: builtin/extractive\n  storage:\n    database: om.sqlite\n"
        + extra_yaml
    )
    ensure_runtime(names, queue_db=str(tmp_path / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
    env = {
        **os.environ,
        "RAY_ADDRESS": ray.get_runtime_context().gcs_address,
        "OMRAY_PREFIX": names.prefix,
        "CLAUDE_PROJECT_DIR": str(project),
    }
    settings = {"model": "builtin/extractive", "storage": {"database": str(project / "om.sqlite")}}
    return project, env, OmrayClient(names, settings=settings, cwd=project)


def _dispatched(session_dir: Path) -> bool:
    cursor = read_cursor(session_dir)
    return not cursor.pending and cursor.marks_applied == len(read_marks(session_dir))


@pytest.mark.skipif(not TRANSCRIPTS, reason="shared/data/transcripts/claude-code is not present")
def test_real_sessions_replayed_through_the_hook_are_observed_once(
    names: RuntimeNames, tmp_path: Path
) -> None:
    project, env, client = _project(names, tmp_path)
    replays = [Replay(source, project, env) for source in TRANSCRIPTS]
    for replay in replays:
        replay.run()
        assert replay.stops >= 1

    assert_eventually(
        lambda: all(_dispatched(replay.session_dir) for replay in replays),
        timeout_s=240,
        interval_s=0.5,
        message="hook turns not dispatched",
    )
    assert client.wait_idle(timeout_s=240)
    db_path = project / "om.sqlite"
    for replay in replays:
        _assert_observed_once(db_path, replay.session_id, replay.session_dir / "events.jsonl")
        assert not [e for e in client.runtime_events(replay.session_id) if "failed" in str(e.get("type"))]
        projection = project_memory(db_path, replay.session_id)
        assert projection.strip()
        output = replay.hook("SessionStart", source="compact", model="claude-sonnet-4-5")
        assert output is not None
        context = output["hookSpecificOutput"]
        assert context["hookEventName"] == "SessionStart"
        text = context["additionalContext"]
        # The projection's entries, the newest ones when all do not fit Claude Code's 10,000 characters.
        assert text.startswith(COMPACT_HEADER) and len(text) <= CONTEXT_LIMIT
        shown = [line for line in text.split("## Observations\n", 1)[1].splitlines() if line.startswith("[")]
        entries = projection.split("## Observations\n", 1)[1].splitlines()
        assert shown and shown == entries[len(entries) - len(shown) :]


CODEX_THREAD = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
CODEX_TURN_ENDS = (16, 24)
"""Lines of ``tests/fixtures/transcripts/codex-rollout.jsonl`` after which Codex notifies a completed turn."""


def test_codex_rollout_observed_as_it_grows(names: RuntimeNames, tmp_path: Path) -> None:
    # Codex says when a turn completes, never when a session ends: its deferred tail is observed by
    # the idle flush (shortened here from its default so the test does not wait minutes).
    project, env, client = _project(names, tmp_path, "  observer:\n    idle_flush_seconds: 2\n")
    codex_home = tmp_path / "codex"
    rollout = (
        codex_home / "sessions" / "2026" / "03" / "04" / f"rollout-2026-03-04T10-00-00-{CODEX_THREAD}.jsonl"
    )
    rollout.parent.mkdir(parents=True)
    lines = (
        Path(__file__).resolve().parents[1] / "fixtures" / "transcripts" / "codex-rollout.jsonl"
    ).read_bytes()
    records = lines.splitlines(keepends=True)
    env = {**env, "CODEX_HOME": str(codex_home)}
    env.pop("CLAUDE_PROJECT_DIR")
    written = 0
    for turn, end in enumerate(CODEX_TURN_ENDS, start=1):
        rollout.write_bytes(b"".join(records[:end]))
        notification = {
            "type": "agent-turn-complete",
            "thread-id": CODEX_THREAD,
            "turn-id": str(turn),
            "cwd": str(project),
            "input-messages": ["..."],
            "last-assistant-message": "...",
        }
        result = subprocess.run(
            [sys.executable, "-m", "cluster.commands.cli", "hook", "codex", json.dumps(notification)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert result.returncode == 0 and result.stdout == "" and result.stderr == "", result.stderr
        written = end
    assert written == len(records)
    session_dir = project / ".hatfield" / "sessions" / CODEX_THREAD
    assert_eventually(lambda: _dispatched(session_dir), timeout_s=240, interval_s=0.5)
    assert client.wait_idle(timeout_s=240)
    seqs = _assert_observed_once(project / "om.sqlite", CODEX_THREAD, session_dir / "events.jsonl")
    turn_ends = [e.seq for e in iter_events(session_dir / "events.jsonl") if e.type == "agent_end"]
    assert len(turn_ends) == len(CODEX_TURN_ENDS) and turn_ends[-1] == seqs[-1]
    assert project_memory(project / "om.sqlite", CODEX_THREAD).strip()


def _claude_record(kind: str, text: str, n: int) -> bytes:
    message: dict[str, Any] = (
        {"role": "user", "content": text}
        if kind == "user"
        else {
            "id": f"msg-b{n}",
            "role": "assistant",
            "model": "m",
            "content": [{"type": "text", "text": text}],
        }
    )
    record = {
        "type": kind,
        "uuid": f"b{kind}{n}",
        "timestamp": f"2026-03-04T10:{n:02d}:00Z",
        "message": message,
    }
    return (json.dumps(record) + "\n").encode()


def test_one_session_naming_two_transcripts_observes_both(names: RuntimeNames, tmp_path: Path) -> None:
    # Claude Code has named another transcript for the same session_id (after /clear, a fork, a
    # compaction): b's offset must never be applied to a, and the session must never stall.
    project, env, client = _project(names, tmp_path)
    session = "two-transcripts"
    first = project / "claude" / "a.jsonl"
    second = project / "claude" / "b.jsonl"
    first.parent.mkdir(parents=True)
    first.write_bytes(
        (
            Path(__file__).resolve().parents[1] / "fixtures" / "transcripts" / "claude-code-session.jsonl"
        ).read_bytes()
    )
    padding = "x" * (first.stat().st_size // 2)  # b grows past a's length: its offset is no place in a
    second.write_bytes(
        b"".join(
            _claude_record("user", f"Second transcript question {n} {padding}", n)
            + _claude_record("assistant", f"Second transcript answer {n}", n)
            for n in (1, 2)
        )
    )
    for transcript in (first, second):
        payload = {
            "session_id": session,
            "transcript_path": str(transcript),
            "cwd": str(project),
            "hook_event_name": "Stop",
            "stop_hook_active": False,
        }
        result = subprocess.run(
            [sys.executable, "-m", "cluster.commands.cli", "hook", "claude-code"],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=env,
            cwd=project,
            timeout=120,
        )
        assert result.returncode == 0 and result.stderr == "", result.stderr[-2000:]
    session_dir = project / ".hatfield" / "sessions" / session
    assert_eventually(lambda: _dispatched(session_dir), timeout_s=240, interval_s=0.5)
    assert client.wait_idle(timeout_s=240)
    cursor = read_cursor(session_dir)
    assert cursor.problems == () and [s.transcript for s in cursor.spans] == [str(first), str(second)]
    _assert_observed_once(project / "om.sqlite", session, session_dir / "events.jsonl")
    prompts = [
        str(e.payload.get("text", ""))[:28]
        for e in iter_events(session_dir / "events.jsonl")
        if e.type == "agent_command_applied"
    ]
    assert prompts[-2:] == ["Second transcript question 1", "Second transcript question 2"]
    status = json.loads((project / ".hatfield" / "omray-hook.status.json").read_text())
    assert not [n for n in status.get("notices", []) if str(n.get("key", "")).startswith("sync:")]


def _transcript_texts(db_path: Path, session_id: str) -> list[str]:
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT content FROM omray_transcript WHERE run_id = ?", (session_id,)).fetchall()
    return [str(content) for (content,) in rows]


@pytest.mark.skipif(not TRANSCRIPTS, reason="shared/data/transcripts/claude-code is not present")
def test_a_forked_session_observes_only_its_own_turns(names: RuntimeNames, tmp_path: Path) -> None:
    # `claude --resume <old> --fork-session`: the new session's transcript starts with a copy of the
    # old one's lines (same uuids, the old sessionId), then its own turn (issue 40 item 13).
    project, env, client = _project(names, tmp_path)
    old = Replay(TRANSCRIPTS[0], project, env)
    old.run()
    assert_eventually(lambda: _dispatched(old.session_dir), timeout_s=240, interval_s=0.5)
    assert client.wait_idle(timeout_s=240)
    db_path = project / "om.sqlite"
    old_texts = _transcript_texts(db_path, old.session_id)
    assert old_texts
    copied = old.transcript.read_bytes()
    assert copied
    fork = Replay(TRANSCRIPTS[0], project, env)  # (its constructor empties the old path: write it back)
    old.transcript.write_bytes(copied)
    fork.session_id = "forked-" + old.session_id[:8]
    fork.transcript = project / "claude" / f"{fork.session_id}.jsonl"
    fork.transcript.write_bytes(
        copied
        + _claude_record("user", "Forked question: rename the module", 1)
        + _claude_record("assistant", "Forked answer: renamed it", 1)
    )
    fork._stop(None)
    assert_eventually(lambda: _dispatched(fork.session_dir), timeout_s=240, interval_s=0.5)
    assert client.wait_idle(timeout_s=240)
    _assert_observed_once(db_path, fork.session_id, fork.session_dir / "events.jsonl")
    assert _transcript_texts(db_path, fork.session_id) == [
        "User: Forked question: rename the module",
        "Assistant: Forked answer: renamed it",
    ]
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        cited = conn.execute(
            "SELECT MAX(source_end_seq) FROM om_observation WHERE run_id = ?", (fork.session_id,)
        ).fetchone()[0]
    assert cited is not None and cited <= 3  # its observations cite only its own turn
    assert _transcript_texts(db_path, old.session_id) == old_texts
