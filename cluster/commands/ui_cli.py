"""``omray ui [--project DIR ...] [--port N]``: start the memory viewer (``cluster.servers.ui_server``)."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from protocol.errors import OmrayError

if TYPE_CHECKING:
    from cluster.servers.ui_server import UiBackend, UiProject

HOST = "127.0.0.1"
"""The viewer listens on loopback only."""
DEFAULT_PORT = 8767
"""``omray ui`` port on 127.0.0.1."""
QUEUE_POLL_S = 1.0
"""How often the background thread asks the queue for its status."""


class QueuePoller:
    """The queue's status, polled on a background thread through a client link (never blocks a page)."""

    def __init__(self, link: Any, interval_s: float = QUEUE_POLL_S) -> None:
        from cluster.commands.watch import BackgroundQueueReader

        self._reader = BackgroundQueueReader(
            lambda: link.call("status", (), 5.0), interval_s=interval_s, max_age_s=max(5.0, 4 * interval_s)
        )

    def start(self) -> QueuePoller:
        """Start polling; returns ``self``."""
        self._reader.start()
        return self

    def stop(self) -> None:
        """Stop polling."""
        self._reader.stop()

    def __call__(self) -> tuple[Mapping[str, Any] | None, float | None]:
        try:
            return self._reader.read(), None
        except OmrayError:
            return None, None


def runtime_clients(roots: Sequence[Path], prefix: str = "omray") -> tuple[list[Any], Any]:
    """One client per project sharing one link to the runtime, and that link; ``([None...], None)``
    when no runtime answers (the viewer is then read-only)."""
    from cluster.client import OmrayClient, connect
    from cluster.naming import RuntimeNames
    from persistence.settings_file import find_settings_file, load_settings_block

    try:
        first = connect(prefix=prefix, cwd=roots[0])
    except OmrayError as exc:
        typer.echo(f"omray ui: no runtime ({type(exc).__name__}); read-only, actions are off", err=True)
        return [None for _ in roots], None
    clients: list[Any] = [first]
    for root in roots[1:]:
        settings_file = find_settings_file(root)
        clients.append(
            OmrayClient(
                RuntimeNames(prefix=prefix),
                settings=load_settings_block(settings_file, cwd=root),
                cwd=root,
                settings_file=settings_file,
                link=first.link,
            )
        )
    return clients, first.link


def serve_ui(backend: UiBackend, port: int, token: str) -> None:
    """Serve ``backend`` on ``127.0.0.1:port`` until interrupted (no access log: URLs stay out of logs)."""
    import uvicorn

    from cluster.servers.ui_server import guarded_app

    app = guarded_app(backend, HOST, port, token)
    uvicorn.run(app, host=HOST, port=port, log_level="warning", access_log=False)


def ui_command(
    project: Annotated[
        list[Path] | None,
        typer.Option("--project", help="Project folder to show (repeat for several; default: here)."),
    ] = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port on 127.0.0.1.")] = DEFAULT_PORT,
    prefix: Annotated[str, typer.Option(help="Actor name prefix of the runtime.")] = "omray",
) -> None:
    """A local page showing what each agent remembers, why, and what it cost (127.0.0.1, token)."""
    from cluster.servers.ui_server import UiBackend, load_project, no_queue, unique_names
    from cluster.servers.web_auth import load_or_create_token, url_with_token

    roots = [p.resolve() for p in (project or [Path.cwd()])]
    for root in roots:
        if not root.is_dir():
            typer.echo(f"omray ui: {str(root)!r} is not a folder", err=True)
            raise typer.Exit(code=2)
    clients, link = runtime_clients(roots, prefix)
    try:
        projects: dict[str, UiProject] = {}
        for name, root, client in zip(unique_names(roots), roots, clients, strict=True):
            projects[name] = load_project(root, name, client)
        token = load_or_create_token()
    except OmrayError as exc:
        typer.echo(f"omray ui: {exc}", err=True)
        raise typer.Exit(code=2) from None
    poller = QueuePoller(link).start() if link is not None else None
    backend = UiBackend(projects, poller if poller is not None else no_queue)
    typer.echo(f"omray ui: open {url_with_token(f'http://{HOST}:{port}/', token)}", err=True)
    sys.stderr.flush()
    try:
        serve_ui(backend, port, token)
    finally:
        if poller is not None:
            poller.stop()
        if link is not None:
            link.close()
