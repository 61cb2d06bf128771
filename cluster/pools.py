"""How many workers each role's pool runs, and how many jobs each worker runs at once.

Plain configuration (no Ray): ``omray up`` options and ``OMRAY_*`` variables become a
:class:`PoolSizes`, which ``cluster/named_actors.py`` turns into worker actors and the queue's
autoscaler into bounds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from actors.queue.scaling import PoolLimits
from protocol.errors import SettingsError
from protocol.jobs import (
    OBSERVE_BOUNDARY_HANDLER,
    REFLECT_GENERATION_HANDLER,
    SEMANTIC_INDEX_HANDLER,
)

ROLE_NAMES: dict[str, str] = {
    OBSERVE_BOUNDARY_HANDLER: "observer",
    REFLECT_GENERATION_HANDLER: "reflector",
    SEMANTIC_INDEX_HANDLER: "indexer",
}
"""Actor name part of each role's pool."""


@dataclass(frozen=True)
class PoolSizes:
    """How many worker actors each role runs (a minimum and a maximum), and jobs per worker at once.

    Model-bound roles mostly wait on an endpoint and reserve no CPU: several observers cost
    memory (one process each), not cores, and one observer can wait on several model calls at
    once (``observer_slots``). Index work embeds on the CPU: one job per indexer. Each pool starts
    at its minimum and the queue's autoscaler (:mod:`actors.queue.scaling`) grows it up to its
    maximum while runs wait for a slot, and shrinks it back when workers are spare; a maximum left
    unset is the role's default maximum, or the minimum if that is larger. The defaults suit a
    laptop; ``omray up --observers N --max-observers M`` and the ``OMRAY_OBSERVERS`` /
    ``OMRAY_MAX_OBSERVERS`` / ``OMRAY_OBSERVER_SLOTS`` / … variables change them.
    """

    observers: int = 2
    """ObserverActors at least."""
    reflectors: int = 1
    """ReflectorActors at least."""
    indexers: int = 1
    """IndexerActors at least."""
    observer_slots: int = 4
    """Observe jobs one ObserverActor runs at once (each waits on its model calls)."""
    reflector_slots: int = 2
    """Reflect jobs one ReflectorActor runs at once."""
    indexer_slots: int = 1
    """Index jobs one IndexerActor runs at once (CPU-bound)."""
    max_observers: int | None = None
    """ObserverActors at most (default 8)."""
    max_reflectors: int | None = None
    """ReflectorActors at most (default 2)."""
    max_indexers: int | None = None
    """IndexerActors at most (default 1: index work is CPU-bound)."""

    def __post_init__(self) -> None:
        for field_name in _POOL_FIELDS:
            value = getattr(self, field_name)
            if value is None and field_name in _DEFAULT_MAXIMA:
                minimum = getattr(self, field_name.removeprefix("max_"))
                object.__setattr__(self, field_name, max(_DEFAULT_MAXIMA[field_name], minimum))
                continue
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 64:
                raise SettingsError(f"{field_name} must be an integer from 1 to 64, got {value!r}")
        for maximum in _DEFAULT_MAXIMA:
            minimum = maximum.removeprefix("max_")
            if getattr(self, maximum) < getattr(self, minimum):
                low, high = getattr(self, minimum), getattr(self, maximum)
                raise SettingsError(f"{maximum} ({high!r}) must be at least {minimum} ({low!r})")

    def of(self, handler_id: str) -> int:
        """Least pool size of the role serving ``handler_id`` (the size it starts with)."""
        return int(getattr(self, _ROLE_PLURALS[handler_id]))

    def max_of(self, handler_id: str) -> int:
        """Largest pool size of the role serving ``handler_id``."""
        return int(getattr(self, f"max_{_ROLE_PLURALS[handler_id]}"))

    def slots_of(self, handler_id: str) -> int:
        """Jobs one worker of the role serving ``handler_id`` runs at once."""
        return int(getattr(self, f"{ROLE_NAMES[handler_id]}_slots"))

    def limits(self) -> dict[str, PoolLimits]:
        """Every pool's bounds, for the autoscaler."""
        return {hid: PoolLimits(self.of(hid), self.max_of(hid), self.slots_of(hid)) for hid in ROLE_NAMES}

    @property
    def total(self) -> int:
        """Jobs all pools run at once at their largest."""
        return sum(self.max_of(hid) * self.slots_of(hid) for hid in ROLE_NAMES)

    @staticmethod
    def given(environ: Mapping[str, str] | None = None) -> frozenset[str]:
        """The fields an ``OMRAY_<FIELD>`` variable sets (the others take their defaults)."""
        env = os.environ if environ is None else environ
        return frozenset(name for name in _POOL_FIELDS if env.get(f"OMRAY_{name.upper()}", "").strip())

    def bound(self, field_name: str) -> tuple[str, str, int]:
        """``(handler id, "minimum" | "maximum" | "slots", value)`` of one field, as pools report it."""
        role = field_name.removeprefix("max_").removesuffix("_slots").removesuffix("s")
        handler_id = next(hid for hid, name in ROLE_NAMES.items() if name == role)
        kind = "minimum"
        if field_name.startswith("max_"):
            kind = "maximum"
        elif field_name.endswith("_slots"):
            kind = "slots"
        return handler_id, kind, int(getattr(self, field_name))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PoolSizes:
        """Sizes from ``OMRAY_<FIELD>`` variables (``OMRAY_OBSERVERS``, ``OMRAY_MAX_OBSERVERS``, …)."""
        env = os.environ if environ is None else environ
        values: dict[str, int] = {}
        for field_name in _POOL_FIELDS:
            variable = f"OMRAY_{field_name.upper()}"
            raw = env.get(variable, "").strip()
            if raw:
                try:
                    values[field_name] = int(raw)
                except ValueError:
                    raise SettingsError(f"{variable} must be an integer, got {raw!r}") from None
        try:
            return cls(**values)
        except SettingsError as exc:
            variables = ", ".join(f"OMRAY_{name.upper()}" for name in values) or "no OMRAY_* variable"
            raise SettingsError(f"{exc} (from {variables} and the defaults)") from None


_DEFAULT_MAXIMA = {"max_observers": 8, "max_reflectors": 2, "max_indexers": 1}
_POOL_FIELDS = (
    "observers",
    "reflectors",
    "indexers",
    "observer_slots",
    "reflector_slots",
    "indexer_slots",
    *_DEFAULT_MAXIMA,
)
_ROLE_PLURALS = {hid: f"{role}s" for hid, role in ROLE_NAMES.items()}
