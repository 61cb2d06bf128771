"""The SQLite files themselves: opening them (:mod:`.connection`), the schema and its migrations
(:mod:`.schema`, :mod:`.migrations`), what every writer of one file shares (:mod:`.writer`), reused
read-only connections (:mod:`.read_connection`) and the values SQL binds (:mod:`.sql_values`)."""
