"""The public Python client: ``cluster.connect()`` returns an :class:`OmrayClient`.

The client wraps the documented actor-handle methods (``ray.get_actor("omray.queue",
namespace="omray")`` exposes the same ones) and the read side, which runs in the caller's own
process on read-only SQLite connections, so compaction never waits on the queue or on a model.

Length: one facade for the whole public API (dispatch, hooks, reads, status, forget, retry), each
method a thin typed wrapper; splitting it would split the API users see.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import ray
from pydantic import ValidationError

import actors.read.service as read_service
from actors.observer.trigger import TriggerPolicy, dispatch_signal
from actors.read.database_views import DatabaseViews
from actors.read.status_view import format_activity, fresh_activity
from cluster.naming import RuntimeNames
from cluster.outbox import Outbox
from cluster.remote_database import RemoteDatabase
from cluster.runtime_connection import (
    CALL_TIMEOUT_S,
    HOOK_TIMEOUT_S,
    ChildLink,
    InProcessLink,
    Link,
    RuntimeAuthError,
    RuntimeUnavailableError,
    init_ray,
    prepare_auth,
    probe_gcs,
    resolve_address,
)
from cluster.shipper import EventShipper
from persistence.reads.memory_reader import MemoryReader
from persistence.settings.parse import settings_from_mapping
from protocol.errors import InvalidPayloadError, RuntimeNotRunningError
from protocol.events import (
    AfterTurnCommit,
    BeforeCompactionContext,
    CompactionDecision,
    detect_terminal_boundary,
    projection_failure_reason,
)
from protocol.forget import ForgetArguments, forget_arguments
from protocol.identities import observe_job_id, signalled_observe_job_id
from protocol.jobs import (
    JobEnvelope,
    ObserveBoundaryJob,
    ObserveSignal,
    settings_fingerprint,
)
from protocol.records import ActivityRecord
from protocol.redact import redactor_for
from protocol.settings import OmSettings

logger = logging.getLogger("omray.client")

OUTBOX_PARALLEL = 64
"""Sessions of one client whose hook jobs may be on their way to the queue at once."""
OUTBOX_SENDERS = 4
"""Sender threads of one client's outbox: each takes every hook job waiting when it is free and
sends them in one ``dispatch_many`` call, so a burst of hooks costs the queue a few calls."""

__all__ = [
    "CALL_TIMEOUT_S",
    "HOOK_TIMEOUT_S",
    "OmrayClient",
    "RuntimeAuthError",
    "RuntimeUnavailableError",
    "connect",
    "init_ray",
    "prepare_auth",
    "probe_gcs",
    "resolve_address",
]


def default_events_path(cwd: str | Path, session_id: str) -> Path:
    """Where a Hatfield-style host keeps a session's events: ``.hatfield/sessions/<id>/events.jsonl``."""
    return Path(cwd) / ".hatfield" / "sessions" / session_id / "events.jsonl"


