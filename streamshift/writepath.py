"""The one write path: every change, from an EOD file or from Kafka, goes through here.

``apply_changes`` takes *raw* changes — the flow's columns as text, plus where each row came
from — and:

1. parses and validates them; rejected rows go to ``quarantine`` with the rule's name;
2. runs the flow's ``prepare`` on the rest (reference joins, derived columns);
3. appends every accepted version to ``<flow>_history`` (insert-only by key and version,
   so a replayed batch adds nothing);
4. MERGEs the highest version per key into the current-state table, only where it is
   higher than the stored one (equal = no-op: replays and duplicates change nothing);
5. recomputes only the view groups the changes touched — every group any version of a
   touched key has lived in, read back from history — and MERGEs them into each view
   table, deleting groups that became empty;
6. records changes for business dates an EOD run already closed in ``late_events``.

Every step is idempotent, so a job that dies half-way is repaired by running it again.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType
from pyspark.sql.window import Window

from streamshift.flow import Flow, Reference
from streamshift.tables import (
    EOD_RUNS_SCHEMA,
    LATE_EVENTS_SCHEMA,
    QUARANTINE_SCHEMA,
    LayerTables,
    ensure_table,
    read,
)

if TYPE_CHECKING:
    from streamshift.settings import Settings

# Columns every raw change carries besides the flow's own (as text).
SOURCE = "_source"
SOURCE_REF = "_source_ref"  # file:line, topic:partition:offset, ...
RAW = "_raw"  # the payload as received
FAILED = "_failed_rules"
MALFORMED = "_malformed"  # optional: a rule name when the reader could not split the row
IS_DELETED = "is_deleted"
APPLIED_AT = "_applied_at"

Transform = Callable[[DataFrame], DataFrame]

# Small batches get literal IN-lists in MERGE conditions so Delta prunes files by stats.
PRUNE_KEYS_BELOW = 2_000


def raw_schema(flow: Flow) -> StructType:
    """The text form of a flow's rows: what files and Kafka payloads decode to."""
    return StructType(
        [StructField(c, StringType()) for c in flow.columns]
        + [StructField(SOURCE_REF, StringType()), StructField(RAW, StringType())]
    )


# ---- pure transforms ----------------------------------------------------------------------
def parse(flow: Flow) -> Transform:
    """Raw text → the flow's types; a value that does not parse is named in ``_failed_rules``."""

    def transform(raw: DataFrame) -> DataFrame:
        typed: list[Column] = []
        failures: list[Column] = []
        for f in flow.schema.fields:
            text = F.nullif(F.trim(F.col(f.name).cast("string")), F.lit(""))
            value = text if isinstance(f.dataType, StringType) else text.try_cast(f.dataType)
            typed.append(value.alias(f.name))
            failures.append(F.when(text.isNotNull() & value.isNull(), F.lit(f"parseable_{f.name}")))
        # A reader may flag a row as unreadable before parsing (e.g. wrong field count).
        if MALFORMED in raw.columns:
            failures.insert(0, F.col(MALFORMED))
        passthrough = [c for c in raw.columns if c.startswith("_")]
        return raw.select(
            *typed, *passthrough, F.filter(F.array(*failures), lambda r: r.isNotNull()).alias(FAILED)
        )

    return transform


def validate(flow: Flow) -> Transform:
    """Append the names of the flow's failing rules (after parse failures) to ``_failed_rules``."""

    def transform(prepared: DataFrame) -> DataFrame:
        checks = [
            F.when(~F.coalesce(rule.passes(), F.lit(False)), F.lit(rule.name)) for rule in flow.rules
        ]
        failed = F.concat(F.col(FAILED), F.filter(F.array(*checks), lambda r: r.isNotNull()))
        if MALFORMED in prepared.columns:
            # A row the reader could not split or decode has no values to judge: its one
            # rule is the reader's.
            failed = F.when(F.col(MALFORMED).isNotNull(), F.col(FAILED)).otherwise(failed)
        return prepared.withColumn(FAILED, failed)

    return transform


def checked_changes(flow: Flow, raw: DataFrame, reference: Reference) -> DataFrame:
    """parse → prepare → validate, with the deletion flag; the shared front of the write path."""
    parsed = raw.transform(parse(flow))
    return (
        flow.prepare(parsed, reference)
        .transform(validate(flow))
        .withColumn(IS_DELETED, F.coalesce(flow.deleted(), F.lit(False)))
    )


