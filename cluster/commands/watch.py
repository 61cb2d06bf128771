"""``omray watch``: a live terminal view of the runtime (queue, job in flight, stage lines, failures).

Three parts, so each can be tested on its own:

* :class:`WatchSnapshot` + :func:`render_watch` — what one frame shows, and a pure function that
  draws it (no clock, no I/O);
* :class:`WatchSource` — reads one snapshot: the queue's latest status (polled over Ray on a
  background thread by :class:`BackgroundQueueReader`, so a slow connect never freezes the view)
  and the activity rows on a read-only SQLite connection. It never raises: an unreachable queue or
  a busy or missing database becomes a short "waiting for …" line, and the next refresh retries;
* :func:`run_watch` — the small refresh loop, throttled by :class:`RefreshThrottle` (never faster
  than every 0.25 s), drawn with ``rich.live.Live``. Ctrl-C ends it cleanly.

Only ids, handler ids, stages, counts and failure categories are shown: never memory text.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rich.console import Console
from rich.live import Live
from rich.text import Text

from actors.models.budget import format_budget
from actors.queue.figures import figures_from_status
from actors.queue.reports import held_line
from actors.read.status_view import format_count, format_usage
from protocol.errors import OmrayError

if TYPE_CHECKING:
    from cluster.client import OmrayClient

logger = logging.getLogger("omray.watch")

MIN_INTERVAL_S: Final[float] = 0.25
"""The view never refreshes more often than this (reference §11.3 poller throttle)."""

JOB_ID_PREFIX: Final[int] = 12
"""Characters of a job id shown."""

MAX_FAILURES_SHOWN: Final[int] = 5
"""Most recent ``job_failed`` events shown, newest first."""

QUEUE_STATUS_TIMEOUT_S: Final[float] = 2.0
"""How long one status call may take before the queue counts as unreachable."""

QUEUE_ANSWER_MAX_AGE_S: Final[float] = 5.0
"""An answer older than this is not shown (the queue stopped answering)."""

ONCE_QUEUE_WAIT_S: Final[float] = 15.0
"""With ``--once``, how long to wait for the queue's first answer before printing the frame."""


# ------------------------------------------------------------------------------------------ snapshot


@dataclass(frozen=True, slots=True)
class WatchSnapshot:
    """Everything one frame of ``omray watch`` shows, as its lines (ids shortened, counts formatted)."""

    taken_at: datetime
    """When the snapshot was read (UTC)."""
    queue_name: str
    """Name of the QueueActor watched."""
    queue_depth: int | None
    """Jobs waiting to run; ``None`` when the queue did not answer."""
    in_flight: tuple[str, ...] = ()
    """One line per attempt running now: job id prefix, handler id, attempt number, running time."""
    sessions: tuple[tuple[str, str], ...] = ()
    """(session id, its §11.2 stage line) of the sessions with a fresh activity row, by session id."""
    failures: tuple[str, ...] = ()
    """One line per recent ``job_failed`` event, newest first: job id prefix, failure category,
    attempts made, and the session when known (ids, category and counts only)."""
    waiting: tuple[str, ...] = ()
    """"waiting for …" lines for sources that did not answer this time."""
    session_filter: str | None = None
    """The ``--session`` being watched, or ``None`` for all sessions."""
    lanes: int | None = None
    """Lanes (sessions of a database, or a database's index work) with queued jobs."""
    busy_lanes: int | None = None
    """Lanes with a job running."""
    slots: int | None = None
    """Jobs the worker pools can run at once."""
    pools: tuple[str, ...] = ()
    """One line per worker pool: its size, bounds and runs waiting for a slot (autoscaling)."""
    costs: tuple[str, ...] = ()
    """The watched sessions' cost report line, the project's budget today, then today's spend per
    model of the watched sessions (:func:`cost_lines`), when read."""
    held: tuple[str, ...] = ()
    """One line per project whose model jobs its daily budget holds (from the queue's status)."""
    runs_in_flight: int | None = None
    """Runs in flight, as the queue counts them for its metrics (``None``: count ``in_flight``)."""


