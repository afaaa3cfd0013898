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
Steps that do not depend on each other (quarantine, history, late events) run on side threads
beside the critical path keys → touched groups → current state → views.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from pyspark.sql import Column, DataFrame, Row, SparkSession
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

# Batches with fewer accepted rows than this are "small": literal IN-lists in MERGE
# conditions (Delta prunes files by stats), and one collected history lookup that serves
# both the touched groups and a plain history append.
PRUNE_KEYS_BELOW = 2_000
# Views with fewer touched groups than this are MERGEd from rows collected to the driver.
LOCAL_SOURCE_BELOW = 10_000


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


def changed_groups(recomputed: DataFrame, stored: DataFrame,
                   group_key: tuple[str, ...]) -> DataFrame:
    """The recomputed groups that differ from the stored view: new, vanished or changed values.

    ``recomputed`` comes from :func:`recompute_view_groups` (``_present`` null = vanished);
    ``stored`` is the view table's rows for the same groups. Unchanged groups drop out, so a
    replayed change writes nothing to the view.
    """
    values = [c for c in recomputed.columns if c not in group_key and c != "_present"]
    old = stored.select(*group_key, *(F.col(c).alias(f"_stored_{c}") for c in values),
                        F.lit(True).alias("_stored"))
    on = [recomputed[c].eqNullSafe(old[c]) for c in group_key]
    joined = recomputed.join(old, on, "left")
    present, was = F.col("_present").isNotNull(), F.col("_stored").isNotNull()
    differs = F.lit(False)
    for c in values:
        differs = differs | ~recomputed[c].eqNullSafe(F.col(f"_stored_{c}"))
    keep = (present & ~was) | (~present & was) | (present & was & differs)
    return joined.where(keep).select(*(recomputed[c] for c in recomputed.columns))


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
        ensure_table(self.spark, self.tables.current, state.schema, part, deletion_vectors=True)
        ensure_table(self.spark, self.tables.history, state.schema, part)  # insert-only
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


def _in_list(column: str, values: Sequence[object]) -> str:
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
        with _Steps(timer) as steps:
            if result.rejected:
                steps.submit("quarantine", _quarantine, spark, flow,
                             checked.where(F.size(FAILED) > 0), tables, batch_id)
            if result.accepted:
                accepted = state_columns(flow, checked.where(F.size(FAILED) == 0))
                _apply_accepted(spark, flow, accepted, target, result, closing_date, steps)
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
                    result: ApplyResult, closing_date: dt.date | None, steps: _Steps) -> None:
    """Steps 3–6 for the accepted rows.

    The critical path is keys → touched groups → current state → views; the history write
    and the late-event record depend only on the incoming versions, so they run beside it on
    their own threads (Spark runs jobs from several threads at once, and much of a Delta
    commit is driver time, not work on the two cores).

    A small batch (a micro-batch, a correction) collects its keys and the history of those
    keys once: that one read gives both the touched groups and the versions history already
    holds, so history takes a plain append of the new ones instead of a MERGE.
    """
    tables = target.tables
    key, version, bd = flow.key, flow.version, flow.business_date
    group_columns = sorted({bd} | {c for v in flow.views for c in v.group_key})
    small = result.accepted < PRUNE_KEYS_BELOW
    versions = distinct_versions(flow, accepted).persist()
    try:
        if small:
            incoming = versions.select(key, version, *group_columns).collect()
            pairs = {(r[key], r[bd]) for r in incoming}
        else:
            incoming = []
            pairs = {(r[0], r[1]) for r in versions.select(key, bd).distinct().collect()}
        keys = sorted({k for k, _ in pairs})
        incoming_dates = sorted({d for _, d in pairs})
        steps.timer.lap("keys")

        closed = target.closed_dates() - ({closing_date} if closing_date else set())
        late_dates = [d for d in incoming_dates if d in closed]
        if late_dates:
            steps.submit("late", _record_late, spark, flow, versions, tables, late_dates)
            result.late = sum(1 for _, d in pairs if d in late_dates)

        if small:
            known = steps.run("touched", _history_of, spark, flow, tables, keys, group_columns)
            stored = {(r[key], r[version]) for r in known}
            new = [r for r in incoming if (r[key], r[version]) not in stored]
            if new:
                steps.submit("history", _append_history, spark, flow, versions, tables, new)
            touched = {tuple(r[c] for c in group_columns) for r in [*known, *incoming]}
        else:
            steps.submit("history", _merge_history, spark, flow, versions, tables)
            touched = steps.run("touched", _touched_groups, spark, flow, versions, tables,
                                group_columns)
        date_at = group_columns.index(bd)
        touched_dates = sorted({g[date_at] for g in touched} | set(incoming_dates))
        date_filter = _in_list(f"t.{bd}", touched_dates)

        counts = steps.run("current", _merge_current, spark, flow, versions, tables,
                           date_filter, _in_list(f"t.{key}", keys) if small else "true")
        result.applied = counts.get("num_inserted_rows", 0) + counts.get("num_updated_rows", 0)

        current = read(spark, tables.current).where(_in_list(bd, touched_dates))
        live = current.where(~F.col(IS_DELETED))
        for view in flow.views:
            at = [group_columns.index(c) for c in view.group_key]
            groups_rows = sorted({tuple(g[i] for i in at) for g in touched}, key=repr)
            groups = spark.createDataFrame(groups_rows, live.select(*view.group_key).schema)
            steps.submit(f"view {view.name}", _merge_view, spark, view, live, groups,
                         tables.view(view.name), date_filter,
                         len(groups_rows) < LOCAL_SOURCE_BELOW)
            result.touched_groups[view.name] = len(groups_rows)
        steps.wait(*(f"view {v.name}" for v in flow.views))
        result.views_committed_at = time.time()
    finally:
        steps.settle()  # the side steps read ``versions`` too
        versions.unpersist()


