"""Query results as the text ``grace`` prints: an aligned table with a row count, CSV with a
header, or a JSON array of row objects. Made from plain rows (tuples of Python values, as DuckDB
fetches them), so ``grace sql`` renders its result inside the query's bounded child process
without loading polars or Arrow (:func:`result_text`)."""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import date, datetime, time
from enum import Enum
from typing import Any, Iterable, Protocol, Sequence


class OutputFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


TABLE_ROWS = 1000
"""Rows the table format shows; the rest are counted (``--format csv|json --output FILE`` writes all)."""
CELL_CHARS = 80
"""Characters of a text cell the table shows; a longer one ends in ``…``."""
FETCH_ROWS = 10_000


def _float_cell(v: float) -> str:
    """A float as the table shows it: up to six decimals between 10⁻⁶ and 10⁶ (``0.333333``,
    ``2.0``), else four significant decimals and an exponent (``1.2346e8``); ``NaN``, ``inf``."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == 0 or 1e-6 <= abs(v) < 1e6:
        text = f"{v:.6f}".rstrip("0")
        return text + "0" if text.endswith(".") else text
    mantissa, exponent = f"{v:.4e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _datetime_cell(v: datetime | time) -> str:
    text = v.strftime("%Y-%m-%d %H:%M:%S" if isinstance(v, datetime) else "%H:%M:%S")
    if v.microsecond:
        text += f".{v.microsecond:06d}"
    return text + (f" {v.tzname()}" if v.tzinfo is not None else "")


def _nested(v: Any) -> str:
    return json.dumps(v, default=str, ensure_ascii=False)


def _cell(v: Any) -> str:
    """One value as a table cell: ``null``, ``true``/``false``, numbers, text (one line, at most
    :data:`CELL_CHARS` characters), times with their zone, lists and structs as JSON."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return _float_cell(v)
    if isinstance(v, (datetime, time)):
        return _datetime_cell(v)
    if isinstance(v, date):
        return v.isoformat()
    text = _nested(v) if isinstance(v, (list, tuple, dict)) else repr(v) if isinstance(v, (bytes, bytearray)) else str(v)
    text = text.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\r").replace("\t", " ")
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS] + "…"


def table_text(columns: Sequence[str], rows: Sequence[tuple], total: int | None) -> str:
    """``rows`` (the first of ``total``; None: of more, uncounted) under ``columns`` as a
    box-drawn table, then the row count."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]

    def line(left: str, fill: str, mid: str, right: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right

    def row_line(values: Sequence[str]) -> str:
        return "│" + "┆".join(f" {v.ljust(w)} " for v, w in zip(values, widths)) + "│"

    out = [line("┌", "─", "┬", "┐"), row_line(columns), line("╞", "═", "╪", "╡"), *(row_line(r) for r in cells),
           line("└", "─", "┴", "┘")]
    more = f"; the first {len(rows)} shown: --format csv or json with --output FILE writes them all"
    if total is None:
        return "\n".join(out) + f"\n(more than {len(rows)} rows{more})\n"
    more = more if total > len(rows) else ""
    return "\n".join(out) + f"\n({total} row{'s' if total != 1 else ''}{more})\n"


def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, datetime):
        return v.strftime("%Y-%m-%dT%H:%M:%S.%f") + (v.strftime("%z") if v.tzinfo is not None else "")
    if isinstance(v, (date, time)):
        return v.isoformat()
    if isinstance(v, (list, tuple, dict)):
        return _nested(v)
    return v


def csv_lines(rows: Iterable[tuple]) -> str:
    """``rows`` as CSV lines: empty for null, ``true``/``false``, ISO times, lists and structs as JSON."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([_csv_value(v) for v in row] for row in rows)
    return out.getvalue()


def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (datetime, date, time)):
        return v.isoformat()
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return str(v)


def json_objects(columns: Sequence[str], rows: Iterable[tuple]) -> list[str]:
    """Each of ``rows`` as a JSON object (column → value; times in ISO 8601, NaN and infinities null)."""
    return [json.dumps({c: _json_value(v) for c, v in zip(columns, row)}, ensure_ascii=False, separators=(",", ":"))
            for row in rows]


class Rows(Protocol):
    """Rows to render: :class:`storage.readonly_sql.QueryResult` (a statement run in the SQL
    sandbox) or :class:`HeldRows` (a table a command holds)."""

    columns: list[str]
    limit_bytes: int

    def fetchmany(self, rows: int) -> list[tuple]: ...
    def count_all(self) -> int | None: ...
    def restart(self) -> None: ...
    def too_large(self) -> Exception: ...


class HeldRows:
    """:class:`Rows` of a table in memory (``grace reviewer list``), without a size limit."""

    def __init__(self, columns: Sequence[str], rows: Sequence[tuple]) -> None:
        self.columns, self._rows, self._at, self.limit_bytes = list(columns), rows, 0, 2**62

    def fetchmany(self, rows: int) -> list[tuple]:
        batch = list(self._rows[self._at:self._at + rows])
        self._at += len(batch)
        return batch

    def count_all(self) -> int:
        return len(self._rows)

    def restart(self) -> None:
        self._at = 0

    def too_large(self) -> Exception:
        return ValueError(f"more than {self.limit_bytes} bytes")


def _text(rows: list[tuple], columns: Sequence[str], fmt: OutputFormat) -> str:
    return csv_lines(rows) if fmt is OutputFormat.csv else ",".join(json_objects(columns, rows))


def render(source: Rows, fmt: OutputFormat) -> str:
    """``source``'s rows as text in ``fmt``, read :data:`FETCH_ROWS` at a time.

    - The table shows the first :data:`TABLE_ROWS` rows and the count of all of them, which the
      source counts (DuckDB, for a query: the rest never reaches Python).
    - CSV and JSON hold every row, and refuse a result whose text would pass
      ``source.limit_bytes`` (``source.too_large()``): at once when the first rows' size times the
      count of all passes it, else as soon as the text does."""
    first = source.fetchmany(FETCH_ROWS)
    if fmt is OutputFormat.table:
        total = len(first) if len(first) <= TABLE_ROWS else source.count_all()
        return table_text(source.columns, first[:TABLE_ROWS], total)
    size = len(_text(first, source.columns, fmt))
    if len(first) == FETCH_ROWS:  # maybe many more: how many, before writing them out
        total = source.count_all()
        if total is not None and size / len(first) * total > source.limit_bytes:
            raise source.too_large()
        source.restart()
        first = source.fetchmany(FETCH_ROWS)
    pieces, size = [csv_lines([tuple(source.columns)])] if fmt is OutputFormat.csv else [], 0
    batch = first
    while batch:
        piece = _text(batch, source.columns, fmt)
        size += len(piece)
        if size > source.limit_bytes:
            raise source.too_large()
        pieces.append(piece)
        batch = source.fetchmany(FETCH_ROWS)
    if fmt is OutputFormat.csv:
        return "".join(pieces)
    return "[" + ",".join(pieces) + "]\n"


def result_text(result: Rows, fmt: OutputFormat) -> bytes:
    """A statement's result (:class:`storage.readonly_sql.QueryResult`) as text in ``fmt``
    (:func:`render`), UTF-8: what ``grace sql``'s query process hands back."""
    return render(result, fmt).encode("utf-8")