def snapshot_from(
    *,
    taken_at: datetime,
    queue_name: str,
    queue_status: Mapping[str, Any] | None,
    activity_rows: Sequence[Mapping[str, Any]],
    session_filter: str | None = None,
    waiting: Sequence[str] = (),
    costs: Sequence[str] = (),
) -> WatchSnapshot:
    """Build a snapshot from the queue's ``status()`` dict and ``client.activities()`` rows.

    Rows are expected to be fresh already; ``session_filter`` keeps one session's line and failures.
    """
    in_flight: tuple[str, ...] = ()
    failures: list[str] = []
    depth: int | None = None
    lanes = busy_lanes = slots = None
    pools: tuple[str, ...] = ()
    held: tuple[str, ...] = ()
    runs: int | None = None
    if queue_status is not None:
        held = tuple(held_line(hold) for hold in queue_status.get("held_by_project") or ())
        figures = figures_from_status(queue_status)
        if figures is not None:
            # The very numbers the queue's gauges report (omray's Grafana dashboard charts them).
            depth, runs, slots = figures.depth, figures.in_flight, figures.slots
            lanes, busy_lanes = figures.lanes, figures.busy_lanes
        else:  # a queue older than this CLI
            depth = int(queue_status.get("depth", 0))
            lanes = int(queue_status["lanes"]) if "lanes" in queue_status else None
            busy_lanes = int(queue_status["busy_lanes"]) if "busy_lanes" in queue_status else None
            if "max_in_flight" in queue_status:
                slots = int(queue_status["max_in_flight"])
            if queue_status.get("capacity"):  # the pools' current sizes, below the global limit
                slots = min(slots or 10**9, sum(int(n) for n in queue_status["capacity"].values()))
        pools = tuple(
            _pool_line(hid, pool) for hid, pool in sorted((queue_status.get("pools") or {}).items())
        )
        in_flight = tuple(_running_line(job) for job in queue_status.get("in_flight", []))
        failures = [
            _failure_line(failure)
            for failure in reversed(list(queue_status.get("recent_failures", [])))
            if session_filter is None or str(failure.get("session_id", "")) == session_filter
        ]
    sessions = sorted(
        (
            (str(row["session_id"]), str(row["status_text"]))
            for row in activity_rows
            if session_filter is None or row["session_id"] == session_filter
        ),
        key=lambda line: line[0],
    )
    return WatchSnapshot(
        taken_at=taken_at,
        queue_name=queue_name,
        queue_depth=depth,
        in_flight=in_flight,
        sessions=tuple(sessions),
        failures=tuple(failures[:MAX_FAILURES_SHOWN]),
        waiting=tuple(waiting),
        session_filter=session_filter,
        lanes=lanes,
        busy_lanes=busy_lanes,
        slots=slots,
        pools=pools,
        runs_in_flight=runs,
        costs=tuple(costs),
        held=held,
    )


def cost_lines(
    usage: Mapping[str, Any], budget: Mapping[str, Any], by_day: Sequence[Mapping[str, Any]]
) -> list[str]:
    """The cost report's line of ``usage`` (model requests, tokens, money), the project's budget
    today, then today's spend per model (sessions summed) of ``by_day``."""
    lines = [f"Model usage: {format_usage(dict(usage))}", f"Budget today: {format_budget(dict(budget))}"]
    today: dict[str, list[float | None]] = {}
    for row in by_day:
        if row.get("day") != budget.get("day"):
            continue
        totals = today.setdefault(str(row["model"]), [0, None])
        totals[0] = float(totals[0] or 0) + float(row["tokens"])
        if row.get("usd") is not None:
            totals[1] = float(totals[1] or 0.0) + float(row["usd"])
    for model, (tokens, usd) in sorted(today.items()):
        money = "" if usd is None else f", {usd:.4f} USD"
        lines.append(f"  today {model}: {format_count(int(tokens or 0))} tokens{money}")
    return lines


def _running_line(job: Mapping[str, Any]) -> str:
    job_id = str(job.get("job_id", ""))[:JOB_ID_PREFIX]
    running = _seconds(float(job.get("running_s", 0.0)))
    return f"{job_id}  {job.get('handler_id', '')}  attempt {int(job.get('attempt', 0))}  {running}"


def _failure_line(failure: Mapping[str, Any]) -> str:
    job_id = str(failure.get("job_id", ""))[:JOB_ID_PREFIX]
    session_id = str(failure.get("session_id", ""))
    session = f"  session {session_id}" if session_id else ""
    return f"{job_id}  {failure.get('reason', '')}  {int(failure.get('attempts', 0))} attempts{session}"


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 60 else f"{int(value // 60)} min {int(value % 60):02d} s"


def _pool_line(handler_id: str, pool: Mapping[str, Any]) -> str:
    role = handler_id.rpartition(".")[2]
    return (
        f"{role}: {pool.get('workers', '?')} workers ({pool.get('minimum', '?')}–{pool.get('maximum', '?')}),"
        f" {pool.get('busy_workers', 0)} busy, {pool.get('waiting', 0)} waiting for a slot"
    )


# ----------------------------------------------------------------------------------------- rendering


