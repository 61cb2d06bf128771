"""Text formats shared by the pydantic models and the plain tool specs (standard library only).

``protocol.tool_specs`` builds the MCP tool list that ``omray mcp`` answers before pydantic is
loaded, so the patterns both need live here rather than in ``protocol.records``.
"""

from __future__ import annotations

TIMESTAMP_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}$"
"""An observation's ``timestamp``: ``YYYY-MM-DD HH:MM`` (format only; no calendar check)."""
