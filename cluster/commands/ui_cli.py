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
    from cluster.servers.web_auth import LinkTickets

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
    from persistence.settings.file import find_settings_file, load_settings_block

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


def serve_ui(backend: UiBackend, port: int, token: str, links: LinkTickets) -> None:
    """Serve ``backend`` on ``127.0.0.1:port`` until interrupted (no access log: URLs stay out of logs)."""
    import uvicorn

    from cluster.servers.ui_server import guarded_app

    app = guarded_app(backend, HOST, port, token, links)
    uvicorn.run(app, host=HOST, port=port, log_level="warning", access_log=False)


NEW_LINK_TIMEOUT_S = 10.0
"""How long ``omray ui --new-link`` waits for the running viewer's answer."""


def request_new_link(port: int, token: str, timeout_s: float = NEW_LINK_TIMEOUT_S) -> str:
    """A new one-time link from the viewer running on ``127.0.0.1:port`` (``POST /auth/link`` with the
    bearer token); :class:`ViewerUnreachableError` when none answers there or it refuses."""
    import json
    import urllib.error
    import urllib.request

    from cluster.servers.web_auth import LINK_PATH

    request = urllib.request.Request(
        f"http://{HOST}:{port}{LINK_PATH}",
        data=b"",
        method="POST",
        headers={"authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            url = json.loads(answer.read()).get("url")
    except urllib.error.HTTPError as exc:
        raise ViewerUnreachableError(
            f"the server on {HOST}:{port} refused the token (HTTP {exc.code}): "
            "is it an omray ui of this OMRAY_HOME?"
        ) from None
    except (OSError, ValueError, AttributeError) as exc:
        raise ViewerUnreachableError(
            f"no omray ui answers on {HOST}:{port} ({type(exc).__name__}); start it with `omray ui`"
            " (or name its --port)"
        ) from None
    if not isinstance(url, str) or not url.startswith(f"http://{HOST}:{port}/"):
        raise ViewerUnreachableError(f"the server on {HOST}:{port} did not answer with a viewer link")
    return url


class ViewerUnreachableError(OmrayError):
    """``omray ui --new-link`` found no viewer of this ``OMRAY_HOME`` on the port."""


def ui_command(
    project: Annotated[
        list[Path] | None,
        typer.Option("--project", help="Project folder to show (repeat for several; default: here)."),
    ] = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port on 127.0.0.1.")] = DEFAULT_PORT,
    prefix: Annotated[str, typer.Option(help="Actor name prefix of the runtime.")] = "omray",
    new_link: Annotated[
        bool,
        typer.Option(
            "--new-link", help="Print a new one-time link to the viewer already running on --port, and exit."
        ),
    ] = False,
) -> None:
    """A local page showing what each agent remembers, why, and what it cost (127.0.0.1, token).

    It prints a one-time link: the first browser to open it gets a session cookie, and the link is
    then spent. ``--new-link`` asks the running viewer for another."""
    from cluster.servers.ui_server import UiBackend, load_project, no_queue, unique_names
    from cluster.servers.web_auth import (
        LinkTickets,
        default_token_path,
        load_or_create_token,
        read_token,
        url_with_token,
    )

    if new_link:
        try:
            token = read_token(default_token_path())
            typer.echo(f"omray ui: open {request_new_link(port, token)}", err=True)
        except FileNotFoundError:
            typer.echo("omray ui: no token file yet, so no viewer runs: start it with `omray ui`", err=True)
            raise typer.Exit(code=1) from None
        except OmrayError as exc:
            typer.echo(f"omray ui: {exc}", err=True)
            raise typer.Exit(code=1) from None
        return
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
    links = LinkTickets()
    typer.echo(f"omray ui: open {url_with_token(f'http://{HOST}:{port}/', links.issue())}", err=True)
    typer.echo("omray ui: the link works once; `omray ui --new-link` prints another", err=True)
    sys.stderr.flush()
    try:
        serve_ui(backend, port, token, links)
    finally:
        if poller is not None:
            poller.stop()
        if link is not None:
            link.close()
