"""``python -m cluster.ray_head start --head ...``: Ray's own ``ray start``, with a smaller dashboard.

Ray's dashboard runs each of its modules in a process of its own (about 20 MB PSS each here), and
``ray start`` has no option to choose among them (``--include-dashboard`` is all or a usage-stats
stub). omray's web view needs the Actors, Cluster, Logs, Metrics and Overview pages: the modules
behind them stay. The job-submission, Serve, Train and Data modules serve Ray libraries omray does
not run, so its head leaves them out (``docs/operations.md``; ``omray bench up`` shows the cost).

The modules are chosen the one way the dashboard itself offers, its ``--modules-to-load`` flag,
which this wrapper adds to the command line ``ray start`` builds for the dashboard process; every
other argument and process is ``ray start``'s own. If a future Ray builds its processes another
way, the wrapper changes nothing and the whole dashboard starts, as with plain ``ray start``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

logger = logging.getLogger("omray.ray_head")

UNNEEDED_DASHBOARD_MODULES = frozenset({"JobHead", "ServeHead", "TrainHead", "DataHead"})
"""Dashboard modules of Ray libraries omray does not use (job submission, Serve, Train, Data)."""

MODULES_FLAG = "--modules-to-load="
"""The dashboard process's flag that names the modules it loads."""


def dashboard_modules(available: Iterable[str]) -> list[str]:
    """The dashboard modules omray's head loads: every one Ray has, but the unneeded ones (sorted)."""
    return sorted(set(available) - UNNEEDED_DASHBOARD_MODULES)


def with_modules(command: Sequence[str], modules: Sequence[str]) -> list[str]:
    """``command`` with ``--modules-to-load`` set to ``modules``, unless it names modules already
    (``ray start --include-dashboard=false`` asks for the usage-stats module only: kept as is)."""
    if not modules or any(str(arg).startswith(MODULES_FLAG) for arg in command):
        return list(command)
    return [*command, MODULES_FLAG + ",".join(modules)]


def _available_modules() -> list[str]:
    """Names of the dashboard modules this Ray ships (both kinds: in the dashboard's process and in
    processes of their own)."""
    from ray.dashboard.subprocesses.module import SubprocessModule
    from ray.dashboard.utils import DashboardHeadModule, get_all_modules

    logging.getLogger("ray.dashboard.utils").setLevel(logging.WARNING)  # it logs every module at INFO
    kinds = (DashboardHeadModule, SubprocessModule)
    return [cls.__name__ for kind in kinds for cls in get_all_modules(kind)]  # type: ignore[no-untyped-call]


def patch_dashboard_command() -> bool:
    """Make ``ray start`` (in this process) start the dashboard with :func:`dashboard_modules`.

    Returns False, changing nothing, when this Ray does not start its processes the way this
    expects (the whole dashboard then starts).
    """
    try:
        from ray._private import ray_constants, services

        original: Callable[..., Any] = services.start_ray_process
        dashboard_type = ray_constants.PROCESS_TYPE_DASHBOARD
        modules = dashboard_modules(_available_modules())
    except (ImportError, AttributeError) as exc:
        logger.warning("dashboard modules not chosen", extra={"error_class": type(exc).__name__})
        return False

    def start_ray_process(command: list[str], process_type: str, *args: Any, **kwargs: Any) -> Any:
        if process_type == dashboard_type:
            command = with_modules(command, modules)
        return original(command, process_type, *args, **kwargs)

    services.start_ray_process = start_ray_process
    return True


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``ray <argv>`` (``start --head ...``) with the dashboard command patched."""
    patch_dashboard_command()
    from ray.scripts.scripts import cli

    cli.main(args=list(sys.argv[1:] if argv is None else argv), prog_name="ray")


if __name__ == "__main__":
    main()
