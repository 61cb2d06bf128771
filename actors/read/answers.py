"""The shape of every read-tool answer: JSON-able dicts, typed error answers, strict-JSON cleaning.

Errors are ``{"ok": False, "error": <code>, "message": <text>}`` values, never exceptions, because
they are answers the model must read and correct. :func:`json_safe` makes any answer strict JSON.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

ToolResult = dict[str, object]
"""A JSON-able tool answer (success or error)."""


def error_result(code: str, message: str) -> ToolResult:
    """An error answer in the shape every tool uses."""
    return {"ok": False, "error": code, "message": message}


NON_FINITE_TEXT: Final[dict[str, str]] = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
"""How :func:`json_safe` encodes floats strict JSON cannot carry."""


def _safe_text(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (``"\\ud800"`` in the source JSON) has no UTF-8 form: U+FFFD stands in.
        return "".join("\ufffd" if 0xD800 <= ord(char) <= 0xDFFF else char for char in text)
    return text


def _safe_scalar(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return NON_FINITE_TEXT[repr(value)]
    if isinstance(value, str):
        return _safe_text(value)
    return value


MAX_ANSWER_DEPTH: Final[int] = 200
"""Deepest nesting :func:`json_safe` copies; any JSON encoder (and a model) can take this much."""

TOO_DEEP_TEXT: Final[str] = f"[nested deeper than {MAX_ANSWER_DEPTH} levels]"
"""What stands in for a value nested deeper than :data:`MAX_ANSWER_DEPTH`."""


def json_safe(value: object) -> object:
    """A copy of ``value`` that ``json.dumps(..., allow_nan=False)`` and UTF-8 always accept.

    NaN and the infinities (which Python's JSON reader accepts in events files) become the strings
    ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; lone surrogates in strings and keys become U+FFFD;
    a container nested deeper than :data:`MAX_ANSWER_DEPTH` becomes :data:`TOO_DEEP_TEXT`, so no
    encoder in the caller's stack can hit its recursion limit. Iterative: no recursion here either.
    """
    root: list[Any] = [None]
    pending: list[tuple[object, Any, Any, int]] = [(value, root, 0, 0)]
    while pending:
        source, target, slot, depth = pending.pop()
        if isinstance(source, Mapping | list | tuple) and depth >= MAX_ANSWER_DEPTH:
            target[slot] = TOO_DEEP_TEXT
        elif isinstance(source, Mapping):
            copied: dict[object, object] = {}
            target[slot] = copied
            for key, item in source.items():
                safe_key = _safe_scalar(key)
                copied[safe_key] = None
                pending.append((item, copied, safe_key, depth + 1))
        elif isinstance(source, list | tuple):
            items: list[object] = [None] * len(source)
            target[slot] = items
            pending.extend((item, items, index, depth + 1) for index, item in enumerate(source))
        else:
            target[slot] = _safe_scalar(source)
    return root[0]
