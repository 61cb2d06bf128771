"""One HTTP client per endpoint and process: model, embedding and rerank clients are reused, then closed.

Building an ``openai`` client costs about 0.1 s of CPU and a fresh connection pool; a worker that
built one per job paid that on every job and never reused a connection. A :class:`ClientPool`
keeps one client per endpoint key for the life of the process. :func:`worker_clients` is the pool
of this process (a Ray worker runs all its jobs on it); it is closed when the process exits
normally, which is what a graceful actor stop (``omray down``) does.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Literal, Protocol, TypeVar

log = logging.getLogger("omray.clients")


class Closable(Protocol):
    """A client that holds a connection pool."""

    def close(self) -> None:
        """Release its connections."""
        ...


ClientT = TypeVar("ClientT", bound=Closable)


def secret_key(secret: str) -> str:
    """A digest standing for an API key inside a pool key (the key itself is not kept twice)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class ClientPool:
    """Clients keyed by endpoint (kind, URL, model, credentials digest, timeouts): one each, thread-safe.

    A worker runs a few jobs at once (``max_concurrency``); the ``openai`` and ``httpx`` clients are
    thread-safe, so jobs share them. After :meth:`close` the pool is empty and builds new clients
    on demand (a process that keeps working after a close still works).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[Hashable, Closable] = {}

    def get(self, key: Hashable, build: Callable[[], ClientT]) -> ClientT:
        """The client of ``key``, built by ``build`` the first time."""
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = build()
                self._clients[key] = client
            return client  # type: ignore[return-value]  # ``build`` made it for this key

    def __len__(self) -> int:
        with self._lock:
            return len(self._clients)

    def close(self) -> None:
        """Close every client (errors are logged by class and ignored) and forget them."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            try:
                client.close()
            except Exception as exc:  # closing at shutdown must not hide the other clients
                log.warning("closing a client failed: error_class=%s", type(exc).__name__)


_worker_pool = ClientPool()
atexit.register(_worker_pool.close)


def worker_clients() -> ClientPool:
    """The client pool of this process, closed at exit."""
    return _worker_pool


OpenAIFailure = Literal[
    "timeout", "connection", "rate_limited", "server_error", "client_error", "bad_response"
]
"""What kind of failure an ``openai`` client call raised (each caller words it for its own logs)."""


def openai_failure(exc: Exception) -> tuple[OpenAIFailure, int | None]:
    """The kind of failure ``exc`` is, and its HTTP status when the endpoint answered with one.

    ``openai`` is imported here, not with the module: its types cost a worker actor about half a
    second and tens of MB at start, before its first request.
    """
    import openai

    # Order matters: the timeout and rate-limit classes are subclasses of the broader ones.
    if isinstance(exc, openai.APITimeoutError):
        return "timeout", None
    if isinstance(exc, openai.APIConnectionError):
        return "connection", None
    if isinstance(exc, openai.RateLimitError):
        return "rate_limited", exc.status_code
    if isinstance(exc, openai.APIStatusError):
        return ("server_error" if exc.status_code >= 500 else "client_error"), exc.status_code
    return "bad_response", None
