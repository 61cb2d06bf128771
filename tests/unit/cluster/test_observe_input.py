"""Bad observe input is refused where it enters, with a typed error, and nothing is queued
(issue 40 item 9): ``client.observe("s", 2**63)`` used to answer with a job id (or a bare pydantic
error) and the viewer's observe with ``end_seq`` 10**30 likewise."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cluster.servers.ui_server import UiBackend, UiProject, UiRequestError
from persistence.settings.parse import settings_from_mapping
from protocol.errors import InvalidPayloadError
from protocol.events import MAX_SEQ
from tests.unit.cluster.test_after_turn_commit import RecordingClient


@pytest.mark.parametrize(
    ("session_id", "end_seq"), [("s", MAX_SEQ + 1), ("s", 10**30), ("s", 0), ("s", -3), ("", 2)]
)
def test_client_observe_refuses_what_no_job_can_carry(tmp_path: Path, session_id: str, end_seq: int) -> None:
    client = RecordingClient(tmp_path)
    with pytest.raises(InvalidPayloadError) as refused:
        client.observe(session_id, end_seq)
    assert client.sent == []
    assert str(end_seq) not in str(refused.value)  # names the field, not the value


def test_client_observe_accepts_the_largest_seq(tmp_path: Path) -> None:
    client = RecordingClient(tmp_path)
    client.observe("s", MAX_SEQ)
    assert len(client.sent) == 1


@pytest.mark.parametrize("end_seq", [MAX_SEQ + 1, 10**30, True, "5"])
def test_the_viewer_refuses_an_end_seq_out_of_range(tmp_path: Path, end_seq: object) -> None:
    client = RecordingClient(tmp_path)
    sessions = tmp_path / "sessions"
    (sessions / "s1").mkdir(parents=True)
    (sessions / "s1" / "events.jsonl").write_text("", encoding="utf-8")
    settings = settings_from_mapping({"model": "builtin/extractive"})
    project = UiProject("demo", tmp_path, settings, tmp_path / "om.sqlite", sessions)
    backend = UiBackend({"demo": replace(project, client=client)})
    with pytest.raises(UiRequestError) as refused:
        backend.observe({"session_id": "s1", "end_seq": end_seq})
    assert (refused.value.status, refused.value.error) == (400, "invalid_seq")
    assert client.sent == []
