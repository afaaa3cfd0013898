"""The two strategies of the write path's accepted rows, behind one interface.

Both answer the same questions of a batch, in the order :func:`streamshift.engine.write.apply.
apply_changes` asks them (keys → touched groups → current state → views): which dates it holds,
which groups it touched and which of its versions history already holds (writing the new ones
to history beside), which rows to record as late.

* :class:`SmallBatch` (a micro-batch, a correction: fewer than ``PRUNE_KEYS_BELOW`` accepted
  rows) collects its keys and the history of those keys once: that one read gives both the
  touched groups and the versions history already holds, so only the new ones are appended
  to history (checked after its commit for another writer's copy); MERGE conditions carry the
  keys as literal lists (Delta prunes files by their statistics); late events are appended.
* :class:`LargeBatch` (a day's file) keeps its keys in Spark: the counting pass gave its groups,
  dates and key range, history is MERGEd and joined within that range.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING, Protocol

from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F

from streamshift.engine.write.commits import append, merge_into
from streamshift.engine.write.local_reads import (
    as_spark_reads,
    may_read_here,
    read_here_failed,
    read_here_succeeded,
)
from streamshift.engine.write.predicates import (
    CONTENT,
    DELIVERED,
    by_key_version,
    delivered,
    isin,
    same_columns,
    same_delivery,
    synthetic,
    within,
)
from streamshift.engine.write.steps import Steps
from streamshift.engine.write.target import (
    delta_log_version,
    ensure_state_table,
    is_little,
    read,
)
from streamshift.engine.write.transforms import EOD_SOURCES, REPLACEMENT_SOURCE, content_hash
from streamshift.spec import sqltext as sql
from streamshift.spec.catalog import LATE_EVENTS_SCHEMA, LayerTables
from streamshift.spec.contract import APPLIED_AT, SOURCE, SOURCE_REF
from streamshift.spec.flow import Flow
from streamshift.spec.sqltext import Sql
from streamshift.store import tables as delta_rows

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

Group = tuple[object, ...]
Pair = tuple[object, object]

# A small batch's history lookup reads history through deltalake while its files hold at most
# this: the whole table is read, so the read grows with history, while Spark's filtered read
# of a table whose state it has computed does not (bench/view_read.py --history).
HISTORY_READ_HERE_BYTES = 8 * 1024 * 1024
# A history found larger is read by Spark, and its size looked at again only after this long
# (history grows; a batch should not open a large table's log with deltalake to learn that).
HISTORY_SIZE_AGAIN_AFTER = 600.0
_HISTORY_TOO_LARGE: dict[str, float] = {}  # history -> when it was found too large (monotonic)


class Batch(Protocol):
    """What the critical path asks of a batch's accepted rows."""

    # The business dates the batch's versions belong to.
    incoming_dates: list[dt.date]
    # The lowest and highest key of its versions (what a history read can skip files by).
    key_range: Pair

    def may_interpret(self, held_bytes: int) -> bool:
        """Whether its queries run without generated code (little data on both sides)."""
        ...

    def look_up(
        self, steps: Steps, dates_were_empty: bool
    ) -> tuple[set[Group], set[Pair], list[Pair] | bool]:
        """The groups it touched, the (key, version) pairs history holds with other content
        (conflicts), and its versions history holds from another delivery (re-sent: listed,
        or whether there are any); writes its new versions to history beside."""
        ...

    def drop_conflicts(self, conflicts: set[Pair]) -> None:
        """Leave the conflicting versions out of what follows."""
        ...

    def record_late(self, steps: Steps, late_dates: list[dt.date]) -> int:
        """Record its arrivals for dates already closed; how many keys were late."""
        ...

    def current_keys(self) -> Sql:
        """The current-state MERGE's condition on the key."""
        ...


