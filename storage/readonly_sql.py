"""SQL a user typed (``grace sql``, :meth:`storage.lake.Lake.query`), run so that it can only
read the lake's own tables and views.

Two walls. The second stops every read of a file that is not the lake's, but not a write
into the lake's own table folder (DuckDB's allow-list opens a folder for reading and writing
alike); the first stops every write:

1. **What may run** is decided from DuckDB's own parse (statement type and parse tree), with
   one keyword check where DuckDB gives no tree (:func:`readonly_statement`): exactly one statement, of parsed type ``SELECT`` (``WITH``,
   ``VALUES``, ``FROM``-first, ``UNPIVOT``, ``DESCRIBE``, ``SUMMARIZE``, ``SHOW``, ``PIVOT … IN``
   included), a ``PIVOT`` whose columns come from the data (parsed type ``MULTI``), or an
   ``EXPLAIN`` of one of these. Two holes of the parsed type are closed on the parse tree:
   a ``SELECT`` may carry a data-modifying ``WITH`` clause (``WITH x AS (COPY … TO 'f') SELECT 1``
   parses as ``SELECT`` and writes ``f``), so every query node of its JSON parse tree
   (``json_serialize_sql``) must be a plain query node; and ``MULTI`` has no parse tree to
   inspect while DuckDB runs its first statement (the query for the pivot's columns, ``WITH``
   clause included) before binding the rest, so one holding a ``COPY``/``INSERT``/``UPDATE``/
   ``DELETE``/``MERGE`` keyword (DuckDB's tokenizer) is refused, and the rest runs as
   ``SELECT * FROM (…)``, which parses only if it is a query. ``EXPLAIN ANALYZE`` runs its
   statement and is refused whatever it explains.
2. **What it can reach** (:func:`sandbox`): a fresh in-memory DuckDB that attaches the catalog
   read-only, with external access off except for the lake's table files, automatic extension
   install and load off, a memory limit, no spilling to disk, a bounded thread count, and the
   configuration locked last. ``read_csv('/etc/passwd')``, ``read_text('/proc/self/environ')``,
   ``glob``, other buckets, ``ATTACH``, ``INSTALL``/``LOAD`` and ``http://`` URLs fail there,
   and so does every read of the files of a table with private columns (``reviewers``: its salts
   and key hashes, :data:`storage.catalog_seal.PRIVATE_COLUMNS`), which the catalog holds as a copy
   without them (:func:`storage.catalog_seal.table_folders`).

A timer interrupts a statement that runs longer than the timeout; a result larger than the
memory limit is refused instead of being gathered (a table shown to a person reads only its
first rows and DuckDB's count of the rest: :class:`QueryResult`). Every refusal or failure is one line
(:class:`ReadOnlyQuery`, :class:`QueryFailed`).

A query a person typed (``grace sql``) runs in a child process of its own
(:func:`run_isolated`), because DuckDB checks its interrupt and memory limit only between
vectors: a scalar function (``repeat('x', 3000000000)``, ``lpad``, ``list_sort(range(1e8))``,
``damerau_levenshtein`` of long strings) ran for minutes and took gigabytes past both. The
child has an OS limit on its memory (``RLIMIT_DATA``: the statement's memory limit plus
:data:`CHILD_HEADROOM_BYTES`) and on its CPU time; the parent kills it at the timeout whatever
it is doing, and reads at most :data:`RESULT_CAP_BYTES` of result, so none of these can hang
or take down the machine or the command.
"""

from __future__ import annotations

import json
import os
import re
import resource
import select
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import duckdb

from grace_core.errors import LakeError, QueryFailed, ReadOnlyQuery, first_line
from grace_core.per_process import PerProcess
from storage.config import SIZE_PATTERN, SIZE_UNITS, LakeConfig
from storage.duckdb_host import sql_string

if TYPE_CHECKING:
    import pyarrow as pa

QUERY_NODES = frozenset({"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"})
"""Parse-tree query nodes that only read; any other ``*_NODE`` (``COPY_QUERY_NODE``,
``INSERT_QUERY_NODE``, ``DELETE_QUERY_NODE``, …) is a write hidden in a ``WITH`` clause."""

WRITE_KEYWORDS = frozenset({"copy", "insert", "update", "delete", "merge"})
"""Statements a ``WITH`` clause may hold besides ``SELECT``. A ``MULTI`` statement (a ``PIVOT``
whose columns come from the data) has no parse tree to inspect, and DuckDB runs its first
statements (the query for the pivot's columns, ``WITH`` clause included) before binding the
rest, so one holding any of these keywords is refused outright."""

