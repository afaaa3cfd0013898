"""Table upkeep for one flow: compaction of small files, VACUUM with each table's own retention,
and a Delta log checkpoint, for every table of the flow in both layers.

A stream commits a few small files per micro-batch and a log entry per commit; left alone, reads
list more files and replay more log every day. Compaction rewrites small files into large ones
(a data-neutral commit: readers and the change feed see no change), VACUUM deletes files no
version within the retention needs, and a checkpoint lets readers start from one Parquet file
instead of replaying JSON commits.

The retention is the table's ``delta.deletedFileRetentionDuration`` (Delta's default: 7 days);
Delta 4 ignores a ``RETAIN`` given to VACUUM. Shorter breaks time travel, readers of older
snapshots, replays and a writer whose transaction began before the vacuum, so streamshift never
sets it below the default.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from streamshift.spec.catalog import LAYERS
from streamshift.spec.flow import Flow
from streamshift.spec.settings import Settings
from streamshift.store.versions import live_tables, remove_expired

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamshift.control.jobs import JobContext
    from streamshift.spec.requests import MaintainRequest

RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
DEFAULT_RETENTION = "interval 7 days"  # Delta's default when the property is not set


@dataclass
class TableUpkeep:
    table: str
    files_before: int
    files_after: int
    version: int  # the checkpointed version
    retention: str  # what VACUUM kept

    def describe(self) -> str:
        files = f"{self.files_before} → {self.files_after} files"
        return f"{self.table}: {files}, VACUUM retaining {self.retention}, checkpoint at v{self.version}"


@dataclass
class MaintainResult:
    flow: str
    tables: list[TableUpkeep] = field(default_factory=list)
    seconds: float = 0.0
    # Tables of versions readers switched away from longer than the retention ago.
    removed: list[str] = field(default_factory=list)

    def describe(self) -> str:
        lines = [t.describe() for t in self.tables] or ["no tables yet"]
        lines += [f"removed {r} (STREAMSHIFT_VERSION_RETENTION_DAYS)" for r in self.removed]
        return (
            f"maintained {len(self.tables)} tables of {self.flow} in {self.seconds:.1f}s:\n  "
            + "\n  ".join(lines)
        )


def flow_tables(settings: Settings, flow: Flow) -> list[str]:
    """The flow's Delta tables that exist, both layers (quarantine and late events are shared
    by the layer's flows and kept with them)."""
    paths = []
    for layer in LAYERS:
        t = live_tables(settings.warehouse, flow, layer)
        paths += [t.current, t.history, t.redeliveries, *(t.view(v.name) for v in flow.views)]
        paths += [t.quarantine, t.late_events]
    return [p for p in paths if (Path(p) / "_delta_log").is_dir()]


def _detail(spark: SparkSession, path: str) -> tuple[int, str]:
    """(number of files, VACUUM retention) of the table's latest version."""
    from delta.tables import DeltaTable

    row = DeltaTable.forPath(spark, path).detail().select("numFiles", "properties").first()
    assert row is not None  # a table's detail is one row
    return int(row[0]), (row[1] or {}).get(RETENTION_PROPERTY, DEFAULT_RETENTION)


def run(spark: SparkSession, context: JobContext, request: MaintainRequest) -> MaintainResult:
    """The upkeep job: compaction, VACUUM and a log checkpoint of each of the flow's tables."""
    return run_maintain(spark, context.settings, context.flow)


def run_maintain(
    spark: SparkSession, settings: Settings, flow: Flow, progress: bool = True
) -> MaintainResult:
    from delta.tables import DeltaTable

    started = time.monotonic()
    result = MaintainResult(flow.name)
    result.removed = remove_expired(settings.warehouse, flow, settings.version_retention_days)
    jvm_delta_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog  # type: ignore[union-attr]
    for path in flow_tables(settings, flow):
        name = str(Path(path).relative_to(settings.warehouse))
        if progress:
            print(f"[maintain] {name}: compaction, VACUUM, checkpoint", flush=True)
        before, retention = _detail(spark, path)
        table = DeltaTable.forPath(spark, path)
        table.optimize().executeCompaction()
        table.vacuum()
        jvm_delta_log.forTable(spark._jsparkSession, path).checkpoint()
        [latest] = table.history(1).select("version").collect()
        version = int(latest[0])
        after, _ = _detail(spark, path)
        result.tables.append(TableUpkeep(name, before, after, version, retention))
    result.seconds = time.monotonic() - started
    return result
