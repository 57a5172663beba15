"""The lake: every path, bucket and DuckDB file GRACE uses lives behind this package.

- :mod:`storage.config` — where the lake is (local folder or ``s3://bucket/prefix``);
- :mod:`storage.schemas` — every table's declared schema, version and partitioning;
- :mod:`storage.filesystem` — local and S3 stores with atomic and create-only writes;
- :mod:`storage.manifest` — commit records: which files make up the lake;
- :mod:`storage.commit` — atomic, idempotent commits of tables;
- :mod:`storage.catalog` / :mod:`storage.views` — the DuckDB catalog and its views;
- :mod:`storage.lake` — :class:`~storage.lake.Lake`, what the flows call;
- :mod:`storage.ingest` — document batches into the lake;
- :mod:`storage.table_files` — single table files named by the user (``grace score``).
"""
