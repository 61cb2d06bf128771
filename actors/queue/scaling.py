"""Worker-pool autoscaling as a pure decision: grow or shrink each role's pool from its backlog.

:class:`PoolScaler` is told, every few seconds, how each pool looks (:class:`PoolLoad`: runs that
are ready to start but find no free slot, and the attempts each member has in flight) and answers
with commands, :class:`Grow` (create these member indices) and :class:`Retire` (take this idle
member out and stop it). ``cluster/`` executes them; this module does no I/O and reads no clock.

Hysteresis keeps a pool from flapping: it grows only after runs have waited for a slot for
``grow_after_s``, and shrinks only after it has had a spare worker for ``shrink_after_s`` (then
one worker every ``cooldown_s`` while the spare capacity lasts), never within ``cooldown_s`` of
growing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from protocol.errors import OmrayError


class ScalingError(OmrayError):
    """Pool limits or a scaling policy that cannot work (e.g. a maximum below the minimum)."""


@dataclass(frozen=True, slots=True)
class PoolLimits:
    """Bounds of one role's pool."""

    minimum: int
    """Fewest workers, kept even when idle."""
    maximum: int
    """Most workers."""
    slots: int
    """Jobs one worker runs at once."""

    def __post_init__(self) -> None:
        for name in ("minimum", "maximum", "slots"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ScalingError(f"{name} must be an integer, got {type(value).__name__}")
        if not 1 <= self.minimum <= self.maximum:
            raise ScalingError(f"need 1 <= minimum <= maximum, got {self.minimum!r} and {self.maximum!r}")
        if self.slots < 1:
            raise ScalingError(f"slots must be >= 1, got {self.slots!r}")


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    """How long a backlog or spare capacity must last before a pool changes size."""

    grow_after_s: float = 1.0
    """Runs have waited for a slot at least this long: grow."""
    shrink_after_s: float = 20.0
    """A worker has been spare at least this long: retire one."""
    cooldown_s: float = 5.0
    """Least time between two retirements, and between growing and a retirement."""

    def __post_init__(self) -> None:
        for name in ("grow_after_s", "shrink_after_s", "cooldown_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ScalingError(f"{name} must be a number of seconds, got {type(value).__name__}")
            if not math.isfinite(value) or value < 0:
                raise ScalingError(f"{name} must be a finite number of seconds >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class PoolLoad:
    """One pool as it is now."""

    waiting: int
    """Runs ready to start now (lane free, no backoff) that found no free slot of this pool."""
    members: Mapping[int, int]
    """Attempts in flight of every active member, by member index."""


@dataclass(frozen=True, slots=True)
class Grow:
    """Create these members of the pool serving ``handler_id`` and give them work."""

    handler_id: str
    """Pool to grow."""
    indices: tuple[int, ...]
    """Member indices to create (the lowest free ones)."""


@dataclass(frozen=True, slots=True)
class Retire:
    """Stop giving work to member ``index`` of the pool serving ``handler_id``, then stop it.

    The member had nothing in flight when decided; the executor retires it only if that still
    holds, so no job is ever interrupted by shrinking.
    """

    handler_id: str
    """Pool to shrink."""
    index: int
    """Member to retire."""


ScalingCommand = Grow | Retire
"""What a scaling step asks ``cluster/`` to do."""


@dataclass(slots=True)
class _Timers:
    waiting_since: float | None = None
    spare_since: float | None = None
    last_grow: float = field(default=-math.inf)
    last_retire: float = field(default=-math.inf)


class PoolScaler:
    """Decides pool sizes between each role's minimum and maximum; one instance per queue.

    Guarantees: a pool is never sized below its minimum or above its maximum; only a member with
    nothing in flight is ever retired, and one at a time; a pool below its minimum (a worker lost
    for good) is refilled at once.
    """

    def __init__(self, limits: Mapping[str, PoolLimits], policy: ScalingPolicy | None = None) -> None:
        self._limits = dict(limits)
        self._policy = policy or ScalingPolicy()
        self._timers = {handler_id: _Timers() for handler_id in self._limits}

    @property
    def limits(self) -> Mapping[str, PoolLimits]:
        """Bounds of every pool."""
        return self._limits

    def step(self, now: float, loads: Mapping[str, PoolLoad]) -> list[ScalingCommand]:
        """The commands for every pool given its load at ``now``."""
        commands: list[ScalingCommand] = []
        for handler_id, load in loads.items():
            limits = self._limits.get(handler_id)
            if limits is not None:
                command = self._step_pool(handler_id, limits, self._timers[handler_id], now, load)
                if command is not None:
                    commands.append(command)
        return commands

    def _step_pool(
        self, handler_id: str, limits: PoolLimits, timers: _Timers, now: float, load: PoolLoad
    ) -> ScalingCommand | None:
        size = len(load.members)
        if size < limits.minimum:
            return self._grow(handler_id, timers, now, load, limits.minimum - size)
        if load.waiting == 0:
            timers.waiting_since = None
        elif timers.waiting_since is None:
            timers.waiting_since = now
        if timers.waiting_since is not None and size < limits.maximum:
            if now - timers.waiting_since >= self._policy.grow_after_s:
                wanted = math.ceil(load.waiting / limits.slots)
                return self._grow(handler_id, timers, now, load, min(wanted, limits.maximum - size))
            return None
        idle = sorted(index for index, running in load.members.items() if running == 0)
        in_flight = sum(load.members.values())
        spare = load.waiting == 0 and bool(idle) and in_flight <= (size - 1) * limits.slots
        if not spare or size <= limits.minimum:
            timers.spare_since = None
            return None
        timers.spare_since = timers.spare_since if timers.spare_since is not None else now
        policy = self._policy
        if (
            now - timers.spare_since >= policy.shrink_after_s
            and now - timers.last_retire >= policy.cooldown_s
            and now - timers.last_grow >= policy.cooldown_s
        ):
            timers.last_retire = now
            return Retire(handler_id, idle[-1])
        return None

    @staticmethod
    def _grow(handler_id: str, timers: _Timers, now: float, load: PoolLoad, count: int) -> Grow:
        free = (index for index in range(len(load.members) + count) if index not in load.members)
        timers.waiting_since = None
        timers.spare_since = None
        timers.last_grow = now
        return Grow(handler_id, tuple(next(free) for _ in range(count)))
