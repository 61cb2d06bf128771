"""The ``omray`` console script.

``omray hook ...`` runs on an agent's hot path after every turn, so it starts with only what a
hook needs (about a third of the whole command line's start-up); every other command loads the
full CLI (``cluster.cli``).
"""

from __future__ import annotations

import sys


def main() -> None:
    """Console entry point."""
    if sys.argv[1:2] == ["hook"]:
        from cluster.agent_hooks import hook_app

        hook_app(args=sys.argv[2:], prog_name="omray hook")
        return
    from cluster.cli import main as cli_main

    cli_main()
