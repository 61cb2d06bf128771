"""The derived hybrid-search index of one memory database (reference §14.3–§14.5), one job per file.

- :mod:`.files`: permissions, checksums and the manifest's seal;
- :mod:`.sources`: read-only queries of the canonical memories, state row and fingerprint;
- :mod:`.manifest`: the chunk manifest (what is indexed, cursors, meta data);
- :mod:`.chunking`: planning one bounded batch of chunks to embed;
- :mod:`.keyword`: the ``bm25s`` keyword index;
- :mod:`.vectors`: the ``hnswlib`` vector index;
- :mod:`.fusion`: candidate filtering, fusion and collapsing chunk hits to memories;
- :mod:`.derived`: the index directory, its lock and the state row;
- :mod:`.build`: synchronization (rebuild, bounded batches);
- :mod:`.retrieve`: hybrid search;
- :mod:`.index`: :class:`SemanticIndex`, the three above as one class.
"""

from persistence.semantic.build import JOB_BATCHES, SyncResult
from persistence.semantic.derived import IndexProgress
from persistence.semantic.files import KEYWORD_DIR, MANIFEST_FILE, VECTOR_FILE, DerivedIndexError
from persistence.semantic.index import SemanticIndex, semantic_directory
from persistence.semantic.keyword import query_tokens, tokenize
from persistence.semantic.sources import (
    SemanticSourceReader,
    SemanticState,
    SemanticStateWriter,
    SourceFingerprint,
)

__all__ = [
    "JOB_BATCHES",
    "KEYWORD_DIR",
    "MANIFEST_FILE",
    "VECTOR_FILE",
    "DerivedIndexError",
    "IndexProgress",
    "SemanticIndex",
    "SemanticSourceReader",
    "SemanticState",
    "SemanticStateWriter",
    "SourceFingerprint",
    "SyncResult",
    "query_tokens",
    "semantic_directory",
    "tokenize",
]
