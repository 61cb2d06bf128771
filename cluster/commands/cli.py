"""The ``omray`` command line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from protocol.errors import OmrayError

app = typer.Typer(
    name="omray",
    help="Observational memory for LLM agents, on a local Ray cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(message: str, code: int = 2) -> None:
    """Print a one-line error to stderr and exit (no traceback for expected errors)."""
    typer.echo(f"omray: {message}", err=True)
    raise typer.Exit(code=code)


def emit(data: Any, as_json: bool, text: str) -> None:
    """Print ``data`` as JSON or ``text``."""
    typer.echo(json.dumps(data, indent=2, sort_keys=True) if as_json else text)


def _pool_size(help: str) -> Any:
    """An ``omray up`` option sizing a worker pool: 1 to 64 (unset: the default, or ``OMRAY_*``)."""
    return typer.Option(min=1, max=64, help=help)


@app.command()
def up(
    address: Annotated[
        str | None, typer.Option(help="Join an existing Ray cluster instead of starting one.")
    ] = None,
    observers: Annotated[int | None, _pool_size("ObserverActors at least (default 2).")] = None,
    reflectors: Annotated[int | None, _pool_size("ReflectorActors at least (default 1).")] = None,
    indexers: Annotated[int | None, _pool_size("IndexerActors at least (default 1).")] = None,
    max_observers: Annotated[
        int | None, _pool_size("ObserverActors the pool may grow to (default 8).")
    ] = None,
    max_reflectors: Annotated[
        int | None, _pool_size("ReflectorActors the pool may grow to (default 2).")
    ] = None,
    max_indexers: Annotated[int | None, _pool_size("IndexerActors the pool may grow to (default 1).")] = None,
    observer_slots: Annotated[
        int | None, _pool_size("Observe jobs one observer runs at once (default 4).")
    ] = None,
    port: Annotated[
        int, typer.Option(min=1, max=65535, help="GCS port of the head omray starts or joins.")
    ] = 6380,
    dashboard_port: Annotated[
        int, typer.Option(min=1, max=65535, help="Dashboard port (on 127.0.0.1).")
    ] = 8265,
    dashboard: Annotated[
        bool,
        typer.Option(
            "--dashboard/--no-dashboard",
            help="Run Ray's dashboard (web UI, state API, metrics) with the head omray starts.",
        ),
    ] = True,
) -> None:
    """Start (or join) Ray and create omray's named actors; pending jobs resume."""
    import os

    from cluster.pools import PoolSizes
    from cluster.up_down import up as bootstrap_up

    # Through the environment: `omray up` re-executes itself once after starting the head.
    for variable, value in (
        ("OMRAY_OBSERVERS", observers),
        ("OMRAY_REFLECTORS", reflectors),
        ("OMRAY_INDEXERS", indexers),
        ("OMRAY_OBSERVER_SLOTS", observer_slots),
        ("OMRAY_MAX_OBSERVERS", max_observers),
        ("OMRAY_MAX_REFLECTORS", max_reflectors),
        ("OMRAY_MAX_INDEXERS", max_indexers),
    ):
        if value is not None:
            os.environ[variable] = str(value)
    try:
        # Every size checked before anything starts: a bad one is an error here, not after the head.
        sizes = PoolSizes.from_env()
        given = PoolSizes.given(os.environ)  # flags and OMRAY_* variables alike
        info = bootstrap_up(
            address,
            port=port,
            dashboard_port=dashboard_port,
            include_dashboard=dashboard,
            pools=sizes if given else None,
            pool_fields=given,
        )
    except OmrayError as exc:
        fail(str(exc))
    typer.echo(f"omray is up: queue {info['queue']!r} in namespace {info['namespace']!r}")
    if info.get("dashboard_url"):
        typer.echo(f"Ray dashboard: {info['dashboard_url']} (token auth: {info['auth']})")
    if info.get("grafana_dashboard"):
        typer.echo(f"omray's Grafana dashboard, next to Ray's: {info['grafana_dashboard']}")
    elif not dashboard and address is None:
        typer.echo("Ray dashboard: off (to watch it there: `omray down`, then `omray up`)")


