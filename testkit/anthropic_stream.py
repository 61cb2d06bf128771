"""A Messages API ``message`` as the server-sent event stream a streaming request gets (tests).

Kept apart from :mod:`testkit.anthropic_messages` so :mod:`testkit.scripted_server` can stream any
scripted message without importing the module that builds on its ``Reply``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from testkit.sse import sse_body


def event_stream(body: Mapping[str, Any]) -> bytes:
    """``body`` (a ``message``) as the event stream of a streaming request."""
    usage = dict(body.get("usage") or {})
    start = {**body, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[tuple[str, Mapping[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(body.get("content") or ()):
        if block.get("type") == "tool_use":
            opened = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input") or {})}
        else:
            opened = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": str(block.get("text", ""))}
        events += [
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": opened}),
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]
    events += [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": body.get("stop_reason"), "stop_sequence": None},
                "usage": {"output_tokens": usage.get("output_tokens", 0)},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return sse_body(events)
