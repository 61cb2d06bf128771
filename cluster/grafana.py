"""omray's Grafana dashboard and a Prometheus scrape config for it (``omray metrics ...``).

:func:`dashboard` builds the dashboard from :data:`PANELS`: one table of panels, each a title, a
unit and PromQL expressions over the metrics of :mod:`cluster.metric_catalog`. It has two
variables, ``datasource`` (a Prometheus data source, as in the dashboards Ray generates) and
``runtime`` (the actor-name prefix, ``omray`` for ``omray up``). :func:`prometheus_config` writes a
scrape config whose targets come from the service-discovery file Ray keeps up to date (every
node's metrics port, and the dashboard's), so a Prometheus started with it scrapes omray's metrics
and Ray's own. ``omray up`` also drops the dashboard next to the ones Ray generates in its
session's ``metrics/grafana/dashboards`` folder, which Grafana loads when it runs with Ray's
provisioning config (``docs/operations.md``).

Nothing here imports Ray; the output is deterministic (tests compare it and query every
expression against a real Prometheus).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from cluster.metric_catalog import BY_NAME, RAY_PREFIX

DASHBOARD_UID: Final = "omray"
"""Grafana uid of omray's dashboard (its URL: ``/d/omray``)."""
DASHBOARD_FILE: Final = "omray_grafana_dashboard.json"
"""File name of the dashboard in Ray's session folder of generated dashboards."""
SERVICE_DISCOVERY_FILE: Final = "prom_metrics_service_discovery.json"
"""Ray's Prometheus service-discovery file, in each session directory (and linked from ``/tmp/ray``)."""
LEGACY_SERVICE_DISCOVERY_PATH: Final = "/tmp/ray/" + SERVICE_DISCOVERY_FILE
"""Where Ray links the discovery file of the session started last on the machine."""

RATE_WINDOW: Final = "$__rate_interval"
"""Range of the ``rate``/``increase`` expressions: Grafana's choice for the scrape interval."""
RUNTIME: Final = 'runtime="$runtime"'
"""Label matcher every expression carries."""

