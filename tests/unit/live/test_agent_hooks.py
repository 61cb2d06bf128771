"""Agent hooks without Ray: the pure decisions, a hook call, and the dispatcher with a fake client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cluster import agent_hooks
from cluster.agent_hooks import (
    RUNTIME_MISSING_MESSAGE,
    claude_code_hook,
    codex_hook,
    codex_rollout,
    dispatch_project,
    problem_notice,
    run_dispatcher,
    session_dir,
)
from persistence.importers.live import read_cursor
from persistence.store import Store
from protocol.agent_hooks import (
    ClaudeCodeHookInput,
    CodexNotification,
    claude_code_action,
    codex_action,
    session_start_output,
)
from protocol.errors import RuntimeNotRunningError
from protocol.events import AfterTurnCommit
from tests.unit.importers.helpers import FIXTURES
from tests.unit.persistence.builders import make_observation, make_part

SESSION = "5d0c3f3e-claude-fixture"


@pytest.mark.parametrize(
    ("event", "source", "action"),
    [
        ("Stop", None, "close"),
        ("PreCompact", None, "close"),
        ("SessionEnd", None, "close"),
        ("SubagentStop", None, "sync"),
        ("SessionStart", "compact", "inject"),
        ("SessionStart", "resume", "inject"),
        ("SessionStart", "startup", "ignore"),
        ("SessionStart", "clear", "ignore"),
        ("UserPromptSubmit", None, "ignore"),
        ("PreToolUse", None, "ignore"),
    ],
)
def test_claude_code_action(event: str, source: str | None, action: str) -> None:
    hook_input = ClaudeCodeHookInput(session_id="s", hook_event_name=event, source=source)
    assert claude_code_action(hook_input) == action


def test_codex_action_and_payload_keys() -> None:
    done = CodexNotification.model_validate_json(
        '{"type": "agent-turn-complete", "thread-id": "t-1", "turn-id": "7", "cwd": "/p", "client": "x"}'
    )
    assert done.thread_id == "t-1" and codex_action(done) == "close"
    other = CodexNotification.model_validate({"type": "approval-requested", "thread-id": "t-1"})
    assert codex_action(other) == "ignore"


def test_session_start_output_is_claude_codes_additional_context() -> None:
    output = session_start_output("- memory line")
    assert output["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert output["hookSpecificOutput"]["additionalContext"].endswith("- memory line")


class FakeOutbox:
    def wait_empty(self, timeout_s: float) -> bool:
        return True


class FakeClient:
    """Records ``after_turn_commit`` calls as the real client would receive them."""

    def __init__(self) -> None:
        self.calls: list[AfterTurnCommit] = []
        self.flushes: list[tuple[str, int, str]] = []
        self.outbox = FakeOutbox()
        self.closed = False

    def observe(self, session_id: str, end_seq: int, *, events_path: Path, signal: str) -> str:
        assert events_path.exists()
        self.flushes.append((session_id, end_seq, signal))
        return f"flush-{end_seq}"

    def after_turn_commit(self, ctx: AfterTurnCommit, *, events_path: Path) -> str:
        assert events_path.exists()
        self.calls.append(ctx)
        return f"job-{ctx.events[0].seq}"

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def no_spawn(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    started: list[Path] = []
    monkeypatch.setattr(agent_hooks, "start_dispatcher", started.append)
    return started


def _hook(event: str, project: Path, transcript: Path, **extra: Any) -> str:
    return json.dumps(
        {
            "session_id": SESSION,
            "transcript_path": str(transcript),
            "cwd": str(project),
            "hook_event_name": event,
            **extra,
        }
    )


def test_stop_records_a_mark_and_the_dispatcher_sends_each_turn_once(
    tmp_path: Path, no_spawn: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLAUDE_PROJECT_DIR", raising=False)
    transcript = FIXTURES / "claude-code-session.jsonl"
    assert claude_code_hook(_hook("Stop", tmp_path, transcript), None) is None
    assert no_spawn == [tmp_path.resolve()]
    client = FakeClient()
    assert dispatch_project(tmp_path, lambda project: client) is True
    assert dispatch_project(tmp_path, lambda project: client) is True  # nothing new: nothing sent
    ends = [ctx.events[0].seq for ctx in client.calls]
    assert ends == sorted(set(ends)) and ends
    assert all(ctx.run_id == SESSION and ctx.status == "completed" for ctx in client.calls)
    assert read_cursor(session_dir(tmp_path, SESSION)).pending == ()
    assert client.closed


@pytest.mark.parametrize(("event", "signal"), [("PreCompact", "compaction"), ("SessionEnd", "session_end")])
def test_pre_compact_and_session_end_observe_everything_so_far_once(
    tmp_path: Path, no_spawn: list[Path], monkeypatch: pytest.MonkeyPatch, event: str, signal: str
) -> None:
    # A Stop, then the flushing event with nothing new in the transcript: no new turn to send, but
    # the deferred tail must be observed now (after the turns), once.
    monkeypatch.delenv("CLAUDE_PROJECT_DIR", raising=False)
    transcript = FIXTURES / "claude-code-session.jsonl"
    claude_code_hook(_hook("Stop", tmp_path, transcript), None)
    client = FakeClient()
    dispatch_project(tmp_path, lambda project: client)
    assert client.flushes == []
    claude_code_hook(_hook(event, tmp_path, transcript), None)
    dispatch_project(tmp_path, lambda project: client)
    dispatch_project(tmp_path, lambda project: client)  # the flush was accepted: not sent again
    last_seq = read_cursor(session_dir(tmp_path, SESSION)).last_seq
    assert client.flushes == [(SESSION, last_seq, signal)]
    assert last_seq == max(ctx.events[0].seq for ctx in client.calls)
    assert read_cursor(session_dir(tmp_path, SESSION)).flush is None


def test_a_missing_runtime_keeps_the_turns_and_is_reported_once(tmp_path: Path, no_spawn: list[Path]) -> None:
    transcript = FIXTURES / "claude-code-session.jsonl"
    claude_code_hook(_hook("Stop", tmp_path, transcript), tmp_path)

    def refuse(project: Path) -> Any:
        raise RuntimeNotRunningError("no runtime")

    assert dispatch_project(tmp_path, refuse) is False
    assert read_cursor(session_dir(tmp_path, SESSION)).pending  # kept for later
    first = claude_code_hook(_hook("Stop", tmp_path, transcript), tmp_path)
    assert first == {"systemMessage": RUNTIME_MISSING_MESSAGE}
    assert claude_code_hook(_hook("Stop", tmp_path, transcript), tmp_path) is None
    assert problem_notice(tmp_path) is None
    client = FakeClient()
    assert dispatch_project(tmp_path, lambda project: client) is True
    assert client.calls and read_cursor(session_dir(tmp_path, SESSION)).pending == ()


def test_session_start_after_compaction_prints_the_projection(tmp_path: Path, no_spawn: list[Path]) -> None:
    (tmp_path / "omray.yaml").write_text("observational_memory:\n  storage:\n    database: om.sqlite\n")
    store = Store(tmp_path / "om.sqlite")
    store.commit_observer_part(make_part(SESSION, 1, 1), [make_observation(SESSION, "Kettle config crashes")])
    store.close()
    transcript = FIXTURES / "claude-code-session.jsonl"
    output = claude_code_hook(_hook("SessionStart", tmp_path, transcript, source="compact"), tmp_path)
    assert output is not None
    assert "Kettle config crashes" in output["hookSpecificOutput"]["additionalContext"]
    assert claude_code_hook(_hook("SessionStart", tmp_path, transcript, source="startup"), tmp_path) is None
    assert no_spawn == []


def test_codex_notification_marks_the_threads_rollout(
    tmp_path: Path, no_spawn: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    rollout_dir = tmp_path / "codex" / "sessions" / "2026" / "03" / "04"
    rollout_dir.mkdir(parents=True)
    rollout = rollout_dir / f"rollout-2026-03-04T10-00-00-{thread}.jsonl"
    rollout.write_bytes((FIXTURES / "codex-rollout.jsonl").read_bytes())
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    assert codex_rollout(thread) == rollout
    project = tmp_path / "proj"
    codex_hook(json.dumps({"type": "agent-turn-complete", "thread-id": thread, "cwd": str(project)}), None)
    client = FakeClient()
    assert dispatch_project(project.resolve(), lambda p: client) is True
    assert client.calls and all(ctx.run_id == thread for ctx in client.calls)


def test_a_corrupt_transcript_line_is_reported_once_and_never_spins_the_dispatcher(
    tmp_path: Path, no_spawn: list[Path]
) -> None:
    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes((FIXTURES / "claude-code-session.jsonl").read_bytes() + b"{not json\n")
    claude_code_hook(_hook("Stop", tmp_path, transcript), tmp_path)
    client = FakeClient()
    run_dispatcher(tmp_path, lambda project: client)  # returns: the bad line waits for a fix
    assert client.calls == [] and not (session_dir(tmp_path, SESSION) / "events.jsonl").exists()
    notice = claude_code_hook(_hook("Stop", tmp_path, transcript), tmp_path)
    assert notice is not None and "line 19" in notice["systemMessage"] and "not json" not in str(notice)
    assert claude_code_hook(_hook("Stop", tmp_path, transcript), tmp_path) is None
