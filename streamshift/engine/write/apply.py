"""The one write path: every change, from an EOD file or from Kafka, goes through here.

``apply_changes`` takes *raw* changes — the flow's columns as text, plus where each row came
from — and:

1. parses and validates them; rejected rows go to ``quarantine`` with the rule's name;
2. runs the flow's ``prepare`` on the rest (reference joins, derived columns);
3. adds every accepted version to ``<flow>_history`` once (by key and version, so a replayed
   batch adds nothing: a small batch appends the versions its read of history did not find,
   a large one MERGEs), and every later delivery of a version (a re-sent
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
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import cast

# Importing Delta's exceptions teaches PySpark's error conversion their classes: before it,
# a conflict in a session of the job's own arrives as a bare Py4JJavaError.
import delta.exceptions
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from streamshift.engine.spark import interpreted, written_in_tasks
from streamshift.engine.versions import ensure_deployed
from streamshift.engine.write.batches import Batch, LargeBatch, SmallBatch
from streamshift.engine.write.commits import merge_into
from streamshift.engine.write.predicates import (
    by_key_version,
    delivered,
    same_columns,
    same_delivery,
    synthetic,
    within,
)
from streamshift.engine.write.steps import Steps, Timer
from streamshift.engine.write.target import (
    Target,
    delta_log_version,
    ensure_state_table,
    read,
)
from streamshift.engine.write.transforms import (
    FIRST_VERSION,
    LATEST_VERSION,
    REPLACEMENT_SOURCE,
    VERSION_CONFLICT_RULE,
    checked_changes,
    content_hash,
    quarantine_rows,
    ranked_versions,
    state_columns,
    typed_payload,
)
from streamshift.engine.write.views import refresh_views
from streamshift.spec import sqltext as sql
from streamshift.spec.catalog import LayerTables
from streamshift.spec.contract import (
    APPLIED_AT,
    FAILED,
    RAW,
    SOURCE,
    UNKNOWN_FIELDS,
)
from streamshift.spec.errors import StreamshiftError
from streamshift.spec.flow import Flow, Reference
from streamshift.spec.sqltext import Sql

# Batches with fewer accepted rows than this are "small": literal IN-lists in MERGE
# conditions (Delta prunes files by stats), and one collected history lookup that serves
# both the touched groups and which versions history lacks; late events are appended.
PRUNE_KEYS_BELOW = 2_000
# Batches with at least this many accepted rows per business date they hold write each
# MERGE's rows in the tasks that hold them, several files per date (``written_in_tasks``);
# the others one file per date and batch, through one task per date, which would keep a large
# date on one core. Many dates spread over the tasks that way anyway, and in tasks each would
# become a file per task.
WRITE_IN_TASKS_FROM = 100_000
# A batch whose keys accepted more than once number at most this ranks those keys' rows
# apart from the rest (``ranked_batch``); more, and the whole batch is ranked as one window.
RANK_APART_AT_MOST = 5_000
# The layers (by current state's path) whose last batch ranked its rows as one window, with
# more rows beyond one per key than ranking apart takes; their next batch does the same.
_RANK_WHOLE: dict[str, bool] = {}
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
# The same conflicts by Delta's error conditions: through Spark Connect (the warm engine) the
# client does not know Delta's exception classes and raises PySpark's UnknownException, whose
# condition is Delta's (``DELTA_CONCURRENT_APPEND.WITH_PARTITION_HINT``).
DELTA_CONFLICT_CONDITIONS = frozenset(
    {
        "DELTA_CONCURRENT_APPEND",
        "DELTA_CONCURRENT_DELETE_DELETE",
        "DELTA_CONCURRENT_DELETE_READ",
        "DELTA_CONCURRENT_TRANSACTION",
        "DELTA_CONCURRENT_WRITE",
        "DELTA_METADATA_CHANGED",
        "DELTA_PROTOCOL_CHANGED",
    }
)


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
    # how current state was read for the views' recompute from the table: deltalake or spark
    views_read: str | None = None
    # Rows that held fields (file columns, event fields) the flow does not declare, and their
    # names: ignored (the setting unknown_fields = refuse quarantines such events instead).
    unknown_rows: int = 0
    unknown_fields: tuple[str, ...] = ()
    # The digest of the reference data the batch was checked with (the day's feed).
    reference: str = ""

    def describe(self) -> str:
        groups = ", ".join(f"{v} {k} groups" for k, v in self.touched_groups.items())
        unknown = (
            f"; {self.unknown_rows} rows held fields the flow does not declare "
            f"({', '.join(self.unknown_fields)}): ignored"
            if self.unknown_rows
            else ""
        )
        return (
            f"{self.received} rows: {self.accepted} accepted, {self.rejected} quarantined, "
            f"{self.applied} applied to current state, {self.late} late; recomputed "
            f"{groups or 'no groups'}{unknown}"
        )


class WriteConflictError(StreamshiftError):
    """Another writer kept committing to the same tables through every retry."""


def is_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is Delta's commit conflict (another writer committed to a table this
    apply read), raised in a session of the job's own or through Spark Connect."""
    if isinstance(exc, tuple(getattr(delta.exceptions, name) for name in DELTA_CONFLICTS)):
        return True
    return (_condition(exc) or "").split(".")[0] in DELTA_CONFLICT_CONDITIONS


