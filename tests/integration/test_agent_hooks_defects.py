"""Issue #30 on real Ray: a scripted Claude Code session per defect, hooks run as Claude Code runs them.

Each hook call is a fresh process started as the ``omray`` console script starts
(``cluster.commands.entry.main``), the hook JSON on stdin, in the environment of ``claude -p``
(``CLAUDE_CODE_ENTRYPOINT=sdk-cli``). Transcripts are written the way Claude Code 2.1 writes them
(records seen in real sessions: ``compact_boundary``, the ``/compact`` command and its local
output, the synthetic "No response requested.").

1. A model that cannot be reached: the next hook says which session, why and what to do, once,
   to the UI (``systemMessage``) and to the model (``additionalContext`` at the next start).
2. Resume: memory only for a transcript that was compacted and lacks it; never twice.
3. Order: observations of one minute come in the order of their events, in the projection the
   hook injects and in ``memory_view``.
4. Phantom: ``SessionEnd`` for a transcript that never exists creates nothing, reports nothing.
5. Noise: Claude Code's own command and system blocks are not observed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.queue.reports import queue_summary_lines
from actors.read.service import memory_view
from cluster.client import OmrayClient
from cluster.commands.hook_fast import COMPACT_HEADER, RESUME_HEADER
from cluster.commands.hook_notices import NOTICE_FOR_MODEL
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.naming import RuntimeNames
from cluster.status import explain
from persistence.files.events_reader import iter_events
from persistence.importers.live import read_cursor, read_marks
from testkit.scripted_models import ScriptedMemoryModel
from testkit.scripted_server import Reply, ScriptedServer
from tests.integration.conftest import assert_eventually, free_port

pytestmark = pytest.mark.integration

SESSION = "3f2a9c1e-6b7d-4e21-9a0c-5d8e7f601234"
MINUTE = "2026-11-30T09:15"


def _record(kind: str, content: object, second: int, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if kind == "assistant":
        message["id"] = extra.pop("message_id", f"msg-{second}")
        message["model"] = extra.pop("model", "claude-sonnet-4-5")
    return {
        "type": kind,
        "sessionId": SESSION,
        "isSidechain": False,
        "timestamp": f"{MINUTE}:{second:02d}.000Z",
        "message": message,
        **extra,
    }


def _prompt(text: str, second: int) -> dict[str, Any]:
    return _record("user", text, second)


def _answer(text: str, second: int) -> dict[str, Any]:
    return _record("assistant", [{"type": "text", "text": text}], second)


class Session:
    """A Claude Code session: its transcript as it grows and the hook calls, in one project."""

    def __init__(self, project: Path, env: dict[str, str], session_id: str = SESSION) -> None:
        self.project = project
        self.env = env
        self.session_id = session_id
        self.transcript = project / "claude" / f"{session_id}.jsonl"
        self.transcript.parent.mkdir(parents=True, exist_ok=True)
        self.transcript.touch()

    def write(self, *records: dict[str, Any]) -> None:
        with self.transcript.open("a", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, separators=(",", ":")) + "\n")

    def hook(self, event: str, transcript: Path | None = None, **extra: Any) -> dict[str, Any] | None:
        payload = {
            "session_id": self.session_id,
            "transcript_path": str(transcript or self.transcript),
            "cwd": str(self.project),
            "hook_event_name": event,
            **extra,
        }
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from cluster.commands.entry import main; main()",
                "hook",
                "claude-code",
            ],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.project,
            timeout=120,
        )
        assert result.returncode == 0 and result.stderr == "", result.stderr[-2000:]
        return json.loads(result.stdout) if result.stdout.strip() else None

    @property
    def folder(self) -> Path:
        return self.project / ".hatfield" / "sessions" / self.session_id

    def dispatched(self) -> bool:
        cursor = read_cursor(self.folder)
        return (
            not cursor.pending
            and cursor.flush is None
            and cursor.marks_applied == len(read_marks(self.folder))
        )


def _project(
    names: RuntimeNames, tmp_path: Path, settings_yaml: str | None
) -> tuple[Path, dict[str, str], OmrayClient]:
    project = tmp_path / "project"
    project.mkdir()
    if settings_yaml is not None:
        (project / "omray.yaml").write_text(settings_yaml)
    ensure_runtime(names, queue_db=str(tmp_path / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
    env = {
        **os.environ,
        "RAY_ADDRESS": ray.get_runtime_context().gcs_address,
        "OMRAY_PREFIX": names.prefix,
        "CLAUDE_PROJECT_DIR": str(project),
        "CLAUDE_CODE_ENTRYPOINT": "sdk-cli",  # claude -p: hook output reaches the user only through the model
    }
    client = OmrayClient(names, cwd=project)
    return project, env, client


OFFLINE = "observational_memory:\n  semantic: null\n  observer:\n    observe_after_tokens: 0\n"
"""The offline default model (no model named), every turn observed at its end, exact search."""


def _db(project: Path) -> Path:
    return project / ".hatfield" / "extensions-data" / "observational-memory" / "om.sqlite"


def _observed(session: Session, client: OmrayClient) -> None:
    assert_eventually(session.dispatched, timeout_s=180, interval_s=0.3, message="hook turns not dispatched")
    assert client.wait_idle(timeout_s=180)


def test_a_model_that_cannot_be_reached_is_reported_once_with_session_cause_and_fix(
    names: RuntimeNames, tmp_path: Path
) -> None:
    dead = free_port()  # nothing listens there
    settings = (
        "observational_memory:\n  model: dead/model\n  semantic: null\n"
        f"  providers:\n    dead:\n      base_url: http://127.0.0.1:{dead}/v1\n      context_window: 32768\n"
        "  observer:\n    observe_after_tokens: 0\n"
    )
    project, env, client = _project(names, tmp_path, settings)
    session = Session(project, env)
    session.write(_prompt("Why does the parser reject 1969?", 1), _answer("It checks year >= 1970.", 2))
    assert session.hook("Stop") is None

    def notice() -> dict[str, Any] | None:
        return session.hook("Stop")  # each call shows what the dispatcher found since

    shown = assert_eventually(
        notice, timeout_s=180, interval_s=2.0, message="no notice about the failing model"
    )
    message = shown["systemMessage"]
    assert SESSION in message and "cannot be reached" in message and "base_url" in message
    assert session.hook("Stop") is None  # once per cause
    started = session.hook("SessionStart", source="startup")  # claude -p: the model tells the user
    assert started is not None and "systemMessage" not in started
    context = started["hookSpecificOutput"]["additionalContext"]
    assert context.startswith(NOTICE_FOR_MODEL) and SESSION in context
    assert session.hook("SessionStart", source="startup") is None
    failures = [explain(f) for f in client.status()["recent_failures"] if f.get("session_id") == SESSION]
    assert failures and failures[-1]["last_failure"] == "model_unreachable"
    assert "base_url" in failures[-1]["fix"]


def _observations(project: Path, session_id: str) -> int:
    import sqlite3

    with sqlite3.connect(f"file:{_db(project)}?mode=ro", uri=True) as conn:
        found = conn.execute("SELECT count(*) FROM om_observation WHERE run_id = ?", (session_id,))
        return int(found.fetchone()[0])


def test_a_session_that_ended_during_a_model_outage_is_observed_once_the_cause_is_fixed(
    names: RuntimeNames, tmp_path: Path
) -> None:
    """Issue 40 item 1: the ended session's jobs gave up; fixing omray.yaml and one new turn of
    another session re-drive them, and the ended session is observed (exactly once)."""
    dead = free_port()  # nothing listens there
    settings = (
        "observational_memory:\n  model: scripted/memory\n  semantic: null\n"
        "  providers:\n    scripted:\n      base_url: {url}\n      context_window: 16384\n"
        "  observer:\n    observe_after_tokens: 0\n"
    )
    project, env, client = _project(names, tmp_path, settings.format(url=f"http://127.0.0.1:{dead}/v1"))
    ended = Session(project, env)
    ended.write(_prompt("Why does the parser reject 1969?", 1), _answer("It checks year >= 1970.", 2))
    assert ended.hook("Stop") is None
    assert ended.hook("SessionEnd") is None
    _observed(ended, client)  # its observe job used up its attempts: the queue is idle, nothing observed
    assert _observations(project, SESSION) == 0
    assert client.status()["waiting_for_cause"] >= 1  # omray status says it waits for its cause
    with ScriptedServer(chat_default=ScriptedMemoryModel()) as server:
        (project / "omray.yaml").write_text(settings.format(url=server.base_url))  # the user fixes it
        other = "7d1c0b2e-9f3a-4c55-8e21-0a9b8c7d6e5f"
        later = Session(project, env, session_id=other)
        later.write(
            _record("user", "And 1970 itself?", 1, sessionId=other),
            _record("assistant", [{"type": "text", "text": "1970 is accepted."}], 2, sessionId=other),
        )
        notice = later.hook("Stop")  # the outage's one notice, if the dispatcher found it since
        assert notice is None or "omray retry" in notice["systemMessage"]
        _observed(later, client)
        assert_eventually(
            lambda: _observations(project, SESSION) > 0,
            timeout_s=120,
            message="the ended session was never observed after the fix",
        )
        assert client.wait_idle(timeout_s=120)
        observed = _observations(project, SESSION)
        assert client.retry_failed() == 0  # nothing is left failed, so nothing is queued again
        assert client.wait_idle(timeout_s=60)
        assert _observations(project, SESSION) == observed  # observed once, not again


class _Recovering:
    """A model endpoint that refuses (503) until :attr:`up`, then answers as the scripted memory model."""

    def __init__(self) -> None:
        self.up = False
        self.model = ScriptedMemoryModel()

    def __call__(self, request: Any) -> Any:
        return self.model(request) if self.up else Reply(status=503, body={"error": {"message": "down"}})


def test_an_ended_session_is_observed_after_the_endpoint_answers_again_and_omray_retry(
    names: RuntimeNames, tmp_path: Path
) -> None:
    """Issue 40 items 1 and 6: the endpoint refuses while a session ends; status names the project
    whose jobs wait and how to release them; once the endpoint answers (no settings change, no new
    turn of any session) `omray retry` observes the ended session, exactly once."""
    endpoint = _Recovering()
    with ScriptedServer(chat_default=endpoint) as server:
        settings = (
            "observational_memory:\n  model: scripted/memory\n  semantic: null\n"
            f"  providers:\n    scripted:\n      base_url: {server.base_url}\n      context_window: 16384\n"
            "  observer:\n    observe_after_tokens: 0\n"
        )
        project, env, client = _project(names, tmp_path, settings)
        ended = Session(project, env)
        ended.write(_prompt("Why does the parser reject 1969?", 1), _answer("It checks year >= 1970.", 2))
        assert ended.hook("Stop") is None
        assert ended.hook("SessionEnd") is None
        _observed(ended, client)  # its jobs used up their attempts against the refusing endpoint
        assert _observations(project, SESSION) == 0
        waiting = [line for line in queue_summary_lines(client.status()) if "waiting for their cause" in line]
        assert len(waiting) == 1 and str(_db(project).resolve()) in waiting[0] and "omray retry" in waiting[0]
        endpoint.up = True  # the endpoint answers again; nothing else happens in the project
        assert client.retry_failed() >= 1  # what `omray retry` calls
        assert_eventually(
            lambda: _observations(project, SESSION) > 0,
            timeout_s=120,
            message="the ended session was not observed after omray retry",
        )
        assert client.wait_idle(timeout_s=120)
        observed = _observations(project, SESSION)
        assert client.status()["waiting_for_cause"] == 0
        assert client.retry_failed() == 0 and client.wait_idle(timeout_s=60)
        assert _observations(project, SESSION) == observed  # observed once, not again


def _observe_turns(names: RuntimeNames, tmp_path: Path) -> tuple[Path, Session, OmrayClient]:
    """A session of one minute observed with the default offline model; its transcript has Claude
    Code's own blocks (a /compact and its output, a synthetic answer) between real turns."""
    project, env, client = _project(names, tmp_path, OFFLINE)
    session = Session(project, env)
    session.write(
        _prompt("Step one: open dates.py", 1),
        _record(
            "assistant",
            [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "src/dates.py"}}],
            2,
        ),
        _record(
            "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "def parse(...): ..."}], 3
        ),
        _answer("Step one done: dates.py parses with a 1970 floor.", 4),
    )
    assert (
        session.hook("Stop", last_assistant_message="Step one done: dates.py parses with a 1970 floor.")
        is None
    )
    session.write(
        {
            "type": "system",
            "subtype": "compact_boundary",
            "content": "Conversation compacted",
            "sessionId": SESSION,
            "timestamp": f"{MINUTE}:05.000Z",
        },
        _record(
            "user", "This session is being continued from a previous conversation.", 6, isCompactSummary=True
        ),
        _record(
            "user", "<local-command-caveat>Caveat: local commands.</local-command-caveat>", 7, isMeta=True
        ),
        _record(
            "user", "<command-name>/compact</command-name>\n<command-message>compact</command-message>", 8
        ),
        _record(
            "user", "<local-command-stdout>Compacted (ctrl+o to see full summary)</local-command-stdout>", 9
        ),
        _record("user", [{"type": "text", "text": "Continue from where you left off."}], 10, isMeta=True),
        _record("assistant", [{"type": "text", "text": "No response requested."}], 11, model="<synthetic>"),
        _prompt("Step two: allow 1969 in parse()", 12),
        _answer("Step two done: parse() accepts 1969 now.", 13),
        _prompt("Step three: run the tests", 14),
        _answer("Step three done: 12 tests pass.", 15),
    )
    assert session.hook("Stop") is None
    assert session.hook("SessionEnd", reason="other") is None  # observes everything at once
    _observed(session, client)
    return project, session, client


