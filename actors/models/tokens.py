"""Token counting with ``tiktoken`` (exact for OpenAI-style tokenizers), offline.

Budgets, stored ``token_count`` values and thresholds all use one counter per encoding. The
encoding is a setting (``tokens.encoding``); the files come from the offline cache seeded by
:mod:`persistence.files.tokenizer_cache`.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from persistence.files.tokenizer_cache import ENCODING_FILES, TokenizerUnavailableError, seed_tiktoken_cache

DEFAULT_ENCODING = "o200k_base"
"""Encoding used when settings do not name one."""


@functools.lru_cache(maxsize=4)
def _encoding(name: str) -> Any:
    if name not in ENCODING_FILES:
        raise TokenizerUnavailableError(f"unknown token encoding {name!r}")
    seed_tiktoken_cache()
    import tiktoken

    return tiktoken.get_encoding(name)


class TokenCounter:
    """Counts tokens of text with one tiktoken encoding; thread-safe and cheap to share."""

    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        self.encoding_name = encoding
        self._encoding = _encoding(encoding)

    def count(self, text: str) -> int:
        """Number of tokens in ``text`` (special-token strings are counted as plain text)."""
        return len(self._encoding.encode(text, disallowed_special=()))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special-token text is counted as plain text)."""
        return list(self._encoding.encode(text, disallowed_special=()))

    def __call__(self, text: str) -> int:
        return self.count(text)

    def character_budget(self, tokens: int) -> int:
        """Rough number of characters that fit ``tokens`` (used only to size splits of one long block)."""
        return math.floor(max(0, tokens) * 2.35)

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` that encodes to at most ``max_tokens`` tokens."""
        tokens = self._encoding.encode(text, disallowed_special=())
        if len(tokens) <= max_tokens:
            return text
        return str(self._encoding.decode(tokens[: max(0, max_tokens)]))


@functools.lru_cache(maxsize=4)
def token_counter(encoding: str = DEFAULT_ENCODING) -> TokenCounter:
    """Shared counter for ``encoding``."""
    return TokenCounter(encoding)