def latest_per_key(flow: Flow, df: DataFrame) -> DataFrame:
    """One row per key: the highest version (ties broken by source reference, deterministic)."""
    order = Window.partitionBy(flow.key).orderBy(F.col(flow.version).desc(), F.col(SOURCE_REF))
    return df.withColumn("_rank", F.row_number().over(order)).where("_rank = 1").drop("_rank")


def distinct_versions(flow: Flow, df: DataFrame) -> DataFrame:
    """One row per (key, version): duplicates delivered twice in one batch count once."""
    order = Window.partitionBy(flow.key, flow.version).orderBy(F.col(SOURCE_REF))
    return df.withColumn("_rank", F.row_number().over(order)).where("_rank = 1").drop("_rank")


def recompute_view_groups(view_compute, live: DataFrame, groups: DataFrame,  # type: ignore[no-untyped-def]
                          group_key: tuple[str, ...]) -> DataFrame:
    """The touched groups with their recomputed values; ``_present`` is null for vanished ones."""
    in_groups = live.join(F.broadcast(groups), list(group_key), "left_semi")
    recomputed = view_compute(in_groups).withColumn("_present", F.lit(True))
    return groups.join(recomputed, list(group_key), "left")


class _Timer:
    """Per-step timings of one apply, for the benchmark and the curious (STREAMSHIFT debug)."""

    def __init__(self) -> None:
        self.steps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.steps[step] = self.steps.get(step, 0.0) + now - self._last
        self._last = now


# ---- IO: the write path ---------------------------------------------------------------------
@dataclass
class ApplyResult:
    received: int = 0
    accepted: int = 0
    rejected: int = 0
    applied: int = 0  # current-state rows inserted or updated
    late: int = 0
    touched_groups: dict[str, int] = field(default_factory=dict)
    rejected_by_rule: dict[str, int] = field(default_factory=dict)
    seconds_by_step: dict[str, float] = field(default_factory=dict)
    views_committed_at: float | None = None  # wall clock when the views showed the changes

    def describe(self) -> str:
        groups = ", ".join(f"{v} {k} groups" for k, v in self.touched_groups.items())
        return (
            f"{self.received} rows: {self.accepted} accepted, {self.rejected} quarantined, "
            f"{self.applied} applied to current state, {self.late} late; recomputed {groups or 'no groups'}"
        )


class Target:
    """A flow's tables in one layer plus its reference data: what ``apply_changes`` writes to."""

    def __init__(self, spark: SparkSession, flow: Flow, tables: LayerTables, reference: Reference):
        self.spark = spark
        self.flow = flow
        self.tables = tables
        self.reference = reference
        self._closed: tuple[int, set[dt.date]] | None = None
        self._ensure_tables()

    @classmethod
    def open(cls, spark: SparkSession, settings: Settings, flow: Flow, layer: str) -> Target:
        from streamshift.reference import load_reference

        tables = LayerTables(settings.warehouse, flow, layer)
        return cls(spark, flow, tables, load_reference(spark, flow))

    def _ensure_tables(self) -> None:
        empty_raw = self.spark.createDataFrame([], raw_schema(self.flow)).withColumn(
            SOURCE, F.lit("")
        )
        state = state_columns(self.flow, checked_changes(self.flow, empty_raw, self.reference))
        part = (self.flow.business_date,)
        ensure_table(self.spark, self.tables.current, state.schema, part)
        ensure_table(self.spark, self.tables.history, state.schema, part)
        ensure_table(self.spark, self.tables.quarantine, QUARANTINE_SCHEMA)
        ensure_table(self.spark, self.tables.late_events, LATE_EVENTS_SCHEMA, ("business_date",))
        ensure_table(self.spark, self.tables.eod_runs, EOD_RUNS_SCHEMA)
        for view in self.flow.views:
            schema = view.compute(state.where(~F.col(IS_DELETED))).schema
            ensure_table(self.spark, self.tables.view(view.name), schema, part,
                         change_data_feed=True)

    def closed_dates(self) -> set[dt.date]:
        """Business dates an EOD run has closed for this flow (any layer).

        Re-read only when ``eod_runs`` has a new commit: a streaming job asks every batch.
        """
        version = delta_log_version(self.spark, self.tables.eod_runs)
        if self._closed is None or self._closed[0] != version:
            runs = read(self.spark, self.tables.eod_runs).where(F.col("flow") == self.flow.name)
            dates = {r[0] for r in runs.select("business_date").distinct().collect()}
            self._closed = (version, dates)
        return set(self._closed[1])


