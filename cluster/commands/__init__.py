"""The ``omray`` command line: the entry point (:mod:`.entry`), the typer app (:mod:`.cli`) and
one module per command (agent hooks, ``integrate``, ``import``, ``memory``, ``metrics``, ``mcp``,
``ui``, ``watch``, ``demo``).

May import everything below it: ``protocol``, ``persistence``, ``actors``, the Ray wiring and
client at the top of ``cluster`` and the servers of :mod:`cluster.servers`. Nothing outside this
package imports it (``bench`` excepted), so the Ray wiring never depends on a command.

Two paths must stay light, because an agent waits on them: a hook call (:mod:`.entry` ->
:mod:`.hook_fast`, standard library only) and the start of ``omray mcp`` (:mod:`.entry` ->
:mod:`cluster.servers.mcp_server`). This file imports nothing, so loading the package costs nothing.
"""
