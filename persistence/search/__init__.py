"""Exact ``memory_search`` and ``recall``'s lookups (reference §13.3, §13.6): the checked request every
search reads (:mod:`.request`), the reader (:mod:`.reader`), the plan per table (:mod:`.plans`), its
SQL (:mod:`.sql`) and the candidates of 1-2 character queries (:mod:`.short_queries`). Hybrid search's
index is :mod:`persistence.semantic`."""
