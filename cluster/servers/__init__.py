"""The servers omray runs for agents and people, which need no Ray: the MCP server over stdio
(:mod:`.mcp_stdio`, standard library) and streamable HTTP (:mod:`.mcp_http`), the memory viewer
(:mod:`.ui_server` and its page in ``ui_static/``), and the guard both HTTP servers sit behind
(:mod:`.web_auth`: token, exact Host, no browser Origin).

May import ``protocol``, ``persistence``, ``actors`` and the top of ``cluster`` (the client, lazily,
for actions through a running runtime); never :mod:`cluster.commands`, which starts these servers.
This file imports nothing, so ``omray mcp``'s fast start loads only what it uses.
"""
