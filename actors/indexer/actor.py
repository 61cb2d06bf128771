"""IndexerActor: the thin shell that runs ``semantic_index`` jobs, one bounded batch each (§14.4).

The indexing core is :mod:`actors.indexer.sync` (plan, embed in batches, commit) over the index files
of :mod:`persistence.semantic`; this handler wires it to the embedder of the settings and to the
database's StoreActor (the only writer of the index state row).
"""

from __future__ import annotations

import functools
import time
from typing import Any

from actors.indexer.schedule import events_path, schedule_index
from actors.indexer.sync import JOB_BATCHES, embed_in_batches
from actors.models.clients import worker_clients
from actors.models.offline_embedder import default_offline_embedder
from actors.models.registry import embedder_for
from actors.observer.transcript import backfill_transcript
from actors.store.reader import DataReader
from actors.worker import RoleActor, WorkerContext, local_now, utc_now
from persistence.semantic import SyncResult
from persistence.settings.parse import settings_from_mapping
from protocol.errors import InvalidPayloadError
from protocol.jobs import SEMANTIC_INDEX_HANDLER, JobEnvelope, SemanticIndexJob
from protocol.semantic import Embedder
from protocol.settings import SemanticSettings

BACKFILL_SESSIONS = 8
"""Sessions whose transcript one index job backfills at most (a continuation does the rest)."""


def backfill_transcripts(
    db_path: str,
    events_root: str | None,
    store: Any,
    reader: Any = None,
    redact_patterns: tuple[str, ...] = (),
) -> int:
    """Backfill the transcript of up to :data:`BACKFILL_SESSIONS` sessions whose coverage is ahead of
    it (a database observed before the transcript existed); needs the events root. ``reader`` (a
    :class:`actors.store.reader.DataReader` or its proxy; default: one in this process) reads the
    database and the events files on the database's node. Returns how many sessions it backfilled."""
    if events_root is None:
        return 0
    reader = reader if reader is not None else DataReader(db_path, store)
    sessions = reader.transcript_lagging_sessions(BACKFILL_SESSIONS)
    now_local, now_utc = local_now(), utc_now()
    for session_id in sessions:
        path = events_path(events_root, session_id)
        if path is None:
            continue
        backfill_transcript(
            session_id,
            reader,
            store,
            functools.partial(reader.read_event_window, str(path), redact_patterns=redact_patterns),
            now_local,
            now_utc,
        )
    return len(sessions)


def semantic_index(envelope: JobEnvelope, attempt: int, context: WorkerContext) -> dict[str, Any]:
    """Handler of ``observational_memory.semantic_index``: one bounded commit of
    :data:`~actors.indexer.sync.JOB_BATCHES` embedding batches (reference §14.4).

    The batch is planned and committed on the database's node (its reader) and embedded here,
    wherever this worker runs. Without a ``semantic`` setting there is nothing to index and the job
    succeeds at once. When the batch did not complete the index, a continuation job is queued
    behind it.
    """
    job = envelope.payload
    if not isinstance(job, SemanticIndexJob):
        raise InvalidPayloadError(f"job {envelope.job_id!r} is not a semantic_index job")
    settings = settings_from_mapping(job.settings)
    if settings.semantic is None:
        return {"status": "semantic_not_configured"}
    store = context.store_for(job.db_path)
    store.ping()
    reader = context.reader_for(job.db_path)
    backfilled = backfill_transcripts(job.db_path, job.events_root, store, reader, settings.redact_patterns)
    result = synchronize_through(reader, settings.semantic, embedder_for(settings.semantic, worker_clients()))
    continuation = None
    if not result.complete or backfilled >= BACKFILL_SESSIONS:
        continuation = schedule_index(
            context.dispatch, settings.semantic, job.db_path, job.session_id, job.settings, job.events_root
        )
    return {
        "status": "complete" if result.complete else "partial",
        "indexed_memories": result.indexed_memories,
        "source_memories": result.source_memories,
        "embedded_chunks": result.embedded_chunks,
        "rebuilt": result.rebuilt,
        "transcripts_backfilled": backfilled,
        "continuation_job_id": continuation,
    }


def synchronize_through(reader: Any, semantic: SemanticSettings, embedder: Embedder) -> SyncResult:
    """One bounded index synchronization: planned and committed by ``reader`` (on the database's
    node), embedded here."""
    plan = reader.index_plan(semantic, JOB_BATCHES)
    if isinstance(plan, SyncResult):
        return plan
    vectors = embed_in_batches(embedder, plan.vector_texts(), semantic.embedding_api.batch_size)
    result: SyncResult = reader.index_commit(semantic, plan, vectors)
    return result


class IndexerActor(RoleActor):
    """Runs ``semantic_index`` jobs; the derived index files are rebuilt from canonical rows."""

    role_handler_id = SEMANTIC_INDEX_HANDLER
    default_handler = "actors.indexer.actor:semantic_index"

    def warm(self, encoding: str | None = None) -> dict[str, Any]:
        """As :meth:`RoleActor.warm`, and load the offline embedder too (about 2 s of CPU, once),
        which the default settings' first index job would otherwise pay."""
        started = time.monotonic()
        answer = super().warm(encoding)
        default_offline_embedder().load()
        return {**answer, "warm_ms": round((time.monotonic() - started) * 1000.0, 1)}
