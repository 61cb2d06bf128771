"""Job payloads refuse what no events file can hold: a bad observe request is a typed error when it
is built, before anything is queued (it used to be accepted and fail as ``worker_crashed``)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from protocol.events import MAX_SEQ
from protocol.jobs import ObserveBoundaryJob


def _job(end_seq: int) -> ObserveBoundaryJob:
    return ObserveBoundaryJob(
        session_id="s1",
        terminal_end_seq=end_seq,
        terminal_status="completed",
        renderer_version="1",
        observer_schema_version="1",
        db_path="/data/om.sqlite",
        events_path="/data/s1/events.jsonl",
    )


@pytest.mark.parametrize("end_seq", [0, -1, MAX_SEQ + 1, 10**30])
def test_an_end_seq_out_of_range_is_refused(end_seq: int) -> None:
    with pytest.raises(ValidationError, match="terminal_end_seq"):
        _job(end_seq)


def test_the_largest_seq_is_accepted() -> None:
    assert _job(MAX_SEQ).terminal_end_seq == MAX_SEQ
