"""Upper bounds of omray's settings: every duration and threshold is finite and bounded.

A value past its bound (or NaN, or an infinity) is a :class:`~protocol.errors.SettingsError` naming
the key, so a typo such as ``idle_flush_seconds: .inf`` can never hold a session's tail, or
``wait_idle``, forever.
"""

from __future__ import annotations

MAX_IDLE_FLUSH_SECONDS = 86_400.0
"""Longest ``observer.idle_flush_seconds`` (a day): a tail (and ``wait_idle``) is never held forever."""
MAX_PROVIDER_TIMEOUT_S = 3_600.0
"""Longest ``providers.<name>.timeout_s`` (an hour per request)."""
MAX_CLI_BUDGET_USD = 1_000.0
"""Largest ``providers.claude-code.max_budget_usd`` per model call."""
MAX_CONTEXT_WINDOW = 100_000_000
"""Largest ``providers.<name>.context_window`` in tokens."""
MAX_TOKEN_THRESHOLD = 1_000_000_000
"""Largest token threshold (``reflect_after_observation_tokens``, ``observations_max_tokens``,
``observe_after_tokens``)."""
MAX_CHUNK_BYTES = 1_048_576
"""Largest ``semantic`` ``chunk_bytes`` and ``document_characters``."""
MAX_CHUNK_LINES = 100_000
"""Largest ``semantic.embedding_api.max_lines``."""
MAX_BATCH_SIZE = 4_096
"""Largest ``semantic`` ``batch_size``."""
MAX_PRICE = 1_000_000.0
"""Largest price per million tokens."""
MAX_DAILY_TOKENS = 1_000_000_000_000
"""Largest ``budget.daily_tokens`` (a trillion tokens a day: effectively no cap, yet a finite number)."""
MAX_DAILY_USD = 1_000_000.0
"""Largest ``budget.daily_usd``."""
MIN_PROMPT_CAP = 4_096
"""Smallest ``budget.max_prompt_tokens``: the Observer's instructions and answer schema alone take
some 800 tokens, and a part needs room for memory and conversation besides."""