Unit = Literal["short", "s", "ops", "none", "currencyUSD"]
"""Grafana units used."""


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL expression of a panel and its legend."""

    expr: str
    """The expression, with ``$runtime`` and ``$__rate_interval`` for Grafana to fill."""
    legend: str
    """Legend format (``{{label}}`` placeholders)."""


@dataclass(frozen=True, slots=True)
class Panel:
    """One chart (``timeseries``) or number (``stat``)."""

    title: str
    """Panel title."""
    description: str
    """What it shows (Grafana's panel info tooltip)."""
    queries: tuple[Query, ...]
    """Its expressions."""
    unit: Unit = "short"
    """Unit of the values."""
    kind: Literal["timeseries", "stat"] = "timeseries"
    """Chart or current number."""


def _m(name: str) -> str:
    """The exported name of metric ``name`` with the runtime matcher (a selector)."""
    if name.removesuffix("_bucket") not in BY_NAME:
        raise KeyError(f"no omray metric {name!r}")
    return f"{RAY_PREFIX}{name}{{{RUNTIME}}}"


def _gauge(name: str, by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} ({_m(name)})"


def _rate(name: str, by: str, per: int = 1) -> str:
    scale = f" * {per}" if per != 1 else ""
    return f"sum by ({by}) (rate({_m(name)}[{RATE_WINDOW}])){scale}"


def _quantile(q: float, by: str) -> str:
    return (
        f"histogram_quantile({q}, sum by (le, {by}) "
        f"(rate({_m('omray_job_duration_seconds_bucket')}[{RATE_WINDOW}])))"
    )


def _stat(title: str, description: str, gauge: str, legend: str) -> Panel:
    """A number panel: the current sum of one gauge."""
    return Panel(title, description, (Query(_gauge(gauge), legend),), kind="stat")


def _rates(
    title: str, description: str, counter: str, by: str, legend: str, per: int = 1, unit: Unit = "short"
) -> Panel:
    """A chart of one counter's rate (per second, or per ``per`` seconds), summed by ``by``."""
    return Panel(title, description, (Query(_rate(counter, by, per), legend),), unit=unit)


PANELS: Final[tuple[tuple[str, tuple[Panel, ...]], ...]] = (
    (
        "Queue now (the numbers `omray watch` and `omray status` show)",
        (
            _stat("Queue depth", "Jobs accepted and not running.", "omray_queue_depth", "depth"),
            _stat(
                "Runs in flight",
                "Runs in flight (coalesced jobs count once).",
                "omray_queue_in_flight",
                "in flight",
            ),
            _stat("Slots", "Runs the queue may have in flight now.", "omray_queue_slots", "slots"),
            _stat("Lanes", "Lanes with unfinished jobs.", "omray_queue_lanes", "lanes"),
            _stat("Busy lanes", "Lanes with a run in flight.", "omray_queue_busy_lanes", "busy lanes"),
            _stat(
                "Held by budget",
                "Projects whose observe and reflect jobs wait: their daily model budget is used up.",
                "omray_queue_held_projects",
                "held projects",
            ),
        ),
    ),
    (
        "Queue",
        (
            Panel(
                "Queue depth and runs in flight",
                "Jobs waiting, runs in flight and the slots they may use.",
                (
                    Query(_gauge("omray_queue_depth"), "depth"),
                    Query(_gauge("omray_queue_in_flight"), "in flight"),
                    Query(_gauge("omray_queue_slots"), "slots"),
                ),
            ),
            Panel(
                "Lanes over time",
                "Lanes (one session of one database, or one database's index work) with unfinished "
                "jobs, and those running one.",
                (
                    Query(_gauge("omray_queue_lanes"), "lanes"),
                    Query(_gauge("omray_queue_busy_lanes"), "busy lanes"),
                ),
            ),
        ),
    ),
    (
        "Jobs",
        (
            Panel(
                "Job duration p50 / p95 by handler",
                "Duration of one attempt (all outcomes), from the job-duration histogram.",
                (
                    Query(_quantile(0.5, "handler_id"), "p50 {{handler_id}}"),
                    Query(_quantile(0.95, "handler_id"), "p95 {{handler_id}}"),
                ),
                unit="s",
            ),
            _rates(
                "Attempts by handler and outcome",
                "Attempts finished per second: succeeded, failed (retried by policy) or worker_lost.",
                "omray_job_attempts_total",
                "handler_id, outcome",
                "{{handler_id}} {{outcome}}",
                unit="ops",
            ),
            _rates(
                "Jobs given up by handler and reason",
                "Jobs that failed after their retries, per minute (each also a job_failed event).",
                "omray_job_failures_total",
                "handler_id, reason",
                "{{handler_id}} {{reason}}",
                per=60,
            ),
        ),
    ),
    (
        "Worker pools",
        (
            Panel(
                "Pool sizes",
                "Workers of each pool, those busy, and the autoscaler's bounds.",
                (
                    Query(_gauge("omray_pool_workers", "handler_id"), "{{handler_id}} workers"),
                    Query(_gauge("omray_pool_busy_workers", "handler_id"), "{{handler_id}} busy"),
                    Query(_gauge("omray_pool_min_workers", "handler_id"), "{{handler_id}} min"),
                    Query(_gauge("omray_pool_max_workers", "handler_id"), "{{handler_id}} max"),
                ),
            ),
            Panel(
                "Runs waiting for a slot",
                "Runs ready to start that wait for a free slot of a pool (what makes it grow).",
                (Query(_gauge("omray_pool_waiting", "handler_id"), "{{handler_id}}"),),
            ),
            _rates(
                "Pool resizes",
                "Autoscaler decisions per minute, by pool and direction (grow, shrink).",
                "omray_pool_resizes_total",
                "handler_id, direction",
                "{{handler_id}} {{direction}}",
                per=60,
            ),
        ),
    ),
    (
        "Models",
        (
            _rates(
                "Model tokens by stage and direction",
                "Tokens per second of the Observer (observe), Reflector (reflect) and Dropper (drop); "
                "cached_prompt is part of prompt.",
                "omray_model_tokens_total",
                "kind, direction",
                "{{kind}} {{direction}}",
            ),
            _rates(
                "Model tokens by model",
                "Tokens per second by the settings' provider/model.",
                "omray_model_tokens_total",
                "model, direction",
                "{{model}} {{direction}}",
            ),
            _rates(
                "Model cost per hour (when prices are set)",
                "Money per hour in the price table's currency, for models the settings price.",
                "omray_model_cost_total",
                "kind, model, currency",
                "{{kind}} {{model}} ({{currency}})",
                per=3600,
                unit="none",
            ),
        ),
    ),
)
"""The dashboard: rows of panels, top to bottom."""


def queries() -> Iterator[tuple[str, Query]]:
    """Every panel title with each of its expressions."""
    for _, panels in PANELS:
        for panel in panels:
            for query in panel.queries:
                yield panel.title, query


METRIC_NAME = re.compile(r"\b" + re.escape(RAY_PREFIX) + r"(omray_[a-z_]+)\{")
"""A metric selector in an expression."""


def metrics_of(expr: str) -> list[str]:
    """Names (without Ray's prefix, ``_bucket`` dropped) of the metrics an expression selects."""
    return [name.removesuffix("_bucket") for name in METRIC_NAME.findall(expr)]


_DATASOURCE: Final = {"type": "prometheus", "uid": "${datasource}"}


def _panel_json(panel: Panel, panel_id: int, x: int, y: int, width: int, height: int) -> dict[str, Any]:
    targets = [
        {"datasource": _DATASOURCE, "expr": query.expr, "legendFormat": query.legend, "refId": chr(65 + n)}
        for n, query in enumerate(panel.queries)
    ]
    body: dict[str, Any] = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": _DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": width, "h": height},
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": panel.unit, "min": 0}, "overrides": []},
    }
    if panel.kind == "stat":
        body["options"] = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "none",
            "graphMode": "none",
        }
    else:
        body["options"] = {
            "legend": {"displayMode": "list", "placement": "bottom"},
            "tooltip": {"mode": "multi"},
        }
    return body


