"""Every metric omray exports: name, type, help text and labels, in one table.

:mod:`cluster.metrics` creates the Ray metrics from this table, the Grafana dashboard
(:mod:`cluster.grafana`) charts them, and the tests check both against it. Importing this module
imports no Ray.

Labels are bounded: the runtime's actor-name prefix, handler ids, outcome and failure categories,
model stages, the ``provider/model`` names and currency of the settings, pool-resize directions.
Never a session, a job, a path or anything a model or an agent wrote. Ray adds its own labels
(``SessionName`` is Ray's session, one per cluster start, ``NodeAddress``, ``WorkerId``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

MetricType = Literal["gauge", "counter", "histogram"]
"""Kinds of ``ray.util.metrics``."""

RAY_PREFIX: Final = "ray_"
"""Ray puts this before every application metric's name on its Prometheus endpoints."""

LABEL_VALUES: Final[dict[str, str]] = {
    "runtime": "actor-name prefix of the runtime (`omray` for `omray up`)",
    "handler_id": "stable handler id (observe_boundary, reflect_generation, semantic_index)",
    "outcome": "succeeded, failed, held (the daily budget is used up: not an attempt) or worker_lost",
    "reason": "failure category of a job given up (retry_exhausted, invalid_payload, ...)",
    "kind": "model stage: observe, reflect or drop",
    "model": "`provider/model` from the settings",
    "direction": "prompt, cached_prompt or completion (tokens); grow or shrink (resizes)",
    "currency": "currency label of the settings' price table",
}
"""Every label an omray metric may carry, and its bounded set of values."""

DURATION_BOUNDARIES: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Buckets of the job-duration histogram, in seconds."""


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric."""

    name: str
    """Name given to Ray (exported as ``ray_<name>``)."""
    type: MetricType
    """Gauge, counter or histogram."""
    help: str
    """Help text (Prometheus ``# HELP``)."""
    labels: tuple[str, ...]
    """Label keys, each one of :data:`LABEL_VALUES`."""

    @property
    def exported(self) -> str:
        """Name on Ray's Prometheus endpoint."""
        return RAY_PREFIX + self.name


QUEUE_METRICS: Final = (
    MetricSpec(
        "omray_queue_depth",
        "gauge",
        "Jobs accepted and not running: waiting for their lane, a free slot or a retry.",
        ("runtime",),
    ),
    MetricSpec(
        "omray_queue_in_flight",
        "gauge",
        "Runs in flight (a run that covers several coalesced jobs counts once).",
        ("runtime",),
    ),
    MetricSpec(
        "omray_queue_slots",
        "gauge",
        "Runs the queue may have in flight now: its limit, or the pools' slots if fewer.",
        ("runtime",),
    ),
    MetricSpec(
        "omray_queue_lanes",
        "gauge",
        "Lanes (one session of one database, or one database's index work) with unfinished jobs.",
        ("runtime",),
    ),
    MetricSpec("omray_queue_busy_lanes", "gauge", "Lanes with a run in flight.", ("runtime",)),
    MetricSpec(
        "omray_queue_held_projects",
        "gauge",
        "Projects (memory databases) whose observe and reflect jobs wait because their daily model "
        "budget is used up.",
        ("runtime",),
    ),
    MetricSpec(
        "omray_job_duration_seconds",
        "histogram",
        "Duration of one job attempt, by handler and outcome.",
        ("runtime", "handler_id", "outcome"),
    ),
    MetricSpec(
        "omray_job_attempts_total",
        "counter",
        "Job attempts finished, by handler and outcome (succeeded, failed, worker_lost).",
        ("runtime", "handler_id", "outcome"),
    ),
    MetricSpec(
        "omray_job_failures_total",
        "counter",
        "Jobs given up after their retries, by handler and failure category.",
        ("runtime", "handler_id", "reason"),
    ),
    MetricSpec(
        "omray_model_tokens_total",
        "counter",
        "Model tokens spent by the Observer, Reflector and Dropper, by handler, stage, model and "
        "direction (prompt, cached_prompt, completion; cached_prompt is part of prompt).",
        ("runtime", "handler_id", "kind", "model", "direction"),
    ),
    MetricSpec(
        "omray_model_cost_total",
        "counter",
        "Money the model tokens cost, by stage, model and currency, for models the settings' price "
        "table covers.",
        ("runtime", "kind", "model", "currency"),
    ),
)
"""Metrics the QueueActor exports."""

POOL_METRICS: Final = (
    MetricSpec("omray_pool_workers", "gauge", "Worker actors in a role's pool.", ("runtime", "handler_id")),
    MetricSpec(
        "omray_pool_busy_workers",
        "gauge",
        "Worker actors of a pool with an attempt in flight.",
        ("runtime", "handler_id"),
    ),
    MetricSpec(
        "omray_pool_min_workers",
        "gauge",
        "Fewest worker actors the autoscaler keeps in a pool.",
        ("runtime", "handler_id"),
    ),
    MetricSpec(
        "omray_pool_max_workers",
        "gauge",
        "Most worker actors the autoscaler grows a pool to.",
        ("runtime", "handler_id"),
    ),
    MetricSpec(
        "omray_pool_waiting",
        "gauge",
        "Runs ready to start that wait for a free slot of a pool.",
        ("runtime", "handler_id"),
    ),
    MetricSpec(
        "omray_pool_resizes_total",
        "counter",
        "Pool size changes by the autoscaler, by handler and direction (grow, shrink).",
        ("runtime", "handler_id", "direction"),
    ),
)
"""Metrics the pool autoscaler (in the QueueActor's process) exports."""

ALL_METRICS: Final = QUEUE_METRICS + POOL_METRICS
"""Every omray metric."""

BY_NAME: Final = {spec.name: spec for spec in ALL_METRICS}
"""Metric specs by their name (without Ray's prefix)."""