class SmallBatch:
    """A batch whose keys and their history are collected to the driver once."""

    def __init__(
        self, spark: SparkSession, flow: Flow, tables: LayerTables, versions: DataFrame
    ) -> None:
        self.spark, self.flow, self.tables, self.versions = spark, flow, tables, versions
        key, bd = flow.key, flow.business_date
        self.incoming = versions.select(
            key,
            flow.version,
            SOURCE,
            content_hash(flow).alias(CONTENT),
            delivered().alias(DELIVERED),
            *flow.group_columns,
        ).collect()
        pairs = {(r[key], r[bd]) for r in self.incoming}
        self.keys = sorted({k for k, _ in pairs})
        self.incoming_dates = sorted({d for _, d in pairs})
        self.key_range = (self.keys[0], self.keys[-1])

    def may_interpret(self, held_bytes: int) -> bool:
        return is_little(held_bytes)

    def _identity(self, r: Row) -> tuple[object, object, bool]:
        # a synthetic cancel and a real event of one version are different versions
        return r[self.flow.key], r[self.flow.version], r[SOURCE] == REPLACEMENT_SOURCE

    def look_up(
        self, steps: Steps, dates_were_empty: bool
    ) -> tuple[set[Group], set[Pair], list[Pair] | bool]:
        flow, key, version = self.flow, self.flow.key, self.flow.version
        group_columns = flow.group_columns
        # History's log version before it is read: had only this batch's append committed
        # after it, no other writer can have stored one of the versions it reads as new.
        read_at = delta_log_version(self.spark, self.tables.history)
        known = steps.run(
            "touched", _history_of, self.spark, flow, self.tables, self.keys, group_columns
        )
        stored = {self._identity(r): r[CONTENT] for r in known}
        if len(stored) < len(known):
            # A version held twice: an append that raced another writer's commit and died
            # before it removed its copy. Repaired before anything else reads it.
            steps.run(
                "history repair", _drop_second_copies, self.spark, flow, self.tables, self.keys
            )
        conflicts = {
            (r[key], r[version])
            for r in self.incoming
            if stored.get(self._identity(r), r[CONTENT]) != r[CONTENT]
        }
        self.incoming = [r for r in self.incoming if (r[key], r[version]) not in conflicts]
        first_delivered = {self._identity(r): r[DELIVERED] for r in known}
        resent = sorted(
            {
                (r[key], r[version])
                for r in self.incoming
                if first_delivered.get(self._identity(r), r[DELIVERED]) != r[DELIVERED]
                and r[SOURCE] != REPLACEMENT_SOURCE
            },
            key=repr,
        )
        new = [r for r in self.incoming if self._identity(r) not in stored]
        if new:
            steps.submit(
                "history",
                _append_history,
                self.spark,
                flow,
                self.versions,
                self.tables,
                new,
                read_at,
            )
        touched = {tuple(r[c] for c in group_columns) for r in [*known, *self.incoming]}
        return touched, conflicts, resent

    def drop_conflicts(self, conflicts: set[Pair]) -> None:
        """(Done by :meth:`look_up`: the collected rows no longer hold them.)"""

    def record_late(self, steps: Steps, late_dates: list[dt.date]) -> int:
        key, bd = self.flow.key, self.flow.business_date
        arrived = [r for r in self.incoming if r[SOURCE] not in EOD_SOURCES]
        late_pairs = {(r[key], r[bd]) for r in arrived if r[bd] in late_dates}
        if late_pairs:
            steps.submit(
                "late", _append_late, self.spark, self.flow, self.tables, arrived, late_dates
            )
        return len(late_pairs)

    def current_keys(self) -> Sql:
        return sql.col(self.flow.key, "t").isin(self.keys)


