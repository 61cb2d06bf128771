"""omray's custom metrics, exported through ``ray.util.metrics``.

They appear in the Ray dashboard's metrics views and on each node's Prometheus endpoint under
the ``ray_`` prefix (for example ``ray_omray_queue_depth``). Labels carry handler ids, outcome
kinds and failure categories only: never session content.
"""

from __future__ import annotations

from ray.util.metrics import Counter, Gauge, Histogram

_DURATION_BOUNDARIES = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0]


class RayQueueMetrics:
    """The queue's metrics port backed by Ray metrics (created inside the QueueActor process)."""

    def __init__(self, runtime: str) -> None:
        tags = {"runtime": runtime}
        self._depth = Gauge(
            "omray_queue_depth", "Jobs waiting or running in the durable queue.", ("runtime",)
        )
        self._in_flight = Gauge("omray_queue_in_flight", "Job attempts running now.", ("runtime",))
        self._depth.set_default_tags(tags)
        self._in_flight.set_default_tags(tags)
        self._duration = Histogram(
            "omray_job_duration_seconds",
            "Duration of one job attempt, by handler and outcome.",
            boundaries=_DURATION_BOUNDARIES,
            tag_keys=("runtime", "handler_id", "outcome"),
        )
        self._duration.set_default_tags(tags)
        self._attempts = Counter(
            "omray_job_attempts_total",
            "Job attempts finished, by handler and outcome.",
            ("runtime", "handler_id", "outcome"),
        )
        self._attempts.set_default_tags(tags)
        self._failures = Counter(
            "omray_job_failures_total",
            "Jobs given up after their retries, by handler and failure category.",
            ("runtime", "handler_id", "reason"),
        )
        self._failures.set_default_tags(tags)
        self._tokens = Counter(
            "omray_model_tokens_total",
            "Model tokens reported by the Observer/Reflector/Dropper, by handler, model and direction "
            "(prompt, cached_prompt, completion).",
            ("runtime", "handler_id", "model", "direction"),
        )
        self._tokens.set_default_tags(tags)

    def queue_depth(self, depth: int, in_flight: int) -> None:
        """Current depth and attempts in flight."""
        self._depth.set(depth)
        self._in_flight.set(in_flight)

    def attempt_finished(self, handler_id: str, outcome: str, seconds: float, attempt: int) -> None:
        """One attempt ended (succeeded, failed or worker_lost)."""
        tags = {"handler_id": handler_id, "outcome": outcome}
        self._duration.observe(max(0.0, seconds), tags=tags)
        self._attempts.inc(1, tags=tags)

    def job_failed(self, handler_id: str, reason: str) -> None:
        """A job left the queue as failed."""
        self._failures.inc(1, tags={"handler_id": handler_id, "reason": reason})

    def model_tokens(
        self,
        handler_id: str,
        prompt_tokens: int,
        completion_tokens: int,
        cached_prompt_tokens: int = 0,
        model: str = "",
    ) -> None:
        """Tokens a job's model calls reported (``cached_prompt`` is part of ``prompt``), labelled by
        the ``provider/model`` name from settings (never anything a model wrote)."""
        counts = {
            "prompt": prompt_tokens,
            "cached_prompt": cached_prompt_tokens,
            "completion": completion_tokens,
        }
        for direction, count in counts.items():
            if count:
                tags = {"handler_id": handler_id, "model": model or "unknown", "direction": direction}
                self._tokens.inc(count, tags=tags)


class RayPoolMetrics:
    """The autoscaler's metrics port backed by Ray metrics (created inside the QueueActor process)."""

    def __init__(self, runtime: str) -> None:
        tags = {"runtime": runtime}
        self._workers = Gauge(
            "omray_pool_workers", "Worker actors in a role's pool.", ("runtime", "handler_id")
        )
        self._waiting = Gauge(
            "omray_pool_waiting",
            "Runs ready to start that wait for a free slot of a pool.",
            ("runtime", "handler_id"),
        )
        self._resizes = Counter(
            "omray_pool_resizes_total",
            "Pool size changes by the autoscaler, by handler and direction (grow, shrink).",
            ("runtime", "handler_id", "direction"),
        )
        for metric in (self._workers, self._waiting, self._resizes):
            metric.set_default_tags(tags)

    def pool_size(self, handler_id: str, workers: int, waiting: int) -> None:
        """Current size of one pool and the runs waiting for it."""
        self._workers.set(workers, tags={"handler_id": handler_id})
        self._waiting.set(waiting, tags={"handler_id": handler_id})

    def pool_resized(self, handler_id: str, direction: str) -> None:
        """The autoscaler grew or shrank one pool."""
        self._resizes.inc(1, tags={"handler_id": handler_id, "direction": direction})