def _condition(exc: BaseException) -> str | None:
    """Spark's error condition of ``exc`` (``DELTA_CONCURRENT_APPEND.WITH_PARTITION_HINT``)."""
    return exc.getCondition() if isinstance(exc, PySparkException) else None


def apply_changes(
    flow: Flow,
    changes: DataFrame,
    source: str,
    target: Target,
    *,
    batch_id: str = "",
    closing_date: dt.date | None = None,
    on_step: Callable[[str], None] | None = None,
    before_writes: tuple[str, Callable[[DataFrame, dict[str, int]], None]] | None = None,
) -> ApplyResult:
    """Apply raw changes to ``target`` — the single write path of batch and stream.

    ``changes`` holds the flow's columns as text plus ``_source_ref`` and ``_raw``; an
    optional ``_source`` column overrides ``source`` per row, and other columns whose names
    start with ``_`` ride along on the apply's frame. ``closing_date`` is the date an EOD run
    is closing: its own rows are not late. ``on_step(name)`` is called as each step ends
    (``seconds_by_step``'s names), from the thread that ran it.

    ``before_writes`` = (step name, function): the function is called once, with the apply's
    persisted frame (the checked rows, counted) and the rejected rows' counts by their first
    rule, before anything is written, so a caller reads what it needs of the batch from the
    one cache the apply builds (the stream sends its undecodable messages to the dead-letter
    topic from it, before quarantine holds them, and skips that read when none were counted).

    Two writers may share a layer (in stage ``stream`` the EOD correction and the streaming
    job write the same business date). Delta detects a conflicting commit and refuses it;
    because every step here is idempotent, the whole apply is simply run again, with jittered
    exponential back-off, up to ``COMMIT_ATTEMPTS`` times. Steps that did commit before the
    conflict are no-ops the second time.
    """
    attempts = _Attempts(before_writes=[before_writes] if before_writes else [])
    started = time.perf_counter()
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        try:
            result = _apply_once(
                flow, changes, source, target, batch_id, closing_date, on_step, attempts
            )
            result.seconds = time.perf_counter() - started
            return result
        except Exception as exc:
            if not is_conflict(exc):
                raise
            what = _condition(exc) or type(exc).__name__
            if attempt == COMMIT_ATTEMPTS:
                raise WriteConflictError(
                    f"{target.tables.layer} layer of {flow.name}: another writer kept "
                    f"committing through {COMMIT_ATTEMPTS} attempts ({what}); "
                    "run the job again (it is idempotent)"
                ) from exc
            delay = min(30.0, 0.5 * 2 ** (attempt - 1)) * (0.5 + random.random())
            print(
                f"[write] concurrent commit to the {target.tables.layer} layer of {flow.name} "
                f"({what}); applying again in {delay:.1f}s "
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
    before_writes: list[tuple[str, Callable[[DataFrame, dict[str, int]], None]]]
    # Current-state rows the attempts' committed MERGEs inserted or updated. A conflict in a
    # side step (history beside the current-state MERGE) fails an attempt whose current state
    # did commit; the next attempt's MERGE then finds those rows in place and counts none.
    applied: int = 0


def checked_batch(
    flow: Flow, changes: DataFrame, reference: Reference, *, ranked: bool = False
) -> DataFrame:
    """The apply's persisted frame: the checked rows, stamped once; ranked by key as one
    window in the same pass when ``ranked`` (a layer whose batches repeat many keys), else not
    yet (:func:`ranked_batch`). The caller unpersists it.

    The raw payload stays only on rejected rows, the only ones that keep it (quarantine), so
    the cache and the shuffle do not carry it. The stamp is a literal: with
    ``current_timestamp()`` in the cached plan, a Delta MERGE of a frame derived from it misses
    the cache and recomputes the batch from its source (bench/eod_load.py).
    """
    rejected = F.size(FAILED) > 0
    checked = checked_changes(flow, changes, reference)
    if ranked:
        checked = ranked_versions(flow, checked)
    return (
        checked.withColumn(RAW, F.when(rejected, F.col(RAW)))
        .withColumn(APPLIED_AT, F.lit(dt.datetime.now(dt.UTC)))
        .persist()
    )


@dataclass
class Ranked:
    """``checked`` with :func:`~streamshift.engine.write.transforms.ranked_versions`' flags,
    what ranking it persisted (unpersisted with ``checked``), and whether it took the whole
    batch as one window."""

    frame: DataFrame
    persisted: DataFrame | None = None
    whole: bool = False

    def unpersist(self) -> None:
        if self.persisted is not None:
            self.persisted.unpersist()


def ranked_batch(flow: Flow, checked: DataFrame) -> Ranked:
    """``checked`` (:func:`checked_batch`, not ranked) ranked by key: which versions are new,
    which is each key's latest, which deliveries conflict.

    A key accepted once in the batch is its own first and latest version and cannot conflict,
    so only the keys accepted more than once need the window's exchange and sort of their rows
    (:func:`~streamshift.engine.write.transforms.ranked_versions`). One job counts the
    accepted rows per key, a shuffle of the keys alone, and fills ``checked``'s cache on the
    way: a batch of new keys (a day's file, a stream of new events) ranks no row, a few
    repeated keys rank theirs from the cache, and more than ``RANK_APART_AT_MOST`` rank the
    whole batch as one window from the cache, which costs more than ranking it in the pass
    that fills the cache (``checked_batch(ranked=True)``, what the apply does next time).
    """
    accepted = F.size(FAILED) == 0
    counted = checked.where(accepted).groupBy(flow.key).count()
    repeated = counted.where("count > 1").select(flow.key).limit(RANK_APART_AT_MOST + 1).collect()
    keys = [r[0] for r in repeated]
    if len(keys) > RANK_APART_AT_MOST or None in keys:
        whole = ranked_versions(flow, checked).persist()
        return Ranked(whole, whole, whole=True)
    once = {FIRST_VERSION: accepted, LATEST_VERSION: accepted}
    if not keys:
        return Ranked(checked.withColumns(once))
    spark = checked.sparkSession
    among = F.broadcast(
        spark.createDataFrame([(k,) for k in keys], checked.select(flow.key).schema)
    )
    few = ranked_versions(flow, checked.join(among, flow.key, "left_semi")).persist()
    rest = checked.join(among, flow.key, "left_anti").withColumns(once)
    return Ranked(rest.unionByName(few), few)


def batch_counts(flow: Flow, checked: DataFrame) -> list[Row]:
    """One pass over the apply's persisted frame: the rows by rule and, per view group (of
    which the business date is part), the accepted versions, the keys (one latest row each)
    and the range they span."""
    first, key = F.col(FIRST_VERSION), F.col(flow.key)
    rule = F.try_element_at(F.col(FAILED), F.lit(1))
    unknown = (
        [F.count(UNKNOWN_FIELDS).alias("unknown"), F.collect_set(UNKNOWN_FIELDS).alias("names")]
        if UNKNOWN_FIELDS in checked.columns
        else []
    )
    return (
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
            *unknown,
        )
        .collect()
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
    ensure_deployed(target)  # the code is the flow's recorded version (or a change in place)
    if SOURCE not in changes.columns:
        changes = changes.withColumn(SOURCE, F.lit(source))
    rejected = F.size(FAILED) > 0
    # A layer whose last batch repeated too many keys to rank them apart ranks the next one
    # as one window in the pass that fills the cache: when most keys repeat, that costs less
    # than counting keys first and ranking from the cache (BENCHMARKS.md, the throughput row).
    whole = _RANK_WHOLE.get(tables.current, False)
    persisted = checked_batch(flow, changes, target.reference, ranked=whole)
    ranked = Ranked(persisted, whole=whole)
    try:
        result = ApplyResult()
        result.reference = target.reference_digest
        timer = Timer(on_step)
        if not whole:
            ranked = ranked_batch(flow, persisted)
        checked = ranked.frame
        counts = batch_counts(flow, checked)
        if ranked.whole:  # rows beyond one per key: at least as many as keys repeated
            extra = sum(r["count"] - r["keys"] for r in counts if r["rule"] is None)
            _RANK_WHOLE[tables.current] = extra > RANK_APART_AT_MOST
        by_group: list[Row] = []
        names: set[str] = set()
        for row in counts:
            # the unknown-field counts are there only when the batch has the column
            unknown = row.asDict().get("unknown")
            if unknown:
                result.unknown_rows += unknown
                names.update(n for joined in row["names"] for n in joined.split(", "))
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
        result.unknown_fields = tuple(sorted(names))
        timer.lap("validate")
        while attempts.before_writes:
            name, call = attempts.before_writes.pop()
            call(checked, dict(result.rejected_by_rule))
            timer.lap(name)
        dates = {r[flow.business_date] for r in by_group}
        in_tasks = result.accepted >= WRITE_IN_TASKS_FROM * max(1, len(dates))
        with (
            written_in_tasks(spark, checked.sparkSession) if in_tasks else nullcontext(),
            Steps(timer) as steps,
        ):
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
        ranked.unpersist()
        persisted.unpersist()


def _quarantine(
    spark: SparkSession, flow: Flow, rejected: DataFrame, tables: LayerTables, batch_id: str
) -> None:
    rows = quarantine_rows(flow, rejected, batch_id, F.col(RAW))
    merge_into(tables.quarantine, rows, same_columns(["flow", "source_ref", "rule"]), insert="*")


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
    rows = by_key_version(flow, checked.where(F.col(FIRST_VERSION)), conflicts, "left_semi")
    conflict = F.lit(VERSION_CONFLICT_RULE)
    payload = F.coalesce(F.col(RAW), typed_payload(flow))
    rows = quarantine_rows(flow, rows, "", payload, rule=conflict, rules=conflict)
    merge_into(tables.quarantine, rows, same_columns(["flow", "source_ref", "rule"]), insert="*")


def _apply_accepted(
    spark: SparkSession,
    flow: Flow,
    checked: DataFrame,
    by_group: list[Row],
    target: Target,
    result: ApplyResult,
    closing_date: dt.date | None,
    steps: Steps,
    attempts: _Attempts,
) -> None:
    """Steps 3–6 for the accepted rows of ``checked``, the apply's persisted frame: its
    ``ranked_versions`` flags pick the new versions and each key's latest (rejected rows have
    neither).

    The critical path is keys → touched groups → current state → views; the history write,
    redeliveries and the late-event record depend only on the incoming versions, so they run
    beside it (:class:`~streamshift.engine.write.steps.Steps`). A small batch and a large one
    answer the path's questions each in its own way (:mod:`streamshift.engine.write.batches`).
    """
    tables = target.tables
    bd = flow.business_date
    plans = ExitStack()
    # Both read the apply's persisted frame: no shuffle of their own.
    versions = state_columns(flow, checked.where(F.col(FIRST_VERSION)))
    latest = state_columns(flow, checked.where(F.col(LATEST_VERSION)))
    try:
        # Keys.
        batch: Batch
        if result.accepted < PRUNE_KEYS_BELOW:
            batch = SmallBatch(spark, flow, tables, versions)
        else:
            batch = LargeBatch(spark, flow, tables, versions, by_group)
        # Current state's log version, taken before its dates are seen empty: later it tells
        # whether this apply's commit was the only one since (the views' shortcut).
        version_before = delta_log_version(spark, tables.current)
        held = target.current_bytes(batch.incoming_dates)
        dates_were_empty = held == 0
        if batch.may_interpret(held):  # little data on both sides: no generated code
            plans.enter_context(interpreted(spark, checked.sparkSession))
        steps.timer.lap("keys")

        # Touched groups (history written beside).
        touched, conflicts, resent = batch.look_up(steps, dates_were_empty)
        if conflicts:
            # Versions history holds with other content: the stored one stays (neither MERGE
            # applies an equal version); the new delivery goes to quarantine, counted there.
            steps.wait_if_submitted("quarantine")  # one writer of quarantine at a time
            steps.run("conflicts", _quarantine_conflicts, spark, flow, checked, conflicts, tables)
            result.accepted -= len(conflicts)
            result.rejected += len(conflicts)
            rule = VERSION_CONFLICT_RULE
            result.rejected_by_rule[rule] = result.rejected_by_rule.get(rule, 0) + len(conflicts)
            batch.drop_conflicts(conflicts)
        if resent or sum(r["repeats"] for r in by_group):
            steps.submit(
                "redeliveries",
                _record_redeliveries,
                spark,
                flow,
                checked,
                tables,
                resent,
                conflicts,
                batch.key_range,
            )
        closed = target.closed_dates() - ({closing_date} if closing_date else set())
        late_dates = [d for d in batch.incoming_dates if d in closed]
        if late_dates:
            result.late = batch.record_late(steps, late_dates)

        # Current state.
        date_at = flow.group_columns.index(bd)
        touched_dates: list[dt.date] = sorted(
            {cast(dt.date, g[date_at]) for g in touched} | set(batch.incoming_dates)
        )
        date_filter = sql.col(bd, "t").isin(touched_dates)
        # A batch for dates current state never held (a new day's EOD file): nothing can
        # match, so an insert-only MERGE does it (one anti-join, no source materialisation, no
        # rewrite); should another writer have added some of the keys meanwhile, the full
        # MERGE follows for them.
        seen_empty_at = None
        if dates_were_empty and set(touched_dates) == set(batch.incoming_dates):
            seen_empty_at = version_before
        inserted_only = steps.run(
            "current",
            _merge_current,
            spark,
            flow,
            latest,
            tables,
            date_filter,
            batch.current_keys(),
            sum(r["keys"] for r in by_group) if seen_empty_at is not None else None,
            attempts,
        )
        result.applied = attempts.applied

        # Views. When every key went into dates that held nothing and no other writer has
        # committed to current state since they were seen empty, those dates' current state
        # is the batch's latest rows, which the apply holds in memory (bench/eod_load.py).
        from_batch = None
        if inserted_only:  # (so seen_empty_at is set)
            assert seen_empty_at is not None
            if delta_log_version(spark, tables.current) == seen_empty_at + 1:
                from_batch = (latest, seen_empty_at + 1)
        refresh_views(
            spark,
            flow,
            tables,
            steps,
            result,
            touched,
            touched_dates,
            date_filter,
            from_batch,
            changed=result.applied > 0,
        )
    finally:
        steps.settle()  # the side steps read the persisted frame too
        plans.close()


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
        rows = rows.unionByName(by_key_version(flow, firsts, resent, "left_semi"))
    elif resent:
        held = (
            read(spark, tables.history)
            .where(within(key, key_range).column() & ~synthetic().column())
            .select(
                F.col(key).alias("_k"),
                F.col(version).alias("_v"),
                content_hash(flow).alias("_c"),
                delivered().alias("_d"),
            )
        )
        joined = (
            (F.col(key) == F.col("_k"))
            & (F.col(version) == F.col("_v"))
            & (content_hash(flow) == F.col("_c"))
            & (delivered() != F.col("_d"))
        )
        rows = rows.unionByName(firsts.join(held, joined, "left_semi"))
    if conflicts:
        rows = by_key_version(flow, rows, conflicts, "left_anti")
    ensure_state_table(spark, flow, tables.redeliveries)
    on = same_columns([key, version]) & same_delivery() & within(key, key_range, "t")
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
    version = higher | (same & synthetic("t") & ~synthetic("s"))
    on = same_columns([flow.key]) & date_filter & key_filter

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
