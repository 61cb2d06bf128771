"""Server-sent events as the model APIs stream them: ``event: <name>`` and one ``data:`` JSON line.

Standard library only; shared by the scripted server's streams (tests) and the benchmarks' mock model
server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def sse_body(events: Sequence[tuple[str, Mapping[str, Any]]]) -> bytes:
    """``(name, data)`` events as one event-stream body."""
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()