@app.command()
def retry(
    all_projects: Annotated[
        bool, typer.Option("--all", help="Every project's failed jobs, not only this directory's.")
    ] = False,
) -> None:
    """Queue again the jobs that failed for good (a model outage, a wrong key or model) once the
    cause is fixed: the ended sessions they belong to are observed after all. Jobs held by a daily
    budget re-check it at once (after you raised the cap)."""
    from cluster.client import connect

    try:
        client = connect(cwd=Path.cwd())
        try:
            answer = client.retry(all_projects=all_projects)
        finally:
            client.close()
    except OmrayError as exc:
        fail(str(exc))
    where = "every project" if all_projects else "this project"
    typer.echo(f"queued again: {answer['requeued']} failed jobs of {where}")
    if answer["rechecked"]:
        typer.echo(
            f"budget re-checked now: {answer['rechecked']} held project(s) of {where} (their jobs start if "
            "the raised cap allows it)"
        )


@app.command()
def down() -> None:
    """Remove omray's actors and stop the Ray head if `omray up` started it."""
    from cluster.up_down import down as bootstrap_down

    info = bootstrap_down()
    typer.echo(
        f"removed {len(info['removed'])} actors; stopped the Ray head omray up started: "
        f"{info['stopped_head']} ({info['stopped_processes']} processes)"
    )
    if info["left_running"]:
        typer.echo(f"left running: {info['left_running']}")


def _project_budget(project: Path) -> dict[str, object] | None:
    """The daily budget of the project in ``project`` today (``None``: no settings or database there)."""
    import time

    from actors.models.budget import project_budget
    from persistence.reads.memory_reader import MemoryReader
    from persistence.settings.file import load_settings

    try:
        settings = load_settings(cwd=project)
        db_path = Path(settings.database_path(project))
        if not db_path.is_file():
            return None
        return project_budget(MemoryReader(db_path).spend_since, settings, time.time())
    except OmrayError:
        return None


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    address: Annotated[
        str | None, typer.Option(help="Ray address (default: RAY_ADDRESS, else what `omray up` recorded).")
    ] = None,
) -> None:
    """Actors and their state, queue depth, the job in flight, recent failures (session, cause, fix),
    and what the agent hooks of the project in this directory could not do.

    Exits 1 when Ray answers but omray's queue does not run there.
    """
    from actors.queue.reports import failure_lines, queue_summary_lines
    from cluster.commands.hook_notices import notices, read_status
    from cluster.status import runtime_status

    hook_notices = [str(item.get("message")) for item in notices(read_status(str(Path.cwd())))]
    budget = _project_budget(Path.cwd())
    try:
        data = runtime_status(address)
    except OmrayError as exc:
        for message in hook_notices:
            typer.echo(f"agent hooks of this project: {message}", err=True)
        fail(str(exc))
    data["project_notices"] = hook_notices
    data["project_budget"] = budget
    if data.get("queue") is None and not data.get("queue_older_than_cli"):
        if as_json:
            emit(data, as_json, "")
        fail("omray's queue is not running on this Ray cluster; start it with `omray up`", code=1)
    lines = [f"{a['name']}: {a['state']}" for a in data["actors"]]
    queue = data.get("queue") or {}
    lines.extend(queue_summary_lines(queue))
    if data.get("queue_older_than_cli"):
        lines.append("queue: running, older than this CLI (no status; `omray down`, `omray up` update it)")
    for handler_id, pool in sorted((queue.get("pools") or {}).items()):
        lines.append(
            f"pool {handler_id}: {pool['workers']} workers ({pool['minimum']}-{pool['maximum']}), "
            f"{pool['busy_workers']} busy, {pool['waiting']} runs waiting for a slot"
        )
    for job in queue.get("in_flight", []):
        lines.append(f"in flight: {job['job_id']} ({job['handler_id']}, attempt {job['attempt']})")
    lines.extend(failure_lines(queue))
    if budget is not None:
        from actors.models.budget import format_budget

        lines.append(f"budget of this project today: {format_budget(budget)}")
    lines.extend(f"agent hooks of this project: {message}" for message in hook_notices)
    emit(data, as_json, "\n".join(lines))


@app.command()
def demo(
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Settings override KEY=VALUE with dotted keys (repeatable)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    keep: Annotated[bool, typer.Option(help="Keep the temporary project directory.")] = False,
) -> None:
    """Run the offline demo: a sample session observed end to end on a local Ray cluster."""
    from cluster.commands.demo import demo_json, render_demo, run_demo

    try:
        result = run_demo(set_ or [], keep=keep)
    except OmrayError as exc:
        fail(str(exc))
    typer.echo(demo_json(result) if as_json else render_demo(result))
    if not result["drained"] or result["job_failed_events"]:
        fail("the queue did not drain cleanly; see `omray status`", code=1)


