"""Read-only queries of the token usage table (``omray_token_usage``): the cost report per session,
job kind and model, per UTC day, and what each model spent since a time (the daily budget, issue 41
item 3). :class:`persistence.reads.memory_reader.MemoryReader` answers them through these functions,
on its own read-only snapshot; a file no writer migrated yet (no ``cost_usd`` column) reads as
reporting no cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection, case, func, literal, null, select

from persistence.database import schema
from protocol.records import ModelDaySpend, TokenUsageDay, TokenUsageTotal

T = TypeVar("T")


class QueryRunner(Protocol):
    """Runs ``query`` on one read-only snapshot (``empty`` when ``tables`` are missing): the reader's
    ``_run`` (:class:`persistence.reads.memory_reader.MemoryReader`)."""

    def __call__(self, query: Callable[[Connection], T], empty: T, tables: Sequence[str]) -> T:
        """The query's answer."""
        ...


def _has_cost_column(conn: Connection) -> bool:
    """True when ``omray_token_usage`` has ``cost_usd`` (migration ``omray_017_budget``; a reader may
    open a file no writer has migrated yet)."""
    return any(row[1] == "cost_usd" for row in conn.exec_driver_sql("PRAGMA table_info(omray_token_usage)"))


def _usage_sums(conn: Connection) -> list[Any]:
    """The summed columns of a token usage report (``cost_usd``: NULL when no row reported one)."""
    table = schema.omray_token_usage
    sums: list[Any] = [
        func.sum(table.c[name]).label(name)
        for name in ("requests", "prompt_tokens", "cached_prompt_tokens", "completion_tokens")
    ]
    sums.append((func.sum(table.c.cost_usd) if _has_cost_column(conn) else null()).label("cost_usd"))
    return sums


def token_usage(run: QueryRunner, session_id: str | None = None) -> list[TokenUsageTotal]:
    """Summed token usage per session, job kind and model (one session's, or every session's)."""

    def query(conn: Connection) -> list[TokenUsageTotal]:
        table = schema.omray_token_usage
        keys = (table.c.run_id, table.c.job_kind, table.c.model)
        statement = select(*keys, *_usage_sums(conn)).group_by(*keys).order_by(*keys)
        if session_id is not None:
            statement = statement.where(table.c.run_id == session_id)
        return [TokenUsageTotal(**row._asdict()) for row in conn.execute(statement)]

    return run(query, [], ("omray_token_usage",))


def token_usage_by_day(
    run: QueryRunner, since_day: str, session_id: str | None = None
) -> list[TokenUsageDay]:
    """Summed token usage per UTC day (from ``since_day``, ``YYYY-MM-DD``), session, job kind and
    model, newest day first (one session's, or every session's)."""

    def query(conn: Connection) -> list[TokenUsageDay]:
        table = schema.omray_token_usage
        day = func.substr(table.c.recorded_at, 1, 10).label("day")
        keys = (day, table.c.run_id, table.c.job_kind, table.c.model)
        statement = (
            select(*keys, *_usage_sums(conn))
            .where(table.c.recorded_at >= since_day)
            .group_by(*keys)
            .order_by(day.desc(), table.c.run_id, table.c.job_kind, table.c.model)
        )
        if session_id is not None:
            statement = statement.where(table.c.run_id == session_id)
        return [TokenUsageDay(**row._asdict()) for row in conn.execute(statement)]

    return run(query, [], ("omray_token_usage",))


def spend_since(run: QueryRunner, since: str) -> list[ModelDaySpend]:
    """What each model spent in the rows recorded at or after ``since`` (UTC ISO-8601, as the rows
    hold their times), over every session: the daily budget's input. One indexed range read."""

    def query(conn: Connection) -> list[ModelDaySpend]:
        table = schema.omray_token_usage
        cost = table.c.cost_usd if _has_cost_column(conn) else None

        def unreported(column: Any) -> Any:
            if cost is None:
                return func.sum(column)
            return func.sum(case((cost.is_(None), column), else_=0))

        statement = (
            select(
                table.c.model,
                func.sum(table.c.requests).label("requests"),
                func.sum(table.c.prompt_tokens).label("prompt_tokens"),
                func.sum(table.c.cached_prompt_tokens).label("cached_prompt_tokens"),
                func.sum(table.c.completion_tokens).label("completion_tokens"),
                (func.total(cost) if cost is not None else literal(0.0)).label("reported_usd"),
                unreported(table.c.prompt_tokens).label("unreported_prompt_tokens"),
                unreported(table.c.cached_prompt_tokens).label("unreported_cached_prompt_tokens"),
                unreported(table.c.completion_tokens).label("unreported_completion_tokens"),
                unreported(table.c.requests).label("unreported_requests"),
            )
            .where(table.c.recorded_at >= since)
            .group_by(table.c.model)
            .order_by(table.c.model)
        )
        return [ModelDaySpend(**row._asdict()) for row in conn.execute(statement)]

    return run(query, [], ("omray_token_usage",))
