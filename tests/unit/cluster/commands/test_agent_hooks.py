"""Agent hooks without Ray: a hook call (``cluster.commands.hook_fast``) and the dispatcher with a
fake client."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from actors.read.service import project as project_memory
from cluster import settings_cache
from cluster.commands import agent_hooks, hook_fast, hook_notices
from cluster.commands.agent_hooks import (
    RUNTIME_MISSING_MESSAGE,
    dispatch_project,
    run_dispatcher,
    session_dir,
)
from persistence.importers import common
from persistence.importers.live import MARKS_FILE, read_cursor, read_marks
from persistence.importers.live_spans import Mark
from persistence.settings import file as settings_file
from persistence.writers.store import Store
from protocol.errors import RuntimeNotRunningError
from protocol.events import AfterTurnCommit
from tests.unit.persistence.builders import make_observation, make_part
from tests.unit.persistence.importers.helpers import FIXTURES

SESSION = "5d0c3f3e-claude-fixture"


class FakeOutbox:
    def wait_empty(self, timeout_s: float) -> bool:
        return True


class FakeClient:
    """Records ``after_turn_commit`` calls as the real client would receive them."""

    def __init__(self, failures: list[dict[str, Any]] | None = None, *, local: bool | None = True) -> None:
        self.calls: list[AfterTurnCommit] = []
        self.local = local
        self.db_path = Path("om.sqlite")
        self.flushes: list[tuple[str, int, str]] = []
        self.outbox = FakeOutbox()
        self.closed = False
        self.failures = failures or []
        self.idle = True

    def observe(self, session_id: str, end_seq: int, *, events_path: Path, signal: str) -> str:
        assert events_path.exists()
        self.flushes.append((session_id, end_seq, signal))
        return f"flush-{end_seq}"

    def after_turn_commit(self, ctx: AfterTurnCommit, *, events_path: Path) -> str:
        assert events_path.exists()
        self.calls.append(ctx)
        return f"job-{ctx.events[0].seq}"

    def runtime_events(self, session_id: str, after_seq: int = 0) -> list[dict[str, Any]]:
        return [e for e in self.failures if e["session_id"] == session_id and e["event_seq"] > after_seq]

    def queue_is_idle(self) -> bool:
        return self.idle

    def database_is_local(self) -> bool | None:
        return self.local

    def projection_lines(self, session_id: str) -> tuple[list[str], list[str]]:
        return [f"- reflection of {session_id}"], ["- an observation"]

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def no_spawn(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    started: list[str] = []
    monkeypatch.setattr(hook_fast, "start_dispatcher", started.append)
    monkeypatch.delenv("CLAUDE_PROJECT_DIR", raising=False)
    monkeypatch.delenv("CLAUDE_CODE_ENTRYPOINT", raising=False)
    monkeypatch.delenv("OMRAY_SETTINGS", raising=False)
    return started


def _hook(event: str, project: Path, transcript: Path, **extra: Any) -> dict[str, Any] | None:
    raw = json.dumps(
        {
            "session_id": SESSION,
            "transcript_path": str(transcript),
            "cwd": str(project),
            "hook_event_name": event,
        }
        | extra
    )
    return hook_fast.claude_code(raw, None)


def test_the_hot_path_shares_the_file_layout_of_the_rest() -> None:
    # hook_fast repeats a few names so that it imports nothing of omray; they must stay equal.
    assert hook_fast.MARKS_FILE == MARKS_FILE
    assert Path(hook_fast.SESSIONS_DIR) == agent_hooks.SESSIONS_SUBDIR
    assert settings_cache.SETTINGS_ENV == settings_file.SETTINGS_ENV
    assert settings_cache.SETTINGS_FILES == settings_file.DEFAULT_SETTINGS_FILES
    assert common._SESSION_ID_RE.pattern == hook_fast.SESSION_ID_PATTERN
    line = hook_fast.mark_line("/t/x.jsonl", "claude-code", 12, True, "compaction")
    assert Mark.model_validate_json(line) == Mark(
        transcript="/t/x.jsonl", format="claude-code", offset=12, close=True, flush="compaction"
    )


@pytest.mark.parametrize(
    ("event", "close", "flush"),
    [
        ("Stop", True, None),
        ("PreCompact", True, "compaction"),
        ("SessionEnd", True, "session_end"),
        ("SubagentStop", False, None),
    ],
)
def test_each_event_records_its_mark(
    tmp_path: Path, no_spawn: list[str], event: str, close: bool, flush: str | None
) -> None:
    transcript = FIXTURES / "claude-code-session.jsonl"
    assert _hook(event, tmp_path, transcript) is None
    (mark,) = read_marks(session_dir(tmp_path, SESSION))
    assert (mark.close, mark.flush, mark.format) == (close, flush, "claude-code")
    assert mark.offset == transcript.stat().st_size and mark.transcript == str(transcript.resolve())
    assert no_spawn == [str(tmp_path.resolve())]


@pytest.mark.parametrize(
    ("event", "source"), [("UserPromptSubmit", None), ("SessionStart", "startup"), ("SessionStart", "clear")]
)
def test_other_events_do_nothing(tmp_path: Path, no_spawn: list[str], event: str, source: str | None) -> None:
    assert _hook(event, tmp_path, FIXTURES / "claude-code-session.jsonl", source=source) is None
    assert not (tmp_path / ".hatfield").exists() and no_spawn == []


def test_a_call_whose_transcript_does_not_exist_creates_nothing_and_reports_nothing(
    tmp_path: Path, no_spawn: list[str]
) -> None:
    # `claude mcp list` fires SessionEnd with a transcript that is never written.
    hook_notices.set_notice(str(tmp_path), "project", "omray: something to say")
    for event in ("SessionEnd", "Stop", "PreCompact", "SubagentStop"):
        assert _hook(event, tmp_path, tmp_path / "never-written.jsonl") is None
    assert not (tmp_path / ".hatfield" / "sessions").exists() and no_spawn == []
    # The notice is still there for a real call.
    assert _hook("Stop", tmp_path, FIXTURES / "claude-code-session.jsonl") == {
        "systemMessage": "omray: something to say"
    }


def test_stop_records_a_mark_and_the_dispatcher_sends_each_turn_once(
    tmp_path: Path, no_spawn: list[str]
) -> None:
    transcript = FIXTURES / "claude-code-session.jsonl"
    assert _hook("Stop", tmp_path, transcript) is None
    client = FakeClient()
    assert dispatch_project(tmp_path, lambda project: client).runtime_up
    assert dispatch_project(tmp_path, lambda project: client).runtime_up  # nothing new: nothing sent
    ends = [ctx.events[0].seq for ctx in client.calls]
    assert ends == sorted(set(ends)) and ends
    assert all(ctx.session_id == SESSION and ctx.status == "completed" for ctx in client.calls)
    assert read_cursor(session_dir(tmp_path, SESSION)).pending == ()
    assert client.closed


@pytest.mark.parametrize(("event", "signal"), [("PreCompact", "compaction"), ("SessionEnd", "session_end")])
def test_pre_compact_and_session_end_observe_everything_so_far_once(
    tmp_path: Path, no_spawn: list[str], event: str, signal: str
) -> None:
    # A Stop, then the flushing event with nothing new in the transcript: no new turn to send, but
    # the deferred tail must be observed now (after the turns), once.
    transcript = FIXTURES / "claude-code-session.jsonl"
    _hook("Stop", tmp_path, transcript)
    client = FakeClient()
    dispatch_project(tmp_path, lambda project: client)
    assert client.flushes == []
    _hook(event, tmp_path, transcript)
    dispatch_project(tmp_path, lambda project: client)
    dispatch_project(tmp_path, lambda project: client)  # the flush was accepted: not sent again
    last_seq = read_cursor(session_dir(tmp_path, SESSION)).last_seq
    assert client.flushes == [(SESSION, last_seq, signal)]
    assert last_seq == max(ctx.events[0].seq for ctx in client.calls)
    assert read_cursor(session_dir(tmp_path, SESSION)).flush is None


def _refuse(project: Path) -> Any:
    raise RuntimeNotRunningError("no runtime")


def test_a_missing_runtime_keeps_the_turns_and_is_shown_once_in_the_interactive_ui(
    tmp_path: Path, no_spawn: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAUDE_CODE_ENTRYPOINT", "cli")
    transcript = FIXTURES / "claude-code-session.jsonl"
    _hook("Stop", tmp_path, transcript)
    assert not dispatch_project(tmp_path, _refuse).runtime_up
    assert read_cursor(session_dir(tmp_path, SESSION)).pending  # kept for later
    assert _hook("Stop", tmp_path, transcript) == {"systemMessage": RUNTIME_MISSING_MESSAGE}
    assert _hook("Stop", tmp_path, transcript) is None
    # Seen in the UI: the model is not told on the next start either.
    assert _hook("SessionStart", tmp_path, transcript, source="startup") is None
    client = FakeClient()
    assert dispatch_project(tmp_path, lambda project: client).runtime_up
    assert client.calls and read_cursor(session_dir(tmp_path, SESSION)).pending == ()
    assert hook_notices.notices(hook_notices.read_status(str(tmp_path))) == []  # the cause went away


def test_with_claude_p_the_model_is_told_once_at_the_next_session_start(
    tmp_path: Path, no_spawn: list[str]
) -> None:
    # `claude -p` prints no hook output: the notice reaches the user through the model, once.
    transcript = FIXTURES / "claude-code-session.jsonl"
    _hook("Stop", tmp_path, transcript)
    dispatch_project(tmp_path, _refuse)
    assert _hook("SessionEnd", tmp_path, transcript) == {"systemMessage": RUNTIME_MISSING_MESSAGE}
    output = _hook("SessionStart", tmp_path, transcript, source="resume")
    assert output is not None and "systemMessage" not in output
    context = output["hookSpecificOutput"]["additionalContext"]
    assert context.startswith(hook_notices.NOTICE_FOR_MODEL) and RUNTIME_MISSING_MESSAGE in context
    assert _hook("SessionStart", tmp_path, transcript, source="startup") is None
    assert _hook("Stop", tmp_path, transcript) is None


def test_failed_jobs_become_one_notice_with_cause_and_fix(tmp_path: Path, no_spawn: list[str]) -> None:
    transcript = FIXTURES / "claude-code-session.jsonl"
    _hook("Stop", tmp_path, transcript)
    failed = {
        "event_seq": 3,
        "session_id": SESSION,
        "event_type": "extension_agent.job_failed",
        "payload": {
            "message": "Background memory job gave up after 4 attempt(s); last failure: model_auth.",
            "reason": "retry_exhausted",
        },
    }
    client = FakeClient()
    client.idle = False
    state = dispatch_project(tmp_path, lambda project: client, now=1000.0)
    assert state.watching and not hook_notices.notices(hook_notices.read_status(str(tmp_path)))
    client.failures.append(failed)
    dispatch_project(tmp_path, lambda project: client, now=1001.0)
    client.failures.append({**failed, "event_seq": 4})  # the same cause again: no new notice
    client.idle = True
    assert not dispatch_project(tmp_path, lambda project: client, now=1002.0).watching
    output = _hook("Stop", tmp_path, transcript)
    assert output is not None
    message = output["systemMessage"]
    # one notice per cause: the first session, the cause, the fix and where to see the others
    assert SESSION in message and "rejected the API key" in message and "omray up" in message
    assert "omray status" in message
    assert _hook("Stop", tmp_path, transcript) is None


def test_the_dispatcher_watches_its_jobs_then_exits(tmp_path: Path, no_spawn: list[str]) -> None:
    _hook("Stop", tmp_path, FIXTURES / "claude-code-session.jsonl")
    client = FakeClient()
    client.idle = False
    clock = iter(range(1000, 1000 + 10 * int(agent_hooks.WATCH_S), 10))
    run_dispatcher(tmp_path, lambda project: client, poll_s=0.0, clock=lambda: float(next(clock)))
    assert client.calls and client.closed
    assert hook_notices.read_status(str(tmp_path))["watch"] == {}


def _memory_project(tmp_path: Path, text: str = "Kettle config crashes") -> None:
    (tmp_path / "omray.yaml").write_text("observational_memory:\n  storage:\n    database: om.sqlite\n")
    with Store(tmp_path / "om.sqlite") as store:
        store.commit_observer_part(make_part(SESSION, 1, 1), [make_observation(SESSION, text)])


def test_session_start_after_compaction_prints_the_projection(tmp_path: Path, no_spawn: list[str]) -> None:
    _memory_project(tmp_path)
    transcript = FIXTURES / "claude-code-session.jsonl"
    for _ in range(2):  # the first call loads the settings, the second reads the cached path
        output = _hook("SessionStart", tmp_path, transcript, source="compact")
        assert output is not None
        context = output["hookSpecificOutput"]["additionalContext"]
        projection = project_memory(tmp_path / "om.sqlite", SESSION)
        assert context.startswith(hook_fast.COMPACT_HEADER + "\n\n## Reflections\n")
        # The same entry lines as the projection compaction renders.
        assert context.split("## Observations\n", 1)[1] == projection.split("## Observations\n", 1)[1]
        assert settings_cache.cached_database(str(tmp_path.resolve())) == str(
            tmp_path.resolve() / "om.sqlite"
        )
        assert settings_cache.cached_hybrid(str(tmp_path.resolve())) is True
    (tmp_path / "omray.yaml").write_text("observational_memory:\n  storage:\n    database: other.sqlite\n")
    assert _hook("SessionStart", tmp_path, transcript, source="compact") is None  # new settings: no memory
    assert no_spawn == []


def test_a_database_on_another_node_gives_a_compacted_session_its_memory_through_the_runtime(
    tmp_path: Path, no_spawn: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path.resolve()
    (project / "omray.yaml").write_text(
        "observational_memory:\n  storage:\n    database: /elsewhere/om.sqlite\n"
    )
    transcript = FIXTURES / "claude-code-session.jsonl"
    asked: list[tuple[str, str]] = []

    def remote(project_dir: str, session_id: str) -> tuple[list[str], list[str]]:
        asked.append((project_dir, session_id))
        return ["- a durable fact"], ["- an event"]

    monkeypatch.setattr(hook_fast, "remote_projection_lines", remote)
    assert _hook("SessionStart", project, transcript, source="compact") is None  # not noted yet: no file
    assert asked == []
    client = FakeClient(local=False)
    client.db_path = Path("/elsewhere/om.sqlite")
    assert _hook("Stop", project, transcript) is None
    assert dispatch_project(project, lambda _: client).runtime_up
    assert settings_cache.remote_database(str(project)) == "/elsewhere/om.sqlite"
    output = _hook("SessionStart", project, transcript, source="compact")
    assert asked == [(str(project), SESSION)]
    assert output is not None
    assert "- a durable fact" in output["hookSpecificOutput"]["additionalContext"]
    # Settings naming a database on this node's disk: its file is read, the note does not apply.
    _memory_project(project)
    output = _hook("SessionStart", project, transcript, source="compact")
    assert output is not None and "Kettle config crashes" in output["hookSpecificOutput"]["additionalContext"]
    assert len(asked) == 1


def test_the_context_entry_prints_the_lines_the_runtime_gives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = FakeClient(local=False)
    agent_hooks.print_context(tmp_path, SESSION, lambda _: client)
    printed = json.loads(capsys.readouterr().out)
    assert printed == {"reflections": [f"- reflection of {SESSION}"], "observations": ["- an observation"]}
    assert client.closed


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        (b'{"reflections": ["- r"], "observations": ["- o"]}\n', (["- r"], ["- o"])),
        (b"", ([], [])),  # no runtime: the entry printed nothing
        (b'{"reflections": [1], "observations": []}\n', ([], [])),
        (b"not json\n", ([], [])),
    ],
)
def test_the_hook_reads_the_context_entrys_answer_or_nothing(
    monkeypatch: pytest.MonkeyPatch, stdout: bytes, expected: tuple[list[str], list[str]]
) -> None:
    import subprocess

    seen: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[bytes]:
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout, b"")

    monkeypatch.setattr(subprocess, "run", run)
    assert hook_fast.remote_projection_lines("/p", SESSION) == expected
    assert seen[0][-3:] == ["--context", "/p", SESSION]


def _claude_record(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, "sessionId": SESSION, **fields}, separators=(",", ":"))


def _resumed_transcript(path: Path, *, compacted: bool, memory_after: bool) -> Path:
    lines = [
        _claude_record("user", message={"role": "user", "content": "first"}),
        _claude_record(
            "assistant",
            message={"id": "m1", "role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        ),
    ]
    if compacted:
        lines.append(_claude_record("system", subtype="compact_boundary", content="Conversation compacted"))
        lines.append(
            _claude_record("user", isCompactSummary=True, message={"role": "user", "content": "summary"})
        )
    if memory_after:
        attachment = {"type": "hook_additional_context", "content": [f"{hook_fast.COMPACT_HEADER}\n\n..."]}
        lines.append(_claude_record("attachment", attachment=attachment))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("compacted", "memory_after", "injected"),
    [(False, False, False), (True, False, True), (True, True, False), (False, True, False)],
)
def test_resume_adds_memory_only_to_a_compacted_transcript_that_lacks_it(
    tmp_path: Path, no_spawn: list[str], compacted: bool, memory_after: bool, injected: bool
) -> None:
    _memory_project(tmp_path)
    transcript = _resumed_transcript(tmp_path / "t.jsonl", compacted=compacted, memory_after=memory_after)
    output = _hook("SessionStart", tmp_path, transcript, source="resume")
    if not injected:
        assert output is None
        return
    assert output is not None
    context = output["hookSpecificOutput"]["additionalContext"]
    assert context.startswith(hook_fast.RESUME_HEADER) and "Kettle config crashes" in context


def test_codex_notification_marks_the_threads_rollout(
    tmp_path: Path, no_spawn: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    rollout_dir = tmp_path / "codex" / "sessions" / "2026" / "03" / "04"
    rollout_dir.mkdir(parents=True)
    rollout = rollout_dir / f"rollout-2026-03-04T10-00-00-{thread}.jsonl"
    rollout.write_bytes((FIXTURES / "codex-rollout.jsonl").read_bytes())
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    assert hook_fast.codex_rollout(thread) == str(rollout)
    project = tmp_path / "proj"
    hook_fast.codex(
        json.dumps({"type": "agent-turn-complete", "thread-id": "../x", "cwd": str(project)}), None
    )
    hook_fast.codex(
        json.dumps({"type": "agent-turn-complete", "thread-id": "nope", "cwd": str(project)}), None
    )
    assert not project.exists()
    hook_fast.codex(
        json.dumps({"type": "agent-turn-complete", "thread-id": thread, "cwd": str(project)}), None
    )
    client = FakeClient()
    assert dispatch_project(project.resolve(), lambda p: client).runtime_up
    assert client.calls and all(ctx.session_id == thread for ctx in client.calls)


def test_a_corrupt_transcript_line_is_reported_once_and_never_spins_the_dispatcher(
    tmp_path: Path, no_spawn: list[str]
) -> None:
    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes((FIXTURES / "claude-code-session.jsonl").read_bytes() + b"{not json\n")
    _hook("Stop", tmp_path, transcript)
    client = FakeClient()
    run_dispatcher(tmp_path, lambda project: client)  # returns: the bad line waits for a fix
    assert client.calls == [] and not (session_dir(tmp_path, SESSION) / "events.jsonl").exists()
    notice = _hook("Stop", tmp_path, transcript)
    assert notice is not None and "line 19" in notice["systemMessage"] and "not json" not in str(notice)
    assert _hook("Stop", tmp_path, transcript) is None


def test_a_session_whose_transcript_is_gone_is_skipped_without_a_notice(
    tmp_path: Path, no_spawn: list[str]
) -> None:
    # Folders a phantom call left behind before this version: nothing to read, nothing to say.
    transcript = tmp_path / "gone.jsonl"
    transcript.write_bytes((FIXTURES / "claude-code-session.jsonl").read_bytes())
    _hook("Stop", tmp_path, transcript)
    transcript.unlink()
    client = FakeClient()
    assert dispatch_project(tmp_path, lambda project: client).runtime_up
    assert client.calls == [] and hook_notices.notices(hook_notices.read_status(str(tmp_path))) == []


def test_run_handles_only_the_hook_calls_it_knows(
    tmp_path: Path, no_spawn: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert hook_fast.run(["claude-code", "--help"]) is False
    assert hook_fast.run(["dispatch", "--project", "x"]) is False
    assert hook_fast.run(["codex", "--unknown"]) is False
    monkeypatch.setattr(
        "sys.stdin", type("S", (), {"buffer": type("B", (), {"read": lambda self, n: b"{bad"})()})()
    )
    assert hook_fast.run(["claude-code", "--project", str(tmp_path)]) is True  # bad input: handled, silent
    assert re.match(r"^[A-Za-z]", hook_fast.COMPACT_HEADER)


def test_a_stop_before_the_transcript_caught_up_closes_the_turn_where_it_ends(
    tmp_path: Path, no_spawn: list[str]
) -> None:
    # Claude Code writes its transcript asynchronously: at Stop the tool result and the answer of a
    # tool-using turn may still be on their way. The turn must not be cut between call and result.
    lines = (FIXTURES / "claude-code-session.jsonl").read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"toolu_pytest"' in line and b'"tool_use"' in line) + 1
    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes(b"".join(lines[:cut]))
    answer = "test_missing_key fails: it expects a KeyError."
    assert _hook("Stop", tmp_path, transcript, last_assistant_message=answer) is None
    (mark,) = read_marks(session_dir(tmp_path, SESSION))
    assert mark.settle and not mark.close
    transcript.write_bytes(b"".join(lines))  # Claude Code catches up
    client = FakeClient()
    dispatch_project(tmp_path, lambda project: client)
    events = [
        json.loads(line)
        for line in (session_dir(tmp_path, SESSION) / "events.jsonl").read_text().splitlines()
    ]
    ends = [e["seq"] for e in events if e["type"] == "agent_end"]
    assert [e["type"] for e in events[-3:]] == ["tool_execution_end", "llm_step_completed", "agent_end"]
    assert len(ends) == 2 and ends[-1] == events[-1]["seq"]  # one end per turn, after the answer
    assert [ctx.events[0].seq for ctx in client.calls] == ends
    # When the transcript already holds the answer, Stop closes at once.
    assert _hook("Stop", tmp_path, transcript, last_assistant_message=answer) is None
    assert read_marks(session_dir(tmp_path, SESSION))[-1].close


def test_memory_is_cut_to_what_claude_code_keeps_whole_newest_observations_first() -> None:
    # Claude Code keeps a hook's additionalContext whole up to 10,000 characters only.
    reflections = [f"[r{i:011d}] durable fact number {i}" for i in range(300)]
    observations = [
        f"[o{i:011d}] 2026-11-30 09:15 [medium] event number {i} " + "x" * 60 for i in range(2000)
    ]
    text = hook_fast.fit_memory(hook_fast.COMPACT_HEADER, reflections, observations, hook_fast.CONTEXT_LIMIT)
    assert text is not None and len(text) <= hook_fast.CONTEXT_LIMIT
    shown = text.split("## Observations\n", 1)[1].splitlines()
    note, kept = shown[0], shown[1:]
    assert kept[-1] == observations[-1] and kept == observations[-len(kept) :]  # the newest, in order
    assert f"({len(observations) - len(kept)} older observations" in note and "memory_view" in note
    assert text.split("## Reflections\n", 1)[1].startswith(reflections[0])
    small = hook_fast.fit_memory("h", reflections[:2], observations[:3], hook_fast.CONTEXT_LIMIT)
    assert small == "\n".join(
        ["h", "", "## Reflections", *reflections[:2], "", "## Observations", *observations[:3]]
    )
    assert hook_fast.fit_memory("h", [], [], 100) is None
    long_line = hook_fast.fit_memory("h", [], ["y" * 20_000], 1_000)
    assert long_line is not None and len(long_line) <= 1_000 and long_line.endswith("…")


def test_the_newest_rollout_of_a_thread_is_found_newest_day_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    sessions = tmp_path / "codex" / "sessions"
    for day in ("2026/03/04", "2026/11/30", "2025/12/31"):
        folder = sessions / day
        folder.mkdir(parents=True)
        (folder / f"rollout-{day.replace('/', '-')}T10-00-00-{thread}.jsonl").write_text("{}\n")
        (folder / "rollout-2026-01-01T00-00-00-other.jsonl").write_text("{}\n")
    (sessions / "2026" / "12" / "01").mkdir(parents=True)  # a newer day without this thread
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    found = hook_fast.codex_rollout(thread)
    assert found == str(sessions / "2026" / "11" / "30" / f"rollout-2026-11-30T10-00-00-{thread}.jsonl")
    assert hook_fast.codex_rollout("nobody") is None


def _load_settings(project: Path) -> Any:
    settings_file.load_settings(cwd=project)  # what connect() does first; raises for bad settings
    raise AssertionError("the settings were expected to be refused")


@pytest.mark.parametrize(
    "yaml_text",
    [
        "observational_memory:\n  reflector:\n    reflect_after_observation_tokens: 0\n",
        "observational_memory:\n  observer:\n    observe_afer_tokens: 0\n",
    ],
)
def test_a_settings_notice_reads_as_one_sentence_per_clause(
    tmp_path: Path, no_spawn: list[str], yaml_text: str
) -> None:
    # The error's own closing period and the notice's "Fix it" once read "...1000000000.. Fix it".
    (tmp_path / "omray.yaml").write_text(yaml_text, encoding="utf-8")
    _hook("Stop", tmp_path, FIXTURES / "claude-code-session.jsonl")
    assert not dispatch_project(tmp_path, _load_settings).runtime_up
    (notice,) = hook_notices.notices(hook_notices.read_status(str(tmp_path)))
    message = str(notice["message"])
    assert ".." not in message and "?." not in message
    assert re.search(r"[0-9a-z?]\. Fix it, then the waiting turns are observed", message), message
