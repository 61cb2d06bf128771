"""The derived hybrid-search index of one memory database (reference §14.3–§14.5), one job per file.

- :mod:`.files`: permissions, checksums and the manifest's seal;
- :mod:`.sources`: read-only queries of the canonical memories, state row and fingerprint;
- :mod:`.manifest`: the chunk manifest (what is indexed, cursors, meta data);
- :mod:`.chunks`: how memory text is cut into chunks (content-derived chunk ids);
- :mod:`.batches`: one indexing batch's plan and the reads that fill it;
- :mod:`.keyword`: the ``bm25s`` keyword index;
- :mod:`.vectors`: the ``hnswlib`` vector index;
- :mod:`.derived`: the index directory, its lock and the state row;
- :mod:`.build`: a batch's rebuild checks, planning reads and commit;
- :mod:`.candidates`: a search's snapshot and candidate scores (each store's hits, both scores);
- :mod:`.index`: :class:`SemanticIndex`, the three above as one class.

Storage only: no module here calls a model or ranks. The indexing core is :mod:`actors.indexer`
(``actors.indexer.sync.synchronize``), the hybrid search pipeline :mod:`actors.read.retrieval`.
"""

from persistence.semantic.build import SyncResult
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
