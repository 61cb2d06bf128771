"""Values the read side binds and decodes: ``IN (...)`` lists in batches, JSON list columns."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, Final, TypeVar

T = TypeVar("T")

ID_BATCH: Final[int] = 500
"""Values bound in one ``IN (...)`` list at most (:func:`in_batches`)."""


def in_batches(values: Iterable[T], size: int = ID_BATCH) -> Iterator[tuple[tuple[T, ...], str]]:
    """``values`` in slices of at most ``size``, each with its ``?, ?, ...`` placeholder list: the
    read side's ``... IN ({marks})`` lookups of many ids."""
    items = list(values)
    for start in range(0, len(items), size):
        batch = tuple(items[start : start + size])
        yield batch, ", ".join("?" * len(batch))


def json_list(raw: object) -> list[Any]:
    """The JSON array a text column holds; ``[]`` for text that is not JSON or not an array (a
    damaged or legacy row reads as empty rather than failing the whole answer)."""
    try:
        decoded = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return []
    return decoded if isinstance(decoded, list) else []
