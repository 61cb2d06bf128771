"""The one way every benchmark summarizes a list of timings.

Nearest rank: the ``fraction`` percentile is the smallest measured value with at least that share
of the values at or below it, so every figure printed is a time that was actually measured (no
interpolation between two calls), and p50 of an even count is the lower middle value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], fraction: float) -> float:
    """Nearest-rank percentile of ``values`` (``fraction`` 0..1; 0.0 when there are none)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
    return ordered[index]
