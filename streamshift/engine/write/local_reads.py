"""The rule of the write path's reads in the apply's own process (through deltalake, where
Spark would compute the whole file list of a version its own commit just made): which tables
may be read so, what a failure does, and the rows made ready for Spark.

Two reads follow it: a view's touched groups from current state (``views.groups_read_here``)
and a small batch's history lookup (``batches._history_read_here``). A read that fails sends
its table to Spark's read for ``READ_HERE_AGAIN_AFTER`` seconds; Spark can always read it.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

from pyspark.sql.types import StructType

if TYPE_CHECKING:
    import pyarrow as pa

# A table deltalake failed on is read by Spark, then by deltalake again once this long has
# passed (a failure may be passing: a file being replaced, a full disk).
READ_HERE_AGAIN_AFTER = 600.0
_NOT_READ_HERE: dict[str, float] = {}  # table -> when deltalake last failed on it (monotonic)


def may_read_here(path: str) -> bool:
    """Whether the table at ``path`` may be read through deltalake in this process: on a local
    disk, and deltalake has not failed on it in the last ``READ_HERE_AGAIN_AFTER`` seconds."""
    failed_at = _NOT_READ_HERE.get(path)
    lately = failed_at is not None and time.monotonic() - failed_at < READ_HERE_AGAIN_AFTER
    return ("://" not in path or path.startswith("file://")) and not lately


def read_here_failed(path: str, exc: Exception) -> None:
    """Spark reads the table at ``path`` for the next ``READ_HERE_AGAIN_AFTER`` seconds; the
    job's log says so once."""
    _NOT_READ_HERE[path] = time.monotonic()
    print(
        f"[write] {path}: read through Spark for the next {READ_HERE_AGAIN_AFTER / 60:.0f} "
        f"min ({type(exc).__name__}: "
        f"{str(exc).splitlines()[0] if str(exc) else ''})",
        file=sys.stderr,
        flush=True,
    )


def read_here_succeeded(path: str) -> None:
    _NOT_READ_HERE.pop(path, None)


def as_spark_reads(schema_json: str, rows: pa.Table) -> tuple[StructType, pa.Table]:
    """(schema, rows): a deltalake read's Delta schema as Spark's and its rows cast to the
    Arrow types Spark gives that schema (pyarrow has no kernels for deltalake's string_view
    columns, and timestamps are UTC), ready for ``spark.createDataFrame(rows, schema)``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = StructType.fromJson(json.loads(schema_json))
    return schema, rows.cast(to_arrow_schema(schema, timezone="UTC"))
