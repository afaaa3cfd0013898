"""The tables the write path writes, as handles: opening one reads nothing and creates nothing.

A :class:`Target` is a flow's tables in one layer plus its reference data. Its reference data
is loaded on first use, its tables are created by :meth:`Target.create_tables`, the explicit,
idempotent first step of every writing job (``apply_changes`` calls it too, so a writer never
finds a table missing). Reads of tables that may not exist yet go through
:func:`read_or_empty`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import shutil
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from streamshift.engine.spark import interpreted, is_interpreted
from streamshift.engine.write.commits import append
from streamshift.engine.write.transforms import checked_changes, raw_schema, state_columns
from streamshift.spec.catalog import (
    DAY_CLOSES_SCHEMA,
    EOD_RUNS_SCHEMA,
    LATE_EVENTS_SCHEMA,
    QUARANTINE_SCHEMA,
    LayerTables,
)
from streamshift.spec.contract import IS_DELETED, SOURCE
from streamshift.spec.flow import Flow, Reference, ReferenceTable
from streamshift.spec.settings import load_settings
from streamshift.spec.sqltext import delta_path, identifier
from streamshift.store import storage
from streamshift.store.records import closed_dates_in
from streamshift.store.versions import live_tables

if TYPE_CHECKING:
    from streamshift.spec.settings import Settings


# ---- Delta helpers ------------------------------------------------------------------------
def read(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    """The Delta table at ``path``: its latest version, or ``version`` (time travel)."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path)


def warm_state(
    spark: SparkSession, paths: Iterable[str], stop: Callable[[], bool] = lambda: False
) -> None:
    """Have Spark compute the state of each table's latest version (listing its files does),
    so the next reader or MERGE starts from it instead of computing it first. A table
    dropped meanwhile is skipped; once ``stop()`` says so, the tables left are."""
    for path in paths:
        if stop():
            return
        with contextlib.suppress(Exception):
            read(spark, path).inputFiles()


def _log_entries(path: str) -> list[str]:
    """File names in the table's ``_delta_log`` (none when there is no log): one listing."""
    return storage.names(f"{path}/_delta_log")


def is_table(spark: SparkSession, path: str) -> bool:
    """Whether a Delta table was committed at ``path``: its log holds a commit or checkpoint.

    One listing of ``_delta_log``, not ``DeltaTable.isDeltaTable`` (which resolves the table:
    ~0.2 s each, and every job checks seven tables).
    """
    return any(name.endswith(".json") or ".checkpoint" in name for name in _log_entries(path))


def read_or_empty(spark: SparkSession, path: str, schema: StructType | str) -> DataFrame:
    """The table at ``path``, or an empty frame of ``schema`` when nothing was written yet."""
    if is_table(spark, path):
        return read(spark, path)
    return spark.createDataFrame([], schema)


CHECKPOINT_INTERVAL = 100


def ensure_state_table(spark: SparkSession, flow: Flow, path: str, **options: bool) -> None:
    """Create a table of the flow's rows (current state, history, redeliveries) at ``path`` if
    it does not exist yet: partitioned by date, with statistics of the key and the version
    only, the columns the kit's readers find rows by (a key's versions, a key range). The
    statistics of every column cost a million-row write about a quarter of its time more
    (bench/write_stats.py: 0.73 without them)."""
    ensure_table(
        spark,
        path,
        state_schema(spark, flow),
        (flow.business_date,),
        stats_columns=(flow.key, flow.version),
        **options,
    )


def ensure_table(
    spark: SparkSession,
    path: str,
    schema: StructType | str,
    partition_by: tuple[str, ...] = (),
    change_data_feed: bool = False,
    deletion_vectors: bool = False,
    stats_columns: tuple[str, ...] = (),
) -> None:
    """Create the Delta table at ``path`` if it does not exist yet; ``stats_columns``: the
    only columns whose statistics its writes collect (Delta's default: the first 32)."""
    if is_table(spark, path):
        return
    struct = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    assert isinstance(struct, StructType)
    columns = ", ".join(
        f"{identifier(f.name)} {f.dataType.simpleString()}" + ("" if f.nullable else " NOT NULL")
        for f in struct.fields
    )
    # Deletion vectors, for big tables: a MERGE that touches one row marks it deleted instead
    # of rewriting the whole file it lives in (a correction costs one row, not one file). On
    # small tables rewriting the file is cheaper than the vector (bench/delta_floor.py).
    properties = {"delta.enableDeletionVectors": str(deletion_vectors).lower()}
    # A checkpoint every 100 commits instead of Delta's 10: the commit that writes one waits
    # for it, and a stream commits to its tables every batch; a new process replaying up to 99
    # commits reads no slower than one starting from a checkpoint (bench/small_apply.py
    # --variants interval_10 interval_100, bench/delta_checkpoint.py). Upkeep checkpoints too.
    properties["delta.checkpointInterval"] = str(CHECKPOINT_INTERVAL)
    if change_data_feed:
        properties["delta.enableChangeDataFeed"] = "true"
    if stats_columns:
        properties["delta.dataSkippingStatsColumns"] = ",".join(map(identifier, stats_columns))
    partitioned = (
        f" PARTITIONED BY ({', '.join(identifier(c) for c in partition_by)})"
        if partition_by
        else ""
    )
    # (property names are this function's constants; values are quoted, since the statistics'
    # column names are the flow's)
    props = ", ".join(f"'{k}' = '{_quoted(v)}'" for k, v in properties.items())
    definition = f"({columns}) USING delta{partitioned} TBLPROPERTIES ({props})"
    templates = load_settings().table_templates
    if templates and _copied_from_template(spark, Path(templates), definition, path):
        return
    spark.sql(f"CREATE TABLE IF NOT EXISTS {delta_path(path)} {definition}")


