"""Budget holds: which databases' model jobs wait for their daily budget (pure; issue 41 item 3).

A worker that finds its project's daily model budget used up sends nothing and answers
:class:`~protocol.outcomes.JobHeld`. The queue then *holds* the database: its model jobs (observe and
reflect: :data:`HELD_HANDLERS`) stay in their lanes, in order, and none of them starts, while its
index and forget jobs, and every other database, go on. A held run is not an attempt (it sent
nothing), so holding never uses up a job's retries.

A hold ends

- at ``until``, the next UTC day, when the budget resets: every held lane starts again;
- when a *probe* finds the budget allows the call again: every ``recheck_s`` one held job of the
  database starts (one at a time) and re-checks the budget with the settings as they are then, so a
  raised cap is picked up within ``recheck_s`` even if the session has ended and no new job comes;
  a probe answering anything but :class:`JobHeld` releases the hold, one answering it renews it;
- at once (the next dispatch probes) when a job of the database is accepted under other settings
  than the budget said no under, or on request (``omray retry``).

:class:`HoldBook` keeps the holds; :class:`actors.queue.state.QueueState` asks it which lane heads
wait and records the holds its commands make durable. Only that state machine calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from protocol.jobs import OBSERVE_BOUNDARY_HANDLER, REFLECT_GENERATION_HANDLER
from protocol.outcomes import JobHeld

HELD_HANDLERS: Final = frozenset({OBSERVE_BOUNDARY_HANDLER, REFLECT_GENERATION_HANDLER})
"""The handlers whose jobs call the model, and so wait while their database is held."""

DEFAULT_RECHECK_S: Final = 60.0
"""How often a held database lets one job re-check its budget (a raised cap is picked up that fast)."""


@dataclass(slots=True)
class Hold:
    """One held database."""

    reason: str
    """``budget_tokens`` or ``budget_usd``."""
    until: float
    """When the budget resets (the next UTC day): the hold ends by itself."""
    recheck_at: float
    """When one held job may start to re-check the budget (if no re-check runs)."""
    spent: float
    """Spent that day when last checked, in the cap's unit."""
    cap: float
    """The cap, in its unit."""
    fingerprint: str | None
    """The settings the budget said no under (``None``: not known)."""
    since: float
    """When the hold started."""
    probe: int | None = None
    """Carrier sequence number of the run re-checking the budget now, if any."""

    def next_change(self) -> float:
        """When this hold may let a job start next, by time alone."""
        return self.until if self.probe is not None else min(self.recheck_at, self.until)


class HoldBook:
    """The holds of one queue, by database; pure (times are arguments)."""

    def __init__(self, recheck_s: float = DEFAULT_RECHECK_S) -> None:
        if not recheck_s > 0:
            raise ValueError(f"recheck_s must be > 0, got {recheck_s!r}")
        self.recheck_s = recheck_s
        self._holds: dict[str, Hold] = {}

    @property
    def count(self) -> int:
        """Holds kept (one whose day is over counts until :meth:`purge`)."""
        return len(self._holds)

    def purge(self, now: float) -> None:
        """Forget the holds whose day is over (their jobs start as any others)."""
        for db_path in [path for path, hold in self._holds.items() if now >= hold.until]:
            del self._holds[db_path]

    def active(self, db_path: str, now: float) -> Hold | None:
        """The database's hold, unless there is none or the day it held for is over."""
        hold = self._holds.get(db_path)
        return hold if hold is not None and now < hold.until else None

    def blocks(self, db_path: str, handler_id: str, now: float) -> bool:
        """True when a job of ``handler_id`` of ``db_path`` may not start now: its database is held and
        no re-check is due (or one runs already)."""
        if handler_id not in HELD_HANDLERS:
            return False
        hold = self.active(db_path, now)
        return hold is not None and (hold.probe is not None or now < hold.recheck_at)

    def started(self, db_path: str, handler_id: str, carrier_seq: int, now: float) -> None:
        """A job of ``db_path`` started as run ``carrier_seq``: if its database is held, the re-check."""
        hold = self.active(db_path, now) if handler_id in HELD_HANDLERS else None
        if hold is not None and hold.probe is None:
            hold.probe = carrier_seq

    def record(self, db_path: str, held: JobHeld, now: float) -> tuple[Hold, bool]:
        """A run of ``db_path`` was held: start the hold, or renew it. Returns it and whether it is new."""
        current = self.active(db_path, now)
        until = held.until if held.until > now else now + self.recheck_s
        recheck_at = min(until, now + self.recheck_s)
        if current is None:
            hold = Hold(held.reason, until, recheck_at, held.spent, held.cap, held.settings_fingerprint, now)
            self._holds[db_path] = hold
            return hold, True
        current.reason, current.until, current.recheck_at = held.reason, until, recheck_at
        current.spent, current.cap, current.fingerprint = held.spent, held.cap, held.settings_fingerprint
        current.probe = None
        return current, False

    def run_ended(self, db_path: str, carrier_seq: int, held: bool) -> None:
        """A run of ``db_path`` ended; a re-check that was not held again releases the hold."""
        hold = self._holds.get(db_path)
        if hold is None or hold.probe != carrier_seq:
            return
        if held:
            hold.probe = None  # ``record`` renews it
        else:
            del self._holds[db_path]

    def run_lost(self, db_path: str, carrier_seq: int) -> None:
        """A run of ``db_path`` was lost (its worker died): a re-check it was is due again."""
        hold = self._holds.get(db_path)
        if hold is not None and hold.probe == carrier_seq:
            hold.probe = None

    def recheck(self, db_path: str | None, now: float) -> int:
        """Let the held databases (``db_path``'s, or all) re-check their budget at once; how many."""
        found = 0
        for path, hold in self._holds.items():
            if (db_path is None or path == db_path) and now < hold.until:
                hold.recheck_at = min(hold.recheck_at, now)
                found += 1
        return found

    def settings_seen(self, db_path: str, fingerprint: str | None, now: float) -> bool:
        """A job of ``db_path`` was accepted under settings ``fingerprint``: when the budget said no
        under other settings, re-check at once. True when it does."""
        hold = self.active(db_path, now)
        if hold is None or fingerprint is None or hold.fingerprint is None or fingerprint == hold.fingerprint:
            return False
        hold.recheck_at = min(hold.recheck_at, now)
        hold.fingerprint = fingerprint  # one re-check per change
        return True

    def wakes(self, now: float) -> list[float]:
        """Times after ``now`` when a hold may let a job start by time alone."""
        return [hold.next_change() for hold in self._holds.values() if hold.next_change() > now]

    def snapshot(self, with_paths: bool = True) -> list[dict[str, object]]:
        """The holds, JSON-able (database paths unless ``with_paths`` is false, codes, counts and
        times; no content)."""
        return [
            {
                **({"db_path": db_path} if with_paths else {}),
                "reason": hold.reason,
                "until": hold.until,
                "recheck_at": hold.recheck_at,
                "spent": hold.spent,
                "cap": hold.cap,
                "since": hold.since,
                "rechecking": hold.probe is not None,
            }
            for db_path, hold in sorted(self._holds.items())
        ]
