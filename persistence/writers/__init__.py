"""The writers, one class per SQLite file and the only one that writes it: the memory database's
:class:`~persistence.writers.store.Store` (its StoreActor), forgetting inside it (:mod:`.forget`),
and the job queue's :class:`~persistence.writers.queue_store.QueueStore` (the QueueActor)."""
