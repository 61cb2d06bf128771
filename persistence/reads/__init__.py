"""Read-only queries of a memory database, from any process: the memory reader (:mod:`.memory_reader`,
with the pure coverage watermark of :mod:`.coverage_watermark`), the compaction projection
(:mod:`.projection`, :mod:`.projection_sql`: standard library only), the memory viewer's queries
(:mod:`.viewer`), token usage and spend (:mod:`.usage`) and what ``omray memory forget`` looks up
(:mod:`.forgotten`)."""
