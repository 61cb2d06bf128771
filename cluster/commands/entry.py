"""The ``omray`` console script.

``omray hook claude-code|codex`` runs on an agent's hot path after every turn, so it runs in
``cluster.commands.hook_fast`` with the standard library only; ``omray mcp`` loads only the MCP server
(``cluster.servers.mcp_server``); every other command (and ``--help`` of these) loads the full CLI
(``cluster.commands.cli``).
"""

from __future__ import annotations

import sys


def main() -> None:
    """Console entry point."""
    if sys.argv[1:2] == ["hook"]:
        from cluster.commands import hook_fast

        if hook_fast.run(sys.argv[2:]):
            return
        from cluster.commands.agent_hooks import hook_app

        hook_app(args=sys.argv[2:], prog_name="omray hook")
        return
    if sys.argv[1:2] == ["mcp"]:
        from cluster.servers.mcp_server import run_fast

        if run_fast(sys.argv[2:]):
            return
    from cluster.commands.cli import main as cli_main

    cli_main()
