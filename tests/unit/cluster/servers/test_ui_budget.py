"""The viewer's cost page: spend per UTC day, session and model, the budget today, and a held project."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cluster.servers.ui_server import UiBackend, UiProject
from persistence.settings.parse import settings_from_mapping
from persistence.writers.store import Store
from protocol.records import TokenUsageRecord


def _usage(
    store: Store, usage_id: str, session: str, model: str, tokens: int, when: str, usd: float | None
) -> None:
    store.record_token_usage(
        TokenUsageRecord(
            usage_id=usage_id,
            session_id=session,
            job_kind="observe",
            model=model,
            requests=1,
            prompt_tokens=tokens,
            cached_prompt_tokens=0,
            completion_tokens=10,
            recorded_at=when,
            cost_usd=usd,
        )
    )


def test_the_cost_page_shows_days_the_budget_and_a_hold(tmp_path: Path) -> None:
    db = tmp_path / "om.sqlite"
    now = datetime.now(UTC).replace(microsecond=0)
    today = now.isoformat()
    store = Store(db)
    _usage(store, "u1", "s-one", "claude-code/haiku", 990, today, 0.02)
    _usage(store, "u2", "s-two", "local/m", 500, today, None)
    _usage(store, "u3", "s-one", "claude-code/haiku", 5, "2001-01-01T00:00:00+00:00", 0.5)  # long ago
    settings = settings_from_mapping(
        {
            "storage": {"database": str(db)},
            "semantic": None,
            "budget": {"daily_tokens": 1000, "daily_usd": 1.0},
            "prices": {"models": {"local/m": {"prompt": 2.0, "completion": 2.0}}},
        }
    )
    status: dict[str, Any] = {
        "held_by_project": [
            {
                "db_path": str(db),
                "reason": "budget_tokens",
                "until": 1.0,
                "spent": 1510,
                "cap": 1000,
                "jobs": 3,
            },
            {
                "db_path": "/another/om.sqlite",
                "reason": "budget_usd",
                "until": 1.0,
                "spent": 2,
                "cap": 1,
                "jobs": 9,
            },
        ]
    }
    backend = UiBackend({"demo": UiProject("demo", tmp_path, settings, db, tmp_path / "sessions")})
    backend.queue_status = lambda: (status, 0.1)

    cost = backend.cost_json("demo", None)

    day = now.date().isoformat()
    assert [(d["day"], d["session_id"], d["model"], d["tokens"]) for d in cost["by_day"]] == [
        (day, "s-one", "claude-code/haiku", 1000),
        (day, "s-two", "local/m", 510),
    ]
    assert cost["by_day"][0]["usd"] == 0.02 and cost["by_day"][1]["usd"] == 0.00102  # reported; priced
    budget = cost["budget"]
    assert (budget["day"], budget["tokens"], budget["reached"]) == (day, 1510, "budget_tokens")
    assert budget["usd"] == 0.02102 and budget["daily_usd"] == 1.0
    assert cost["held"] == [{"reason": "budget_tokens", "until": 1.0, "spent": 1510, "cap": 1000, "jobs": 3}]
    assert "/another" not in json.dumps(cost)
    assert [d["tokens"] for d in backend.cost_json("demo", "s-two")["by_day"]] == [510]