def _observe_after_import(session_id: str, events_path: Path, last_seq: int) -> None:
    from cluster.client import connect

    try:
        client = connect(cwd=Path.cwd())
        job_id = client.observe(session_id, last_seq, events_path=events_path)
    except OmrayError as exc:
        fail(f"imported, but could not start observing: {exc}", code=1)
    typer.echo(
        f"observe job {job_id[:12]} queued for session {session_id!r} (events 1..{last_seq})", err=True
    )


def _mount_bench() -> None:
    """The commands declared in the ``omray.commands`` entry-point group (``pyproject.toml``:
    ``bench = "bench.cli:bench_app"``); ``bench`` sits above ``cluster`` (it drives the runtime), so
    it is mounted through its declaration, never imported here. In an installed wheel, which leaves
    ``bench`` out, a command that says why there are none."""
    from importlib.metadata import entry_points

    for point in entry_points(group="omray.commands", name="bench"):
        try:
            bench_app = point.load()
        except ImportError:
            break
        if isinstance(bench_app, typer.Typer):
            app.add_typer(bench_app, name="bench", help="Benchmarks: print figures as JSON with --json.")
            return

    @app.command("bench", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def _needs_the_bench_package() -> None:
        """Benchmarks run from a source checkout: the ``bench`` package does not ship in the wheel."""
        typer.echo(
            "omray bench: the benchmarks run from a source checkout of omray (`make setup`, then "
            "`.venv/bin/omray bench ...`); this installation has no `bench` package.",
            err=True,
        )
        raise typer.Exit(code=2)


def _mount_subcommands() -> None:
    from cluster.commands import import_cli

    app.command("import")(import_cli.import_command_for(_observe_after_import))
    from cluster.commands.memory_cli import memory_app

    app.add_typer(memory_app, name="memory", help="Read memory: status, view, project, search, recall.")
    _mount_bench()
    from cluster.commands.metrics_cli import metrics_app

    app.add_typer(metrics_app, name="metrics", help="omray's Grafana dashboard and a Prometheus config.")
    from cluster.commands.agent_hooks import hook_app
    from cluster.commands.integrate import integrate_command
    from cluster.commands.mcp_cli import mcp_command

    app.add_typer(hook_app, name="hook", help="Agent hooks for Claude Code and Codex (run by the agent).")
    app.command("mcp")(mcp_command)
    app.command("integrate")(integrate_command)
    from cluster.commands.ui_cli import ui_command

    app.command("ui")(ui_command)


_mount_subcommands()


@app.command()
def watch(
    session: Annotated[str | None, typer.Option(help="Only this session's stage line and failures.")] = None,
    db: Annotated[
        Path | None, typer.Option(help="Memory database (default: from the settings file in this directory).")
    ] = None,
    address: Annotated[
        str | None, typer.Option(help="Ray address (default: RAY_ADDRESS, else what `omray up` recorded).")
    ] = None,
    interval: Annotated[
        float, typer.Option(max=3600.0, help="Seconds between refreshes (at least 0.25, at most 3600).")
    ] = 0.25,
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
    prefix: Annotated[str, typer.Option(help="Actor name prefix of the runtime.")] = "omray",
) -> None:
    """Live view: queue depth, the job in flight, each session's stage line, recent failures."""
    try:
        from cluster.client import OmrayClient
        from cluster.commands.watch import watch_runtime
        from cluster.naming import RuntimeNames
        from persistence.settings.file import load_settings_block

        try:
            settings: dict[str, Any] = (
                {"storage": {"database": str(db.absolute())}}
                if db is not None
                else load_settings_block(cwd=Path.cwd())
            )
        except OmrayError as exc:
            fail(str(exc))
        client = OmrayClient(RuntimeNames(prefix=prefix), settings=settings, cwd=Path.cwd())
        selected = session.strip() if session and session.strip() else None
        code = watch_runtime(client, address=address, session_filter=selected, interval_s=interval, once=once)
    except KeyboardInterrupt:  # Ctrl-C before the view started is a clean exit too
        code = 0
    # A read-only driver has nothing to hand over: leave at once instead of through Ray's exit
    # handler, which can wait on the polling thread's call to a slow cluster after Ctrl-C.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