def test_noise_is_not_observed_and_observations_of_one_minute_keep_their_events_order(
    names: RuntimeNames, tmp_path: Path
) -> None:
    project, session, _client = _observe_turns(names, tmp_path)
    events = list(iter_events(session.folder / "events.jsonl"))
    texts = json.dumps([event.payload for event in events])
    for noise in ("command-name", "local-command", "No response requested", "Continue from where", "Caveat"):
        assert noise not in texts
    prompts = [e.payload["text"] for e in events if e.type == "agent_command_applied"]
    assert prompts == [
        "Step one: open dates.py",
        "Step two: allow 1969 in parse()",
        "Step three: run the tests",
    ]

    # Every observation shares the minute; they must still come in the order of their events.
    _markdown, view = memory_view(_db(project), SESSION)
    observations = view["observations"]
    assert isinstance(observations, list) and len(observations) >= 3
    assert len({item["timestamp"] for item in observations}) == 1
    firsts = [min(item["source_seqs"]) for item in observations if item["source_seqs"]]
    assert firsts == sorted(firsts)
    started = session.hook("SessionStart", source="compact")
    assert started is not None
    context = started["hookSpecificOutput"]["additionalContext"]
    assert context.startswith(COMPACT_HEADER)
    shown = [line[1:13] for line in context.split("## Observations\n", 1)[1].splitlines()]
    assert shown == [item["id"][:12] for item in observations]
    assert "No response requested" not in context and "/compact" not in context


