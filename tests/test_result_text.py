"""The text ``grace sql`` and ``grace reviewer list`` print (flows/cli/result_text.py), from rows
as DuckDB fetches them."""

from __future__ import annotations

import csv
import io
import json
from datetime import date, datetime, timezone

import duckdb
import pytest

from flows.cli.result_text import CELL_CHARS, TABLE_ROWS, HeldRows, OutputFormat, render, result_text
from grace_core.errors import QueryFailed
from storage.config import LakeConfig
from storage.readonly_sql import QueryResult

TYPED = """SELECT * FROM (VALUES
    ('abc', 1, 0.5, true, TIMESTAMPTZ '2026-01-02 03:04:05+00', DATE '2026-01-02', [1, 2], {'k': 'v'}),
    ('with, comma "quoted"', -20, 1/3, false, NULL, NULL, [], NULL),
    (NULL, NULL, 1e10, NULL, TIMESTAMPTZ '2026-01-02 03:04:05.123456+00', NULL, NULL, NULL)
) t(s, i, f, b, t, d, l, st)"""


def run(sql: str, fmt: OutputFormat) -> str:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return result_text(QueryResult(con, sql, LakeConfig(sql_memory_limit="16MB")), fmt).decode("utf-8")


def test_the_table_is_aligned_with_nulls_booleans_times_and_a_row_count() -> None:
    assert run(TYPED, OutputFormat.table) == """\
┌──────────────────────┬──────┬───────────┬───────┬────────────────────────────────┬────────────┬────────┬────────────┐
│ s                    ┆ i    ┆ f         ┆ b     ┆ t                              ┆ d          ┆ l      ┆ st         │
╞══════════════════════╪══════╪═══════════╪═══════╪════════════════════════════════╪════════════╪════════╪════════════╡
│ abc                  ┆ 1    ┆ 0.5       ┆ true  ┆ 2026-01-02 03:04:05 UTC        ┆ 2026-01-02 ┆ [1, 2] ┆ {"k": "v"} │
│ with, comma "quoted" ┆ -20  ┆ 0.333333  ┆ false ┆ null                           ┆ null       ┆ []     ┆ null       │
│ null                 ┆ null ┆ 1.0000e10 ┆ null  ┆ 2026-01-02 03:04:05.123456 UTC ┆ null       ┆ null   ┆ null       │
└──────────────────────┴──────┴───────────┴───────┴────────────────────────────────┴────────────┴────────┴────────────┘
(3 rows)
"""


def test_long_text_is_cut_and_a_long_result_counted() -> None:
    text = run(f"SELECT repeat('x', {CELL_CHARS + 5}) AS long, 'a\nb' AS two_lines", OutputFormat.table)
    assert f"│ {'x' * CELL_CHARS}… ┆ a\\nb      │" in text
    many = run(f"SELECT range AS n FROM range({TABLE_ROWS + 234})", OutputFormat.table)
    assert many.count("\n│ ") == TABLE_ROWS + 1  # the header and the rows shown
    assert many.endswith(f"({TABLE_ROWS + 234} rows; the first {TABLE_ROWS} shown: --format csv or json with --output FILE "
                         "writes them all)\n")
    assert run("SELECT 1 AS one WHERE false", OutputFormat.table) == "┌─────┐\n│ one │\n╞═════╡\n└─────┘\n(0 rows)\n"


def test_csv_and_json_hold_every_value() -> None:
    rows = list(csv.reader(io.StringIO(run(TYPED, OutputFormat.csv))))
    assert rows[0] == ["s", "i", "f", "b", "t", "d", "l", "st"]
    assert rows[1] == ["abc", "1", "0.5", "true", "2026-01-02T03:04:05.000000+0000", "2026-01-02", "[1, 2]", '{"k": "v"}']
    assert rows[2] == ['with, comma "quoted"', "-20", repr(1 / 3), "false", "", "", "[]", ""]
    assert rows[3][:3] == ["", "", "10000000000.0"]
    objects = json.loads(run(TYPED, OutputFormat.json))
    assert objects[0] == {"s": "abc", "i": 1, "f": 0.5, "b": True, "t": "2026-01-02T03:04:05+00:00", "d": "2026-01-02",
                          "l": [1, 2], "st": {"k": "v"}}
    assert objects[2]["t"] == "2026-01-02T03:04:05.123456+00:00" and objects[2]["s"] is None
    assert json.loads(run("SELECT 'nan'::DOUBLE AS x, 'é' AS y", OutputFormat.json)) == [{"x": None, "y": "é"}]


def test_rows_from_python_render_as_rows_from_duckdb() -> None:
    """``grace reviewer list`` renders a table it holds; the same values give the same text."""
    rows = [("alice", datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), date(2026, 1, 2), None)]
    text = render(HeldRows(["name", "added", "day", "note"], rows), OutputFormat.table)
    sql = ("SELECT 'alice' AS name, TIMESTAMPTZ '2026-01-02 03:04:05+00' AS added, DATE '2026-01-02' AS day, "
           "NULL::VARCHAR AS note")
    assert text == run(sql, OutputFormat.table)


def test_a_huge_result_is_counted_by_duckdb_in_a_table_and_refused_as_a_file() -> None:
    """The table reads its first rows and asks DuckDB for the count (200 million rows, no row
    through Python); CSV and JSON, which hold every row, stop at the memory limit (16MB here)."""
    huge = "SELECT range AS n, 'some text' AS s FROM range(200000000)"
    assert run(huge, OutputFormat.table).endswith(
        f"(200000000 rows; the first {TABLE_ROWS} shown: --format csv or json with --output FILE writes them all)\n")
    for fmt in (OutputFormat.csv, OutputFormat.json):
        with pytest.raises(QueryFailed, match=r"^the result is larger than 16MB \(GRACE_SQL_MEMORY_LIMIT\): add a LIMIT or aggregate$"):
            run(huge, fmt)
    assert len(run("SELECT range AS n FROM range(100000)", OutputFormat.csv).splitlines()) == 100001  # under the limit: all
    explained = run("EXPLAIN SELECT * FROM range(10)", OutputFormat.table)
    assert "explain_key" in explained and explained.endswith("(1 row)\n")
