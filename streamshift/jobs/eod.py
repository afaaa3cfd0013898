"""End-of-day batch: load an EOD file (delta or whole-day replacement) through apply_changes."""

from __future__ import annotations

import datetime as dt
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streamshift.core.contract import MALFORMED, SOURCE
from streamshift.sources.eodfile import FileLayout, check_file
from streamshift.sources.eodread import read_eod_file
from streamshift.write.apply import ApplyResult, apply_changes
from streamshift.write.target import Target, read, when_small
from streamshift.write.transforms import replacement_cancels


@dataclass
class EodResult:
    business_date: dt.date
    file: str
    mode: str
    apply: ApplyResult
    cancelled: int
    seconds: float

    def describe(self) -> str:
        extra = (
            f", {self.cancelled} rows absent from the file cancelled"
            if self.mode == "replace"
            else ""
        )
        return (
            f"EOD {self.mode} load of {self.file} for {self.business_date}: "
            f"{self.apply.describe()}{extra} ({self.seconds:.1f}s)"
        )


def run_eod(
    spark: SparkSession,
    target: Target,
    business_date: dt.date,
    file: Path,
    *,
    replace: bool = False,
    source: str = "eod",
) -> EodResult:
    """Load one EOD file for ``business_date`` into ``target`` and record the run."""
    started = time.monotonic()
    flow = target.flow
    file = file.resolve()
    layout = check_file(file, flow, whole_day=replace)  # raises before anything is written
    target.create_tables()
    with when_small([target], [business_date], files=[file]):
        result, cancelled = _load(spark, target, business_date, file, layout, replace, source)
    return EodResult(
        business_date,
        str(file),
        "replace" if replace else "delta",
        result,
        cancelled,
        time.monotonic() - started,
    )


def _load(
    spark: SparkSession,
    target: Target,
    business_date: dt.date,
    file: Path,
    layout: FileLayout,
    replace: bool,
    source: str,
) -> tuple[ApplyResult, int]:
    flow = target.flow
    _progress(f"reading {file} ({layout.data_lines} data lines)")
    rows = read_eod_file(spark, file, flow, layout).withColumn(SOURCE, F.lit(source))
    cancelled = 0
    if replace:
        cancels = replacement_cancels(
            flow, read(spark, target.tables.current), rows, business_date, str(file)
        ).persist()
        cancelled = cancels.count()
        _progress(f"replacement: {cancelled} rows of {business_date} absent from the file")
        rows = rows.unionByName(cancels.withColumn(MALFORMED, F.lit(None).cast("string")))
    _progress("applying changes (validate, history, current state, views)")
    result = apply_changes(
        flow, rows, source, target, batch_id=f"eod:{file}", closing_date=business_date
    )
    _record_run(spark, target, business_date, file, "replace" if replace else "delta", result)
    return result, cancelled


def _record_run(
    spark: SparkSession,
    target: Target,
    business_date: dt.date,
    file: Path,
    mode: str,
    result: ApplyResult,
) -> None:
    row = [
        (
            target.flow.name,
            target.tables.layer,
            business_date,
            str(file),
            mode,
            result.received,
            result.accepted,
            result.rejected,
            result.late,
        )
    ]
    df = spark.createDataFrame(
        row,
        "flow STRING, layer STRING, business_date DATE, file STRING, mode STRING, "
        "received BIGINT, accepted BIGINT, rejected BIGINT, late BIGINT",
    ).withColumn("run_at", F.current_timestamp())
    df.write.format("delta").mode("append").save(target.tables.eod_runs)


def _progress(message: str) -> None:
    print(f"[eod] {message}", file=sys.stderr, flush=True)
