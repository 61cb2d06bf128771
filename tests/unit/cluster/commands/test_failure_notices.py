"""A lasting failure makes one notice per cause, not one per session (issue 40 item 5)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from cluster.commands import agent_hooks, hook_notices
from protocol.outcomes import JOB_FAILED_EVENT_TYPE


class _Client:
    """What the dispatcher reads of the runtime: each watched session's job_failed events."""

    def __init__(self, failures: dict[str, str]) -> None:
        self.failures = failures

    def runtime_events(self, session: str, after: int) -> list[dict[str, Any]]:
        reason = self.failures.get(session)
        if reason is None or after >= 1:
            return []
        return [{"event_type": JOB_FAILED_EVENT_TYPE, "event_seq": 1, "payload": {"reason": reason}}]

    def queue_is_idle(self) -> bool:
        return True


def _notices_after(tmp_path: Path, failures: dict[str, str]) -> list[dict[str, object]]:
    now = time.time()
    for session in failures:
        agent_hooks._watch(str(tmp_path), session, now + 60)
    agent_hooks._look_for_failures(str(tmp_path), lambda _: _Client(failures), agent_hooks.Pass(), now)
    return hook_notices.notices(hook_notices.read_status(str(tmp_path)))


def test_three_sessions_failing_for_one_cause_make_one_notice(tmp_path: Path) -> None:
    found = _notices_after(
        tmp_path, {"s1": "transient_network", "s2": "transient_network", "s3": "transient_network"}
    )
    assert len(found) == 1 and "'s1'" in str(found[0]["message"])  # the first one, and no more
    assert "omray status" in str(found[0]["message"])


def test_two_causes_make_two_notices(tmp_path: Path) -> None:
    found = _notices_after(tmp_path, {"s1": "transient_network", "s2": "model_auth"})
    assert len(found) == 2