class LargeBatch:
    """A batch whose keys stay in Spark; the counting pass gave its groups, dates and the key
    range they span (``by_group``: one row per group with ``low`` and ``high`` keys)."""

    def __init__(
        self,
        spark: SparkSession,
        flow: Flow,
        tables: LayerTables,
        versions: DataFrame,
        by_group: list[Row],
    ) -> None:
        self.spark, self.flow, self.tables, self.versions = spark, flow, tables, versions
        self.own_groups = {tuple(r[c] for c in flow.group_columns) for r in by_group}
        self.incoming_dates = sorted({r[flow.business_date] for r in by_group})
        self.key_range = (min(r["low"] for r in by_group), max(r["high"] for r in by_group))

    def may_interpret(self, held_bytes: int) -> bool:
        return False

    def look_up(
        self, steps: Steps, dates_were_empty: bool
    ) -> tuple[set[Group], set[Pair], list[Pair] | bool]:
        flow, key = self.flow, self.flow.key
        steps.submit(
            "history",
            _merge_history,
            self.spark,
            flow,
            self.versions,
            self.tables,
            within(key, self.key_range, "t"),
        )
        return steps.run(  # type: ignore[no-any-return]
            "touched",
            _touched_groups,
            self.spark,
            flow,
            self.versions,
            self.own_groups,
            self.tables,
            flow.group_columns,
            self.key_range,
            dates_were_empty,
        )

    def drop_conflicts(self, conflicts: set[Pair]) -> None:
        self.versions = by_key_version(self.flow, self.versions, conflicts, "left_anti")

    def record_late(self, steps: Steps, late_dates: list[dt.date]) -> int:
        # the keys of each late date (a key may have versions in several)
        key, bd = self.flow.key, self.flow.business_date
        arrived = self.versions.where(~F.col(SOURCE).isin(*EOD_SOURCES))
        steps.submit("late", _record_late, self.spark, self.flow, arrived, self.tables, late_dates)
        return arrived.where(isin(bd, late_dates)).select(key, bd).distinct().count()

    def current_keys(self) -> Sql:
        return sql.TRUE


def _merge_history(
    spark: SparkSession, flow: Flow, versions: DataFrame, tables: LayerTables, narrowed: Sql
) -> None:
    """Step 3 for a large batch: every accepted version, once (insert-only MERGE on key and
    version).

    ``narrowed`` limits the history the MERGE reads to what the versions can match (a key
    range): a join on the key implies it, and Delta skips every file outside it. The MERGE
    reads the files it could match, so of two writers holding the same version Delta refuses
    the second commit and the apply runs again (a small batch appends instead and checks
    after: :func:`_append_history`).
    """
    on = (
        same_columns([flow.key, flow.version])
        & synthetic("t").eq_null_safe(synthetic("s"))
        & narrowed
    )
    merge_into(tables.history, versions, on, insert="*")


def _append_history(
    spark: SparkSession,
    flow: Flow,
    versions: DataFrame,
    tables: LayerTables,
    new: list[Row],
    read_at: int,
) -> None:
    """Step 3 for a small batch: append the versions history did not hold when it was read
    (at log version ``read_at``).

    An append, not the insert-only MERGE (which costs a second more: bench/delta_floor.py),
    because the batch has just read which of its versions are new. A plain append is blind,
    though: another writer (an EOD load of the same layer, a replay) may have stored some of
    them after the read. When history's log moved by more than this append's commit, the
    batch's keys are read again and any version now held twice loses its later copy
    (:func:`_drop_second_copies` moves it to the redeliveries): each version stays once in
    history whatever the writers, and a writer that dies between the two commits leaves the
    repair to the next batch that reads those keys (:meth:`SmallBatch.look_up`)."""
    key, version = flow.key, flow.version
    rows = by_key_version(flow, versions, {(r[key], r[version]) for r in new}, "left_semi")
    append(rows, tables.history)
    if delta_log_version(spark, tables.history) != read_at + 1:
        _drop_second_copies(spark, flow, tables, sorted({r[key] for r in new}))


