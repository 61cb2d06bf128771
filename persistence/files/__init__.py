"""The files beside SQLite: a session's ``events.jsonl`` (:mod:`.events_reader`), how much of a growing
line file is complete (:mod:`.file_tail`, standard library only: the agent hook loads it), atomic
replacement (:mod:`.atomic_file`), tiktoken's offline encoding files (:mod:`.tokenizer_cache`), the
node-local logs of events shipped from other nodes (:mod:`.events_log`) and the per-node disk guard
of a one-machine cluster (:mod:`.node_disk`)."""
