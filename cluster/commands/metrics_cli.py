"""``omray metrics``: omray's Grafana dashboard and a Prometheus scrape config (mounted by
``cluster.commands.cli``).

Both are printed on stdout, for a file or a provisioning folder::

    omray metrics grafana-dashboard > omray.json
    omray metrics prometheus-config > prometheus.yml && prometheus --config.file=prometheus.yml

Neither imports Ray or needs a running cluster.
"""

from __future__ import annotations

from typing import Annotated

import typer

metrics_app = typer.Typer(
    name="metrics",
    help="omray's Grafana dashboard and a Prometheus scrape config for its metrics.",
    no_args_is_help=True,
    add_completion=False,
)


@metrics_app.command("grafana-dashboard")
def grafana_dashboard(
    runtime: Annotated[
        str, typer.Option(help="Default of the dashboard's runtime variable (the actor-name prefix).")
    ] = "omray",
) -> None:
    """Print omray's Grafana dashboard (JSON) for a Prometheus data source."""
    from cluster.grafana import dashboard_text

    typer.echo(dashboard_text(runtime), nl=False)


@metrics_app.command("prometheus-config")
def prometheus_config(
    sd_file: Annotated[
        str | None,
        typer.Option(
            help="Ray's service-discovery file (default: that of the head `omray up` started, else "
            "/tmp/ray/prom_metrics_service_discovery.json, the session Ray started last)."
        ),
    ] = None,
    scrape_interval: Annotated[
        float, typer.Option(min=1.0, max=3600.0, help="Seconds between scrapes.")
    ] = 10.0,
) -> None:
    """Print a Prometheus config that scrapes the targets Ray lists in its service-discovery file."""
    from cluster.grafana import prometheus_config as config
    from cluster.grafana import service_discovery_file

    if sd_file is None:
        sd_file = service_discovery_file(_recorded_session_dir())
    typer.echo(config(sd_file, scrape_interval), nl=False)


def _recorded_session_dir() -> str | None:
    """Session directory of the head ``omray up`` started (``$OMRAY_HOME/runtime.json``), if any.

    Read here rather than through ``cluster.up_down``, which imports Ray."""
    import json

    from cluster.naming import omray_home

    try:
        data = json.loads((omray_home() / "runtime.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    session_dir = data.get("session_dir") if isinstance(data, dict) else None
    return session_dir if isinstance(session_dir, str) and session_dir else None
