"""The lake: every path, bucket and DuckDB file GRACE uses lives behind this package."""