def test_resume_adds_memory_only_where_compaction_left_it_out_and_never_twice(
    names: RuntimeNames, tmp_path: Path
) -> None:
    project, session, _client = _observe_turns(names, tmp_path)
    # The transcript was compacted (its boundary is in it) and holds no memory of omray after it.
    first = session.hook("SessionStart", source="resume")
    assert first is not None
    context = first["hookSpecificOutput"]["additionalContext"]
    assert context.startswith(RESUME_HEADER) and "Step one" in context
    # Claude Code keeps what a hook added in the transcript: resuming again finds it, adds nothing.
    session.write(
        {
            "type": "attachment",
            "sessionId": SESSION,
            "attachment": {
                "type": "hook_additional_context",
                "content": [context],
                "hookEvent": "SessionStart",
            },
        }
    )
    assert session.hook("SessionStart", source="resume") is None
    # A transcript that was never compacted holds the whole conversation: nothing to add.
    plain = project / "claude" / "plain.jsonl"
    plain.write_text(json.dumps(_prompt("Step one: open dates.py", 1)) + "\n")
    assert session.hook("SessionStart", transcript=plain, source="resume") is None


def test_a_hook_whose_transcript_does_not_exist_creates_nothing_and_reports_nothing(
    names: RuntimeNames, tmp_path: Path
) -> None:
    # `claude mcp list` fires SessionEnd for a session whose transcript is never written.
    project, env, client = _project(names, tmp_path, OFFLINE)
    phantom = Session(project, env, session_id="9d8c7b6a-0000-4000-8000-000000000000")
    phantom.transcript.unlink()
    assert phantom.hook("SessionEnd", reason="other") is None
    assert not (project / ".hatfield").exists()
    real = Session(project, env)
    real.write(_prompt("Step one: open dates.py", 1), _answer("Done.", 2))
    assert real.hook("Stop") is None
    _observed(real, client)
    assert real.hook("Stop") is None  # nothing to report: no "session ... is not observed"
    assert sorted(p.name for p in (project / ".hatfield" / "sessions").iterdir()) == [SESSION]
