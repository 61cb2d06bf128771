"""Canonical JSON and SHA-256 helpers (reference §5.1).

Canonical JSON must match the PHP original byte for byte so that content-derived ids agree
across implementations: keys in insertion order (never sorted), compact separators, raw UTF-8,
``/`` unescaped, and U+2028/U+2029 escaped as PHP does.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any


def canonical_json(value: Any) -> str:
    """Encode ``value`` as compact JSON exactly as PHP's ``json_encode`` with unescaped slashes/unicode."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def sha256_hex(text: str | bytes) -> str:
    """Lowercase hex SHA-256 of ``text`` (UTF-8 encoded when it is a string)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def canonical_hash(value: Any) -> str:
    """``sha256(canonical_json(value))``."""
    return sha256_hex(canonical_json(value))


PHP_TRIM_CHARACTERS = " \t\n\r\0\x0b"
"""The characters PHP's ``trim()`` removes by default (nothing else, unlike ``str.strip()``)."""


def php_trim(text: str) -> str:
    """Trim exactly what PHP's ``trim()`` trims, so trimmed content hashes like the original's."""
    return text.strip(PHP_TRIM_CHARACTERS)


_WHITESPACE_RUN = re.compile(r"\s+")


def condense(text: str) -> str:
    """Trim as PHP does, then collapse every run of (Unicode) whitespace to a single space."""
    return _WHITESPACE_RUN.sub(" ", php_trim(text))