def _quoted(text: str) -> str:
    """``text`` inside a SQL string literal's quotes."""
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _copied_from_template(spark: SparkSession, templates: Path, definition: str, path: str) -> bool:
    """Whether the empty table ``definition`` makes was copied to ``path`` from its template
    under ``templates`` (made there by Delta first, when missing): a copied Delta table folder
    is a valid table, and copying one costs no commit. The copy lands whole (renamed into
    place) or not at all; a ``path`` that exists already, or is not on the local disk, is
    created as usual."""
    target = Path(path)
    if "://" in path or target.exists():
        return False
    template = templates / hashlib.sha256(definition.encode()).hexdigest()[:24]
    if not (template / "_delta_log").is_dir():
        templates.mkdir(parents=True, exist_ok=True)
        making = templates / f".{template.name}.{uuid.uuid4().hex}"
        spark.sql(f"CREATE TABLE IF NOT EXISTS {delta_path(str(making))} {definition}")
        try:
            making.rename(template)
        except OSError:  # another process made it first
            shutil.rmtree(making, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    landing = target.parent / f".{target.name}.{uuid.uuid4().hex}"
    shutil.copytree(template, landing)
    try:
        landing.rename(target)
    except OSError:  # created meanwhile by another writer
        shutil.rmtree(landing, ignore_errors=True)
        return False
    return True


def partition_bytes(spark: SparkSession, path: str, column: str, values: list[object]) -> int:
    """Bytes in the table's partition directories ``column=value``: what a query of those
    partitions may scan, from one file-system call each (files a later commit replaced count
    until VACUUM removes them, so the measure errs large)."""
    return sum(storage.tree_bytes(f"{path}/{column}={value}") for value in values)


def delta_log_version(spark: SparkSession, path: str) -> int:
    """The table's latest commit number, from a listing of ``_delta_log`` (no log replay)."""
    versions = [
        int(name[:-5])
        for name in _log_entries(path)
        if name.endswith(".json") and name[:-5].isdigit()
    ]
    return max(versions, default=-1)


# Work on less than this (the dates' current state, the input files) runs its queries without
# generated code: on a few thousand rows Janino's compiling costs more than it saves, while on
# hundreds of thousands the interpreter's slower scans cost more (bench/small_apply.py).
INTERPRET_BELOW_BYTES = 2 * 1024 * 1024


def is_little(held_bytes: int) -> bool:
    """Whether ``held_bytes`` (of current state, or of an input file) is little enough to
    query without generated code (``INTERPRET_BELOW_BYTES``, read when asked: a bench sets it)."""
    return held_bytes < INTERPRET_BELOW_BYTES


def when_small(
    targets: Iterable[Target],
    dates: Iterable[dt.date],
    *,
    files: Iterable[Path | None] = (),
    sessions: Iterable[SparkSession] = (),
) -> AbstractContextManager[None]:
    """:func:`streamshift.engine.spark.interpreted` (the targets' sessions and ``sessions``) when
    ``dates`` hold little current state in every target and every given file is small;
    otherwise nothing changes. Inside such a block already (an EOD load's apply) nothing is
    measured again."""
    targets, dates = list(targets), list(dates)
    sessions = [*(t.spark for t in targets), *sessions]
    if all(is_interpreted(s) for s in sessions):
        return interpreted(*sessions)
    small = all(t.holds_little(dates) for t in targets) and all(
        is_little(f.stat().st_size) for f in files if f is not None and f.exists()
    )
    if not small:
        return nullcontext()
    return interpreted(*sessions)


# ---- reference data -----------------------------------------------------------------------
def reference_path(flow: Flow, table: ReferenceTable, override_dir: str = "") -> Path:
    """Where a reference table is read: ``<override_dir>/<flow>/<table>.csv`` when that file
    exists (the ``reference_dir`` setting), else the file the flow ships."""
    if override_dir:
        override = Path(override_dir) / flow.name / f"{table.name}.csv"
        if override.is_file():
            return override
    return table.path


def reference_digest(flow: Flow, override_dir: str = "") -> str:
    """A digest of the content of the reference files ``flow`` reads (where
    :func:`reference_path` finds them): the feed a run was checked with. Empty without
    reference tables."""
    if not flow.reference:
        return ""
    sha = hashlib.sha256()
    for ref in sorted(flow.reference, key=lambda r: r.name):
        sha.update(ref.name.encode() + b"\0")
        sha.update(hashlib.sha256(reference_path(flow, ref, override_dir).read_bytes()).digest())
    return sha.hexdigest()[:16]


def load_reference(spark: SparkSession, flow: Flow, override_dir: str = "") -> dict[str, DataFrame]:
    """Each reference table of ``flow`` as a cached DataFrame, read with its declared schema
    (from ``override_dir`` where it holds the table: :func:`reference_path`).

    Reference data is small (the flows broadcast it), so each table is cached as one partition:
    a window or aggregate a flow's ``prepare`` runs over it then needs no shuffle, which a
    streaming job would otherwise run again in every micro-batch.
    """
    tables: dict[str, DataFrame] = {}
    for ref in flow.reference:
        path = reference_path(flow, ref, override_dir)
        df = spark.read.csv(str(path), header=True, schema=ref.schema, mode="FAILFAST")
        # Spark's cache is shared by every session of a JVM (the warm engine's clients too)
        # and found by plan: the file's size and time in the plan make a changed file a new
        # plan, read anew, instead of the cached old data.
        stat = path.stat()
        df = df.where(F.lit(f"{stat.st_size}:{stat.st_mtime_ns}").isNotNull())
        tables[ref.name] = df.coalesce(1).cache()
    return tables


def empty_reference(spark: SparkSession, flow: Flow) -> dict[str, DataFrame]:
    """The reference tables' shapes without their data: enough to derive table schemas."""
    return {ref.name: spark.createDataFrame([], ref.schema) for ref in flow.reference}


# ---- schemas ------------------------------------------------------------------------------
# Derived schemas by flow object: planning the flow's transforms on empty frames costs driver
# time, and every job opens its targets (and so their tables' schemas) again.
_SCHEMAS: dict[tuple[int, str], tuple[Flow, StructType]] = {}


def _cached(flow: Flow, name: str, derive: Callable[[], StructType]) -> StructType:
    entry = _SCHEMAS.get((id(flow), name))
    if entry is None or entry[0] is not flow:
        entry = _SCHEMAS[(id(flow), name)] = (flow, derive())
    return entry[1]


def state_schema(spark: SparkSession, flow: Flow) -> StructType:
    """Schema of current state and history: the flow's prepared columns (reads no data)."""

    def derive() -> StructType:
        empty_raw = spark.createDataFrame([], raw_schema(flow)).withColumn(SOURCE, F.lit(""))
        checked = checked_changes(flow, empty_raw, empty_reference(spark, flow))
        return state_columns(flow, checked).schema

    return _cached(flow, "", derive)


def view_schema(spark: SparkSession, flow: Flow, view: str) -> StructType:
    def derive() -> StructType:
        state = spark.createDataFrame([], state_schema(spark, flow))
        return flow.view(view).compute(state.where(~F.col(IS_DELETED))).schema

    return _cached(flow, view, derive)


# ---- the target ---------------------------------------------------------------------------
class Target:
    """A flow's tables in one layer plus its reference data: what ``apply_changes`` writes to.

    Constructing it reads nothing and creates nothing.
    """

    def __init__(
        self,
        spark: SparkSession,
        flow: Flow,
        tables: LayerTables,
        reference: Reference | None = None,
        reference_dir: str = "",
    ):
        self.spark = spark
        self.flow = flow
        self.tables = tables
        self._reference = reference
        self._reference_dir = reference_dir
        self._reference_digest = ""
        self._created = False
        self._closed: tuple[int, set[dt.date]] | None = None

    @classmethod
    def open(cls, spark: SparkSession, settings: Settings, flow: Flow, layer: str) -> Target:
        return cls(
            spark,
            flow,
            live_tables(settings.warehouse, flow, layer),
            reference_dir=settings.reference_dir,
        )

    @property
    def reference(self) -> Reference:
        """The flow's reference data, read on first use and cached for the target's life."""
        if self._reference is None:
            self._reference_digest = reference_digest(self.flow, self._reference_dir)
            self._reference = load_reference(self.spark, self.flow, self._reference_dir)
        return self._reference

    @property
    def reference_digest(self) -> str:
        """The digest of the reference files :attr:`reference` read (empty before it did, or
        when the target was handed its reference data)."""
        return self._reference_digest

    def create_tables(self) -> Target:
        """Create the layer's tables where missing (idempotent; a no-op after the first call)."""
        if self._created:
            return self
        flow, tables, spark = self.flow, self.tables, self.spark
        part = (flow.business_date,)
        state = partial(ensure_state_table, spark, flow)
        table = partial(ensure_table, spark)
        wanted: list[tuple[str, Callable[[], None]]] = [
            (tables.current, partial(state, tables.current, deletion_vectors=True)),
            (tables.history, partial(state, tables.history)),  # insert-only
            (tables.quarantine, partial(table, tables.quarantine, QUARANTINE_SCHEMA)),
            (
                tables.late_events,
                partial(table, tables.late_events, LATE_EVENTS_SCHEMA, ("business_date",)),
            ),
            (tables.eod_runs, partial(table, tables.eod_runs, EOD_RUNS_SCHEMA)),
            (tables.day_closes, partial(table, tables.day_closes, DAY_CLOSES_SCHEMA)),
        ]
        for view in flow.views:
            path, schema = tables.view(view.name), view_schema(spark, flow, view.name)
            wanted.append((path, partial(table, path, schema, part, change_data_feed=True)))
        missing = [create for path, create in wanted if not is_table(spark, path)]
        if missing:
            # Each is a first commit to a table of its own, mostly the driver waiting: side by
            # side a layer's first use takes about two thirds of the time.
            with ThreadPoolExecutor(max_workers=4) as pool:
                list(pool.map(lambda create: create(), missing))
        self._created = True
        return self

    def table(self, name: str) -> DataFrame:
        """Read one of the layer's tables (``current``, ``history``, ``quarantine``,
        ``late_events`` or a view), empty when it was never written."""
        tables = self.tables
        fixed = {"quarantine": QUARANTINE_SCHEMA, "late_events": LATE_EVENTS_SCHEMA}
        paths = {
            "current": tables.current,
            "history": tables.history,
            "quarantine": tables.quarantine,
            "late_events": tables.late_events,
        }
        path = paths[name] if name in paths else tables.view(name)
        if is_table(self.spark, path):
            return read(self.spark, path)
        if name in fixed:
            schema: StructType | str = fixed[name]
        elif name in paths:
            schema = state_schema(self.spark, self.flow)
        else:
            schema = view_schema(self.spark, self.flow, name)
        return self.spark.createDataFrame([], schema)

    def current_bytes(self, dates: Iterable[dt.date]) -> int:
        """Bytes of current state's files for ``dates`` (0: the layer never held those dates)."""
        return partition_bytes(
            self.spark, self.tables.current, self.flow.business_date, list(dates)
        )

    def holds_little(self, dates: Iterable[dt.date]) -> bool:
        """Whether current state holds fewer than ``INTERPRET_BELOW_BYTES`` for ``dates``."""
        return is_little(self.current_bytes(dates))

    def closed_dates(self) -> set[dt.date]:
        """Business dates closed for this flow in this layer (``day_closes``).

        Re-read only when ``day_closes`` has a new commit: a streaming job asks every batch.
        """
        path = self.tables.day_closes
        version = delta_log_version(self.spark, path)
        if version < 0:
            return set()
        if self._closed is None or self._closed[0] != version:
            closed = closed_dates_in(path, self.flow.name, self.tables.layer)
            self._closed = (version, closed)
        return set(self._closed[1])

    def close_day(
        self,
        business_date: dt.date,
        how: str,
        layers: Iterable[str],
        *,
        by: str,
        reason: str | None = None,
        detail: str | None = None,
    ) -> None:
        """Record ``business_date`` closed in ``layers`` (one commit): later changes for it
        are late events there."""
        path = self.tables.day_closes
        ensure_table(self.spark, path, DAY_CLOSES_SCHEMA)
        rows = [
            (self.flow.name, layer, business_date, how, by, reason, detail)
            for layer in dict.fromkeys(layers)
        ]
        frame = self.spark.createDataFrame(
            rows,
            "flow STRING, layer STRING, business_date DATE, how STRING, closed_by STRING, "
            "reason STRING, detail STRING",
        ).select(
            "flow",
            "layer",
            "business_date",
            "how",
            F.current_timestamp().alias("closed_at"),
            "closed_by",
            "reason",
            "detail",
        )
        append(frame, path)
