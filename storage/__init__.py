"""The lake: every path, bucket and DuckDB file GRACE uses lives behind this package.

- :mod:`storage.config` — where the lake is (local folder or ``s3://bucket/prefix``);
- :mod:`storage.schemas` — every table's declared schema, version and partitioning;
- :mod:`storage.filesystem` — local and S3 stores (atomic writes, delta-rs storage options);
- :mod:`storage.delta_tables` — the tables as Delta tables: open, create, insert-if-absent, state;
- :mod:`storage.commit_log` — which units of work are done, with the table versions they left;
- :mod:`storage.commit` — idempotent, concurrency-safe commits of tables;
- :mod:`storage.catalog` / :mod:`storage.views` — the DuckDB catalog and its views;
- :mod:`storage.lake` — :class:`~storage.lake.Lake`, what the flows call (time travel included);
- :mod:`storage.maintenance` / :mod:`storage.check` / :mod:`storage.migrate` — compaction and
  vacuum, the integrity check, and conversion of a lake of the earlier format;
- :mod:`storage.ingest` — document batches into the lake;
- :mod:`storage.table_files` — single table files named by the user (``grace score``).
"""
