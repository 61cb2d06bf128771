"""omray's Grafana dashboard, its Prometheus config and the metric catalog they rest on."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from cluster.cli import app
from cluster.grafana import (
    DASHBOARD_FILE,
    DASHBOARD_UID,
    dashboard,
    dashboard_text,
    metrics_of,
    prometheus_config,
    queries,
    service_discovery_file,
    write_into_session,
)
from cluster.metric_catalog import ALL_METRICS, BY_NAME, LABEL_VALUES
from cluster.ray_head import UNNEEDED_DASHBOARD_MODULES, dashboard_modules, with_modules


def test_every_metric_has_help_text_and_bounded_labels() -> None:
    assert len(BY_NAME) == len(ALL_METRICS)
    for spec in ALL_METRICS:
        assert spec.help.strip().endswith(".") and len(spec.help) > 20, spec.name
        assert set(spec.labels) <= set(LABEL_VALUES), spec.name
        assert "runtime" in spec.labels
        assert not {"session", "session_id", "run_id", "job_id", "path", "db_path"} & set(spec.labels)
        assert spec.name.startswith("omray_") and spec.exported == f"ray_{spec.name}"
        assert (spec.type == "counter") == spec.name.endswith("_total")


def test_the_dashboard_charts_every_metric_and_only_known_ones() -> None:
    used = {name for _, query in queries() for name in metrics_of(query.expr)}
    assert used == set(BY_NAME)
    for title, query in queries():
        assert metrics_of(query.expr), title
        assert 'runtime="$runtime"' in query.expr
        assert query.expr.count("(") == query.expr.count(")"), title


def test_the_dashboard_is_a_grafana_model_with_its_variables_and_a_tidy_grid() -> None:
    model = json.loads(dashboard_text())
    assert model == dashboard() and model["uid"] == DASHBOARD_UID
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert (
        variables["datasource"]["query"] == "prometheus"
        and variables["runtime"]["current"]["value"] == "omray"
    )
    assert dashboard("t1")["templating"]["list"][1]["current"]["value"] == "t1"
    panels = model["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, panel["title"]  # no two panels overlap
                cells.add((x, y))
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"
    titles = [p["title"] for p in panels if p["type"] != "row"]
    assert len(titles) == len(set(titles))
    for wanted in (
        "Queue depth",
        "Busy lanes",
        "Job duration p50 / p95 by handler",
        "Pool resizes",
        "Model tokens by stage and direction",
        "Model cost per hour (when prices are set)",
    ):
        assert wanted in titles


def test_the_prometheus_config_reads_rays_discovery_file() -> None:
    config = yaml.safe_load(prometheus_config("/tmp/ray/session_x/prom_metrics_service_discovery.json", 5))
    assert config["global"]["scrape_interval"] == "5s"
    [job] = config["scrape_configs"]
    assert job["file_sd_configs"][0]["files"] == ["/tmp/ray/session_x/prom_metrics_service_discovery.json"]
    assert service_discovery_file(None) == "/tmp/ray/prom_metrics_service_discovery.json"
    assert service_discovery_file("/s") == "/s/prom_metrics_service_discovery.json"


def test_the_commands_print_them(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    runner = CliRunner()
    shown = runner.invoke(app, ["metrics", "grafana-dashboard", "--runtime", "mine"])
    assert shown.exit_code == 0 and json.loads(shown.stdout) == dashboard("mine")
    monkeypatch.setenv("OMRAY_HOME", str(tmp_path))
    (tmp_path / "runtime.json").write_text(json.dumps({"session_dir": "/tmp/ray/session_y"}))
    config = runner.invoke(app, ["metrics", "prometheus-config"])
    assert config.exit_code == 0 and "/tmp/ray/session_y/prom_metrics_service_discovery.json" in config.stdout


def test_the_dashboard_goes_next_to_rays_only_where_ray_put_its_own(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert write_into_session(str(tmp_path), "omray") is None  # no dashboard ran: nothing written
    folder = tmp_path / "metrics" / "grafana" / "dashboards"
    folder.mkdir(parents=True)
    path = write_into_session(str(tmp_path), "omray")
    assert path == folder / DASHBOARD_FILE and json.loads(path.read_text()) == dashboard("omray")


def test_omrays_head_leaves_out_the_dashboard_modules_of_unused_libraries() -> None:
    available = [
        "NodeHead",
        "StateHead",
        "JobHead",
        "ServeHead",
        "TrainHead",
        "DataHead",
        "UsageStatsHead",
        "New",
    ]
    assert dashboard_modules(available) == ["New", "NodeHead", "StateHead", "UsageStatsHead"]
    assert {"JobHead", "ServeHead", "TrainHead", "DataHead"} == UNNEEDED_DASHBOARD_MODULES
    command = ["python", "dashboard.py", "--port=1"]
    assert with_modules(command, ["NodeHead", "StateHead"]) == [
        *command,
        "--modules-to-load=NodeHead,StateHead",
    ]
    # `--include-dashboard=false` asks for the usage-stats stub only: left as Ray built it.
    stub = [*command, "--modules-to-load=UsageStatsHead"]
    assert with_modules(stub, ["NodeHead"]) == stub