class OmrayClient(RemoteDatabase):
    """Typed access to one omray runtime.

    ``settings`` is the ``observational_memory`` block (as in a Hatfield settings file), validated
    here. ``settings_file`` is the file it was read from, if any: jobs then name that file and
    workers read it when each job runs (a changed model applies to queued and retried jobs). Without
    a file, the block itself travels with every job.

    Every call into the runtime has a deadline: ``hook_timeout_s`` for the agent hooks, which then
    return (``None``: not accepted yet) and never raise, ``call_timeout_s`` for the rest, which then
    raise :class:`RuntimeUnavailableError`. ``link`` carries the calls: the client from
    :func:`connect` uses a :class:`~cluster.runtime_connection.ChildLink`, which rejoins a
    restarted runtime by itself; by default the calls go through this process's own Ray connection.
    """

    def __init__(
        self,
        names: RuntimeNames | None = None,
        settings: Mapping[str, Any] | None = None,
        cwd: str | Path | None = None,
        settings_file: str | Path | None = None,
        *,
        link: Link | None = None,
        hook_timeout_s: float = HOOK_TIMEOUT_S,
        call_timeout_s: float = CALL_TIMEOUT_S,
        ship_events: bool | None = None,
    ) -> None:
        self.names = names or RuntimeNames()
        self.settings_file = str(Path(settings_file).resolve()) if settings_file is not None else None
        self.settings_block: dict[str, Any] = dict(settings or {})
        self.settings: OmSettings = settings_from_mapping(self.settings_block)
        self.settings_fingerprint = settings_fingerprint(self.settings_block)
        self.cwd = Path(cwd) if cwd is not None else Path.cwd()
        self.hook_timeout_s = hook_timeout_s
        self.call_timeout_s = call_timeout_s
        self.link: Link = link or InProcessLink(self.names.queue, self.names.namespace)
        self.outbox = Outbox(
            self._send,
            call_timeout_s,
            parallel=OUTBOX_PARALLEL,
            send_many=self._send_many,
            senders=OUTBOX_SENDERS,
        )
        self._ship_events = ship_events
        self._database_local: bool | None = None
        self.shipper = EventShipper(self.link.call, redactor_for(self.settings.redact_patterns))
        self._hybrid: Any = None

    @property
    def db_path(self) -> Path:
        """The memory database in effect (``storage.database`` joined to the working directory)."""
        return Path(self.settings.database_path(str(self.cwd)))

    def events_path(self, session_id: str) -> Path:
        """The session's ``events.jsonl`` under the working directory."""
        return default_events_path(self.cwd, session_id)

    # --- agent hooks ----------------------------------------------------------------------------

    def after_turn_commit(
        self, ctx: AfterTurnCommit | Mapping[str, Any], *, events_path: str | Path | None = None
    ) -> str | None:
        """Dispatch an observe job when the committed batch ends a turn (§7.1); returns its job id.

        ``ctx.session_end`` and, under context pressure (``ctx.context_fill``), any batch also send
        one; the Observer then decides when to call its model (``actors.observer.trigger``).

        Returns within ``hook_timeout_s`` and never raises into the agent. ``None`` means nothing
        was dispatched (no terminal boundary, or a rejected input) or the runtime has not accepted
        the job yet (stopped, restarting): the client then keeps sending it in the background, in
        order, until the runtime takes it. ``ctx`` may also be the JSON form of
        :class:`AfterTurnCommit` (a mapping); anything else, or a mapping that does not validate, is
        rejected internally with :class:`protocol.errors.InvalidPayloadError` and logged once per
        client and input type (class names only, never values). Failures are logged with ids and
        error classes only.
        """
        try:
            context = _turn_commit_context(ctx)
        except InvalidPayloadError as exc:
            self._log_rejection_once(ctx, exc)
            return None
        try:
            envelope = self.turn_envelope(context, events_path)
            if envelope is None:
                return None
            # Sent by the outbox, which ships the events first when the database is elsewhere
            # (:meth:`for_its_node`); the hook waits at most its deadline.
            return self.outbox.submit(envelope.job_id, envelope, self.hook_timeout_s)
        except Exception as exc:  # the committed turn must never fail because of memory
            logger.warning(
                "observe dispatch failed",
                extra={"session_id": context.session_id, "error_class": type(exc).__name__},
            )
            return None

    def turn_envelope(
        self, context: AfterTurnCommit, events_path: str | Path | None = None
    ) -> JobEnvelope | None:
        """The observe job :meth:`after_turn_commit` sends for a committed batch, if any, not dispatched
        (``actors.observer.trigger.dispatch_signal``).

        A turn end observes through its terminal event (§7.1); a session end or a checkpoint under
        context pressure through the batch's last event.
        """
        boundary = detect_terminal_boundary(context)
        policy = TriggerPolicy(self.settings.observe_after_tokens, self.settings.pressure_context_fill)
        signal = dispatch_signal(boundary is not None, context.context_fill, context.session_end, policy)
        last_seq = context.last_seq
        if signal is None or last_seq is None:
            return None
        end_seq, status = last_seq, context.status
        if signal == "turn_end" and boundary is not None:
            end_seq, status = boundary.end_seq, boundary.status
        return self.observe_envelope(
            context.session_id,
            end_seq,
            status,
            events_path=events_path,
            signal=signal,
            context_fill=context.context_fill,
        )

    def _log_rejection_once(self, ctx: object, exc: InvalidPayloadError) -> None:
        kind = type(ctx).__name__
        rejected: set[str] = self.__dict__.setdefault("_rejected_turn_inputs", set())
        if kind in rejected:
            return
        rejected.add(kind)
        logger.warning(
            "after_turn_commit input rejected",
            extra={"input_type": kind, "error_class": type(exc).__name__},
        )

    def observe(
        self,
        session_id: str,
        end_seq: int,
        status: str = "completed",
        *,
        events_path: str | Path | None = None,
        signal: ObserveSignal = "session_end",
    ) -> str:
        """Dispatch an observe job through ``end_seq`` (deterministic job id, §5.2); returns the job id.

        An explicit call (``omray import``) observes now, whatever the amount of new source: its
        signal is ``session_end`` unless given.
        """
        envelope = self.observe_envelope(session_id, end_seq, status, events_path=events_path, signal=signal)
        return self.dispatch(envelope)

    def observe_envelope(
        self,
        session_id: str,
        end_seq: int,
        status: str = "completed",
        *,
        events_path: str | Path | None = None,
        signal: ObserveSignal = "turn_end",
        context_fill: float | None = None,
    ) -> JobEnvelope:
        """The observe job through ``end_seq`` with its deterministic job id (§5.2), not dispatched.

        Jobs sent for another ``signal`` than a turn end get their own id (one per seq and signal).
        Raises :class:`InvalidPayloadError` naming the fields (never their values) for a request no
        job can carry (an ``end_seq`` past SQLite's integers, a malformed session id): nothing is sent.
        """
        try:
            job = ObserveBoundaryJob(
                session_id=session_id,
                terminal_end_seq=end_seq,
                terminal_status=status,
                renderer_version=self.settings.renderer_version,
                observer_schema_version=self.settings.observer_schema_version,
                db_path=str(self.db_path.resolve()),
                events_path=str(Path(events_path or self.events_path(session_id)).resolve()),
                settings_file=self.settings_file,
                settings={} if self.settings_file else self.settings_block,
                signal=signal,
                context_fill=context_fill,
                settings_fingerprint=self.settings_fingerprint,
            )
        except ValidationError as exc:
            fields = sorted({".".join(str(p) for p in err["loc"]) for err in exc.errors()})
            raise InvalidPayloadError(f"invalid observe request: fields {fields!r}") from None
        job_id = observe_job_id(
            session_id, end_seq, status, self.settings.renderer_version, self.settings.observer_schema_version
        )
        if signal != "turn_end":
            job_id = signalled_observe_job_id(job_id, signal)
        return JobEnvelope(job_id=job_id, session_id=session_id, payload=job)

    def session_started(self, session_id: str) -> str | None:
        """Session-start hook: schedule an index batch when hybrid retrieval is configured (§14.4)."""
        from actors.indexer.schedule import schedule_index

        try:
            return schedule_index(
                self._hook_dispatch,
                self.settings.semantic,
                str(self.db_path.resolve()),
                session_id,
                self.settings_block,
                str(self.events_path(session_id).resolve().parent.parent),
            )
        except Exception as exc:  # never fail the host's session start
            logger.warning(
                "index dispatch failed", extra={"session_id": session_id, "error_class": type(exc).__name__}
            )
            return None

    # --- read side (this process, read-only connections) ------------------------------------------

    def _views(self) -> DatabaseViews:
        """The database's pages computed in this process (the database lives on this node)."""
        return DatabaseViews(self.db_path, self.settings)

    def before_compaction(self, ctx: BeforeCompactionContext) -> CompactionDecision:
        """Replace the summary with durable memory, continue when there is none, cancel on error (§10.1),
        and cancel while the range the host replaces is not observed yet.

        Never dispatches a job, calls a model, reads events, polls or sleeps. On a database that
        lives on another node its ReaderActor answers (bounded by the hook's deadline; cancel when
        it cannot)."""
        try:
            answer = self._remote_view(
                "before_compaction", self.hook_timeout_s, context=ctx.model_dump(mode="json")
            )
        except Exception as exc:  # fail closed, as a local read failure does
            logger.warning("remote compaction read failed", extra={"error_class": type(exc).__name__})
            return CompactionDecision.cancel(projection_failure_reason(type(exc).__name__))
        if answer is None:
            return self._views().before_compaction(ctx)
        return CompactionDecision.model_validate(answer)

    def project(self, session_id: str) -> str:
        """The compaction text of a session's active memory (``''`` when empty)."""
        answer = self._remote_view("project", self.call_timeout_s, session_id=session_id)
        return self._views().project(session_id) if answer is None else str(answer["text"])

    def projection_lines(self, session_id: str) -> tuple[list[str], list[str]]:
        """A session's active memory as entry lines (reflections, observations): what the agent hooks
        give a compacted session."""
        answer = self._remote_view("projection_lines", self.call_timeout_s, session_id=session_id)
        if answer is None:
            return self._views().projection_lines(session_id)
        return list(answer["reflections"]), list(answer["observations"])

    def memory_status(self, session_id: str) -> tuple[str, dict[str, object]]:
        """``/om-status`` of a session as (text, JSON)."""
        answer = self._remote_view("memory_status", self.call_timeout_s, session_id=session_id)
        return self._views().memory_status(session_id) if answer is None else (answer["text"], answer["json"])

    def token_usage(self, session_id: str | None = None) -> dict[str, object]:
        """The cost report of one session, or of every session: tokens per job kind and model, money
        when the settings have a price table (read-only, like ``memory_status``)."""
        answer = self._remote_view("token_usage", self.call_timeout_s, session_id=session_id)
        return self._views().token_usage(session_id) if answer is None else answer

    def budget(self) -> dict[str, object]:
        """This project's daily budget today: spend (tokens, US dollars) against the caps, and whether a
        cap is reached (``actors.models.budget.budget_report``; read-only)."""
        now = time.time()
        answer = self._remote_view("budget", self.call_timeout_s, now=now)
        return self._views().budget(now) if answer is None else answer

    def usage_by_day(self, session_id: str | None = None) -> list[dict[str, object]]:
        """Spend per UTC day (the last seven), session and model: one session's, or every session's."""
        now = time.time()
        answer = self._remote_view("usage_by_day", self.call_timeout_s, session_id=session_id, now=now)
        return self._views().usage_by_day(session_id, now) if answer is None else list(answer["days"])

    def memory_view(self, session_id: str) -> tuple[str, dict[str, object]]:
        """``/om-view`` of a session as (text, JSON)."""
        answer = self._remote_view("memory_view", self.call_timeout_s, session_id=session_id)
        return self._views().memory_view(session_id) if answer is None else (answer["text"], answer["json"])

    def _hybrid_search(self) -> Any:
        if self.settings.semantic is None:
            return None
        if self._hybrid is None:
            from actors.read.hybrid import hybrid_search_for

            writer: Any = None
            if ray.is_initialized():
                writer = self._state_writer()
            self._hybrid = hybrid_search_for(str(self.db_path), self.settings.semantic, writer)
        return self._hybrid

    def _state_writer(self) -> Any:
        """The database's StoreActor, created on the runtime's data node; ``None`` without a runtime.

        Never on this process's node: a client on another node must not create a writer (and an
        empty database) where the files do not live. Without a writer, search skips only the
        "mark the index dirty" write, which the next index job would redo anyway.
        """
        from cluster.data_node import store_of
        from cluster.ray_calls import StoreProxy

        try:
            self.queue_handle()
            store = store_of(self.names, str(self.db_path.resolve()), timeout_s=10)
        except Exception as exc:  # no runtime, or a queue without placements: search read-only
            logger.info("no state writer for hybrid search", extra={"error_class": type(exc).__name__})
            return None
        return StoreProxy(store, durable=False)

    def memory_search(
        self, arguments: Mapping[str, object], session_id: str | None = None
    ) -> dict[str, object]:
        """The ``memory_search`` tool (``scope``, ``mode``: docs/api.md); ``session_id`` is the caller's.

        On a database that lives on another node, the database's ReaderActor answers."""
        if self._reads_remotely():
            return self._remote_tool("memory_search", arguments=dict(arguments), session_id=session_id)
        return read_service.memory_search(
            self.db_path, arguments, hybrid_search=self._hybrid_search(), session_id=session_id
        )

    def recall(self, session_id: str, arguments: Mapping[str, object]) -> dict[str, object]:
        """The ``recall`` tool, scoped to ``session_id`` unless the arguments name another session.

        On a database that lives on another node, the database's ReaderActor answers, with the
        events its node holds (the sessions' shipped logs)."""
        if self._reads_remotely():
            return self._remote_tool(
                "recall",
                session_id=session_id,
                arguments=dict(arguments),
                events_root=self._agent_events_root(),
            )
        return read_service.recall(
            self.db_path,
            self._recall_events_path,
            session_id,
            arguments,
            redactor=redactor_for(self.settings.redact_patterns),
        )

    def call_tool(
        self, name: str, arguments: Mapping[str, object] | str, session_id: str
    ) -> dict[str, object]:
        """Run ``memory_search`` or ``recall`` for any agent framework; always returns an answer dict."""
        if self._reads_remotely():
            return self._remote_tool(
                "call_tool",
                name=name,
                arguments=arguments if isinstance(arguments, str) else dict(arguments),
                session_id=session_id,
                events_root=self._agent_events_root(),
            )
        return read_service.call_tool(
            name,
            arguments,
            session_id,
            db_path=self.db_path,
            events_path_for=self._recall_events_path,
            hybrid_search=self._hybrid_search(),
            redactor=redactor_for(self.settings.redact_patterns),
        )

    def forget(
        self,
        memory_ids: Sequence[str] = (),
        *,
        session_id: str | None = None,
        event_ranges: Sequence[Sequence[int] | str] = (),
        wait_s: float = 60.0,
        arguments: ForgetArguments | None = None,
    ) -> dict[str, Any]:
        """Forget memory through the runtime: observations and reflections by id (full ids or display
        ids of 12+ characters), or everything of ``session_id``, or only the transcript text of its
        ``event_ranges`` (inclusive ``(start, end)`` seqs, or ``"A-B"``); or ``arguments`` already
        checked by :func:`protocol.forget.forget_arguments` (then the others are ignored).

        One ``forget`` job per session goes through the queue, in the session's lane (after every job
        of the session already accepted); then waits up to ``wait_s`` seconds for the jobs' transactions
        (``complete``). Idempotent: ids forgotten before are listed in ``already_forgotten``, ids never
        stored in ``unknown``, prefixes of several memories in ``ambiguous``. Raises
        :class:`protocol.forget.ForgetArgumentsError` for malformed arguments (nothing is sent).
        """
        from cluster.forget import forget_report, wait_for_results

        checked = arguments or forget_arguments(
            {"ids": memory_ids, "session_id": session_id, "event_ranges": event_ranges}
        )
        db_path = str(self.db_path.resolve())
        wire = checked.model_dump(mode="json")
        plan = self._remote_view("forget_plan", self.call_timeout_s, arguments=wire)
        if plan is None:
            envelopes, report = self._views().forget_plan(checked, db_path, self.settings_block)
            results_of: Any = self._views()
        else:
            envelopes = [JobEnvelope.model_validate(envelope) for envelope in plan["envelopes"]]
            report, results_of = dict(plan["report"]), _RemoteForgetResults(self)
        job_ids = [self.dispatch(envelope) for envelope in envelopes]
        results = wait_for_results(results_of, job_ids, wait_s) if wait_s > 0 else {}
        return forget_report(report, job_ids, results)

    def tool_specs(self) -> list[dict[str, Any]]:
        """OpenAI function-calling specs of ``memory_search`` and ``recall`` for this configuration."""
        from protocol.tool_specs import memory_tool_specs

        return memory_tool_specs(hybrid=self.settings.semantic is not None)

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

    def _send(self, envelope: JobEnvelope, timeout_s: float) -> str:
        job_id: str = self.link.call("dispatch", (self.for_its_node(envelope, timeout_s),), timeout_s)
        return job_id

    def _send_many(self, envelopes: list[JobEnvelope], timeout_s: float) -> list[str]:
        ready = [self.for_its_node(envelope, timeout_s) for envelope in envelopes]
        job_ids = self.link.call("dispatch_many", (ready,), timeout_s)
        return [str(job_id) for job_id in job_ids]

    def _hook_dispatch(self, envelope: JobEnvelope) -> str:
        return self.outbox.submit(envelope.job_id, envelope, self.hook_timeout_s) or envelope.job_id

    def dispatch(self, envelope: JobEnvelope | Mapping[str, Any]) -> str:
        """Accept a job durably on the queue; returns its job id once it is persisted.

        Raises :class:`InvalidPayloadError` for an envelope that does not validate (its message
        names the error class, never a value), and :class:`RuntimeUnavailableError` when the
        runtime does not answer within ``call_timeout_s`` (the job may or may not be accepted;
        dispatching it again is safe).
        """
        if isinstance(envelope, JobEnvelope):
            job = envelope
        else:
            try:
                job = JobEnvelope.model_validate(envelope)
            except ValidationError as exc:
                raise InvalidPayloadError(f"invalid job envelope ({type(exc).__name__})") from None
        return self._send(job, self.call_timeout_s)

    def status(self) -> dict[str, Any]:
        """Queue depth, the job in flight and recent failures."""
        status: dict[str, Any] = self.link.call("status", (), self.call_timeout_s)
        return status

    def retry_failed(self, all_projects: bool = False) -> int:
        """``omray retry``: queue again the jobs of this database (or all) that failed for good."""
        return self.retry(all_projects)["requeued"]

    def retry(self, all_projects: bool = False) -> dict[str, int]:
        """``omray retry``: queue again the jobs of this database (or all) that failed for good, and let
        its (their) budget holds re-check at once: ``{"requeued": n, "rechecked": holds}``."""
        db = None if all_projects else str(self.db_path.resolve())
        answer = self.link.call("retry_failed", (db,), self.call_timeout_s)
        return {"requeued": int(answer["requeued"]), "rechecked": int(answer.get("rechecked", 0))}

    def job_counts(self) -> dict[str, int]:
        """Durable job counts by state."""
        counts: dict[str, int] = self.link.call("job_counts", (), self.call_timeout_s)
        return counts

    def runtime_events(
        self, session_id: str, after_seq: int = 0, db_path: str | Path | None = None
    ) -> list[dict[str, Any]]:
        """Sanitized runtime events for a session of this client's database (or of ``db_path``),
        such as ``extension_agent.job_failed``. Each names its ``db_path``; another project's session
        of the same id is not listed."""
        database = str(Path(db_path if db_path is not None else self.db_path).resolve())
        events: list[dict[str, Any]] = self.link.call(
            "runtime_events", (session_id, after_seq, database), self.call_timeout_s
        )
        return events

    def queue_is_idle(self) -> bool:
        """True when no job is pending or running right now."""
        idle: bool = self.link.call("is_idle", (), self.call_timeout_s)
        return idle

    def wait_idle(self, timeout_s: float = 120.0, poll_s: float = 0.1) -> bool:
        """Wait until no job is pending or running; False on timeout (or when the runtime is away)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            remaining = max(deadline - time.monotonic(), 0.001)
            try:
                if self.link.call("is_idle", (), min(remaining, self.call_timeout_s)):
                    return True
            except RuntimeUnavailableError:
                pass
            time.sleep(poll_s)
        return False

    def close(self) -> None:
        """Stop the link's driver process, if any (jobs still in the outbox are not sent)."""
        self.link.close()

    # --- live activity (reference §11) ----------------------------------------------------------

    def activity(self, session_id: str, *, now: datetime | None = None) -> dict[str, Any] | None:
        """The session's fresh activity row with its status line, or ``None``.

        Reads durable state only, on a read-only connection. A row more than 300 s old (a crash
        leftover) is hidden; exactly 300 s is still shown. ``now`` defaults to the current UTC time.
        """
        record = MemoryReader(self.db_path).activity(session_id)
        if record is None:
            return None
        return _activity_view(record, now or datetime.now(UTC))

    def activities(self, *, now: datetime | None = None) -> list[dict[str, Any]]:
        """Every session's fresh activity row (as :meth:`activity` returns it), by session id."""
        moment = now or datetime.now(UTC)
        views = (_activity_view(record, moment) for record in MemoryReader(self.db_path).all_activity())
        return [view for view in views if view is not None]


