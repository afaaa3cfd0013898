"""End-of-day batch: load an EOD file (delta or whole-day replacement) through apply_changes."""

from __future__ import annotations

import datetime as dt
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamshift.eodfile import check_file, read_eod_file
from streamshift.flow import Flow
from streamshift.tables import read
from streamshift.writepath import (
    IS_DELETED,
    RAW,
    SOURCE,
    SOURCE_REF,
    ApplyResult,
    Target,
    apply_changes,
)

REPLACEMENT_SOURCE = "replacement"


@dataclass
class EodResult:
    business_date: dt.date
    file: str
    mode: str
    apply: ApplyResult
    cancelled: int
    seconds: float

    def describe(self) -> str:
        extra = f", {self.cancelled} trades absent from the file cancelled" if self.mode == "replace" else ""
        return (
            f"EOD {self.mode} load of {self.file} for {self.business_date}: "
            f"{self.apply.describe()}{extra} ({self.seconds:.1f}s)"
        )


def replacement_cancels(flow: Flow, current: DataFrame, file_rows: DataFrame,
                        business_date: dt.date, file: str) -> DataFrame:
    """Synthetic retractions for live rows of ``business_date`` whose keys the file lacks.

    Each is the next version of its key, in raw form, so it takes the ordinary write path.
    """
    file_keys = file_rows.select(F.trim(F.col(flow.key)).alias(flow.key)).where(
        F.col(flow.key).isNotNull()
    )
    absent = (
        current.where((F.col(flow.business_date) == F.lit(business_date)) & ~F.col(IS_DELETED))
        .join(file_keys, flow.key, "left_anti")
    )
    values = {
        flow.key: F.col(flow.key).cast("string"),
        flow.version: (F.col(flow.version) + 1).cast("string"),
        flow.business_date: F.col(flow.business_date).cast("string"),
        **{c: F.lit(str(v)) for c, v in flow.retraction_values.items()},
    }
    columns = [values.get(c, F.lit(None).cast("string")).alias(c) for c in flow.columns]
    return absent.select(
        *columns,
        F.concat(F.lit(f"{REPLACEMENT_SOURCE}:{file}:"), F.col(flow.key)).alias(SOURCE_REF),
        F.lit(None).cast("string").alias(RAW),
        F.lit(REPLACEMENT_SOURCE).alias(SOURCE),
    )


def run_eod(spark: SparkSession, target: Target, business_date: dt.date, file: Path,
            *, replace: bool = False, source: str = "eod") -> EodResult:
    """Load one EOD file for ``business_date`` into ``target`` and record the run."""
    started = time.monotonic()
    flow = target.flow
    file = file.resolve()
    layout = check_file(file, flow, whole_day=replace)  # raises before anything is written
    _progress(f"reading {file} ({layout.data_lines} data lines)")
    rows = read_eod_file(spark, file, flow, layout).withColumn(SOURCE, F.lit(source))
    cancelled = 0
    if replace:
        cancels = replacement_cancels(
            flow, read(spark, target.tables.current), rows, business_date, str(file)
        ).persist()
        cancelled = cancels.count()
        _progress(f"replacement: {cancelled} trades of {business_date} absent from the file")
        rows = rows.unionByName(cancels.withColumn("_malformed", F.lit(None).cast("string")))
    _progress("applying changes (validate, history, current state, views)")
    result = apply_changes(flow, rows, source, target, batch_id=f"eod:{file}",
                           closing_date=business_date)
    _record_run(spark, target, business_date, file, "replace" if replace else "delta", result)
    return EodResult(business_date, str(file), "replace" if replace else "delta", result,
                     cancelled, time.monotonic() - started)


def _record_run(spark: SparkSession, target: Target, business_date: dt.date, file: Path,
                mode: str, result: ApplyResult) -> None:
    row = [(target.flow.name, target.tables.layer, business_date, str(file), mode,
            result.received, result.accepted, result.rejected, result.late)]
    df = spark.createDataFrame(
        row, "flow STRING, layer STRING, business_date DATE, file STRING, mode STRING, "
        "received BIGINT, accepted BIGINT, rejected BIGINT, late BIGINT",
    ).withColumn("run_at", F.current_timestamp())
    df.write.format("delta").mode("append").save(target.tables.eod_runs)


def _progress(message: str) -> None:
    print(f"[eod] {message}", file=sys.stderr, flush=True)
