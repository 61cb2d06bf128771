"""Moved to :mod:`bench.scripted_server` (benchmarks use it too); kept as an alias for tests."""

from bench.scripted_server import *  # noqa: F403
from bench.scripted_server import (  # noqa: F401
    Reply,
    ScriptedServer,
    chat_text,
    chat_tool_calls,
    embeddings_reply,
    hash_vector,
    http_error,
    rerank_reply,
    word_overlap_scores,
)
