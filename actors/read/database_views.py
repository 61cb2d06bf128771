"""The pages of one memory database an agent reads besides its search tools, computed where the
database lives (issue 43): the compaction summary, ``/om-status`` and ``/om-view``, the cost reports,
and the resolution of a ``forget`` call's ids.

A client on the database's node calls :class:`DatabaseViews` in its own process; a client on any
other node asks the database's ReaderActor (:class:`actors.store.reader.MemoryTools`), which calls
the same methods over its local files. Every answer is a plain value (a dict, a list, a pydantic
model), so it crosses the actor boundary unchanged and a remote answer is the local one.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from actors.models.budget import project_budget, report_since, usage_by_day_json
from actors.read import service
from actors.read.status_view import usage_json
from persistence.reads.forgotten import ForgetReader
from persistence.reads.memory_reader import MemoryReader
from persistence.reads.projection import read_projection_lines
from protocol.errors import InvalidPayloadError
from protocol.events import BeforeCompactionContext, CompactionDecision
from protocol.forget import ForgetArguments
from protocol.jobs import ForgetJob, JobEnvelope
from protocol.settings import OmSettings

VIEWS: frozenset[str] = frozenset(
    {
        "before_compaction",
        "project",
        "projection_lines",
        "memory_status",
        "memory_view",
        "token_usage",
        "budget",
        "usage_by_day",
        "forget_plan",
        "forget_result",
    }
)
"""The :class:`DatabaseViews` methods a ReaderActor answers for clients on other nodes."""


class DatabaseViews:
    """Read-only pages of the database at ``db_path`` under ``settings`` (the caller's)."""

    def __init__(self, db_path: str | Path, settings: OmSettings) -> None:
        self.db_path = Path(db_path)
        self.settings = settings

    def before_compaction(self, context: BeforeCompactionContext) -> CompactionDecision:
        """:func:`actors.read.service.before_compaction` (fails closed: ``cancel`` on any error)."""
        return service.before_compaction(
            self.db_path, context, self.settings.renderer_version, self.settings.observer_schema_version
        )

    def project(self, session_id: str) -> str:
        """The compaction text of a session's active memory (``''`` when empty)."""
        return service.project(self.db_path, session_id)

    def projection_lines(self, session_id: str) -> tuple[list[str], list[str]]:
        """The session's active memory as entry lines (reflections, observations): what an agent
        hook fits into a compacted session's context
        (:func:`persistence.reads.projection.read_projection_lines`)."""
        return read_projection_lines(str(self.db_path), session_id)

    def memory_status(self, session_id: str) -> tuple[str, dict[str, object]]:
        """``/om-status`` of a session as (text, JSON)."""
        from actors.models.tokens import token_counter

        counter = token_counter(self.settings.token_encoding).count
        return service.memory_status(self.db_path, session_id, self.settings, counter)

    def memory_view(self, session_id: str) -> tuple[str, dict[str, object]]:
        """``/om-view`` of a session as (text, JSON)."""
        return service.memory_view(self.db_path, session_id)

    def token_usage(self, session_id: str | None) -> dict[str, object]:
        """Tokens per job kind and model of one session or of all, with money where prices say."""
        return usage_json(MemoryReader(self.db_path).token_usage(session_id), self.settings.prices)

    def budget(self, now: float) -> dict[str, object]:
        """The project's spend today against its caps (``now``: the caller's clock)."""
        return project_budget(MemoryReader(self.db_path).spend_since, self.settings, now)

    def usage_by_day(self, session_id: str | None, now: float) -> list[dict[str, object]]:
        """Spend per UTC day (the last seven up to ``now``), session and model."""
        rows = MemoryReader(self.db_path).token_usage_by_day(report_since(now), session_id)
        return usage_by_day_json(rows, self.settings.prices)

    def forget_plan(
        self, arguments: ForgetArguments, db_path: str, settings_block: dict[str, Any]
    ) -> tuple[list[JobEnvelope], dict[str, Any]]:
        """The forget jobs for checked ``arguments`` (one per session; the jobs name ``db_path`` and
        carry ``settings_block``) and the report of the ids that need none."""
        report: dict[str, Any] = {"already_forgotten": [], "unknown": [], "ambiguous": []}
        by_session: dict[str, list[str]] = {}
        for located in ForgetReader(self.db_path).locate(list(arguments.ids)):
            if located.status == "found" and located.session_id is not None and located.memory_id is not None:
                by_session.setdefault(located.session_id, []).append(located.memory_id)
            elif located.status == "forgotten":
                report["already_forgotten"].append(located.given)
            else:
                report[located.status].append(located.given)
        jobs = [
            ForgetJob(session_id=session, memory_ids=tuple(found), db_path=db_path, settings=settings_block)
            for session, found in by_session.items()
        ]
        if arguments.session_id is not None:
            jobs.append(
                ForgetJob(
                    session_id=arguments.session_id,
                    event_ranges=arguments.event_ranges,
                    whole_session=not arguments.event_ranges,
                    db_path=db_path,
                    settings=settings_block,
                )
            )
        envelopes = [
            JobEnvelope(job_id=uuid.uuid4().hex, session_id=job.session_id, payload=job) for job in jobs
        ]
        return envelopes, report

    def forget_result(self, job_id: str) -> dict[str, Any] | None:
        """What a forget job removed, once its transaction committed (``None`` before)."""
        return ForgetReader(self.db_path).forget_result(job_id)


def view_answer(views: DatabaseViews, operation: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """One of :data:`VIEWS` as the JSON a client on another node gets (what crosses its link):
    ``arguments`` are the JSON form of the method's own (``context``, ``session_id``, ``now``,
    ``arguments`` of a forget, ``job_id``; ``settings_block`` is the caller's settings, which also
    go into forget jobs). Raises :class:`protocol.errors.InvalidPayloadError` for anything else."""
    session_id = arguments.get("session_id")
    if operation == "before_compaction":
        context = BeforeCompactionContext.model_validate(arguments.get("context"))
        return views.before_compaction(context).model_dump(mode="json")
    if operation == "project":
        return {"text": views.project(str(session_id))}
    if operation == "projection_lines":
        reflections, observations = views.projection_lines(str(session_id))
        return {"reflections": reflections, "observations": observations}
    if operation in ("memory_status", "memory_view"):
        text, data = getattr(views, operation)(str(session_id))
        return {"text": text, "json": data}
    if operation == "token_usage":
        return views.token_usage(None if session_id is None else str(session_id))
    if operation == "budget":
        return views.budget(float(arguments["now"]))
    if operation == "usage_by_day":
        days = views.usage_by_day(None if session_id is None else str(session_id), float(arguments["now"]))
        return {"days": days}
    if operation == "forget_plan":
        checked = ForgetArguments.model_validate(arguments.get("arguments"))
        block = dict(arguments.get("settings_block") or {})
        envelopes, report = views.forget_plan(checked, str(views.db_path), block)
        return {"envelopes": [envelope.model_dump(mode="json") for envelope in envelopes], "report": report}
    if operation == "forget_result":
        return {"result": views.forget_result(str(arguments["job_id"]))}
    raise InvalidPayloadError(f"no database view {operation!r}; known: {sorted(VIEWS)!r}")
