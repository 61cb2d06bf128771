"""The public Python client: ``cluster.connect()`` returns an :class:`OmrayClient`.

The client wraps the documented actor-handle methods (``ray.get_actor("omray.queue",
namespace="omray")`` exposes the same ones) and the read side, which runs in the caller's own
process on read-only SQLite connections, so compaction never waits on the queue or on a model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import ray

from cluster.naming import RuntimeNames
from protocol.errors import RuntimeNotRunningError
from protocol.jobs import JobEnvelope

logger = logging.getLogger("omray.client")


def init_ray(address: str = "auto", namespace: str = "omray") -> None:
    """Connect this process to a running Ray cluster (no-op when already connected).

    Never starts a cluster: a missing runtime is a :class:`RuntimeNotRunningError`, so no job is
    ever run inline in the caller.
    """
    if ray.is_initialized():
        return
    try:
        ray.init(address=address, namespace=namespace, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RuntimeNotRunningError(
            f"no Ray cluster reachable at {address!r} ({type(exc).__name__}); start one with `omray up`"
        ) from None


class OmrayClient:
    """Typed access to one omray runtime."""

    def __init__(self, names: RuntimeNames | None = None) -> None:
        self.names = names or RuntimeNames()

    # --- runtime ------------------------------------------------------------------------------

    def queue_handle(self) -> Any:
        """The QueueActor handle; raises :class:`RuntimeNotRunningError` when it does not exist."""
        if not ray.is_initialized():
            raise RuntimeNotRunningError("not connected to Ray; call cluster.connect() after `omray up`")
        try:
            return ray.get_actor(self.names.queue, namespace=self.names.namespace)
        except ValueError:
            raise RuntimeNotRunningError(
                f"no omray queue actor {self.names.queue!r} in namespace "
                f"{self.names.namespace!r}; run `omray up`"
            ) from None

    def dispatch(self, envelope: JobEnvelope | Mapping[str, Any]) -> str:
        """Accept a job durably on the queue; returns its job id once it is persisted."""
        job = envelope if isinstance(envelope, JobEnvelope) else JobEnvelope.model_validate(envelope)
        job_id: str = ray.get(self.queue_handle().dispatch.remote(job))
        return job_id

    def status(self) -> dict[str, Any]:
        """Queue depth, the job in flight and recent failures."""
        status: dict[str, Any] = ray.get(self.queue_handle().status.remote())
        return status

    def job_counts(self) -> dict[str, int]:
        """Durable job counts by state."""
        counts: dict[str, int] = ray.get(self.queue_handle().job_counts.remote())
        return counts

    def runtime_events(self, session_id: str, after_seq: int = 0) -> list[dict[str, Any]]:
        """Sanitized runtime events for a session, such as ``extension_agent.job_failed``."""
        events: list[dict[str, Any]] = ray.get(
            self.queue_handle().runtime_events.remote(session_id, after_seq)
        )
        return events

    def wait_idle(self, timeout_s: float = 120.0, poll_s: float = 0.1) -> bool:
        """Wait until no job is pending or running; False on timeout."""
        deadline = time.monotonic() + timeout_s
        queue = self.queue_handle()
        while time.monotonic() < deadline:
            if ray.get(queue.is_idle.remote()):
                return True
            time.sleep(poll_s)
        return False


def connect(address: str = "auto", *, prefix: str = "omray") -> OmrayClient:
    """Connect to a running omray runtime and return its client."""
    init_ray(address)
    client = OmrayClient(RuntimeNames(prefix=prefix))
    client.queue_handle()  # fail fast with RuntimeNotRunningError
    return client
