"""The files beside SQLite: a session's ``events.jsonl`` (:mod:`.events_reader`), how much of a growing
line file is complete (:mod:`.file_tail`, standard library only: the agent hook loads it), atomic
replacement (:mod:`.atomic_file`) and tiktoken's offline encoding files (:mod:`.tokenizer_cache`)."""