CATALOG_ALIAS = "catalog"
RESULT_CAP_BYTES = 256 * 2**20
"""Largest result (Arrow IPC bytes, or the text ``grace sql`` prints) a typed query returns: enough for any table a person reads
or a file they write; a larger one is refused with a line asking for a LIMIT or an aggregate."""
CHILD_HEADROOM_BYTES = 1536 * 2**20
"""What the query's child process may use beyond the statement's memory limit: the Python
interpreter and libraries it inherits, DuckDB's own structures and the result being written."""
KILL_GRACE_S = 2.0
"""Seconds past the timeout before the child is killed (DuckDB's own interrupt comes first)."""
BATCH_ROWS = 65_536
_SIZE = re.compile(SIZE_PATTERN)


def size_bytes(text: str) -> int:
    """Bytes of a DuckDB size such as ``512MB``, ``2GB`` or ``1.5GiB`` (the ``GRACE_SQL_MEMORY_LIMIT`` form)."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"not a size like 512MB or 2GB: {text!r}")
    return int(float(m.group(1)) * SIZE_UNITS[m.group(2).lower()])


def _parse(sql: str) -> list[Any]:
    """DuckDB's statements of ``sql``."""
    try:
        return duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryFailed(f"invalid SQL: {first_line(exc)}") from None


def _kind(statement: Any) -> str:
    """The parsed type of ``statement`` (``SELECT``, ``MULTI``, ``COPY``, …); ``UNKNOWN`` for a
    type the Python client cannot name (``UPDATE EXTENSIONS`` in duckdb 2.0.1), which is refused."""
    try:
        return statement.type.name
    except ValueError:
        return "UNKNOWN"


def _tokens(sql: str, *, keywords_only: bool = False) -> Iterator[tuple[int, str]]:
    """(offset, text) of each token of ``sql`` but comments (or of its keywords only), by
    DuckDB's own tokenizer, the scanner of its parser."""
    toks = duckdb.tokenize(sql)
    for i, (start, kind) in enumerate(toks):
        end = toks[i + 1][0] if i + 1 < len(toks) else len(sql)
        if kind != duckdb.token_type.comment and (kind == duckdb.token_type.keyword or not keywords_only):
            yield start, sql[start:end].strip()


def _split_explain(text: str) -> tuple[str, str]:
    """``(prefix, statement)``: ``("EXPLAIN (FORMAT json) ", "SELECT …")`` for an ``EXPLAIN``,
    ``("", text)`` otherwise. ``EXPLAIN ANALYZE`` (in any spelling) is refused: it runs its statement."""
    tokens = list(_tokens(text))
    if not tokens or tokens[0][1].lower() != "explain":
        return "", text
    options: list[str] = []
    i = 1
    if i < len(tokens) and tokens[i][1] == "(":
        depth = 0
        for j in range(i, len(tokens)):
            depth += {"(": 1, ")": -1}.get(tokens[j][1], 0)
            options.append(tokens[j][1].strip('"').lower())
            if depth == 0:
                i = j + 1
                break
        else:
            raise QueryFailed("invalid SQL: unbalanced EXPLAIN options")
    elif i < len(tokens):
        options.append(tokens[i][1].strip('"').lower())
        if options[-1] == "verbose":
            i += 1
    if {"analyze", "analyse"} & set(options):
        raise ReadOnlyQuery("grace sql is read-only: EXPLAIN ANALYZE runs its statement and is refused (use EXPLAIN)")
    if i >= len(tokens):
        raise QueryFailed("invalid SQL: EXPLAIN of nothing")
    return text[: tokens[i][0]], text[tokens[i][0]:]


def _writes_in(tree: Any) -> list[str]:
    """Query nodes of a ``json_serialize_sql`` tree that are not plain reads."""
    found: list[str] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, str) and kind.endswith("_NODE") and kind not in QUERY_NODES:
                found.append(kind.removesuffix("_NODE").removesuffix("_QUERY"))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


_PARSERS: PerProcess[None, tuple[duckdb.DuckDBPyConnection, threading.Lock]] = PerProcess(lambda _: (duckdb.connect(":memory:", config={
    "enable_external_access": False, "autoinstall_known_extensions": False, "autoload_known_extensions": False,
    "lock_configuration": True,
}), threading.Lock()))  # one connection is not for two threads at once: its lock


