"""Reading Delta tables without Spark or a JVM, through ``deltalake`` (delta-rs).

Only reads: every write stays Spark + Delta. A table that was never written reads as no rows.
Values come back as the Python values Spark's ``collect()`` gives on the same table (with the
session time zone UTC): timestamps as naive UTC datetimes, decimals as ``Decimal``, dates as
``date``; ``tests/test_migration.py`` reads every table of a warehouse both ways and compares.
"""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def _literal(value: Any) -> str:
    if isinstance(value, tuple | list):  # for IN; an empty list matches nothing
        return "(" + (", ".join(_literal(v) for v in value) or "NULL") + ")"
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.isoformat()}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def _naive_utc(table: pa.Table) -> pa.Table:
    """Delta timestamps arrive tz-aware (UTC); Spark with a UTC session gives naive UTC."""
    import pyarrow as pa

    fields = [
        pa.field(f.name, pa.timestamp(f.type.unit))
        if pa.types.is_timestamp(f.type) and f.type.tz
        else f
        for f in table.schema
    ]
    return table.cast(pa.schema(fields)) if fields != list(table.schema) else table


def exists(path: str | Path) -> bool:
    return (Path(path) / "_delta_log").is_dir()


# Each table a process read lately, by path, with the time of the commit it was read at. An
# answer reads a table more than once (explain: the view, current state and history twice
# each), and a long-lived writer reads the tables it just wrote again (the write path's view
# recompute). A table read before is brought forward by the commits since instead of opened
# anew, which replays its log (bench/trace_explain.py); Spark computes a new version's whole
# file list before its first read of it, this reads the new version's files in milliseconds
# (bench/view_read.py). A table deleted and written again at the same path is opened anew:
# the commit it was read at has another time, or is gone.
_KNOWN: dict[str, tuple[Any, int | None]] = {}  # path -> (DeltaTable, its commit's mtime)
_KNOWING = threading.Lock()
KNOWN_AT_MOST = 32  # the tables read longest ago are let go


def _commit_time(path: str, version: int) -> int | None:
    try:
        return (Path(path) / "_delta_log" / f"{version:020d}.json").stat().st_mtime_ns
    except OSError:
        return None


def _registered(builder: Any, name: str, path: str | Path) -> tuple[Any, int, Any, Any]:
    """(builder, version, schema, table): ``builder`` (if any) with the table at ``path``
    registered as ``name``, as of its newest commit, that commit's version, the table's schema
    then (a query holds the version it was registered at, whatever commits come after) and the
    ``DeltaTable`` (which a later reader may bring forward)."""
    from deltalake import DeltaTable

    path = str(path)
    with _KNOWING:
        known = _KNOWN.pop(path, None)
        if (
            known is not None
            and known[1] is not None  # a commit read without its time: nothing to compare
            and _commit_time(path, known[0].version()) == known[1]
        ):
            table = known[0]
            table.update_incremental()
        else:
            table = DeltaTable(path)
        version = table.version()
        _KNOWN[path] = (table, _commit_time(path, version))  # the newest last
        while len(_KNOWN) > KNOWN_AT_MOST:
            del _KNOWN[next(iter(_KNOWN))]
        if builder is not None:
            builder = builder.register(name, table)
        return builder, version, table.schema(), table


