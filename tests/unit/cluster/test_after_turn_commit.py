"""``OmrayClient.after_turn_commit`` never raises into the agent, whatever it is given (D12)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from cluster.client import OmrayClient
from cluster.naming import RuntimeNames
from protocol.events import AfterTurnCommit, EventSummary
from protocol.jobs import JobEnvelope, ObserveBoundaryJob


class RecordingClient(OmrayClient):
    """A client whose sends record envelopes instead of calling the queue."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(RuntimeNames(prefix="t"), settings={"model": "builtin/extractive"}, cwd=tmp_path)
        self.sent: list[JobEnvelope] = []

    def _send(self, envelope: JobEnvelope | Any, timeout_s: float) -> str:
        self.sent.append(envelope)
        return str(envelope.job_id)


TERMINAL = {
    "run_id": "7",
    "turn_no": 2,
    "status": "completed",
    "events": [{"seq": 5, "type": "agent_end", "payload": {"reason": "completed"}}],
}


@pytest.mark.parametrize(
    "bad",
    [None, "agent_end", 42, ["x"], {}, {"run_id": "7"}, {**TERMINAL, "events": "nope"}, {**TERMINAL, "x": 1}],
)
def test_bad_input_is_rejected_without_raising(tmp_path: Path, bad: object) -> None:
    client = RecordingClient(tmp_path)
    assert client.after_turn_commit(bad) is None  # type: ignore[arg-type]
    assert client.sent == []


def test_rejection_is_logged_once_per_input_type_without_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = RecordingClient(tmp_path)
    with caplog.at_level(logging.WARNING, logger="omray.client"):
        for _ in range(3):
            client.after_turn_commit("secret turn text")  # type: ignore[arg-type]
            client.after_turn_commit({"run_id": "secret-id"})
    records = [r for r in caplog.records if r.getMessage() == "after_turn_commit input rejected"]
    assert sorted(r.__dict__["input_type"] for r in records) == ["dict", "str"]
    assert all(r.__dict__["error_class"] == "InvalidPayloadError" for r in records)
    assert "secret" not in caplog.text


def test_mapping_form_of_the_context_dispatches_like_the_model(tmp_path: Path) -> None:
    client = RecordingClient(tmp_path)
    job_id = client.after_turn_commit(TERMINAL)
    typed = client.after_turn_commit(
        AfterTurnCommit(
            session_id="7",
            turn_no=2,
            status="completed",
            events=(EventSummary(seq=5, type="agent_end", payload={"reason": "completed"}),),
        )
    )
    assert job_id is not None and job_id == typed
    assert [e.payload.terminal_end_seq for e in client.sent] == [5, 5]  # type: ignore[union-attr]


def test_seq_beyond_sqlite_integers_is_rejected(tmp_path: Path) -> None:
    client = RecordingClient(tmp_path)
    huge = {**TERMINAL, "events": [{"seq": 2**70, "type": "agent_end", "payload": {"reason": "completed"}}]}
    assert client.after_turn_commit(huge) is None and client.sent == []


def test_dispatch_failure_never_raises(tmp_path: Path) -> None:
    client = OmrayClient(RuntimeNames(prefix="t"), settings={"model": "builtin/extractive"}, cwd=tmp_path)
    assert client.after_turn_commit(TERMINAL) is None  # no Ray here: RuntimeNotRunningError is swallowed


def test_context_pressure_and_session_end_send_their_own_jobs(tmp_path: Path) -> None:
    client = RecordingClient(tmp_path)
    step = {
        "run_id": "7",
        "turn_no": 2,
        "status": "running",
        "events": [{"seq": 3, "type": "tool_execution_end"}],
    }
    assert client.turn_envelope(AfterTurnCommit.model_validate(step)) is None  # inside a turn, no pressure
    assert client.turn_envelope(AfterTurnCommit.model_validate({**step, "context_fill": 0.3})) is None
    checkpoint = client.turn_envelope(AfterTurnCommit.model_validate({**step, "context_fill": 0.7}))
    assert checkpoint is not None and isinstance(checkpoint.payload, ObserveBoundaryJob)
    assert (checkpoint.payload.signal, checkpoint.payload.terminal_end_seq) == ("checkpoint", 3)
    assert checkpoint.payload.context_fill == 0.7
    turn_end = client.turn_envelope(AfterTurnCommit.model_validate(TERMINAL))
    ended = client.turn_envelope(AfterTurnCommit.model_validate({**TERMINAL, "session_end": True}))
    assert turn_end is not None and ended is not None and isinstance(ended.payload, ObserveBoundaryJob)
    assert ended.payload.signal == "session_end" and ended.payload.terminal_end_seq == 5
    # One seq, two reasons: two jobs, so a queued turn end never swallows the session's end.
    assert ended.job_id != turn_end.job_id == client.observe_envelope("7", 5).job_id
    # Older callers (no new fields) behave as before.
    assert client.after_turn_commit(TERMINAL) == turn_end.job_id
