"""The one write path: every change, from an EOD file or from Kafka, goes through here.

``apply_changes`` takes *raw* changes — the flow's columns as text, plus where each row came
from — and:

1. parses and validates them; rejected rows go to ``quarantine`` with the rule's name;
2. runs the flow's ``prepare`` on the rest (reference joins, derived columns);
3. appends every accepted version to ``<flow>_history`` (insert-only by key and version,
   so a replayed batch adds nothing), and every later delivery of a version (a re-sent
   message, a line repeated in a file) to ``<flow>_redeliveries``, so a trace lists them;
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
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Self

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from streamshift.engine.spark import interpreted
from streamshift.engine.write.commits import append, merge_into
from streamshift.engine.write.target import (
    Target,
    delta_log_version,
    ensure_table,
    is_little,
    read,
    state_schema,
)
from streamshift.engine.write.transforms import (
    EOD_SOURCES,
    FIRST_VERSION,
    LATEST_VERSION,
    REPLACEMENT_SOURCE,
    VERSION_CONFLICT_RULE,
    changed_groups,
    checked_changes,
    content_hash,
    ranked_versions,
    recompute_view_groups,
    state_columns,
)
from streamshift.spec import sqltext as sql
from streamshift.spec.catalog import LATE_EVENTS_SCHEMA, LayerTables
from streamshift.spec.contract import (
    APPLIED_AT,
    FAILED,
    IS_DELETED,
    LOG_REF,
    RAW,
    SOURCE,
    SOURCE_REF,
)
from streamshift.spec.errors import StreamshiftError
from streamshift.spec.flow import Flow, Reference
from streamshift.spec.sqltext import Sql

# Batches with fewer accepted rows than this are "small": literal IN-lists in MERGE
# conditions (Delta prunes files by stats), and one collected history lookup that serves
# both the touched groups and which versions history lacks; late events are appended.
PRUNE_KEYS_BELOW = 2_000
# Views with fewer touched groups than this are MERGEd from rows collected to the driver.
LOCAL_SOURCE_BELOW = 10_000
# The content hash of a version, beside it in the batch's and history's collected rows.
CONTENT = "_content"
# Where a delivery came from, beside it: its Kafka offset when the log carried it, else its
# file:line. One delivery, one value: history holds a version's first, redeliveries the rest.
DELIVERED = "_delivered"
# How often an apply that lost a commit race to another writer is run again.
COMMIT_ATTEMPTS = 8
# delta.exceptions' classes for a commit refused because another writer committed first.
DELTA_CONFLICTS = (
    "ConcurrentAppendException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentDeleteReadException",
    "ConcurrentTransactionException",
    "ConcurrentWriteException",
    "DeltaConcurrentModificationException",
    "MetadataChangedException",
    "ProtocolChangedException",
)


class _Timer:
    """Per-step timings of one apply, for the benchmark and the curious (STREAMSHIFT debug);
    ``on_step`` hears of each step as it ends (a stream job's heartbeat, during a long batch)."""

    def __init__(self, on_step: Callable[[str], None] | None = None) -> None:
        self.steps: dict[str, float] = {}
        self._last = time.perf_counter()
        self._on_step = on_step

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.done(step, now - self._last)
        self._last = now

    def done(self, step: str, seconds: float) -> None:
        self.steps[step] = self.steps.get(step, 0.0) + seconds
        if self._on_step is not None:
            self._on_step(step)


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
    seconds: float = 0.0  # the apply's wall time, side steps and retries included
    views_committed_at: float | None = None  # wall clock when the views showed the changes
    spark_jobs: int | None = None  # Spark jobs the micro-batch ran (streaming only)
    # What the views were recomputed from: "table" (current state as stored), "batch" (a new
    # day's rows, held in memory), or "batch, then table" (another writer committed meanwhile).
    views_from: str | None = None

    def describe(self) -> str:
        groups = ", ".join(f"{v} {k} groups" for k, v in self.touched_groups.items())
        return (
            f"{self.received} rows: {self.accepted} accepted, {self.rejected} quarantined, "
            f"{self.applied} applied to current state, {self.late} late; recomputed {groups or 'no groups'}"
        )


def _isin(column: str, values: Sequence[object]) -> Column:
    """``column`` is one of ``values``, as literals Spark binds (no SQL text from data)."""
    return F.col(column).isin(list(values)) if values else F.lit(False)


def _synthetic(alias: str = "") -> Sql:
    """Whether a row (of ``alias``, in a MERGE) is a replacement's synthetic cancel."""
    return sql.coalesce(sql.col(SOURCE, alias).eq(sql.lit(REPLACEMENT_SOURCE)), sql.FALSE)


def _same(columns: Sequence[str]) -> Sql:
    """Target ``t`` and source ``s`` agree on ``columns`` (a MERGE's join)."""
    on = sql.TRUE
    for c in columns:
        on = on & sql.col(c, "t").eq(sql.col(c, "s"))
    return on


class WriteConflictError(StreamshiftError):
    """Another writer kept committing to the same tables through every retry."""


def _conflicts() -> tuple[type[BaseException], ...]:
    """Delta's commit conflicts: another writer committed to a table this apply read."""
    import delta.exceptions

    return tuple(getattr(delta.exceptions, name) for name in DELTA_CONFLICTS)


def apply_changes(
    flow: Flow,
    changes: DataFrame,
    source: str,
    target: Target,
    *,
    batch_id: str = "",
    closing_date: dt.date | None = None,
    on_step: Callable[[str], None] | None = None,
    before_writes: tuple[str, Callable[[DataFrame], None]] | None = None,
) -> ApplyResult:
    """Apply raw changes to ``target`` — the single write path of batch and stream.

    ``changes`` holds the flow's columns as text plus ``_source_ref`` and ``_raw``; an
    optional ``_source`` column overrides ``source`` per row, and other columns whose names
    start with ``_`` ride along on the apply's frame. ``closing_date`` is the date an EOD run
    is closing: its own rows are not late. ``on_step(name)`` is called as each step ends
    (``seconds_by_step``'s names), from the thread that ran it.

    ``before_writes`` = (step name, function): the function is called once, with the apply's
    persisted frame (the checked rows, counted), before anything is written, so a caller
    reads what it needs of the batch from the one cache the apply builds (the stream sends
    its undecodable messages to the dead-letter topic from it, before quarantine holds them).

    Two writers may share a layer (in stage ``stream`` the EOD correction and the streaming
    job write the same business date). Delta detects a conflicting commit and refuses it;
    because every step here is idempotent, the whole apply is simply run again, with jittered
    exponential back-off, up to ``COMMIT_ATTEMPTS`` times. Steps that did commit before the
    conflict are no-ops the second time.
    """
    conflicts = _conflicts()
    attempts = _Attempts(before_writes=[before_writes] if before_writes else [])
    started = time.perf_counter()
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        try:
            result = _apply_once(
                flow, changes, source, target, batch_id, closing_date, on_step, attempts
            )
            result.seconds = time.perf_counter() - started
            return result
        except conflicts as exc:
            if attempt == COMMIT_ATTEMPTS:
                raise WriteConflictError(
                    f"{target.tables.layer} layer of {flow.name}: another writer kept "
                    f"committing through {COMMIT_ATTEMPTS} attempts ({type(exc).__name__}); "
                    "run the job again (it is idempotent)"
                ) from exc
            delay = min(30.0, 0.5 * 2 ** (attempt - 1)) * (0.5 + random.random())
            print(
                f"[write] concurrent commit to the {target.tables.layer} layer of {flow.name} "
                f"({type(exc).__name__}); applying again in {delay:.1f}s "
                f"(attempt {attempt + 1} of {COMMIT_ATTEMPTS})",
                file=sys.stderr,
                flush=True,
            )
            time.sleep(delay)
    raise AssertionError("unreachable")  # the loop returns or raises


@dataclass
class _Attempts:
    """What one apply carries from attempt to attempt when a conflict makes it run again."""

    # Called once: popped before it runs, so a retry does not call it again.
    before_writes: list[tuple[str, Callable[[DataFrame], None]]]
    # Current-state rows the attempts' committed MERGEs inserted or updated. A conflict in a
    # side step (history beside the current-state MERGE) fails an attempt whose current state
    # did commit; the next attempt's MERGE then finds those rows in place and counts none.
    applied: int = 0


def checked_batch(flow: Flow, changes: DataFrame, reference: Reference) -> DataFrame:
    """The apply's one persisted frame: the checked rows, ranked by key (which versions are
    new, which is the latest), stamped once. The caller unpersists it.

    The raw payload stays only on rejected rows, the only ones that keep it (quarantine), so
    the cache and the shuffle do not carry it. The stamp is a literal: with
    ``current_timestamp()`` in the cached plan, a Delta MERGE of a frame derived from it misses
    the cache and recomputes the batch from its source (bench/eod_load.py: 22 s instead of
    10 s for a 1M-row history MERGE).
    """
    rejected = F.size(FAILED) > 0
    return (
        ranked_versions(flow, checked_changes(flow, changes, reference))
        .withColumn(RAW, F.when(rejected, F.col(RAW)))
        .withColumn(APPLIED_AT, F.lit(dt.datetime.now(dt.UTC)))
        .persist()
    )


def _apply_once(
    flow: Flow,
    changes: DataFrame,
    source: str,
    target: Target,
    batch_id: str,
    closing_date: dt.date | None,
    on_step: Callable[[str], None] | None,
    attempts: _Attempts,
) -> ApplyResult:
    spark = target.spark
    tables = target.create_tables().tables
    if SOURCE not in changes.columns:
        changes = changes.withColumn(SOURCE, F.lit(source))
    rejected = F.size(FAILED) > 0
    checked = checked_batch(flow, changes, target.reference)
    try:
        result = ApplyResult()
        timer = _Timer(on_step)
        # One pass over the persisted frame counts the rows by rule and, per view group (of
        # which the business date is part), the accepted versions, the keys (one latest row
        # each) and the range they span.
        first, key = F.col(FIRST_VERSION), F.col(flow.key)
        rule = F.try_element_at(F.col(FAILED), F.lit(1))
        counts = (
            checked.groupBy(
                rule.alias("rule"),
                *(F.when(rule.isNull(), F.col(c)).alias(c) for c in flow.group_columns),
            )
            .agg(
                F.count(F.lit(1)).alias("count"),
                F.count_if(first).alias("versions"),
                F.count_if(F.col(LATEST_VERSION)).alias("keys"),
                # accepted deliveries of a version after its first in the batch
                F.count_if(~first).alias("repeats"),
                F.min(F.when(first, key)).alias("low"),
                F.max(F.when(first, key)).alias("high"),
            )
            .collect()
        )
        by_group: list[Row] = []
        for row in counts:
            result.received += row["count"]
            if row["rule"] is None:
                result.accepted += row["count"]
                if row["versions"]:
                    by_group.append(row)
            else:
                result.rejected_by_rule[row["rule"]] = (
                    result.rejected_by_rule.get(row["rule"], 0) + row["count"]
                )
                result.rejected += row["count"]
        timer.lap("validate")
        while attempts.before_writes:
            name, call = attempts.before_writes.pop()
            call(checked)
            timer.lap(name)
        with _Steps(timer) as steps:
            if result.rejected:
                steps.submit(
                    "quarantine",
                    _quarantine,
                    spark,
                    flow,
                    checked.where(rejected),
                    tables,
                    batch_id,
                )
            if result.accepted:
                _apply_accepted(
                    spark, flow, checked, by_group, target, result, closing_date, steps, attempts
                )
        result.seconds_by_step = timer.steps
        return result
    finally:
        checked.unpersist()


def _quarantine(
    spark: SparkSession, flow: Flow, rejected: DataFrame, tables: LayerTables, batch_id: str
) -> None:
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
    merge_into(tables.quarantine, rows, _same(["flow", "source_ref", "rule"]), insert="*")


def _quarantine_conflicts(
    spark: SparkSession,
    flow: Flow,
    checked: DataFrame,
    conflicts: set[tuple[object, object]],
    tables: LayerTables,
) -> None:
    """Deliveries of versions history holds with other content, to quarantine as
    ``version_conflict`` (their payload as the typed row in JSON: the batch keeps raw text
    for rejected rows only)."""
    rows = _by_key_version(flow, checked.where(F.col(FIRST_VERSION)), conflicts, "left_semi")
    rows = rows.select(
        F.lit(flow.name).alias("flow"),
        F.col(SOURCE).alias("source"),
        F.col(SOURCE_REF).alias("source_ref"),
        F.coalesce(F.col(RAW), F.to_json(F.struct(*flow.columns))).alias("raw_payload"),
        F.lit(VERSION_CONFLICT_RULE).alias("rule"),
        F.lit(VERSION_CONFLICT_RULE).alias("rules"),
        F.col(flow.business_date).cast("date").alias("business_date"),
        F.lit("").alias("batch_id"),
        F.current_timestamp().alias("quarantined_at"),
    )
    merge_into(tables.quarantine, rows, _same(["flow", "source_ref", "rule"]), insert="*")


def _apply_accepted(
    spark: SparkSession,
    flow: Flow,
    checked: DataFrame,
    by_group: list[Row],
    target: Target,
    result: ApplyResult,
    closing_date: dt.date | None,
    steps: _Steps,
    attempts: _Attempts,
) -> None:
    """Steps 3–6 for the accepted rows of ``checked``, the apply's persisted frame: its
    ``ranked_versions`` flags pick the new versions and each key's latest (rejected rows have
    neither).

    The critical path is keys → touched groups → current state → views; the history write
    and the late-event record depend only on the incoming versions, so they run beside it on
    their own threads (Spark runs jobs from several threads at once, and much of a Delta
    commit is driver time, not work on the two cores).

    A small batch (a micro-batch, a correction) collects its keys and the history of those
    keys once: that one read gives both the touched groups and the versions history already
    holds, so only the new ones go to history's MERGE, which reads just their keys' files.
    """
    tables = target.tables
    key, version, bd = flow.key, flow.version, flow.business_date
    group_columns = flow.group_columns
    small = result.accepted < PRUNE_KEYS_BELOW
    plans = ExitStack()
    # Both read the apply's persisted frame: no shuffle of their own.
    versions = state_columns(flow, checked.where(F.col(FIRST_VERSION)))
    latest = state_columns(flow, checked.where(F.col(LATEST_VERSION)))
    try:
        if small:
            incoming = versions.select(
                key,
                version,
                SOURCE,
                content_hash(flow).alias(CONTENT),
                _delivered().alias(DELIVERED),
                *group_columns,
            ).collect()
            pairs = {(r[key], r[bd]) for r in incoming}
            keys = sorted({k for k, _ in pairs})
            keys_by_date = Counter(d for _, d in pairs)
            incoming_dates = sorted(keys_by_date)
        else:
            # A large batch's keys stay in Spark; the counting pass gave its groups and dates,
            # how many keys it holds and the range they span (what the history reads below
            # can skip files by).
            incoming, keys = [], []
            own_groups = {tuple(r[c] for c in group_columns) for r in by_group}
            incoming_dates = sorted({r[bd] for r in by_group})
            key_range = (min(r["low"] for r in by_group), max(r["high"] for r in by_group))
        # Current state's log version, taken before its dates are seen empty: later it tells
        # whether this apply's commit was the only one since (the views' shortcut).
        version_before = delta_log_version(spark, tables.current)
        held = target.current_bytes(incoming_dates)
        dates_were_empty = held == 0
        if small and is_little(held):  # and the dates' current state is small: no generated code
            plans.enter_context(interpreted(spark, checked.sparkSession))
        steps.timer.lap("keys")

        if small:
            known = steps.run("touched", _history_of, spark, flow, tables, keys, group_columns)

            def identity(r: Row) -> tuple[object, object, bool]:
                # a synthetic cancel and a real event of one version are different versions
                return r[key], r[version], r[SOURCE] == REPLACEMENT_SOURCE

            stored = {identity(r): r[CONTENT] for r in known}
            conflicts = {
                (r[key], r[version])
                for r in incoming
                if stored.get(identity(r), r[CONTENT]) != r[CONTENT]
            }
            incoming = [r for r in incoming if (r[key], r[version]) not in conflicts]
            first_delivered = {identity(r): r[DELIVERED] for r in known}
            resent: list[tuple[object, object]] | bool = sorted(
                {
                    (r[key], r[version])
                    for r in incoming
                    if first_delivered.get(identity(r), r[DELIVERED]) != r[DELIVERED]
                    and r[SOURCE] != REPLACEMENT_SOURCE
                },
                key=repr,
            )
            keys_by_date = Counter(d for _, d in {(r[key], r[bd]) for r in incoming})
            new = [r for r in incoming if identity(r) not in stored]
            if new:
                steps.submit("history", _insert_history, spark, flow, versions, tables, new)
            touched = {tuple(r[c] for c in group_columns) for r in [*known, *incoming]}
        else:
            steps.submit(
                "history",
                _merge_history,
                spark,
                flow,
                versions,
                tables,
                _within(key, key_range, "t"),
            )
            touched, conflicts, resent = steps.run(
                "touched",
                _touched_groups,
                spark,
                flow,
                versions,
                own_groups,
                tables,
                group_columns,
                key_range,
                dates_were_empty,
            )
        if conflicts:
            # Versions history holds with other content: the stored one stays (neither MERGE
            # applies an equal version); the new delivery goes to quarantine, counted there.
            steps.wait_if_submitted("quarantine")  # one writer of quarantine at a time
            steps.run("conflicts", _quarantine_conflicts, spark, flow, checked, conflicts, tables)
            result.accepted -= len(conflicts)
            result.rejected += len(conflicts)
            rule = VERSION_CONFLICT_RULE
            result.rejected_by_rule[rule] = result.rejected_by_rule.get(rule, 0) + len(conflicts)
            if not small:
                versions = _by_key_version(flow, versions, conflicts, "left_anti")

        repeats = sum(r["repeats"] for r in by_group)
        if repeats or resent:
            steps.submit(
                "redeliveries",
                _record_redeliveries,
                spark,
                flow,
                checked,
                tables,
                resent,
                conflicts,
                (keys[0], keys[-1]) if small else key_range,
            )

        closed = target.closed_dates() - ({closing_date} if closing_date else set())
        late_dates = [d for d in incoming_dates if d in closed]
        if late_dates and small:
            arrived = [r for r in incoming if r[SOURCE] not in EOD_SOURCES]
            late_pairs = {(r[key], r[bd]) for r in arrived if r[bd] in late_dates}
            result.late = len(late_pairs)
            if late_pairs:
                steps.submit("late", _append_late, spark, flow, tables, arrived, late_dates)
        elif late_dates:  # the keys of each late date (a key may have versions in several)
            arrived_versions = versions.where(~F.col(SOURCE).isin(*EOD_SOURCES))
            steps.submit("late", _record_late, spark, flow, arrived_versions, tables, late_dates)
            late_keys = arrived_versions.where(_isin(bd, late_dates)).select(key, bd).distinct()
            result.late = late_keys.count()

        date_at = group_columns.index(bd)
        touched_dates = sorted({g[date_at] for g in touched} | set(incoming_dates))
        date_filter = sql.col(bd, "t").isin(touched_dates)

        # A batch for dates current state never held (a new day's EOD file): nothing can
        # match, so an insert-only MERGE does it (one anti-join, no source materialisation, no
        # rewrite); should another writer have added some of the keys meanwhile, the full
        # MERGE follows for them.
        seen_empty_at = None
        if dates_were_empty and set(touched_dates) == set(incoming_dates):
            seen_empty_at = version_before
        inserted_only = steps.run(
            "current",
            _merge_current,
            spark,
            flow,
            latest,
            tables,
            date_filter,
            sql.col(key, "t").isin(keys) if small else sql.TRUE,
            sum(r["keys"] for r in by_group) if seen_empty_at is not None else None,
            attempts,
        )
        result.applied = attempts.applied

        def only_this_commit() -> bool:
            assert seen_empty_at is not None
            return delta_log_version(spark, tables.current) == seen_empty_at + 1

        def recompute_views(current: DataFrame) -> None:
            live = current.where(~F.col(IS_DELETED))
            for view in flow.views:
                at = [group_columns.index(c) for c in view.group_key]
                groups_rows = sorted({tuple(g[i] for i in at) for g in touched}, key=repr)
                groups = spark.createDataFrame(groups_rows, live.select(*view.group_key).schema)
                steps.submit(
                    f"view {view.name}",
                    _merge_view,
                    spark,
                    view,
                    live,
                    groups,
                    tables.view(view.name),
                    date_filter,
                    len(groups_rows) < LOCAL_SOURCE_BELOW,
                )
                result.touched_groups[view.name] = len(groups_rows)
            steps.wait(*(f"view {v.name}" for v in flow.views))

        def from_table() -> int:
            """Recompute the groups from current state at its latest version; that version."""
            version = delta_log_version(spark, tables.current)
            stored = read(spark, tables.current, version).where(_isin(bd, touched_dates))
            recompute_views(stored)
            return version

        if inserted_only and only_this_commit():
            # Every key went into dates that held nothing, and no other writer has committed
            # to current state since they were seen empty: those dates' current state is the
            # batch's latest rows, which the apply holds in memory, so the views are recomputed
            # from them rather than read back from the files just written (bench/eod_load.py).
            recompute_views(latest)
            basis, result.views_from = seen_empty_at + 1, "batch"  # type: ignore[operator]
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
    finally:
        steps.settle()  # the side steps read the persisted frame too
        plans.close()


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
            self.timer.done(name, time.perf_counter() - started)

    def submit(self, name: str, fn: Callable[..., object], *args: object) -> None:
        self._futures[name] = self._pool.submit(self._timed, name, fn, *args)

    def run(self, name: str, fn: Callable[..., Any], *args: object) -> Any:
        """Run ``fn`` on the caller's thread (the critical path), timed."""
        return self._timed(name, fn, *args)

    def wait_if_submitted(self, name: str) -> None:
        if name in self._futures:
            self._futures[name].result()

    def wait(self, *names: str) -> None:
        for name in names:
            self._futures[name].result()


def _within(column: str, key_range: tuple[object, object], alias: str = "") -> Sql:
    """``column`` inside a batch's key range: implied by a join on the key, and what lets Delta
    skip every file whose key statistics lie outside it. Keys that grow with time (ids that
    carry their date, sequence numbers) put earlier days' files outside, so a load reads
    the history it can match, not all of it; other keys lose nothing."""
    low, high = key_range
    return sql.col(column, alias).between(low, high)


def _merge_history(
    spark: SparkSession, flow: Flow, versions: DataFrame, tables: LayerTables, narrowed: Sql
) -> None:
    """Step 3: every accepted version, once (insert-only MERGE on key and version).

    ``narrowed`` limits the history the MERGE reads to what the versions can match (a key
    range, or the keys and dates of a small batch): a join on the key implies it, and Delta
    skips every file outside it. Not a plain append, which is blind: two writers holding the
    same version (in stage ``stream`` the EOD correction and the stream job) would both add
    it. The MERGE reads the files it could match, so Delta refuses the second commit and the
    apply runs again.
    """
    on = _same([flow.key, flow.version]) & _synthetic("t").eq_null_safe(_synthetic("s")) & narrowed
    merge_into(tables.history, versions, on, insert="*")


def _insert_history(
    spark: SparkSession, flow: Flow, versions: DataFrame, tables: LayerTables, new: list[Row]
) -> None:
    """Step 3 for a small batch: the versions history did not hold when it was read, MERGEd
    on their keys and dates only."""
    key, version, bd = flow.key, flow.version, flow.business_date
    rows = _by_key_version(flow, versions, {(r[key], r[version]) for r in new}, "left_semi")
    keys = sorted({r[key] for r in new})
    dates = sorted({r[bd] for r in new})
    narrowed = sql.col(bd, "t").isin(dates) & sql.col(key, "t").isin(keys)
    _merge_history(spark, flow, rows, tables, narrowed)


def _history_of(
    spark: SparkSession,
    flow: Flow,
    tables: LayerTables,
    keys: list[object],
    group_columns: list[str],
) -> list[Row]:
    """Every stored version of ``keys`` with the groups it lived in.

    Read from history (not current state), so a run that died after moving a row in current
    state but before fixing the views still finds the row's old group when re-run.
    """
    return (
        read(spark, tables.history)
        .where(F.col(flow.key).isin(keys))
        .select(
            flow.key,
            flow.version,
            SOURCE,
            content_hash(flow).alias(CONTENT),
            _delivered().alias(DELIVERED),
            *group_columns,
        )
        .collect()
    )


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
    stored = read(spark, tables.history).where(_within(key, key_range).column())
    if new_dates and stored.isEmpty():
        # Nothing stored in the range: the groups are the batch's own, without the distinct
        # of a million keys for the join.
        return set(own_groups), set(), False
    version = flow.version
    batch = versions.select(
        key,
        F.col(version).alias("_v"),
        content_hash(flow).alias("_c"),
        _synthetic().column().alias("_synthetic"),
        _delivered().alias("_d"),
    )
    same = (F.col(version) == F.col("_v")) & (_synthetic().column() == F.col("_synthetic"))
    known = stored.join(batch, key).select(
        *group_columns,
        F.when(
            same & (content_hash(flow) != F.col("_c")),
            F.struct(F.col(key).alias("k"), F.col(version).alias("v")),
        ).alias("_conflict"),
        (same & (content_hash(flow) == F.col("_c")) & (_delivered() != F.col("_d"))).alias(
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


def _delivered() -> Column:
    """A stored or incoming version's delivery (see ``DELIVERED``)."""
    return F.coalesce(F.col(LOG_REF), F.col(SOURCE_REF))


def _by_key_version(
    flow: Flow, frame: DataFrame, pairs: Iterable[tuple[object, object]], how: str
) -> DataFrame:
    """``frame``'s rows whose (key, version) is one of ``pairs`` (``how="left_semi"``) or is
    none of them (``"left_anti"``): a broadcast join with the pairs, whatever their number."""
    key, version = flow.key, flow.version
    wanted = frame.sparkSession.createDataFrame(
        sorted(pairs, key=repr), frame.select(key, version).schema
    )
    return frame.join(F.broadcast(wanted), [key, version], how)


def _record_redeliveries(
    spark: SparkSession,
    flow: Flow,
    checked: DataFrame,
    tables: LayerTables,
    resent: list[tuple[object, object]] | bool,
    conflicts: set[tuple[object, object]],
    key_range: tuple[object, object],
) -> None:
    """Step 3b: the batch's deliveries of versions whose first delivery history holds, so a
    trace lists each (insert-only by key, version and delivery, so a re-run adds nothing).

    They are the accepted rows after the first of their (key, version) in the batch, and the
    batch's first ones that history holds from another delivery: ``resent`` lists those (a
    small batch, from the history it collected), or says some are (a large one: found here by
    a join with history). A replacement's synthetic cancels are no deliveries; versions
    quarantined as conflicts are not either."""
    key, version = flow.key, flow.version
    accepted = (F.size(F.col(FAILED)) == 0) & (F.col(SOURCE) != F.lit(REPLACEMENT_SOURCE))
    rows = state_columns(flow, checked.where(accepted & ~F.col(FIRST_VERSION)))
    firsts = state_columns(flow, checked.where(accepted & F.col(FIRST_VERSION)))
    if isinstance(resent, list) and resent:
        rows = rows.unionByName(_by_key_version(flow, firsts, resent, "left_semi"))
    elif resent:
        held = (
            read(spark, tables.history)
            .where(_within(key, key_range).column() & ~_synthetic().column())
            .select(
                F.col(key).alias("_k"),
                F.col(version).alias("_v"),
                content_hash(flow).alias("_c"),
                _delivered().alias("_d"),
            )
        )
        on = (
            (F.col(key) == F.col("_k"))
            & (F.col(version) == F.col("_v"))
            & (content_hash(flow) == F.col("_c"))
            & (_delivered() != F.col("_d"))
        )
        rows = rows.unionByName(firsts.join(held, on, "left_semi"))
    if conflicts:
        rows = _by_key_version(flow, rows, conflicts, "left_anti")
    ensure_table(spark, tables.redeliveries, state_schema(spark, flow), (flow.business_date,))
    same_delivery = sql.coalesce(sql.col(LOG_REF, "t"), sql.col(SOURCE_REF, "t")).eq(
        sql.coalesce(sql.col(LOG_REF, "s"), sql.col(SOURCE_REF, "s"))
    )
    on = _same([key, version]) & same_delivery & _within(key, key_range, "t")
    merge_into(tables.redeliveries, rows, on, insert="*")


def _merge_current(
    spark: SparkSession,
    flow: Flow,
    latest: DataFrame,
    tables: LayerTables,
    date_filter: Sql,
    key_filter: Sql,
    fresh_keys: int | None,
    attempts: _Attempts,
) -> bool:
    """Step 4: the highest version per key (``latest``), only where higher than the stored one.

    ``fresh_keys``: the batch's keys, all expected new to the dates it touches. Then an
    insert-only MERGE goes first, and the full MERGE only if it inserted fewer rows.
    Each MERGE's inserted and updated rows go to ``attempts.applied`` as it commits (the
    insert-only one stays committed should the full one then meet a conflict). Returns whether
    the insert-only MERGE inserted every key.
    """
    higher = sql.col(flow.version, "s").gt(sql.col(flow.version, "t"))
    same = sql.col(flow.version, "s").eq(sql.col(flow.version, "t"))
    # A replacement's synthetic cancel ranks below a real event of the same version number.
    version = higher | (same & _synthetic("t") & ~_synthetic("s"))
    on = _same([flow.key]) & date_filter & key_filter

    def committed(counts: dict[str, int]) -> int:
        attempts.applied += counts.get("num_inserted_rows", 0) + counts.get("num_updated_rows", 0)
        return counts.get("num_inserted_rows", 0)

    if (
        fresh_keys is not None
        and committed(merge_into(tables.current, latest, on, insert="*")) >= fresh_keys
    ):
        return True
    committed(merge_into(tables.current, latest, on, update="*", update_when=version, insert="*"))
    return False


def _record_late(
    spark: SparkSession,
    flow: Flow,
    versions: DataFrame,
    tables: LayerTables,
    late_dates: list[dt.date],
) -> None:
    """Step 6: changes for business dates an EOD run already closed."""
    key, version, bd = flow.key, flow.version, flow.business_date
    late = versions.where(_isin(bd, late_dates)).select(
        F.lit(flow.name).alias("flow"),
        F.col(bd).alias("business_date"),
        F.col(key).cast("string").alias("key"),
        F.col(version).alias("version"),
        F.current_timestamp().alias("arrived_at"),
        F.col(SOURCE).alias("source"),
    )
    on = _same(["flow", "business_date", "key", "version", "source"])
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
            & _isin("business_date", late_dates)
            & _isin("key", keys)
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


def _merge_view(
    spark: SparkSession,
    view,
    live: DataFrame,
    groups: DataFrame,  # type: ignore[no-untyped-def]
    path: str,
    date_filter: Sql,
    local: bool,
) -> None:
    """MERGE the touched groups that actually changed; nothing to change, no commit."""
    recomputed = recompute_view_groups(view.compute, live, groups, view.group_key)
    stored = (
        read(spark, path)
        .alias("t")
        .where(date_filter.column())
        .join(F.broadcast(groups), list(view.group_key), "left_semi")
    )
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
        on = date_filter
        for c in view.group_key:
            on = on & sql.col(c, "t").eq_null_safe(sql.col(c, "s"))
        present = sql.col("_present", "s").is_not_null()
        merge_into(
            path,
            source,
            on,
            delete_when=~present,
            update={c: sql.col(c, "s") for c in value_columns},
            insert={c: sql.col(c, "s") for c in (*view.group_key, *value_columns)},
            insert_when=present,
        )
    finally:
        source.unpersist()