class _Steps:
    """Independent write steps of one apply on a few threads; every step is awaited.

    Leaving the block waits for all submitted steps and re-raises the first failure, so a
    failed step never leaves another one running against tables the caller goes on to touch.
    """

    def __init__(self, timer: _Timer) -> None:
        self.timer = timer
        self._pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="apply")
        self._futures: dict[str, Future[object]] = {}

    def __enter__(self) -> Self:
        return self

    def settle(self) -> None:
        """Wait for every submitted step, failed or not."""
        wait(self._futures.values())

    def __exit__(self, *exc: object) -> None:
        try:
            self.settle()
            if exc[0] is None:
                for future in self._futures.values():
                    future.result()
        finally:
            self._pool.shutdown(wait=True)

    def _timed(self, name: str, fn: Callable[..., object], *args: object) -> object:
        started = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.timer.steps[name] = time.perf_counter() - started

    def submit(self, name: str, fn: Callable[..., object], *args: object) -> None:
        self._futures[name] = self._pool.submit(self._timed, name, fn, *args)

    def run(self, name: str, fn: Callable[..., Any], *args: object) -> Any:
        """Run ``fn`` on the caller's thread (the critical path), timed."""
        return self._timed(name, fn, *args)

    def wait(self, *names: str) -> None:
        for name in names:
            self._futures[name].result()


def _merge_history(spark: SparkSession, flow: Flow, versions: DataFrame,
                   tables: LayerTables) -> None:
    """Step 3 for a large batch: every accepted version, once (insert-only MERGE)."""
    from delta.tables import DeltaTable

    key, version = flow.key, flow.version
    (
        DeltaTable.forPath(spark, tables.history).alias("t")
        .merge(versions.alias("s"), f"t.{key} = s.{key} AND t.{version} = s.{version}")
        .whenNotMatchedInsertAll()
        .execute()
    )


def _append_history(spark: SparkSession, flow: Flow, versions: DataFrame, tables: LayerTables,
                    new: list[Row]) -> None:
    """Step 3 for a small batch: append the versions history does not hold yet."""
    key, version = flow.key, flow.version
    wanted = spark.createDataFrame([(r[key], r[version]) for r in new],
                                   versions.select(key, version).schema)
    columns = read(spark, tables.history).columns
    rows = versions.join(F.broadcast(wanted), [key, version], "left_semi").select(*columns)
    rows.write.format("delta").mode("append").save(tables.history)


def _history_of(spark: SparkSession, flow: Flow, tables: LayerTables, keys: list[object],
                group_columns: list[str]) -> list[Row]:
    """Every stored version of ``keys`` with the groups it lived in.

    Read from history (not current state), so a run that died after moving a trade in current
    state but before fixing the views still finds the trade's old group when re-run.
    """
    return (read(spark, tables.history).where(F.col(flow.key).isin(keys))
            .select(flow.key, flow.version, *group_columns).collect())


def _touched_groups(spark: SparkSession, flow: Flow, versions: DataFrame, tables: LayerTables,
                    group_columns: list[str]) -> set[tuple[object, ...]]:
    """A large batch's touched groups: those of its versions and of its keys' history."""
    key = flow.key
    known = read(spark, tables.history).join(versions.select(key).distinct(), key, "left_semi")
    rows = (known.select(*group_columns).unionByName(versions.select(*group_columns))
            .distinct().collect())
    return {tuple(r) for r in rows}


def _merge_current(spark: SparkSession, flow: Flow, versions: DataFrame, tables: LayerTables,
                   date_filter: str, key_filter: str) -> dict[str, int]:
    """Step 4: the highest version per key, only where higher than the stored one."""
    from delta.tables import DeltaTable

    key, version = flow.key, flow.version
    merged = (
        DeltaTable.forPath(spark, tables.current).alias("t")
        .merge(latest_per_key(flow, versions).alias("s"),
               f"t.{key} = s.{key} AND {date_filter} AND {key_filter}")
        .whenMatchedUpdateAll(condition=f"s.{version} > t.{version}")
        .whenNotMatchedInsertAll()
        .execute()
    )
    return _merge_counts(merged)


def _record_late(spark: SparkSession, flow: Flow, versions: DataFrame, tables: LayerTables,
                 late_dates: list[dt.date]) -> None:
    """Step 6: changes for business dates an EOD run already closed."""
    from delta.tables import DeltaTable

    key, version, bd = flow.key, flow.version, flow.business_date
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


def _merge_view(spark: SparkSession, view, live: DataFrame, groups: DataFrame,  # type: ignore[no-untyped-def]
                path: str, date_filter: str, local: bool) -> None:
    """MERGE the touched groups that actually changed; nothing to change, no commit."""
    from delta.tables import DeltaTable

    recomputed = recompute_view_groups(view.compute, live, groups, view.group_key)
    stored = read(spark, path).alias("t").where(date_filter).join(
        F.broadcast(groups), list(view.group_key), "left_semi")
    changed = changed_groups(recomputed, stored, view.group_key)
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
        on = " AND ".join(f"t.{c} <=> s.{c}" for c in view.group_key)
        (
            DeltaTable.forPath(spark, path).alias("t")
            .merge(source.alias("s"), f"{on} AND {date_filter}")
            .whenMatchedDelete(condition="s._present IS NULL")
            .whenMatchedUpdate(set={c: f"s.{c}" for c in value_columns})
            .whenNotMatchedInsert(
                condition="s._present IS NOT NULL",
                values={c: f"s.{c}" for c in (*view.group_key, *value_columns)},
            )
            .execute()
        )
    finally:
        source.unpersist()