def _serialize_sql(statement: str) -> str:
    """``json_serialize_sql(statement)``: DuckDB's parse tree of ``statement`` as JSON. It only
    parses, so one in-memory connection without external access serves every call of this process
    (opening a DuckDB takes longer than the parse); a forked child opens its own."""
    con, lock = _PARSERS.get(None)
    with lock:
        return con.execute("SELECT json_serialize_sql(?)", [statement]).fetchall()[0][0]


def _check_select_tree(statement: str) -> None:
    """Refuse a ``SELECT`` whose parse tree holds a write (``WITH x AS (COPY …)``, ``INSERT``, …)."""
    try:
        text = _serialize_sql(statement)
    except duckdb.Error as exc:
        raise QueryFailed(f"invalid SQL: {first_line(exc)}") from None
    tree = json.loads(text)
    if tree.get("error"):
        raise QueryFailed(f"invalid SQL: {tree.get('error_message', 'cannot be parsed')}")
    writes = _writes_in(tree)
    if writes:
        raise ReadOnlyQuery(
            f"grace sql is read-only: a WITH clause holding {', '.join(sorted(set(writes)))} is refused (only SELECT)"
        )


def readonly_statement(sql: str) -> str:
    """The statement to run for ``sql`` if it is exactly one query (``SELECT``, ``PIVOT`` and the
    like) or an ``EXPLAIN`` without ``ANALYZE`` of one; otherwise raise :class:`ReadOnlyQuery`
    (a statement that could write, attach, load or change settings) or :class:`QueryFailed`
    (not parseable). A data-dependent ``PIVOT`` comes back as ``SELECT * FROM (…)``."""
    statements = _parse(sql)
    if len(statements) != 1:
        raise ReadOnlyQuery(f"grace sql runs exactly one SELECT statement, got {len(statements)} statements")
    text = statements[0].query
    prefix, body = _split_explain(text)
    if _kind(statements[0]) == "EXPLAIN" and not prefix:
        raise ReadOnlyQuery("grace sql is read-only: this EXPLAIN is refused (only EXPLAIN of a SELECT)")
    inner = _parse(body) if prefix else statements
    if len(inner) != 1:
        raise ReadOnlyQuery(f"grace sql explains exactly one SELECT statement, got {len(inner)} statements")
    kind = _kind(inner[0])
    if kind == "SELECT":
        _check_select_tree(inner[0].query)
        return text
    if kind == "MULTI":  # a PIVOT whose columns come from the data: DuckDB first runs a query for them
        writes = sorted({t.lower() for _, t in _tokens(inner[0].query, keywords_only=True)} & WRITE_KEYWORDS)
        if writes:
            raise ReadOnlyQuery(
                f"grace sql is read-only: a PIVOT holding {', '.join(w.upper() for w in writes)} is refused "
                "(only SELECT; quote a column named like a keyword)"
            )
        wrapped = f"SELECT * FROM (\n{inner[0].query}\n)"
        try:
            check = duckdb.extract_statements(wrapped)
        except duckdb.Error:
            check = []
        if len(check) != 1 or _kind(check[0]) not in ("MULTI", "SELECT"):
            raise ReadOnlyQuery("grace sql is read-only: this statement is refused (only SELECT, PIVOT and EXPLAIN of them)")
        return prefix + wrapped
    raise ReadOnlyQuery(f"grace sql is read-only: {kind} statements are refused (only SELECT)")


def sandbox(catalog: Path, *, readable: Sequence[str], filesystem: Any | None, config: LakeConfig) -> duckdb.DuckDBPyConnection:
    """A connection that sees the catalog (read-only) and may open only the files under the
    ``readable`` folders (the tables' own, private ones excepted:
    :func:`storage.catalog_seal.table_folders`), with ``config``'s memory and thread limits; its
    configuration is locked."""
    try:
        con = duckdb.connect(":memory:", config={
            "autoinstall_known_extensions": False, "autoload_known_extensions": False,
            "memory_limit": config.sql_memory_limit, "threads": config.sql_threads, "temp_directory": "",
        })
    except duckdb.Error as exc:
        raise QueryFailed(f"cannot start the SQL engine: {first_line(exc)}") from None
    try:
        con.execute(f"ATTACH {sql_string(str(catalog))} AS {CATALOG_ALIAS} (READ_ONLY)")
        con.execute(f"USE {CATALOG_ALIAS}")
        if filesystem is not None:
            con.register_filesystem(filesystem)
        con.execute(f"SET allowed_directories = [{', '.join(sql_string(p) for p in readable)}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET enable_progress_bar = false")  # drawn on stdout (a flow run's log) by a long query
        con.execute("SET lock_configuration = true")
    except duckdb.Error as exc:
        con.close()
        raise LakeError(f"cannot open the catalog {catalog}: {first_line(exc)}") from None
    return con