def _drop_second_copies(
    spark: SparkSession, flow: Flow, tables: LayerTables, keys: list[object]
) -> None:
    """Move every copy of a version of ``keys`` after its first in history (the earliest
    applied, then the lowest delivery) to the redeliveries, where a later delivery belongs:
    what two writers' blind appends of one version leave. Every writer that finds the pair
    moves the same copy, so none moves both."""
    key, version = flow.key, flow.version
    identity: list[Column | str] = [key, version, synthetic().column().alias("_synthetic")]
    first = Window.partitionBy(*identity).orderBy(F.col(APPLIED_AT), F.col(SOURCE_REF))
    stored = read(spark, tables.history)
    copies = stored.where(F.col(key).isin(keys)).withColumn("_n", F.row_number().over(first))
    rows = copies.where(F.col("_n") > 1).drop("_n").collect()
    if not rows:
        return
    later = spark.createDataFrame(rows, stored.schema)
    ensure_state_table(spark, flow, tables.redeliveries)
    pair = same_columns([key, version])
    merge_into(tables.redeliveries, later, pair & same_delivery(), insert="*")
    # the very copy: its stamp and delivery (the first copy has another of either)
    copy = same_columns([APPLIED_AT]) & sql.col(SOURCE_REF, "t").eq_null_safe(
        sql.col(SOURCE_REF, "s")
    )
    merge_into(tables.history, later, pair & copy, delete_when=sql.TRUE)


def _history_of(
    spark: SparkSession,
    flow: Flow,
    tables: LayerTables,
    keys: list[object],
    group_columns: list[str],
) -> list[Row]:
    """Every stored version of ``keys`` with the groups it lived in.

    Read from history (not current state), so a run that died after moving a row in current
    state but before fixing the views still finds the row's old group when re-run. Through
    deltalake in this process while history is small (:func:`_history_read_here`): no Spark
    job at all when none of the keys is stored (new keys), else one on the rows read.
    """
    here = _history_read_here(flow, tables.history, keys)
    if here is not None and not here[1].num_rows:
        return []
    stored = (
        read(spark, tables.history) if here is None else spark.createDataFrame(here[1], here[0])
    )
    return (
        stored.where(F.col(flow.key).isin(keys))
        .select(
            flow.key,
            flow.version,
            SOURCE,
            content_hash(flow).alias(CONTENT),
            delivered().alias(DELIVERED),
            *group_columns,
        )
        .collect()
    )


def _history_read_here(
    flow: Flow, path: str, keys: list[object]
) -> tuple[StructType, pa.Table] | None:
    """(schema, rows): history's rows of ``keys``, read through deltalake in this process;
    ``None`` where Spark reads them (a table on an object store, more than
    ``HISTORY_READ_HERE_BYTES`` of files, or one deltalake failed on lately).

    Spark computes the whole file list of the version the batch before appended before its
    first read of it, on the batch's critical path; deltalake brings its copy of the table
    forward by the commits since (bench/view_read.py --history). History has no date to prune a
    lookup by key, so the whole table is read, and the keys are matched in Arrow (no key
    becomes SQL text; a null key matches nothing, as in Spark's ``isin``)."""
    found_large = _HISTORY_TOO_LARGE.get(path)
    if not may_read_here(path) or (
        found_large is not None and time.monotonic() - found_large < HISTORY_SIZE_AGAIN_AFTER
    ):
        return None
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        got = delta_rows.all_rows(path, HISTORY_READ_HERE_BYTES)
        if got is None:
            _HISTORY_TOO_LARGE[path] = time.monotonic()
            return None
        # cast whole, before the match: pyarrow cannot match nor take string_view columns
        schema, rows = as_spark_reads(*got[1:])
        wanted = pa.array([k for k in keys if k is not None], rows.schema.field(flow.key).type)
        rows = rows.filter(pc.is_in(rows[flow.key], value_set=wanted))
    except Exception as exc:  # noqa: BLE001 — any failure: Spark reads, as it always could
        read_here_failed(path, exc)
        return None
    read_here_succeeded(path)
    _HISTORY_TOO_LARGE.pop(path, None)
    return schema, rows