def render_watch(snapshot: WatchSnapshot) -> Text:
    """One frame as rich ``Text`` (``.plain`` is the same frame without styles)."""
    frame = Text()
    scope = f"session {snapshot.session_filter}" if snapshot.session_filter else "all sessions"
    frame.append("omray watch", style="bold")
    frame.append(f" · {snapshot.queue_name} · {scope} · {snapshot.taken_at:%H:%M:%S} UTC\n", style="dim")

    depth = "?" if snapshot.queue_depth is None else format_count(snapshot.queue_depth)
    runs = len(snapshot.in_flight) if snapshot.runs_in_flight is None else snapshot.runs_in_flight
    in_flight = f"{runs}" + ("" if snapshot.slots is None else f"/{snapshot.slots}")
    lanes = ""
    if snapshot.lanes is not None:
        lanes = f" · lanes: {snapshot.lanes} ({snapshot.busy_lanes or 0} running)"
    frame.append(f"Queue depth: {depth} · in flight: {in_flight}{lanes}\n")
    for pool in snapshot.pools:
        frame.append(f"  pool {pool}\n", style="dim")
    for job in snapshot.in_flight:
        frame.append("  running ", style="cyan")
        frame.append(f"{job}\n")

    frame.append("Sessions:\n")
    if not snapshot.sessions:
        idle = f"{snapshot.session_filter}: idle" if snapshot.session_filter else "no stage running"
        frame.append(f"  {idle}\n", style="dim")
    for session_id, status_text in snapshot.sessions:
        frame.append(f"  {session_id}  ", style="bold")
        frame.append(f"{status_text}\n")

    for text in snapshot.costs:
        frame.append(f"{text}\n")
    for text in snapshot.held:
        frame.append(f"{text}\n", style="yellow")

    if snapshot.failures:
        frame.append("Recent failures:\n")
        for failure in snapshot.failures:
            frame.append("  failed ", style="red")
            frame.append(f"{failure}\n")

    for message in snapshot.waiting:
        frame.append(f"{message}\n", style="yellow")
    frame.rstrip()
    return frame


# -------------------------------------------------------------------------------------------- source


def utc_now() -> datetime:
    """The current time in UTC."""
    return datetime.now(UTC)


QueueStatusReader = Callable[[], Mapping[str, Any]]
"""Returns the queue's ``status()`` dict; may raise when the queue is unreachable."""


@dataclass
class WatchSource:
    """Reads snapshots of a client's queue and memory database; never raises (a failing source
    becomes a "waiting for …" line)."""

    client: OmrayClient
    """The client (not connected): the queue's name, and the database's activity rows and costs,
    read on read-only connections."""
    read_queue: QueueStatusReader
    """Reads the queue's status (``omray watch``: over Ray, on a :class:`BackgroundQueueReader`)."""
    session_filter: str | None = None
    """Only this session's stage line, failures, usage and spend per model, when set (the budget line is
    the project's)."""
    now: Callable[[], datetime] = utc_now
    """Current UTC time (injected in tests)."""

    def snapshot(self) -> WatchSnapshot:
        """Read the queue, the activity rows and the costs once."""
        taken_at = self.now()
        queue_name, db_path = self.client.names.queue, Path(self.client.db_path)
        waiting: list[str] = []
        queue_status: Mapping[str, Any] | None = None
        try:
            queue_status = self.read_queue()
        except Exception as exc:  # the view must outlive a restarting queue or a lost connection
            logger.debug("queue status unavailable", extra={"error_class": type(exc).__name__})
            waiting.append(f"waiting for the queue {queue_name!r} …")
        rows: Sequence[Mapping[str, Any]] = ()
        costs: Sequence[str] = ()
        if not db_path.is_file():
            waiting.append(f"waiting for the memory database {str(db_path)!r} …")
        else:
            try:
                rows = self.client.activities(now=taken_at)
                session = self.session_filter
                usage, budget = self.client.token_usage(session), self.client.budget()
                costs = cost_lines(usage, budget, self.client.usage_by_day(session))
            except Exception as exc:  # a busy or half-written database is retried on the next refresh
                logger.debug("activity unavailable", extra={"error_class": type(exc).__name__})
                waiting.append("waiting for the memory database (busy) …")
        return snapshot_from(
            taken_at=taken_at,
            queue_name=queue_name,
            queue_status=queue_status,
            activity_rows=rows,
            session_filter=self.session_filter,
            waiting=waiting,
            costs=costs,
        )


class QueueUnavailableError(OmrayError):
    """The queue has not answered recently (not connected yet, restarting, or unreachable)."""