def _too_large(config: LakeConfig) -> QueryFailed:
    return QueryFailed(f"the result is larger than {config.sql_memory_limit} (GRACE_SQL_MEMORY_LIMIT): add a LIMIT or aggregate")


def _arrow_result(relation: duckdb.DuckDBPyRelation, config: LakeConfig) -> pa.Table:
    """The rows of ``relation`` as Arrow, refused when larger than ``config``'s memory limit."""
    import pyarrow as pa  # here: a query whose result is printed (grace sql) needs no Arrow

    limit = size_bytes(config.sql_memory_limit)
    reader = relation.to_arrow_reader(BATCH_ROWS)
    batches, size = [], 0
    for batch in reader:
        size += batch.nbytes
        if size > limit:
            raise _too_large(config)
        batches.append(batch)
    return pa.Table.from_batches(batches, schema=reader.schema)


def _engine_error(exc: BaseException) -> bool:
    """Whether ``exc`` is DuckDB's, or Arrow's as DuckDB hands a result over (pyarrow is loaded
    only when a result is taken as Arrow)."""
    pa = sys.modules.get("pyarrow")
    return isinstance(exc, duckdb.Error) or (pa is not None and isinstance(exc, pa.ArrowException))


class QueryResult:
    """A statement run in a :func:`sandbox`, as a ``produce`` callable of :func:`run_readonly`
    reads it: its ``columns``, its rows a batch at a time (:meth:`fetchmany`, from the first
    again after :meth:`restart`), the count of all its rows (:meth:`count_all`), and the error for
    a result past the memory limit (:meth:`too_large`, ``limit_bytes``)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, statement: str, config: LakeConfig) -> None:
        self._con, self._statement, self._config = con, statement, config
        self._cursor = con.execute(statement)
        self.columns = [d[0] for d in self._cursor.description]
        self.limit_bytes = size_bytes(config.sql_memory_limit)

    def fetchmany(self, rows: int) -> list[tuple]:
        """The next ``rows`` rows (fewer at the end; none after it)."""
        return self._cursor.fetchmany(rows)

    def count_all(self) -> int | None:
        """How many rows the whole result has, counted by DuckDB (the statement again, as a
        subquery of a checked ``SELECT count(*)``: no row reaches Python); None for a statement
        that cannot be a subquery (``EXPLAIN``). Ends the reading of the rows."""
        try:
            counting = readonly_statement(f"SELECT count(*) FROM (\n{self._statement}\n)")
        except (ReadOnlyQuery, QueryFailed):
            return None
        ((count,),) = self._con.execute(counting).fetchall()
        return count

    def restart(self) -> None:
        """Run the statement again: :meth:`fetchmany` starts from its first row."""
        self._cursor = self._con.execute(self._statement)

    def too_large(self) -> QueryFailed:
        return _too_large(self._config)


def run_readonly(
    catalog: Path, sql: str, *, readable: Sequence[str], filesystem: Any | None, config: LakeConfig, checked: bool = False,
    produce: Callable[[QueryResult], Any] | None = None,
) -> Any:
    """Run ``sql`` (see :func:`readonly_statement`; ``checked``: it is that statement already)
    in a :func:`sandbox` on ``catalog``, stopped after ``config.sql_timeout_s``; the result as
    Arrow, refused when larger than the memory limit, or what ``produce`` makes of the
    :class:`QueryResult` (the timeout covers it: it fetches the rows)."""
    statement = sql if checked else readonly_statement(sql)
    con = sandbox(catalog, readable=readable, filesystem=filesystem, config=config)
    stopped = threading.Event()

    def stop() -> None:
        stopped.set()
        con.interrupt()

    timer = threading.Timer(config.sql_timeout_s, stop)
    timer.daemon = True
    timer.start()
    try:
        return _arrow_result(con.sql(statement), config) if produce is None else produce(QueryResult(con, statement, config))
    except Exception as exc:
        if not _engine_error(exc):
            raise
        if stopped.is_set():
            raise QueryFailed(
                f"the query ran longer than {config.sql_timeout_s:g} s and was stopped (GRACE_SQL_TIMEOUT_S)"
            ) from None
        if isinstance(exc, duckdb.OutOfMemoryException) or "Out of Memory" in str(exc):  # also Arrow's buffers
            raise QueryFailed(
                f"the query needs more memory than {config.sql_memory_limit} (GRACE_SQL_MEMORY_LIMIT): {first_line(exc)}"
            ) from None
        if isinstance(exc, duckdb.PermissionException):
            raise ReadOnlyQuery(f"grace sql reads only the lake's tables and views: {first_line(exc)}") from None
        raise QueryFailed(first_line(exc)) from None
    finally:
        timer.cancel()
        con.close()


def _child(catalog: Path, statement: str, readable: Sequence[str], filesystem: Any | None, config: LakeConfig,
           produce: Callable[[QueryResult], bytes], out: int) -> None:
    """In the forked child of :func:`run_isolated`: limit memory and CPU, run ``statement``
    through :func:`run_readonly`'s sandbox and write ``b"R"`` + what ``produce`` makes of the
    result, or ``b"E"`` + a JSON error, to the pipe ``out``; never returns."""
    code = 0
    try:
        cap = size_bytes(config.sql_memory_limit) + CHILD_HEADROOM_BYTES
        used = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # what the fork already holds
        resource.setrlimit(resource.RLIMIT_DATA, (cap + used, cap + used))
        cpu = int(config.sql_timeout_s * max(1, config.sql_threads)) + 5
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        payload = b"R" + run_readonly(catalog, statement, readable=readable, filesystem=filesystem, config=config, checked=True,
                                      produce=produce)
        if len(payload) > RESULT_CAP_BYTES:
            raise QueryFailed(f"the result is larger than {RESULT_CAP_BYTES // 2**20} MiB: add a LIMIT or aggregate")
    except (QueryFailed, ReadOnlyQuery, LakeError) as exc:
        payload = b"E" + json.dumps({"kind": type(exc).__name__, "message": str(exc)}).encode()
    except MemoryError:
        payload = b"E" + json.dumps({"kind": "memory", "message": ""}).encode()
    except BaseException as exc:  # noqa: BLE001 - the child reports every failure as a line, then exits
        kind = "memory" if "Out of Memory" in str(exc) else "QueryFailed"  # e.g. Arrow's buffers, as DuckDB hands them over
        payload = b"E" + json.dumps({"kind": kind, "message": first_line(exc) or type(exc).__name__}).encode()
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(out, view):]
    except OSError:
        code = 1
    os._exit(code)


def run_isolated(
    catalog: Path, sql: str, *, readable: Sequence[str], filesystem: Any | None, config: LakeConfig,
    produce: Callable[[QueryResult], bytes],
) -> bytes:
    """:func:`run_readonly` for a query a person typed, in a forked child bounded by the OS
    (see the module docstring): killed at ``config.sql_timeout_s`` (+ :data:`KILL_GRACE_S`),
    out of memory past the statement's memory limit, its output refused past
    :data:`RESULT_CAP_BYTES`. The child turns the result into bytes with ``produce`` (the text
    ``grace sql`` prints: rendering runs inside the bounds too). Every outcome is those bytes
    or one :class:`QueryFailed` / :class:`ReadOnlyQuery` line."""
    statement = readonly_statement(sql)
    memory = f"the query needs more memory than {config.sql_memory_limit} (GRACE_SQL_MEMORY_LIMIT): add a LIMIT or aggregate"
    late = f"the query ran longer than {config.sql_timeout_s:g} s and was stopped (GRACE_SQL_TIMEOUT_S)"
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (its outcome is what the parent reports)
        os.close(read_end)
        _child(catalog, statement, readable, filesystem, config, produce, write_end)
    os.close(write_end)
    chunks, size, killed = [], 0, None
    deadline = time.monotonic() + config.sql_timeout_s + KILL_GRACE_S
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                killed = late
                break
            ready, _, _ = select.select([read_end], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(read_end, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > RESULT_CAP_BYTES + 1:
                killed = f"the result is larger than {RESULT_CAP_BYTES // 2**20} MiB: add a LIMIT or aggregate"
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        if killed is not None:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if killed is not None:
        raise QueryFailed(killed)
    data = b"".join(chunks)
    if os.WIFSIGNALED(status) or not data:
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        raise QueryFailed(late if sig == signal.SIGXCPU else memory)
    if data[:1] == b"E":
        error = json.loads(data[1:])
        if error["kind"] == "memory":
            raise QueryFailed(memory)
        raise (ReadOnlyQuery if error["kind"] == "ReadOnlyQuery" else QueryFailed)(error["message"])
    return data[1:]
