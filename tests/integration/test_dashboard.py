"""omray in the Ray dashboard: named actors in the state API, custom metrics on the Prometheus endpoint."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from cluster.client import OmrayClient
from cluster.named_actors import ensure_runtime
from cluster.naming import RuntimeNames
from protocol.jobs import SEMANTIC_INDEX_HANDLER, JobEnvelope, SemanticIndexJob
from testkit.handlers import LEDGER_ENV
from tests.integration.conftest import ClusterInfo, assert_eventually

pytestmark = pytest.mark.integration


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
        return body


def test_state_api_lists_omray_actors_by_name(
    ray_cluster: ClusterInfo, names: RuntimeNames, tmp_path: Path
) -> None:
    ensure_runtime(
        names,
        queue_db=str(tmp_path / "queue.sqlite"),
        handler_paths={SEMANTIC_INDEX_HANDLER: "testkit.handlers:noop"},
    )

    def alive_names() -> set[str]:
        data = json.loads(_get(f"{ray_cluster.dashboard_url}/api/v0/actors?limit=1000&detail=false"))
        rows = data["data"]["result"]["result"]
        return {row["name"] for row in rows if row.get("state") == "ALIVE" and row.get("name")}

    wanted = {names.queue, names.indexer}  # the queue writes its own file: no StoreActor for it
    # Worker actors start lazily: wait until every one of them is listed alive, not just the first.
    found = assert_eventually(lambda: wanted <= alive_names() or None, timeout_s=60)
    assert found


def test_custom_metrics_reach_the_prometheus_endpoint(
    ray_cluster: ClusterInfo, names: RuntimeNames, tmp_path: Path
) -> None:
    ensure_runtime(
        names,
        queue_db=str(tmp_path / "queue.sqlite"),
        handler_paths={SEMANTIC_INDEX_HANDLER: "testkit.handlers:noop"},
        worker_env={LEDGER_ENV: str(tmp_path / "ledger.jsonl")},
    )
    client = OmrayClient(names)
    for n in range(5):
        client.dispatch(
            JobEnvelope(
                job_id=f"m{n}",
                payload=SemanticIndexJob(session_id="s-metrics", db_path="/nonexistent/om.sqlite"),
            )
        )
    assert client.wait_idle(timeout_s=60)

    def exported() -> str | None:
        body = _get(ray_cluster.metrics_url).decode("utf-8")
        wanted = (
            "omray_queue_depth",
            "omray_job_attempts_total",
            "omray_job_duration_seconds",
            "omray_pool_workers",
        )
        runtime_lines = [line for line in body.splitlines() if f'runtime="{names.prefix}"' in line]
        return body if all(any(w in line for line in runtime_lines) for w in wanted) else None

    body = assert_eventually(exported, timeout_s=60, interval_s=1.0, message="omray metrics never exported")
    assert "s-metrics" not in body  # labels carry ids of handlers and runtimes, never session content