def _touched_groups(
    spark: SparkSession,
    flow: Flow,
    versions: DataFrame,
    own_groups: set[tuple[object, ...]],
    tables: LayerTables,
    group_columns: list[str],
    key_range: tuple[object, object],
    new_dates: bool,
) -> tuple[set[tuple[object, ...]], set[tuple[object, object]], bool]:
    """A large batch's touched groups: its versions' own (``own_groups``, from the counting
    pass) and those of its keys' history; its conflicts, the (key, version) pairs history
    holds with other content; and whether history holds some of its versions from another
    delivery (re-sent: the same content), all from the same join.

    ``new_dates``: current state holds nothing for the batch's dates (a new day's file, a
    first batch), so its keys may well be new to history too: then history is first asked
    whether it holds anything in the key range, which Delta answers from the files' key
    statistics. A later batch of a day skips that question (its keys have been seen)."""
    key = flow.key
    stored = read(spark, tables.history).where(within(key, key_range).column())
    if new_dates and stored.isEmpty():
        # Nothing stored in the range: the groups are the batch's own, without the distinct
        # of a million keys for the join.
        return set(own_groups), set(), False
    version = flow.version
    batch = versions.select(
        key,
        F.col(version).alias("_v"),
        content_hash(flow).alias("_c"),
        synthetic().column().alias("_synthetic"),
        delivered().alias("_d"),
    )
    same = (F.col(version) == F.col("_v")) & (synthetic().column() == F.col("_synthetic"))
    known = stored.join(batch, key).select(
        *group_columns,
        F.when(
            same & (content_hash(flow) != F.col("_c")),
            F.struct(F.col(key).alias("k"), F.col(version).alias("v")),
        ).alias("_conflict"),
        (same & (content_hash(flow) == F.col("_c")) & (delivered() != F.col("_d"))).alias(
            "_resent"
        ),
    )
    groups, conflicts, resent = set(own_groups), set(), False
    for r in known.distinct().collect():
        groups.add(tuple(r[c] for c in group_columns))
        if r["_conflict"] is not None:
            conflicts.add((r["_conflict"]["k"], r["_conflict"]["v"]))
        resent = resent or bool(r["_resent"])
    return groups, conflicts, resent


def _record_late(
    spark: SparkSession,
    flow: Flow,
    versions: DataFrame,
    tables: LayerTables,
    late_dates: list[dt.date],
) -> None:
    """Step 6: changes for business dates an EOD run already closed."""
    key, version, bd = flow.key, flow.version, flow.business_date
    late = versions.where(isin(bd, late_dates)).select(
        F.lit(flow.name).alias("flow"),
        F.col(bd).alias("business_date"),
        F.col(key).cast("string").alias("key"),
        F.col(version).alias("version"),
        F.current_timestamp().alias("arrived_at"),
        F.col(SOURCE).alias("source"),
    )
    on = same_columns(["flow", "business_date", "key", "version", "source"])
    merge_into(tables.late_events, late, on, insert="*")


def _append_late(
    spark: SparkSession,
    flow: Flow,
    tables: LayerTables,
    incoming: list[Row],
    late_dates: list[dt.date],
) -> None:
    """Step 6 for a small batch: append the late versions ``late_events`` does not hold yet.

    The batch's versions are already on the driver; one filtered read of the table finds those
    recorded before (a replay), so a plain append replaces the insert-only MERGE.
    """
    key, version, bd = flow.key, flow.version, flow.business_date
    late = {(r[bd], str(r[key]), r[version], r[SOURCE]) for r in incoming if r[bd] in late_dates}
    keys = sorted({k for _, k, _, _ in late})
    stored = (
        read(spark, tables.late_events)
        .where(
            (F.col("flow") == F.lit(flow.name))
            & isin("business_date", late_dates)
            & isin("key", keys)
        )
        .select("business_date", "key", "version", "source")
        .collect()
    )
    new = late - {tuple(r) for r in stored}
    if not new:
        return
    now = dt.datetime.now(dt.UTC)
    rows = [(flow.name, d, k, v, now, src) for d, k, v, src in sorted(new, key=repr)]
    frame = spark.createDataFrame(rows, LATE_EVENTS_SCHEMA)
    append(frame, tables.late_events)
