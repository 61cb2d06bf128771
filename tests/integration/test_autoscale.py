"""Worker pools grow under a backlog and shrink when idle, on the shared real Ray cluster, losing nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

from actors.queue.scaling import ScalingPolicy
from cluster.client import OmrayClient
from cluster.named_actors import ensure_runtime
from cluster.naming import RuntimeNames
from cluster.pools import PoolSizes
from protocol.jobs import REFLECT_GENERATION_HANDLER, JobEnvelope
from testkit.handlers import LEDGER_ENV, for_every_role, read_ledger
from tests.integration.conftest import assert_eventually

pytestmark = pytest.mark.integration


def _reflect_job(session: str, n: int) -> JobEnvelope:
    return JobEnvelope.model_validate(
        {
            "job_id": f"grow-{n:04d}",
            "correlation_id": session,
            "payload": {
                "kind": "reflect_generation",
                "run_id": session,
                "generation_id": f"{n:064x}",
                "observation_set_hash": "c" * 64,
                "reflector_model": "builtin/extractive",
                "reflector_schema_version": "1",
                "db_path": "/nonexistent/om.sqlite",
            },
        }
    )


def test_a_pool_grows_under_a_backlog_and_shrinks_when_idle(names: RuntimeNames, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ensure_runtime(
        names,
        queue_db=str(tmp_path / "queue.sqlite"),
        handler_paths=for_every_role("testkit.handlers:slow"),
        worker_env={LEDGER_ENV: str(ledger), "OMRAY_BENCH_SLOW_S": "0.4"},
        pools=PoolSizes(reflectors=1, max_reflectors=3, reflector_slots=1),
        scaling=ScalingPolicy(grow_after_s=0.5, shrink_after_s=2.0, cooldown_s=0.5),
    )
    client = OmrayClient(names)

    def reflectors() -> dict[str, int]:
        pool: dict[str, int] = client.status()["pools"][REFLECT_GENERATION_HANDLER]
        return pool

    assert reflectors()["workers"] == 1
    # Twelve sessions' reflect jobs (never coalesced), 0.4 s each, on one single-slot worker.
    jobs = [_reflect_job(f"lane-{n % 12}", n) for n in range(36)]
    job_ids = [client.dispatch(job) for job in jobs]
    assert_eventually(lambda: reflectors()["workers"] == 3 or None, timeout_s=60, message="pool did not grow")
    assert client.wait_idle(timeout_s=120)
    assert_eventually(
        lambda: reflectors()["workers"] == 1 or None, timeout_s=60, message="pool did not shrink"
    )

    counts = client.job_counts()
    assert counts["succeeded"] == len(job_ids) and counts["failed"] == 0
    starts = [line for line in read_ledger(str(ledger)) if line["event"] == "start"]
    ended = {line["job_id"] for line in read_ledger(str(ledger)) if line["event"] == "end"}
    assert ended == set(job_ids)  # every job ran to its end: no retired worker took one with it
    assert {line["pid"] for line in starts} and len({line["pid"] for line in starts}) >= 3

    # The retired members are gone for good (killed without restart), the first one stays.
    def only_first_alive() -> bool | None:
        alive = {entry["name"] for entry in ray.util.list_named_actors(all_namespaces=True)}
        retired = {names.worker("reflector", 1), names.worker("reflector", 2)}
        return (names.worker("reflector", 0) in alive and not retired & alive) or None

    assert_eventually(only_first_alive, timeout_s=30, message="retired workers still listed")
