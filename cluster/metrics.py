"""omray's custom metrics, exported through ``ray.util.metrics``.

They appear on each node's Prometheus endpoint under the ``ray_`` prefix (for example
``ray_omray_queue_depth``) and in omray's Grafana dashboard (:mod:`cluster.grafana`). Names, help
texts and labels come from :mod:`cluster.metric_catalog`; labels carry handler ids, outcome kinds,
stages and failure categories only: never session content.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray.util.metrics import Counter, Gauge, Histogram

from actors.queue.figures import DIRECTIONS, ModelUsage, PoolFigures, QueueFigures
from cluster.metric_catalog import BY_NAME, DURATION_BOUNDARIES, MetricSpec


def _metric(spec: MetricSpec, runtime: str) -> Any:
    """The Ray metric of ``spec``, its ``runtime`` label set."""
    metric: Any
    if spec.type == "gauge":
        metric = Gauge(spec.name, spec.help, spec.labels)
    elif spec.type == "counter":
        metric = Counter(spec.name, spec.help, spec.labels)
    else:
        metric = Histogram(spec.name, spec.help, boundaries=list(DURATION_BOUNDARIES), tag_keys=spec.labels)
    metric.set_default_tags({"runtime": runtime})
    return metric


def _metrics(runtime: str, *names: str) -> dict[str, Any]:
    return {name: _metric(BY_NAME[name], runtime) for name in names}


class RayQueueMetrics:
    """The queue's metrics port backed by Ray metrics (created inside the QueueActor process)."""

    _FIGURES: Mapping[str, str] = {
        "depth": "omray_queue_depth",
        "in_flight": "omray_queue_in_flight",
        "slots": "omray_queue_slots",
        "lanes": "omray_queue_lanes",
        "busy_lanes": "omray_queue_busy_lanes",
        "held_projects": "omray_queue_held_projects",
    }

    def __init__(self, runtime: str) -> None:
        self._m = _metrics(
            runtime,
            *self._FIGURES.values(),
            "omray_job_duration_seconds",
            "omray_job_attempts_total",
            "omray_job_failures_total",
            "omray_model_tokens_total",
            "omray_model_cost_total",
        )

    def queue_figures(self, figures: QueueFigures) -> None:
        """Depth, runs in flight, slots and lanes (the numbers ``omray status`` and ``watch`` show)."""
        values = figures.as_dict()
        for field, name in self._FIGURES.items():
            self._m[name].set(values[field])

    def attempt_finished(self, handler_id: str, outcome: str, seconds: float, attempt: int) -> None:
        """One attempt ended (succeeded, failed or worker_lost)."""
        tags = {"handler_id": handler_id, "outcome": outcome}
        self._m["omray_job_duration_seconds"].observe(max(0.0, seconds), tags=tags)
        self._m["omray_job_attempts_total"].inc(1, tags=tags)

    def job_failed(self, handler_id: str, reason: str) -> None:
        """A job left the queue as failed."""
        self._m["omray_job_failures_total"].inc(1, tags={"handler_id": handler_id, "reason": reason})

    def model_usage(self, handler_id: str, usage: ModelUsage) -> None:
        """Tokens (and money, when priced) one stage of a finished job spent, labelled by the
        ``provider/model`` name from settings (never anything a model wrote)."""
        for direction in DIRECTIONS:
            count = usage.tokens.get(direction, 0)
            if count:
                tags = {"handler_id": handler_id, "kind": usage.kind, "model": usage.model}
                self._m["omray_model_tokens_total"].inc(count, tags={**tags, "direction": direction})
        if usage.cost:
            tags = {"kind": usage.kind, "model": usage.model, "currency": usage.currency}
            self._m["omray_model_cost_total"].inc(usage.cost, tags=tags)


class RayPoolMetrics:
    """The autoscaler's metrics port backed by Ray metrics (created inside the QueueActor process)."""

    _FIGURES: Mapping[str, str] = {
        "workers": "omray_pool_workers",
        "busy_workers": "omray_pool_busy_workers",
        "minimum": "omray_pool_min_workers",
        "maximum": "omray_pool_max_workers",
        "waiting": "omray_pool_waiting",
    }

    def __init__(self, runtime: str) -> None:
        self._m = _metrics(runtime, *self._FIGURES.values(), "omray_pool_resizes_total")

    def pool_figures(self, handler_id: str, figures: PoolFigures) -> None:
        """One pool's size, bounds, busy members and waiting runs (what ``status`` and ``watch`` show)."""
        values = figures.as_dict()
        for field, name in self._FIGURES.items():
            self._m[name].set(values[field], tags={"handler_id": handler_id})

    def pool_resized(self, handler_id: str, direction: str) -> None:
        """The autoscaler grew or shrank one pool."""
        self._m["omray_pool_resizes_total"].inc(1, tags={"handler_id": handler_id, "direction": direction})
