"""A lasting failure makes one notice per cause, not one per session (issue 40 item 5)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

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


_KEYED_SETTINGS = """observational_memory:
  model: remote/big
  providers:
    remote:
      base_url: http://127.0.0.1:9/v1
      api_key_env: ACME_LLM_KEY
      context_window: 32768
"""


def test_an_unset_key_notice_names_the_variable_to_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMRAY_SETTINGS", raising=False)
    (tmp_path / "omray.yaml").write_text(_KEYED_SETTINGS, encoding="utf-8")
    (missing,) = _notices_after(tmp_path, {"s1": "model_api_key_missing"})
    assert "ACME_LLM_KEY is not set" in str(missing["message"])
    assert "export ACME_LLM_KEY in the shell that runs `omray up`" in str(missing["message"])


def test_a_rejected_key_notice_names_the_variable_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMRAY_SETTINGS", raising=False)
    (tmp_path / "omray.yaml").write_text(_KEYED_SETTINGS, encoding="utf-8")
    (rejected,) = _notices_after(tmp_path, {"s1": "model_auth"})
    assert "ACME_LLM_KEY" in str(rejected["message"])


def test_without_a_key_variable_in_the_settings_the_notice_stays_general(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMRAY_SETTINGS", raising=False)
    (missing,) = _notices_after(tmp_path, {"s1": "model_api_key_missing"})  # no settings: builtin model
    assert "the provider's API key variable is not set" in str(missing["message"])


class _HeldClient(_Client):
    """Each watched session reports that its project's daily budget started holding its jobs."""

    def runtime_events(self, session: str, after: int) -> list[dict[str, Any]]:
        from protocol.outcomes import JOB_HELD_EVENT_TYPE, JobHeldEvent

        if after >= 1:
            return []
        event = JobHeldEvent.for_hold(
            job_id=f"job-{session}",
            handler_id="observational_memory.observe_boundary",
            reason="budget_tokens",
            until="2026-01-03T00:00:00+00:00",
            spent=2_000_123,
            cap=2_000_000,
        )
        return [{"event_type": JOB_HELD_EVENT_TYPE, "event_seq": 1, "payload": event.model_dump()}]


def test_a_budget_reached_is_one_notice_saying_until_when_and_how_to_raise_it(tmp_path: Path) -> None:
    now = time.time()
    for session in ("s1", "s2"):
        agent_hooks._watch(str(tmp_path), session, now + 60)
    agent_hooks._look_for_failures(str(tmp_path), lambda _: _HeldClient({}), agent_hooks.Pass(), now)
    (held,) = hook_notices.notices(hook_notices.read_status(str(tmp_path)))
    message = str(held["message"])
    assert message.startswith("omray: Observing paused") and "budget.daily_tokens" in message
    assert "2026-01-03 00:00 UTC" in message and "nothing is lost" in message
