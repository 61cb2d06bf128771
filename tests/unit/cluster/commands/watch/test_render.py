"""``render_watch`` and ``snapshot_from``: what one frame shows (pure, no clock, no I/O)."""

from __future__ import annotations

from typing import Any

from cluster.commands.watch import WatchSnapshot, render_watch, snapshot_from
from tests.unit.cluster.commands.watch.conftest import NOW

JOB_A = "a1b2c3d4e5f6" + "0" * 52
JOB_B = "b" * 64

QUEUE_STATUS: dict[str, Any] = {
    "depth": 1234,
    "in_flight": [
        {"job_seq": 7, "job_id": JOB_A, "attempt": 2, "handler_id": "observe_boundary", "running_s": 2.25}
    ],
    "recent_failures": [
        {"session_id": "s-1", "job_id": "f-old" + "1" * 59, "reason": "retry_exhausted", "attempts": 4},
        {"session_id": "s-2", "job_id": "f-new" + "2" * 59, "reason": "invalid_job", "attempts": 1},
    ],
}

USAGE: dict[str, Any] = {
    "total": {"requests": 3, "prompt_tokens": 1400, "cached_prompt_tokens": 0, "completion_tokens": 50}
}
"""A cost report with no money (no price table)."""

ROWS = [
    {"session_id": "s-2", "status_text": "Observational memory: reflector running (~2,500 tokens)"},
    {"session_id": "s-1", "status_text": "Observational memory: observer running on ~812-token chunk"},
]


def _frame(**changes: Any) -> str:
    snapshot = snapshot_from(
        taken_at=NOW, queue_name="omray.queue", queue_status=QUEUE_STATUS, activity_rows=ROWS, **changes
    )
    return render_watch(snapshot).plain


def test_full_frame() -> None:
    lines = _frame().splitlines()
    assert lines[0] == "omray watch · omray.queue · all sessions · 12:00:00 UTC"
    assert lines[1] == "Queue depth: 1,234 · in flight: 1"
    assert lines[2] == "  running a1b2c3d4e5f6  observe_boundary  attempt 2  2.2 s"
    assert lines[3:6] == [
        "Sessions:",
        "  s-1  Observational memory: observer running on ~812-token chunk",
        "  s-2  Observational memory: reflector running (~2,500 tokens)",
    ]
    assert lines[6:] == [
        "Recent failures:",
        "  failed f-new2222222  invalid_job  1 attempts  session s-2",
        "  failed f-old1111111  retry_exhausted  4 attempts  session s-1",
    ]
    assert JOB_A not in _frame()  # ids are shortened


def test_session_filter_keeps_one_session_and_its_failures() -> None:
    frame = _frame(session_filter="s-1")
    assert "session s-1 ·" in frame.splitlines()[0]
    assert "s-2" not in frame
    assert "observer running on ~812-token chunk" in frame
    assert "retry_exhausted" in frame and "invalid_job" not in frame


def test_idle_and_unreachable_queue() -> None:
    snapshot = WatchSnapshot(
        taken_at=NOW,
        queue_name="omray.queue",
        queue_depth=None,
        waiting=("waiting for the queue 'omray.queue' …",),
        session_filter="s-9",
    )
    lines = render_watch(snapshot).plain.splitlines()
    assert lines[1] == "Queue depth: ? · in flight: 0"
    assert "  s-9: idle" in lines
    assert "Recent failures:" not in lines
    assert lines[-1] == "waiting for the queue 'omray.queue' …"
    empty = WatchSnapshot(taken_at=NOW, queue_name="q", queue_depth=0)
    assert "  no stage running" in render_watch(empty).plain.splitlines()


def test_at_most_five_failures_newest_first() -> None:
    failures = [
        {"session_id": "s", "job_id": f"job-{n:02d}", "reason": "retry_exhausted", "attempts": 4}
        for n in range(9)
    ]
    snapshot = snapshot_from(
        taken_at=NOW,
        queue_name="q",
        queue_status={"depth": 0, "in_flight": [], "recent_failures": failures},
        activity_rows=[],
    )
    assert [line.split()[0] for line in snapshot.failures] == [
        "job-08",
        "job-07",
        "job-06",
        "job-05",
        "job-04",
    ]


def test_long_running_job_shows_minutes() -> None:
    status = {
        "depth": 0,
        "in_flight": [
            {"job_id": JOB_B, "handler_id": "reflect_generation", "attempt": 1, "running_s": 125.0}
        ],
        "recent_failures": [{"job_id": "j", "reason": "r", "attempts": 2}],
    }
    rows = [{"session_id": "s", "status_text": "x"}]
    snapshot = snapshot_from(taken_at=NOW, queue_name="q", queue_status=status, activity_rows=rows)
    frame = render_watch(snapshot).plain
    assert "bbbbbbbbbbbb  reflect_generation  attempt 1  2 min 05 s" in frame
    assert "  failed j  r  2 attempts\n" in frame + "\n"


def test_lanes_and_pool_slots_are_shown_when_the_queue_reports_them() -> None:
    status = {**QUEUE_STATUS, "lanes": 12, "busy_lanes": 5, "max_in_flight": 11}
    snapshot = snapshot_from(taken_at=NOW, queue_name="omray.queue", queue_status=status, activity_rows=ROWS)
    assert render_watch(snapshot).plain.splitlines()[1] == (
        "Queue depth: 1,234 · in flight: 1/11 · lanes: 12 (5 running)"
    )


def test_the_budget_today_spend_per_model_and_a_held_project() -> None:
    from cluster.commands.watch import cost_lines

    budget = {
        "day": "2026-07-23",
        "tokens": 2_000_400,
        "daily_tokens": 2_000_000,
        "usd": 1.25,
        "daily_usd": None,
        "unpriced_models": [],
        "reached": "budget_tokens",
        "resets_at": "2026-07-24T00:00:00+00:00",
    }
    by_day = [
        {"day": "2026-07-23", "session_id": "s-1", "model": "claude-code/haiku", "tokens": 1000, "usd": 0.5},
        {"day": "2026-07-23", "session_id": "s-2", "model": "claude-code/haiku", "tokens": 400, "usd": 0.25},
        {"day": "2026-07-22", "session_id": "s-1", "model": "claude-code/haiku", "tokens": 9, "usd": 9.0},
    ]
    held = {"db_path": "/p/om.sqlite", "reason": "budget_tokens", "until": 1_784_851_200.0}
    status = {**QUEUE_STATUS, "held_by_project": [{**held, "spent": 2_000_400, "cap": 2_000_000, "jobs": 5}]}
    snapshot = snapshot_from(
        taken_at=NOW,
        queue_name="omray.queue",
        queue_status=status,
        activity_rows=ROWS,
        costs=cost_lines(USAGE, budget, by_day),
    )
    frame = render_watch(snapshot).plain
    assert "Model usage: 3 model requests, 1,400 prompt (0 cached), 50 completion tokens" in frame
    assert "Budget today: 2026-07-23 (UTC): 2,000,400 tokens of 2,000,000, 1.2500 USD (no cap)" in frame
    assert "paused until 2026-07-24 00:00 UTC" in frame
    assert "  today claude-code/haiku: 1,400 tokens, 0.7500 USD" in frame  # the other day left out
    assert "held by the daily budget: 5 observe/reflect jobs of /p/om.sqlite wait" in frame