def latest_rows(path: str, column: str, dates: list[dt.date]) -> tuple[int, str, pa.Table]:
    """(version, schema, rows): the table's newest version, its schema (Delta's JSON) and its
    rows whose date ``column`` is one of ``dates``, columns in the schema's order, timestamps
    tz-aware UTC."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    if not all(type(d) is dt.date for d in dates):  # typed dates only reach the SQL text
        raise TypeError(f"dates must be datetime.date values: {dates!r}")
    builder, version, schema, _ = _registered(QueryBuilder(), "t", path)
    selected = ", ".join(f'"{f.name}"' for f in schema.fields)
    read = builder.execute(f'SELECT {selected} FROM t WHERE "{column}" IN {_literal(dates)}')
    return version, schema.to_json(), pa.RecordBatchReader.from_stream(read).read_all()


def all_rows(path: str, at_most_bytes: int) -> tuple[int, str, pa.Table] | None:
    """(version, schema, rows) as :func:`latest_rows` gives them, of every row; ``None``,
    nothing read, when the table's files hold more than ``at_most_bytes`` (summed from the
    log's file sizes, of the version registered or one a reader brought it to since)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import QueryBuilder

    builder, version, schema, table = _registered(QueryBuilder(), "t", path)
    files = pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=True)).read_all()
    if (pc.sum(files["size_bytes"]).as_py() or 0) > at_most_bytes:
        return None
    selected = ", ".join(f'"{f.name}"' for f in schema.fields)
    read = builder.execute(f"SELECT {selected} FROM t")
    return version, schema.to_json(), pa.RecordBatchReader.from_stream(read).read_all()


def query(sql: str, tables: dict[str, str | Path]) -> pa.Table:
    """Run DataFusion SQL over Delta tables registered under the given names.

    A table that was never written is registered as missing: callers check :func:`exists`
    first or use :func:`rows`, which reads it as no rows.
    """
    import pyarrow as pa
    from deltalake import QueryBuilder

    builder = QueryBuilder()
    for name, path in tables.items():
        builder = _registered(builder, name, path)[0]
    # From the Arrow stream: pa.table() would first ask whether its argument is a pandas
    # DataFrame, and so import pandas (seconds of every read command's start).
    return _naive_utc(pa.RecordBatchReader.from_stream(builder.execute(sql)).read_all())


def select(
    path: str | Path,
    columns: list[str] | None = None,
    where: list[tuple[str, str, Any]] | None = None,
    order_by: list[str] | None = None,
    limit: int | None = None,
) -> pa.Table | None:
    """The table's matching rows as an Arrow table; ``None`` when the table was never written.

    ``where``: (column, operator, value) conditions, ANDed. Read through deltalake's
    DataFusion engine, which honours deletion vectors (its pyarrow dataset path refuses
    tables that have them, as current state does).
    """
    if not exists(path):
        return None
    selected = ", ".join(f'"{c}"' for c in columns) if columns else "*"
    sql = f"SELECT {selected} FROM t"
    if where:
        sql += " WHERE " + " AND ".join(f'"{c}" {op} {_literal(v)}' for c, op, v in where)
    if order_by:
        # NULLS FIRST: the order Spark's orderBy gives.
        sql += " ORDER BY " + ", ".join(f'"{c}" NULLS FIRST' for c in order_by)
    if limit:
        sql += f" LIMIT {int(limit)}"
    return query(sql, {"t": path})


def rows(
    path: str | Path,
    columns: list[str] | None = None,
    where: list[tuple[str, str, Any]] | None = None,
    order_by: list[str] | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """The table's matching rows as dicts (no rows when the table was never written)."""
    table = select(path, columns, where, order_by, limit)
    data: list[dict[str, Any]] = [] if table is None else table.to_pylist()
    return data


def column_names(path: str | Path) -> list[str]:
    """The table's columns (from its log; no data read); none when it was never written."""
    if not exists(path):
        return []
    return [f.name for f in _registered(None, "t", path)[2].fields]


def stats_columns(path: str | Path) -> set[str]:
    """The columns whose statistics the table's files hold (from its log; no data read)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    adds = pa.RecordBatchReader.from_stream(DeltaTable(str(path)).get_add_actions(flatten=True))
    prefix = "null_count."
    return {c.removeprefix(prefix) for c in adds.schema.names if c.startswith(prefix)}


def delta_tables(root: str | Path) -> list[Path]:
    """Every Delta table under ``root`` (a directory holding ``_delta_log``)."""
    return sorted(p.parent for p in Path(root).rglob("_delta_log") if p.is_dir())
