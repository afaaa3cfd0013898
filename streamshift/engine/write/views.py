"""Step 5 of the write path: the view groups an apply touched, recomputed from current state
and MERGEd into each view table (groups that vanished are deleted; a group whose value did not
change is not written, so a view's change feed holds real changes only).

The groups are recomputed from current state as the apply's own MERGE leaves it when the apply
holds those rows: a small batch's (the touched dates as read before its MERGE, the batch laid
over them: computed while that MERGE runs, written once it committed), or a new day's file's
(every key into dates current state never held: the batch's rows, no read-back of the files
just written) — provided no other writer committed to current state in between; else from
current state as stored; and again from the table until no commit came between, so the last
writer to MERGE a group computed it from the latest state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamshift.engine.write.commits import merge_into
from streamshift.engine.write.predicates import isin
from streamshift.engine.write.steps import Steps
from streamshift.engine.write.target import delta_log_version, read
from streamshift.engine.write.transforms import changed_groups, recompute_view_groups
from streamshift.spec import sqltext as sql
from streamshift.spec.catalog import LayerTables
from streamshift.spec.contract import IS_DELETED
from streamshift.spec.flow import Flow, View
from streamshift.spec.sqltext import Sql

if TYPE_CHECKING:
    from streamshift.engine.write.apply import ApplyResult

# Views with fewer touched groups than this are MERGEd from rows collected to the driver.
LOCAL_SOURCE_BELOW = 10_000


def refresh_views(
    spark: SparkSession,
    flow: Flow,
    tables: LayerTables,
    steps: Steps,
    result: ApplyResult,
    touched: set[tuple[object, ...]],
    touched_dates: Sequence[object],
    date_filter: Sql,
    batch: tuple[DataFrame, Callable[[], int | None]] | None,
) -> None:
    """Recompute the ``touched`` groups (of ``flow.group_columns``) of every view.

    ``batch`` = (current state's rows of the touched dates as the apply's current-state MERGE
    leaves them, a function that waits for that MERGE and gives the version of current state
    those rows are — ``None`` when another writer's commit came between): the groups are
    computed from those rows first (while the MERGE may still run) and written once it has
    committed; ``None``: from current state as stored."""
    group_columns, bd = flow.group_columns, flow.business_date

    def groups_of(view: View, live: DataFrame) -> tuple[DataFrame, bool]:
        """The view's touched groups as a frame, and whether they are few (``_changed``)."""
        at = [group_columns.index(c) for c in view.group_key]
        groups_rows = sorted({tuple(g[i] for i in at) for g in touched}, key=repr)
        result.touched_groups[view.name] = len(groups_rows)
        groups = spark.createDataFrame(groups_rows, live.select(*view.group_key).schema)
        return groups, len(groups_rows) < LOCAL_SOURCE_BELOW

    def write(changes: list[tuple[View, DataFrame | None]]) -> None:
        for view, changed in changes:
            steps.submit(
                f"view {view.name}",
                _merge_view,
                spark,
                view,
                changed,
                tables.view(view.name),
                date_filter,
            )
        steps.wait(*(f"view {view.name}" for view, _ in changes))

    def from_table() -> int:
        """Recompute the groups from current state at its latest version; that version."""
        version = delta_log_version(spark, tables.current)
        live = read(spark, tables.current, version).where(isin(bd, touched_dates))
        live = live.where(~F.col(IS_DELETED))
        for view in flow.views:
            groups, local = groups_of(view, live)
            steps.submit(
                f"view {view.name}",
                _recompute_and_merge,
                spark,
                view,
                live,
                groups,
                tables.view(view.name),
                date_filter,
                local,
            )
        steps.wait(*(f"view {v.name}" for v in flow.views))
        return version

    basis: int | None = None
    if batch is not None:
        rows, merged = batch
        live = rows.where(~F.col(IS_DELETED))
        changes = steps.run(
            "views from the batch",
            lambda: [
                (view, _changed(spark, view, live, *groups_of(view, live),
                                tables.view(view.name), date_filter))
                for view in flow.views
            ],
        )  # fmt: skip
        basis = merged()
        if basis is not None:
            write(changes)
            result.views_from = "batch"
        else:  # another commit came between: those values may be stale
            for _, changed in changes:
                if changed is not None:
                    changed.unpersist()
    if basis is None:
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


def _changed(
    spark: SparkSession,
    view: View,
    live: DataFrame,
    groups: DataFrame,
    local: bool,
    path: str,
    date_filter: Sql,
) -> DataFrame | None:
    """The touched groups whose recomputed values differ from the stored view (``None``: no
    group changed): few groups as local rows (no source materialisation for the MERGE, fewer
    jobs), many persisted (the MERGE's passes compute them once; :func:`_merge_view` frees
    them)."""
    recomputed = recompute_view_groups(view.compute, live, groups, view.group_key)
    stored = (
        read(spark, path)
        .alias("t")
        .where(date_filter.column())
        .join(F.broadcast(groups), list(view.group_key), "left_semi")
    )
    changed = changed_groups(recomputed, stored, view.group_key)
    if local:
        rows = changed.collect()
        return spark.createDataFrame(rows, changed.schema) if rows else None
    persisted = changed.persist()
    if persisted.isEmpty():
        persisted.unpersist()
        return None
    return persisted


def _recompute_and_merge(
    spark: SparkSession,
    view: View,
    live: DataFrame,
    groups: DataFrame,
    path: str,
    date_filter: Sql,
    local: bool,
) -> None:
    _merge_view(spark, view, _changed(spark, view, live, groups, local, path, date_filter), path,
                date_filter)  # fmt: skip


def _merge_view(
    spark: SparkSession,
    view: View,
    changed: DataFrame | None,
    path: str,
    date_filter: Sql,
) -> None:
    """MERGE the groups that changed (``_changed``) into the view; nothing changed, no commit."""
    if changed is None:
        return
    try:
        value_columns = [c for c in changed.columns if c not in view.group_key and c != "_present"]
        on = date_filter
        for c in view.group_key:
            on = on & sql.col(c, "t").eq_null_safe(sql.col(c, "s"))
        present = sql.col("_present", "s").is_not_null()
        merge_into(
            path,
            changed,
            on,
            delete_when=~present,
            update={c: sql.col(c, "s") for c in value_columns},
            insert={c: sql.col(c, "s") for c in (*view.group_key, *value_columns)},
            insert_when=present,
        )
    finally:
        changed.unpersist()
