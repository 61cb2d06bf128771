"""omray watched the Ray way, on the shared cluster: a real Prometheus, omray's Grafana dashboard,
``omray watch`` and the Ray dashboard's Actors page in a real headless Chromium.

One runtime serves the module (its workload runs once): an observe job on a scripted, priced
model (tokens and cost), a reflect job whose handler always fails (retries, then a job given up)
and index jobs that hold their workers until a gate file appears (a backlog, so the pool grows).
Prometheus (Debian's ``prometheus``; ``.ci/run`` installs it) scrapes the cluster through Ray's
service-discovery file with the config ``omray metrics prometheus-config`` prints.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.queue.scaling import ScalingPolicy
from bench.observer_bench import PrefixCachingObserver
from cluster.client import OmrayClient
from cluster.commands.demo_session import commit_turn, demo_session
from cluster.commands.watch import render_watch, snapshot_from, utc_now
from cluster.grafana import prometheus_config, queries, service_discovery_file
from cluster.metric_catalog import ALL_METRICS, LABEL_VALUES
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime, remove_runtime
from cluster.naming import RuntimeNames
from cluster.pools import PoolSizes
from protocol.jobs import (
    OBSERVE_BOUNDARY_HANDLER,
    REFLECT_GENERATION_HANDLER,
    SEMANTIC_INDEX_HANDLER,
    JobEnvelope,
    ReflectGenerationJob,
    SemanticIndexJob,
)
from testkit.handlers import GATE_ENV
from testkit.scripted_server import ScriptedServer
from tests.integration.conftest import ClusterInfo, assert_eventually, free_port

pytestmark = pytest.mark.integration

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
INDEX_JOBS = 3
"""Gated index jobs on as many databases: one pool of at most two one-slot workers, one waits."""


def _get_json(url: str, timeout_s: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.loads(response.read())


@dataclass
class Prometheus:
    """A running Prometheus server."""

    url: str

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant vector of ``expr`` now (``[]`` when it has no data)."""
        answer = _get_json(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result


@pytest.fixture(scope="module")
def prometheus(ray_cluster: ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Prometheus scraping the shared cluster every second, configured by ``prometheus_config``."""
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.skip("needs Debian's prometheus package (`.ci/run` installs it: apt-get install prometheus)")
    session_dir = ray._private.worker._global_node.get_session_dir_path()  # type: ignore[union-attr]
    sd_file = service_discovery_file(session_dir)
    assert_eventually(lambda: Path(sd_file).is_file(), timeout_s=60, message="Ray wrote no discovery file")
    home = tmp_path_factory.mktemp("prometheus")
    (home / "prometheus.yml").write_text(prometheus_config(sd_file, scrape_interval_s=1), encoding="utf-8")
    port = free_port()
    log = (home / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={home / 'prometheus.yml'}",
            f"--storage.tsdb.path={home / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Prometheus(f"http://127.0.0.1:{port}")
    try:
        assert_eventually(
            lambda: _ready(server), timeout_s=60, interval_s=0.5, message="Prometheus never ready"
        )
        yield server
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _ready(server: Prometheus) -> bool:
    try:
        return bool(_get_json(f"{server.url}/api/v1/status/buildinfo", timeout_s=2))
    except OSError:
        return False


@dataclass
class Runtime:
    """The module's runtime and what it ran."""

    names: RuntimeNames
    client: OmrayClient
    gate: Path
    """Index jobs hold their workers until this file exists."""
    tmp: Path


def _settings(tmp: Path, server: ScriptedServer) -> dict[str, Any]:
    return {
        "model": "scripted/observer",
        "providers": {"scripted": {"base_url": server.base_url, "context_window": 16384}},
        "storage": {"database": str(tmp / "om.sqlite")},
        "prices": {"models": {"scripted/observer": {"prompt": 1.0, "cached_prompt": 0.1, "completion": 2.0}}},
    }


def _index_job(tmp: Path, n: int, tag: str) -> JobEnvelope:
    return JobEnvelope(
        job_id=f"index-{tag}-{n}",
        payload=SemanticIndexJob(session_id="s-index", db_path=str(tmp / f"idx{n}.sqlite")),
    )


def _hold_index_pool(runtime: Runtime, tag: str) -> None:
    """Index jobs that wait for the gate: the pool grows to its maximum and one still waits."""
    for n in range(INDEX_JOBS):
        runtime.client.dispatch(_index_job(runtime.tmp, n, tag))


@pytest.fixture(scope="module")
def runtime(
    ray_cluster: ClusterInfo, prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runtime]:
    tmp = tmp_path_factory.mktemp("observability")
    names = RuntimeNames(prefix=f"t{uuid.uuid4().hex[:10]}")
    model = PrefixCachingObserver()
    gate = tmp / "gate"
    with ScriptedServer(chat_default=model) as server:
        ensure_runtime(
            names,
            queue_db=str(tmp / "queue.sqlite"),
            handler_paths={
                OBSERVE_BOUNDARY_HANDLER: DEFAULT_HANDLERS[OBSERVE_BOUNDARY_HANDLER],
                REFLECT_GENERATION_HANDLER: "testkit.handlers:always_fail",
                SEMANTIC_INDEX_HANDLER: "testkit.handlers:gated",
            },
            worker_env={GATE_ENV: str(gate)},
            retry_base_delay_s=0.05,
            pools=PoolSizes(observers=1, max_observers=1, reflectors=1, max_reflectors=1, max_indexers=2),
            scaling=ScalingPolicy(grow_after_s=0.2, shrink_after_s=600.0, cooldown_s=0.5),
        )
        client = OmrayClient(names, settings=_settings(tmp, server), cwd=tmp)
        result = Runtime(names, client, gate, tmp)
        try:
            # Prometheus sees the runtime before the work starts, so the counters' rates are not 0.
            assert_eventually(
                lambda: prometheus.query(f'ray_omray_queue_depth{{runtime="{names.prefix}"}}'),
                timeout_s=90,
                interval_s=0.5,
                message="Prometheus never scraped the runtime's queue",
            )
            turns = demo_session("s-observe")
            events = tmp / "events.jsonl"
            for number, turn in enumerate(turns, start=1):
                context = commit_turn(events, turn, session_end=number == len(turns))
                assert client.after_turn_commit(context, events_path=events) is not None
            client.dispatch(
                JobEnvelope(
                    job_id="reflect-fails",
                    payload=ReflectGenerationJob(
                        session_id="s-fail",
                        generation_id="a" * 64,
                        observation_set_hash="b" * 64,
                        reflector_model="builtin/extractive",
                        reflector_schema_version="1",
                        db_path=str(tmp / "fail.sqlite"),
                    ),
                )
            )
            _hold_index_pool(result, "grow")
            assert_eventually(
                lambda: client.status()["pools"][SEMANTIC_INDEX_HANDLER]["workers"] == 2,
                timeout_s=60,
                message="the index pool never grew",
            )
            gate.touch()
            assert client.wait_idle(timeout_s=120)
            assert model.requests >= 1
            yield result
        finally:
            gate.touch()
            client.close()
            remove_runtime(names)


def _value(prometheus: Prometheus, expr: str) -> float | None:
    result = prometheus.query(expr)
    return float(result[0]["value"][1]) if len(result) == 1 else None


STAT_PANELS = ("Queue depth", "Runs in flight", "Slots", "Lanes", "Busy lanes")
"""The dashboard's numbers of the queue now (its first row), the ones ``omray watch`` shows too."""
POOL_PANELS = ("Pool sizes", "Runs waiting for a slot")
"""Its per-pool numbers now: workers, busy, min, max, waiting."""


def _dashboard_now(prometheus: Prometheus, prefix: str) -> dict[str, float | None]:
    """What the dashboard's stat panels and pool panels show now (their own expressions)."""
    shown: dict[str, float | None] = {}
    for title, query in queries():
        expr = query.expr.replace("$runtime", prefix)
        if title in STAT_PANELS:
            shown[title] = _value(prometheus, expr)
        elif title in POOL_PANELS:
            series = query.legend.removeprefix("{{handler_id}}").strip() or "waiting"
            for row in prometheus.query(expr):
                shown[f"{row['metric']['handler_id']} {series}"] = float(row["value"][1])
    return shown


def _watch_now(client: OmrayClient, prefix: str) -> tuple[dict[str, float | None], str]:
    """The same numbers as ``omray watch`` reads and shows them, and its frame."""
    status = client.status()
    snapshot = snapshot_from(taken_at=utc_now(), queue_name=prefix, queue_status=status, activity_rows=())
    numbers = (
        snapshot.queue_depth,
        snapshot.runs_in_flight,
        snapshot.slots,
        snapshot.lanes,
        snapshot.busy_lanes,
    )
    shown: dict[str, float | None] = {
        title: None if number is None else float(number)
        for title, number in zip(STAT_PANELS, numbers, strict=True)
    }
    for handler_id, pool in status["pools"].items():
        for series, key in (
            ("workers", "workers"),
            ("busy", "busy_workers"),
            ("min", "minimum"),
            ("max", "maximum"),
            ("waiting", "waiting"),
        ):
            shown[f"{handler_id} {series}"] = float(pool[key])
    return shown, render_watch(snapshot).plain


def test_watch_and_the_dashboard_show_the_same_numbers(runtime: Runtime, prometheus: Prometheus) -> None:
    prefix = runtime.names.prefix
    runtime.gate.unlink()
    try:
        _hold_index_pool(runtime, "steady")  # a load that stays put: 2 running, 1 waiting
        seen: list[Any] = []

        def agree() -> bool:
            watched, frame = _watch_now(runtime.client, prefix)
            charted = _dashboard_now(prometheus, prefix)
            seen[:] = [watched, charted, frame]
            line = f"Queue depth: {watched['Queue depth']:.0f} · in flight: 2/{watched['Slots']:.0f}"
            return watched["Busy lanes"] == 2 and watched == charted and line in frame

        try:
            assert_eventually(agree, timeout_s=60, interval_s=0.5)
        except AssertionError:
            raise AssertionError(f"watch and the dashboard differ: {seen!r}") from None
        watched = seen[0]
        assert watched["Queue depth"] == 1
        assert watched[f"{SEMANTIC_INDEX_HANDLER} workers"] == 2
        assert watched[f"{SEMANTIC_INDEX_HANDLER} waiting"] == 1
    finally:
        runtime.gate.touch()
    assert runtime.client.wait_idle(timeout_s=120)


def test_every_dashboard_expression_returns_data(runtime: Runtime, prometheus: Prometheus) -> None:
    prefix = runtime.names.prefix
    missing: list[str] = []

    def all_answer() -> bool:
        missing.clear()
        for title, query in queries():
            expr = query.expr.replace("$runtime", prefix).replace("$__rate_interval", "5m")
            values = [float(row["value"][1]) for row in prometheus.query(expr)]
            if not any(math.isfinite(value) for value in values):
                missing.append(f"{title}: {expr}")
        return not missing

    try:
        assert_eventually(all_answer, timeout_s=90, interval_s=1.0)
    except AssertionError:
        raise AssertionError(f"no data for {missing!r}") from None
    # The workload's own numbers came through: a job given up, a pool grown, tokens and cost.
    given_up = prometheus.query(f'ray_omray_job_failures_total{{runtime="{prefix}"}}')
    assert {row["metric"]["handler_id"] for row in given_up} == {REFLECT_GENERATION_HANDLER}
    grown = prometheus.query(f'ray_omray_pool_resizes_total{{runtime="{prefix}",direction="grow"}}')
    assert {row["metric"]["handler_id"] for row in grown} == {SEMANTIC_INDEX_HANDLER}
    kinds = prometheus.query(f'ray_omray_model_tokens_total{{runtime="{prefix}"}}')
    assert {(row["metric"]["kind"], row["metric"]["model"]) for row in kinds} == {
        ("observe", "scripted/observer")
    }
    cost = _value(prometheus, f'sum(ray_omray_model_cost_total{{runtime="{prefix}",currency="USD"}})')
    assert cost is not None and cost > 0


def test_every_metric_has_help_and_bounded_labels(runtime: Runtime, ray_cluster: ClusterInfo) -> None:
    with urllib.request.urlopen(ray_cluster.metrics_url, timeout=10) as response:
        body = response.read().decode("utf-8")
    helps = {
        line.split()[2]: line.split(maxsplit=3)[3] if len(line.split()) > 3 else ""
        for line in body.splitlines()
        if line.startswith("# HELP ray_omray_")
    }
    exported = {spec.exported for spec in ALL_METRICS}
    assert exported <= set(helps), exported - set(helps)
    assert all(helps[name].strip() for name in exported)
    ours = [
        line for line in body.splitlines() if line.startswith("ray_omray_") and runtime.names.prefix in line
    ]
    assert ours
    for line in ours:
        labels = line[line.index("{") + 1 : line.rindex("}")]
        keys = {part.split("=", 1)[0] for part in labels.split('",') if "=" in part}
        omray_keys = {key for key in keys if key[:1].islower() and not key.startswith("otel_")} - {"le"}
        assert omray_keys <= set(LABEL_VALUES), line
    for secret in ("s-observe", "s-fail", "s-index", str(runtime.tmp)):  # sessions and paths
        assert secret not in body


def test_the_ray_dashboard_actors_page_lists_omray(runtime: Runtime, ray_cluster: ClusterInfo) -> None:
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip("needs Debian's chromium and chromium-driver (`.ci/run` installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = runtime.tmp / "chromium-profile"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=1600,1200",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    prefix = runtime.names.prefix
    try:
        driver.set_page_load_timeout(60)
        driver.get(f"{ray_cluster.dashboard_url}/#/actors")
        # The shared cluster lists every test's actors, dead ones too: filter by this runtime's prefix.
        name_filter = assert_eventually(
            lambda: driver.find_elements(By.XPATH, "//label[normalize-space()='Name']/..//input"),
            timeout_s=60,
            interval_s=0.5,
            message="the Actors page has no Name filter",
        )
        name_filter[0].send_keys(prefix)
        wanted = (f"{prefix}.queue", f"{prefix}.observer.0", f"{prefix}.store.", f"{prefix}.indexer.0")

        def listed() -> bool:
            text = driver.find_element("tag name", "body").text
            return all(name in text for name in wanted)

        assert_eventually(
            listed, timeout_s=90, interval_s=1.0, message="omray's actors not on the Actors page"
        )
        driver.save_screenshot(str(runtime.tmp / "actors-page.png"))
    finally:
        driver.quit()