def dashboard(runtime: str = "omray") -> dict[str, Any]:
    """omray's Grafana dashboard (JSON model), its ``runtime`` variable defaulting to ``runtime``."""
    panels: list[dict[str, Any]] = []
    y = 0
    panel_id = 1
    for row_title, row in PANELS:
        panels.append(
            {"id": panel_id, "type": "row", "title": row_title, "collapsed": False, "panels": [],
             "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}}
        )  # fmt: skip
        panel_id += 1
        y += 1
        stat_row = all(panel.kind == "stat" for panel in row)
        width, height = (24 // len(row), 4) if stat_row else (8 if len(row) >= 3 else 12, 8)
        for index, panel in enumerate(row):
            line, column = divmod(index * width, 24)
            panels.append(_panel_json(panel, panel_id, column, y + line * height, width, height))
            panel_id += 1
        y += -(-len(row) * width // 24) * height
    return {
        "uid": DASHBOARD_UID,
        "title": "omray",
        "description": "omray's queue, jobs, worker pools and model usage (metrics ray_omray_*).",
        "tags": ["omray", "ray"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "timezone": "",
        "panels": panels,
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {"selected": False, "text": "Prometheus", "value": "Prometheus"},
                    "hide": 0,
                },
                {
                    "name": "runtime",
                    "label": "Runtime",
                    "type": "query",
                    "datasource": _DATASOURCE,
                    "query": {
                        "query": f"label_values({RAY_PREFIX}omray_queue_depth, runtime)",
                        "refId": "runtime",
                    },
                    "definition": f"label_values({RAY_PREFIX}omray_queue_depth, runtime)",
                    "refresh": 2,
                    "current": {"selected": True, "text": runtime, "value": runtime},
                    "hide": 0,
                },
            ]
        },
        "annotations": {"list": []},
        "links": [],
    }


def dashboard_text(runtime: str = "omray") -> str:
    """:func:`dashboard` as JSON text (what ``omray metrics grafana-dashboard`` prints)."""
    return json.dumps(dashboard(runtime), indent=2) + "\n"


def service_discovery_file(session_dir: str | None) -> str:
    """Ray's service-discovery file of a session directory (the machine's latest one without it)."""
    return str(Path(session_dir) / SERVICE_DISCOVERY_FILE) if session_dir else LEGACY_SERVICE_DISCOVERY_PATH


def prometheus_config(sd_file: str, scrape_interval_s: float = 10.0) -> str:
    """A Prometheus config (YAML) that scrapes every target Ray lists in ``sd_file``."""
    interval = f"{scrape_interval_s:g}s"
    return (
        "# Scrapes the Ray cluster omray runs on: every node's metrics port (omray's metrics and\n"
        "# Ray's) and the dashboard's, as listed in Ray's service-discovery file.\n"
        "global:\n"
        f"  scrape_interval: {interval}\n"
        f"  evaluation_interval: {interval}\n"
        "scrape_configs:\n"
        "  - job_name: ray\n"
        "    file_sd_configs:\n"
        "      - files:\n"
        f"          - {json.dumps(sd_file)}\n"
        f"        refresh_interval: {interval}\n"
    )


def write_into_session(session_dir: str, runtime: str = "omray") -> Path | None:
    """Put the dashboard next to the ones Ray generated for ``session_dir``; its path, or ``None``
    when that session has no such folder (no dashboard, or not on this machine)."""
    folder = Path(session_dir) / "metrics" / "grafana" / "dashboards"
    if not folder.is_dir():
        return None
    path = folder / DASHBOARD_FILE
    temporary = path.with_name(f".{DASHBOARD_FILE}.tmp")
    temporary.write_text(dashboard_text(runtime), encoding="utf-8")
    temporary.replace(path)
    return path
