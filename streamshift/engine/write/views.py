"""Step 5 of the write path: the view groups an apply touched, recomputed from current state
and MERGEd into each view table (groups that vanished are deleted; a group whose value did not
change is not updated, so a view's change feed holds real changes only). An apply that changed
no current-state row (a replay, a re-run repairing a view), or touched many groups, compares
the groups with the view first and commits nothing when none changed; one that changed rows of
a few groups compares them in the MERGE's conditions, one read of the view less
(bench/small_apply.py's compare_first).

The groups are recomputed from the batch's own rows when every key went into dates current
state never held and no other writer committed since (a new day's file: no read-back of the
files just written), else from current state as stored; and again from the table until no
commit came between, so the last writer to MERGE a group computed it from the latest state.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamshift.engine.write.commits import merge_into
from streamshift.engine.write.local_reads import (
    as_spark_reads,
    may_read_here,
    read_here_failed,
    read_here_succeeded,
)
from streamshift.engine.write.predicates import isin, same_columns
from streamshift.engine.write.steps import Steps
from streamshift.engine.write.target import delta_log_version, partition_bytes, read
from streamshift.engine.write.transforms import changed_groups, recompute_view_groups
from streamshift.spec import sqltext as sql
from streamshift.spec.catalog import LayerTables
from streamshift.spec.contract import IS_DELETED
from streamshift.spec.flow import Flow
from streamshift.spec.sqltext import Sql
from streamshift.store import tables as delta_rows

if TYPE_CHECKING:
    import pyarrow as pa

    from streamshift.engine.write.apply import ApplyResult

# Views with fewer touched groups than this are MERGEd from rows collected to the driver.
LOCAL_SOURCE_BELOW = 10_000
# Whether an apply that changed current-state rows compares its few (local) groups with the
# stored view inside the view's MERGE (its clause conditions) instead of reading the view first.
COMPARE_IN_MERGE = True


def refresh_views(
    spark: SparkSession,
    flow: Flow,
    tables: LayerTables,
    steps: Steps,
    result: ApplyResult,
    touched: set[tuple[object, ...]],
    touched_dates: Sequence[object],
    date_filter: Sql,
    batch: tuple[DataFrame, int] | None,
    *,
    changed: bool,
) -> None:
    """Recompute the ``touched`` groups (of ``flow.group_columns``) of every view.

    ``batch`` = (the batch's latest rows, the current-state version they made): recompute
    from those first; ``None``: from current state as stored. ``changed``: the apply changed
    rows of current state, so a view's few groups are MERGEd with the comparison in the
    MERGE's conditions; otherwise (a replay, a re-run repairing a view) and for many groups
    they are compared with the stored view first, and a view whose groups all hold their
    values gets no commit."""
    group_columns, bd = flow.group_columns, flow.business_date

    def recompute(current: DataFrame) -> None:
        live = current.where(~F.col(IS_DELETED))
        for view in flow.views:
            at = [group_columns.index(c) for c in view.group_key]
            groups_rows = sorted({tuple(g[i] for i in at) for g in touched}, key=repr)
            groups = spark.createDataFrame(groups_rows, live.select(*view.group_key).schema)
            local = len(groups_rows) < LOCAL_SOURCE_BELOW
            steps.submit(
                f"view {view.name}",
                _merge_view,
                spark,
                view,
                live,
                groups,
                tables.view(view.name),
                date_filter,
                local,
                # Many groups (a day replaced): most may hold their values, and the MERGE
                # would rewrite every file holding one; they are compared first.
                not (changed and local and COMPARE_IN_MERGE),
            )
            result.touched_groups[view.name] = len(groups_rows)
        steps.wait(*(f"view {v.name}" for v in flow.views))

    def from_table() -> int:
        """Recompute the groups from current state at its latest version; that version."""
        read_here = groups_read_here(spark, flow, tables.current, touched, touched_dates)
        if read_here is not None:
            version, current = read_here
            result.views_read = "deltalake"
        else:
            version = delta_log_version(spark, tables.current)
            current = read(spark, tables.current, version).where(isin(bd, touched_dates))
            result.views_read = "spark"
        recompute(current)
        return version

    if batch is not None:
        rows, basis = batch
        recompute(rows)
        result.views_from = "batch"
    else:
        basis, result.views_from = from_table(), "table"
    # The view MERGEs wrote values computed from current state at version ``basis``. Had
    # another writer committed to current state since, its own view MERGE may have gone in
    # before these and been overwritten with older values: recompute from the table until
    # no commit came in between (the last writer to MERGE a group computed it from the
    # latest current state, so no update is lost).
    while delta_log_version(spark, tables.current) != basis:
        basis = from_table()
        if result.views_from == "batch":
            result.views_from = "batch, then table"
    result.views_committed_at = time.time()


# Current state's rows for a view's recompute are read in the apply's process through
# deltalake (else Spark) while the touched groups, summed over the views, are at most
# ``READ_HERE_GROUPS``, the touched dates' files hold at most ``READ_HERE_BYTES`` and the rows
# read number at most ``READ_HERE_ROWS``. Spark computes the whole file list of the version the
# apply's own MERGE just made before its first read of it, on the apply's critical path;
# deltalake brings its copy of the table forward by that one commit (bench/view_read.py). A
# small batch's history lookup reads history so while its files hold at most
# ``batches.HISTORY_READ_HERE_BYTES`` (``batches._history_read_here``, bench/view_read.py
# --history).
READ_HERE_GROUPS = 1_000
READ_HERE_BYTES = 16 * 1024 * 1024
READ_HERE_ROWS = 100_000


def groups_read_here(
    spark: SparkSession,
    flow: Flow,
    path: str,
    touched: set[tuple[object, ...]],
    dates: Sequence[object],
) -> tuple[int, DataFrame] | None:
    """(version, rows): current state's newest version and its rows in the touched groups of
    every view, read through deltalake and handed to Spark as local rows; ``None`` where Spark
    reads them (a table on an object store, many groups or bytes, or one deltalake failed on
    less than ``READ_HERE_AGAIN_AFTER`` seconds ago).

    A read that holds a key twice (a deletion vector not applied) is not used."""
    if not touched or not may_read_here(path):
        return None
    groups: list[tuple[list[str], list[tuple[object, ...]]]] = []
    for view in flow.views:
        at = [flow.group_columns.index(c) for c in view.group_key]
        groups.append((list(view.group_key), list({tuple(g[i] for i in at) for g in touched})))
    if sum(len(g) for _, g in groups) > READ_HERE_GROUPS:
        return None
    bd = flow.business_date
    if partition_bytes(spark, path, bd, list(dates)) > READ_HERE_BYTES:
        return None
    import pyarrow.compute as pc

    try:
        version, schema_json, rows = delta_rows.latest_rows(
            path, bd, [cast(dt.date, d) for d in dates]
        )
        schema, rows = as_spark_reads(schema_json, rows)
        rows = _in_groups(rows, groups)
        if rows.num_rows and pc.count_distinct(rows[flow.key]).as_py() != rows.num_rows:
            raise ValueError(f"a key read twice at version {version}")
        if rows.num_rows > READ_HERE_ROWS:
            return None
    except Exception as exc:  # noqa: BLE001 — any failure: Spark reads, as it always could
        read_here_failed(path, exc)
        return None
    read_here_succeeded(path)
    return version, spark.createDataFrame(rows, schema)


def _in_groups(
    rows: pa.Table, groups: list[tuple[list[str], list[tuple[object, ...]]]]
) -> pa.Table:
    """The ``rows`` in one of each view's touched groups: a semi-join on the group columns, as
    the recompute's own (a null matches nothing)."""
    import pyarrow as pa

    indexed = rows.append_column("__row", pa.array(range(rows.num_rows), pa.int64()))
    keep: set[int] = set()
    for columns, values in groups:
        wanted = pa.Table.from_pylist(
            [dict(zip(columns, g, strict=True)) for g in values if None not in g],
            schema=pa.schema([rows.schema.field(c) for c in columns]),
        )
        kept = indexed.select([*columns, "__row"]).join(wanted, keys=columns, join_type="left semi")
        keep.update(kept["__row"].to_pylist())
    return rows.take(pa.array(sorted(keep), pa.int64()))


def _merge_view(
    spark: SparkSession,
    view,
    live: DataFrame,
    groups: DataFrame,  # type: ignore[no-untyped-def]
    path: str,
    date_filter: Sql,
    local: bool,
    compare_first: bool,
) -> None:
    """MERGE the touched groups whose values changed: new ones inserted, vanished ones
    deleted, the rest updated where a value differs. ``compare_first``: the groups are
    compared with the stored view before the MERGE, and nothing to change makes no commit;
    else the MERGE's conditions compare them (one read of the view less; a MERGE whose groups
    all hold their values still commits, rewriting their files unchanged)."""
    recomputed = recompute_view_groups(view.compute, live, groups, view.group_key)
    if compare_first:
        stored = (
            read(spark, path)
            .alias("t")
            .where(date_filter.column())
            .join(F.broadcast(groups), list(view.group_key), "left_semi")
        )
        changed = changed_groups(recomputed, stored, view.group_key)
    else:
        changed = recomputed
    if local:
        # Few groups: hand the MERGE local rows (no source materialisation, fewer jobs).
        rows = changed.collect()
        if not rows:
            return
        source = spark.createDataFrame(rows, changed.schema)
    else:
        # Persisted so the emptiness check and the MERGE's passes compute the groups once.
        source = changed.persist()
        if source.isEmpty():
            source.unpersist()
            return
    try:
        value_columns = [c for c in source.columns if c not in view.group_key and c != "_present"]
        present = sql.col("_present", "s").is_not_null()
        merge_into(
            path,
            source,
            date_filter & same_columns(view.group_key, nulls_equal=True),
            delete_when=~present,
            update={c: sql.col(c, "s") for c in value_columns},
            update_when=None if compare_first else ~same_columns(value_columns, nulls_equal=True),
            insert={c: sql.col(c, "s") for c in (*view.group_key, *value_columns)},
            insert_when=present,
        )
    finally:
        source.unpersist()