class _RemoteForgetResults:
    """A forget job's result read by the database's ReaderActor on another node."""

    def __init__(self, client: OmrayClient) -> None:
        self.client = client

    def forget_result(self, job_id: str) -> dict[str, Any] | None:
        answer = self.client._remote_view("forget_result", self.client.call_timeout_s, job_id=job_id)
        result: dict[str, Any] | None = None if answer is None else answer["result"]
        return result


def _turn_commit_context(ctx: object) -> AfterTurnCommit:
    """``ctx`` as an :class:`AfterTurnCommit`; :class:`InvalidPayloadError` (no values in it) otherwise."""
    if isinstance(ctx, AfterTurnCommit):
        return ctx
    if not isinstance(ctx, Mapping):
        raise InvalidPayloadError(f"after_turn_commit needs an AfterTurnCommit, got {type(ctx).__name__}")
    try:
        return AfterTurnCommit.model_validate(dict(ctx))
    except ValidationError as error:
        fields = sorted({".".join(str(p) for p in item["loc"]) for item in error.errors()})
        raise InvalidPayloadError(f"after_turn_commit context has invalid fields {fields!r}") from None


def _activity_view(record: ActivityRecord, now: datetime) -> dict[str, Any] | None:
    if not fresh_activity(record, now):
        return None
    updated_at = datetime.fromisoformat(record.updated_at)
    if updated_at.tzinfo is None:
        updated_at = updated_at.replace(tzinfo=UTC)
    return {
        "session_id": record.session_id,
        "job_id": record.job_id,
        "stage": record.stage,
        "current_tokens": record.current_tokens,
        "target_tokens": record.target_tokens,
        "updated_at": record.updated_at,
        "age_s": max(0, int(now.timestamp() - updated_at.timestamp())),
        "status_text": format_activity(record.stage, record.current_tokens, record.target_tokens),
    }