def state_columns(flow: Flow, checked: DataFrame) -> DataFrame:
    """The columns stored in current state and history."""
    drop = [c for c in checked.columns if c.startswith("_") and c not in (SOURCE, SOURCE_REF)]
    return checked.drop(*drop).withColumn(APPLIED_AT, F.current_timestamp())


def _in_list(column: str, values: list[object]) -> str:
    def literal(v: object) -> str:
        if isinstance(v, dt.date):
            return f"DATE'{v.isoformat()}'"
        return "'" + str(v).replace("'", "''") + "'"

    if not values:
        return "false"
    return f"{column} IN ({', '.join(literal(v) for v in values)})"


def _merge_counts(merge_output: DataFrame) -> dict[str, int]:
    """The row counts a Delta MERGE returns (num_inserted_rows, num_updated_rows, ...)."""
    row = merge_output.first()
    return {k: int(v or 0) for k, v in row.asDict().items()} if row is not None else {}


def delta_log_version(spark: SparkSession, path: str) -> int:
    """The table's latest commit number, from a listing of ``_delta_log`` (no log replay)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a classic (not Spark Connect) session
    log_dir = jvm.org.apache.hadoop.fs.Path(f"{path}/_delta_log")
    fs = log_dir.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(log_dir):
        return -1
    versions = [
        int(name[:-5]) for name in (status.getPath().getName() for status in fs.listStatus(log_dir))
        if name.endswith(".json") and name[:-5].isdigit()
    ]
    return max(versions, default=-1)


def apply_changes(
    flow: Flow,
    changes: DataFrame,
    source: str,
    target: Target,
    *,
    batch_id: str = "",
    closing_date: dt.date | None = None,
) -> ApplyResult:
    """Apply raw changes to ``target`` — the single write path of batch and stream.

    ``changes`` holds the flow's columns as text plus ``_source_ref`` and ``_raw``; an
    optional ``_source`` column overrides ``source`` per row. ``closing_date`` is the date an
    EOD run is closing: its own rows are not late.
    """
    spark = target.spark
    tables = target.tables
    if SOURCE not in changes.columns:
        changes = changes.withColumn(SOURCE, F.lit(source))
    checked = checked_changes(flow, changes, target.reference).persist()
    try:
        result = ApplyResult()
        timer = _Timer()
        counts = checked.groupBy(F.try_element_at(F.col(FAILED), F.lit(1)).alias("rule")).count().collect()
        for row in counts:
            result.received += row["count"]
            if row["rule"] is None:
                result.accepted += row["count"]
            else:
                result.rejected_by_rule[row["rule"]] = row["count"]
                result.rejected += row["count"]
        timer.lap("validate")
        if result.rejected:
            _quarantine(spark, flow, checked.where(F.size(FAILED) > 0), tables, batch_id)
            timer.lap("quarantine")
        if result.accepted:
            accepted = state_columns(flow, checked.where(F.size(FAILED) == 0))
            _apply_accepted(spark, flow, accepted, target, result, closing_date, timer)
        result.seconds_by_step = timer.steps
        return result
    finally:
        checked.unpersist()


def _quarantine(spark: SparkSession, flow: Flow, rejected: DataFrame, tables: LayerTables,
                batch_id: str) -> None:
    from delta.tables import DeltaTable

    rows = rejected.select(
        F.lit(flow.name).alias("flow"),
        F.col(SOURCE).alias("source"),
        F.col(SOURCE_REF).alias("source_ref"),
        F.col(RAW).alias("raw_payload"),
        F.try_element_at(F.col(FAILED), F.lit(1)).alias("rule"),
        F.array_join(F.col(FAILED), ",").alias("rules"),
        F.col(flow.business_date).cast("date").alias("business_date"),
        F.lit(batch_id).alias("batch_id"),
        F.current_timestamp().alias("quarantined_at"),
    )
    (
        DeltaTable.forPath(spark, tables.quarantine).alias("t")
        .merge(rows.alias("s"), "t.flow = s.flow AND t.source_ref = s.source_ref AND t.rule = s.rule")
        .whenNotMatchedInsertAll()
        .execute()
    )


def _apply_accepted(spark: SparkSession, flow: Flow, accepted: DataFrame, target: Target,
                    result: ApplyResult, closing_date: dt.date | None, timer: _Timer) -> None:
    from delta.tables import DeltaTable

    tables = target.tables
    key, version, bd = flow.key, flow.version, flow.business_date
    versions = distinct_versions(flow, accepted).persist()
    try:
        key_dates = versions.select(key, bd).distinct().collect()
        keys = sorted({r[0] for r in key_dates})
        small = len(keys) < PRUNE_KEYS_BELOW
        key_filter = _in_list(f"t.{key}", keys) if small else "true"
        incoming_dates = sorted({r[1] for r in key_dates})
        timer.lap("keys")

        # 3. history: every accepted version, once.
        (
            DeltaTable.forPath(spark, tables.history).alias("t")
            .merge(
                versions.alias("s"),
                f"t.{key} = s.{key} AND t.{version} = s.{version} AND {key_filter}",
            )
            .whenNotMatchedInsertAll()
            .execute()
        )
        timer.lap("history")

        # Every version any touched key has had: its groups are the ones to recompute.
        # (Read back from history, so a run that died after moving a trade in current state
        # but before fixing the views still finds the trade's old group when re-run.)
        history = read(spark, tables.history)
        key_versions = (
            history.where(F.col(key).isin(keys)) if small
            else history.join(versions.select(key).distinct(), key, "left_semi")
        )
        group_columns = sorted({bd} | {c for v in flow.views for c in v.group_key})
        touched = key_versions.select(*group_columns).distinct().collect()
        touched_dates = sorted({r[bd] for r in touched} | set(incoming_dates))
        date_filter = _in_list(f"t.{bd}", touched_dates)
        timer.lap("touched")

        # 4. current state: highest version per key, only where higher than stored.
        latest = latest_per_key(flow, versions)
        merged = (
            DeltaTable.forPath(spark, tables.current).alias("t")
            .merge(latest.alias("s"), f"t.{key} = s.{key} AND {date_filter} AND {key_filter}")
            .whenMatchedUpdateAll(condition=f"s.{version} > t.{version}")
            .whenNotMatchedInsertAll()
            .execute()
        )
        counts = _merge_counts(merged)
        result.applied = counts.get("num_inserted_rows", 0) + counts.get("num_updated_rows", 0)
        timer.lap("current")

        # 5. views: recompute only the touched groups.
        current = read(spark, tables.current).where(_in_list(bd, touched_dates))
        live = current.where(~F.col(IS_DELETED))
        for view in flow.views:
            groups_rows = sorted({tuple(r[c] for c in view.group_key) for r in touched},
                                 key=repr)
            groups = spark.createDataFrame(groups_rows, live.select(*view.group_key).schema)
            _merge_view(spark, view, live, groups, tables.view(view.name), date_filter)
            result.touched_groups[view.name] = len(groups_rows)
        result.views_committed_at = time.time()
        timer.lap("views")

        # 6. late events: changes for dates an EOD run already closed.
        closed = target.closed_dates() - ({closing_date} if closing_date else set())
        late_dates = [d for d in incoming_dates if d in closed]
        if late_dates:
            late = versions.where(_in_list(bd, late_dates)).select(
                F.lit(flow.name).alias("flow"),
                F.col(bd).alias("business_date"),
                F.col(key).cast("string").alias("key"),
                F.col(version).alias("version"),
                F.current_timestamp().alias("arrived_at"),
                F.col(SOURCE).alias("source"),
            )
            (
                DeltaTable.forPath(spark, tables.late_events).alias("t")
                .merge(late.alias("s"), "t.flow = s.flow AND t.business_date = s.business_date "
                       "AND t.key = s.key AND t.version = s.version AND t.source = s.source")
                .whenNotMatchedInsertAll()
                .execute()
            )
            result.late = sum(1 for r in key_dates if r[1] in late_dates)
        timer.lap("late")
    finally:
        versions.unpersist()


def _merge_view(spark: SparkSession, view, live: DataFrame, groups: DataFrame,  # type: ignore[no-untyped-def]
                path: str, date_filter: str) -> None:
    from delta.tables import DeltaTable

    # Persisted so the MERGE's two passes (find files, write) recompute the groups once.
    source = recompute_view_groups(view.compute, live, groups, view.group_key).persist()
    value_columns = [c for c in source.columns if c not in view.group_key and c != "_present"]
    on = " AND ".join(f"t.{c} <=> s.{c}" for c in view.group_key)
    changed = " OR ".join(f"NOT (t.{c} <=> s.{c})" for c in value_columns)
    (
        DeltaTable.forPath(spark, path).alias("t")
        .merge(source.alias("s"), f"{on} AND {date_filter}")
        .whenMatchedDelete(condition="s._present IS NULL")
        .whenMatchedUpdate(condition=changed, set={c: f"s.{c}" for c in value_columns})
        .whenNotMatchedInsert(
            condition="s._present IS NOT NULL",
            values={c: f"s.{c}" for c in (*view.group_key, *value_columns)},
        )
        .execute()
    )
    source.unpersist()