class BackgroundQueueReader:
    """Polls a blocking queue reader on a daemon thread; :meth:`read` answers at once.

    Connecting to Ray can block for minutes when the address is unreachable, and a restarting
    queue can be slow to answer; the view must keep refreshing meanwhile, so the blocking call
    runs on its own thread and the view only ever looks at the latest answer.
    """

    def __init__(
        self,
        read_blocking: QueueStatusReader,
        interval_s: float = MIN_INTERVAL_S,
        max_age_s: float = QUEUE_ANSWER_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read_blocking = read_blocking
        self._interval_s = max(MIN_INTERVAL_S, interval_s)
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: tuple[Mapping[str, Any], float] | None = None
        self._answered = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> BackgroundQueueReader:
        """Start polling (idempotent); returns ``self``."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._poll_forever, name="omray-watch-queue", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the polling thread to stop (it is a daemon, so it never holds up the exit)."""
        self._stop.set()

    def wait_first(self, timeout_s: float) -> bool:
        """Wait until the first poll finished (answer or failure); False on timeout."""
        return self._answered.wait(timeout_s)

    def poll_once(self) -> None:
        """One blocking poll: remember the answer, or forget the last one on failure."""
        try:
            status = self._read_blocking()
        except Exception as exc:  # an unreachable queue is shown as "waiting", never raised
            logger.debug("queue status unavailable", extra={"error_class": type(exc).__name__})
            with self._lock:
                self._latest = None
        else:
            with self._lock:
                self._latest = (status, self._clock())
        finally:
            self._answered.set()

    def read(self) -> Mapping[str, Any]:
        """The latest answer; raises :class:`QueueUnavailableError` when there is none recent enough."""
        with self._lock:
            latest = self._latest
        if latest is None or self._clock() - latest[1] > self._max_age_s:
            raise QueueUnavailableError("the queue has not answered recently")
        return latest[0]

    def _poll_forever(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self._interval_s)


def ray_queue_reader(
    client: Any, address: str | None, timeout_s: float = QUEUE_STATUS_TIMEOUT_S
) -> QueueStatusReader:
    """A blocking queue reader over Ray that connects lazily and looks the queue up again after a failure.

    ``client`` is an :class:`cluster.client.OmrayClient`. Meant to run inside a
    :class:`BackgroundQueueReader`, since connecting to an unreachable address blocks.
    """
    import ray

    from cluster.client import init_ray

    handle: list[Any] = []

    def read() -> Mapping[str, Any]:
        if not handle:
            # Ray warns that it cannot set a SIGTERM handler off the main thread; that is expected here.
            logging.getLogger("ray._private.worker").setLevel(logging.ERROR)
            init_ray(address)
            handle.append(client.queue_handle())
        try:
            status: Mapping[str, Any] = ray.get(handle[0].status.remote(), timeout=timeout_s)
        except Exception:
            handle.clear()
            raise
        return status

    return read


# ---------------------------------------------------------------------------------------------- loop


class RefreshThrottle:
    """Allows a refresh at most every ``interval_s`` seconds (at least 0.25 s); the first is immediate."""

    def __init__(
        self, interval_s: float = MIN_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval_s = max(MIN_INTERVAL_S, interval_s)
        self._clock = clock
        self._last: float | None = None

    def wait_s(self) -> float:
        """Seconds until the next refresh is allowed (0 when it is allowed now)."""
        if self._last is None:
            return 0.0
        return max(0.0, self._last + self.interval_s - self._clock())

    def take(self) -> bool:
        """True (and starts a new interval) when a refresh is allowed now; False otherwise."""
        if self.wait_s() > 0:
            return False
        self._last = self._clock()
        return True


def run_watch(
    read_snapshot: Callable[[], WatchSnapshot],
    *,
    interval_s: float = MIN_INTERVAL_S,
    once: bool = False,
    console: Console | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    max_frames: int | None = None,
) -> int:
    """Draw frames until Ctrl-C (or one frame with ``once``); returns the exit code (0).

    ``max_frames`` bounds the loop for tests.
    """
    console = console or Console()
    if once:
        console.print(render_watch(read_snapshot()))
        return 0
    throttle = RefreshThrottle(interval_s, clock)
    frames = 0
    try:
        starting = Text("omray watch · connecting …", style="dim")
        with Live(
            starting, console=console, auto_refresh=False, redirect_stdout=False, redirect_stderr=False
        ) as live:
            while max_frames is None or frames < max_frames:
                if not throttle.take():
                    sleep(throttle.wait_s())
                    continue
                live.update(render_watch(read_snapshot()), refresh=True)
                frames += 1
    except KeyboardInterrupt:
        pass
    return 0


def watch_runtime(
    client: OmrayClient,
    *,
    address: str | None = None,
    session_filter: str | None = None,
    interval_s: float = MIN_INTERVAL_S,
    once: bool = False,
    console: Console | None = None,
) -> int:
    """``omray watch`` for an :class:`cluster.client.OmrayClient` (not connected yet); returns 0.

    The queue is read over Ray at ``address`` on a background thread; the activity rows and costs
    from ``client.db_path`` on read-only connections.
    """
    queue = BackgroundQueueReader(ray_queue_reader(client, address), interval_s).start()
    try:
        if once:
            queue.wait_first(ONCE_QUEUE_WAIT_S)
        source = WatchSource(client, queue.read, session_filter)
        return run_watch(source.snapshot, interval_s=interval_s, once=once, console=console)
    finally:
        queue.stop()