def connect(
    address: str | None = None,
    *,
    prefix: str = "omray",
    settings: Mapping[str, Any] | None = None,
    cwd: str | Path | None = None,
    hook_timeout_s: float = HOOK_TIMEOUT_S,
    call_timeout_s: float = CALL_TIMEOUT_S,
    ship_events: bool | None = None,
) -> OmrayClient:
    """Connect to a running omray runtime and return its client.

    ``address`` defaults to ``RAY_ADDRESS``, else the address ``omray up`` recorded. ``settings``
    defaults to the file found by ``persistence.settings.file.find_settings_file``; jobs then name
    that file, and workers read it when each job runs. Unless this process is a Ray driver already,
    calls go through a small driver child process that is replaced when the runtime restarts, so
    this process never hangs on, or dies with, a stopped cluster. ``ship_events`` forces (or
    forbids) shipping the sessions' events to the database's node (:meth:`OmrayClient.ships_events`). Raises
    :class:`RuntimeNotRunningError` (or :class:`RuntimeAuthError`) when no runtime answers.
    """
    settings_file: Path | None = None
    if settings is None:
        from persistence.settings.file import find_settings_file, load_settings_block

        settings_file = find_settings_file(Path(cwd) if cwd is not None else Path.cwd())
        settings = load_settings_block(settings_file, cwd=cwd)
    names = RuntimeNames(prefix=prefix)
    link: Link
    if ray.is_initialized():
        link = InProcessLink(names.queue, names.namespace)
    else:
        prepare_auth()
        target = resolve_address(address)
        if target != "auto":
            probe_gcs(target)  # a wrong token or a stopped cluster is reported now, not in 40 s
        link = ChildLink(target, names.queue, names.namespace)
    client = OmrayClient(
        names,
        settings=settings,
        cwd=cwd,
        settings_file=settings_file,
        link=link,
        hook_timeout_s=hook_timeout_s,
        call_timeout_s=call_timeout_s,
        ship_events=ship_events,
    )
    try:
        client.link.call("ping", (), max(call_timeout_s, 60.0))  # fail fast with RuntimeNotRunningError
    except Exception:
        client.close()
        raise
    return client
