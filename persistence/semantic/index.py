"""The derived hybrid-search index of one memory database and its lifecycle (reference §14.4, §14.5).

Everything under ``<database>.semantic/`` (directory 0700, files 0600) is *derived*: it is rebuilt
from the canonical ``om_observation`` / ``om_reflection`` rows whenever it is missing, stale,
inconsistent or corrupt, and is never the source of any memory. It holds the chunk manifest
(:mod:`.manifest`), the vector file (:mod:`.vectors`), the keyword index (:mod:`.keyword`) and
``index.lock``, the per-project ``flock`` lock: shared by searches, exclusive for writes; each side
waits briefly for the other, then answers ``index_busy``. A file where the directory belongs, or a
directory where the lock file belongs, is derived damage and is replaced.

The durable status lives in the canonical ``om_semantic_state`` row, written through a
:class:`~persistence.semantic.sources.SemanticStateWriter` (the database's ``Store``): ``dirty`` is
saved before any write to derived storage and cleared only after all of them succeeded, so any
interrupted write leads to a rebuild instead of a silently inconsistent index.

Unlike the original, which re-read and re-chunked every memory for each batch, indexing keeps a
resumable cursor (:mod:`.chunking`): a batch reads and chunks O(batch) memories however many are
already indexed. Canonical rows are append-only in omray (content-hash ids, insert-or-verify
writes); ``synchronize(full_check=True)`` compares everything for a database edited by other
tools, and search re-checks every hit against the current canonical text, so a stale chunk is
never returned.

Nothing here calls a model: the pipelines that embed (the indexing core in
:mod:`actors.indexer.sync`, hybrid search in :mod:`actors.read.retrieval`) call the index before and
after their model calls, which never run under the lock; the snapshot is re-validated after
re-acquiring it. Logs carry counts, codes and reasons only.

The transcript: every covered event's text (``omray_transcript``) is indexed next to the
memories, so what the Observer was shown stays findable whatever it wrote down. A hit on an
event's chunk carries its excerpt and seq and leads to the observation covering the event (or
stands alone when none does). Each event's first chunk gets a vector, the rest keyword entries
only, so the index grows with events, not bytes. How candidates are ranked is the read side's
(:mod:`actors.read.ranking`, :mod:`actors.read.fusion`).

The index is one class, :class:`SemanticIndex`, put together from three parts: the directory,
lock and state row (:mod:`.derived`), the build side (:mod:`.build`: a batch's planning reads and
its commit) and the query side (:mod:`.candidates`: a search's snapshot and candidate scores).
"""

from __future__ import annotations

import os
from pathlib import Path

from persistence.semantic.build import IndexBuilder
from persistence.semantic.candidates import CandidateReader


class SemanticIndex(IndexBuilder, CandidateReader):
    """The derived hybrid index of one memory database: batch plans and commits, search snapshots and
    candidate reads.

    Guarantees: every derived write happens under the per-project lock and between a saved
    ``dirty`` marker and its clearing; any listed rebuild condition (no state row, dirty, signature
    change, derived files missing/corrupt/inconsistent, an indexed chunk no longer current)
    discards the derived files and starts again; search never returns a chunk whose memory is gone
    or whose text changed, and marks the index dirty on corruption. It calls no model: its callers
    embed and rerank between its locked steps. Safe to use from several processes (``flock``); one
    instance per thread.
    """


def semantic_directory(db_path: str | os.PathLike[str]) -> Path:
    """``<database>.semantic``: the only directory to delete to repair the derived index."""
    return Path(f"{os.fspath(db_path)}.semantic")
