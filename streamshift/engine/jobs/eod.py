"""End-of-day batch: load an EOD file (delta or whole-day replacement) through apply_changes."""

from __future__ import annotations

import datetime as dt
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamshift.engine.eodread import check_control_totals, read_eod_file
from streamshift.engine.write import runs
from streamshift.engine.write.apply import ApplyResult, apply_changes
from streamshift.engine.write.commits import append
from streamshift.engine.write.runs import file_digest, run_key
from streamshift.engine.write.target import Target, when_small
from streamshift.engine.write.transforms import parse, replacement_cancels
from streamshift.spec import stages
from streamshift.spec.catalog import EOD_RUNS_SCHEMA
from streamshift.spec.contract import MALFORMED, SOURCE
from streamshift.spec.flow import Flow
from streamshift.store.eodfile import BadFileError, FileLayout, check_file
from streamshift.store.processes import os_user
from streamshift.store.tables import rows as delta_rows

if TYPE_CHECKING:
    from streamshift.control.jobs import JobContext
    from streamshift.spec.requests import EodRequest


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


def run(spark: SparkSession, context: JobContext, request: EodRequest) -> EodResult:
    """The EOD job: load the request's file into its layer. A load of the batch layer in a
    loading stage closes the date where the stage says; any other load closes the layer it
    wrote."""
    target = Target.open(spark, context.settings, context.flow, request.layer)
    now = context.stage
    closes = now.closes_layers if now.loads and request.layer == "batch" else (request.layer,)
    return run_eod(
        spark, target, request.business_date, request.file, replace=request.replace, closes=closes
    )


def run_eod(
    spark: SparkSession,
    target: Target,
    business_date: dt.date,
    file: Path,
    *,
    replace: bool = False,
    source: str = "eod",
    closes: tuple[str, ...] = stages.STAGES[0].closes_layers,
) -> EodResult:
    """Load one EOD file for ``business_date`` into ``target``, record the run and close the
    date in the layers ``closes`` (the stage's ``closes_layers``)."""
    started = time.monotonic()
    flow = target.flow
    file = file.resolve()
    layout = check_file(file, flow, whole_day=replace)  # raises before anything is written
    target.create_tables()
    with when_small([target], [business_date], files=[file]):
        result, cancelled = _load(spark, target, business_date, file, layout, replace, source)
    target.close_day(business_date, stages.BY_EOD_LOAD, closes, by=os_user(), detail=str(file))
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
    check_control_totals(rows, flow, layout, file)
    _check_dated(flow, rows, business_date, file, replace)
    cancelled, run = 0, None
    mode = "replace" if replace else "delta"
    if replace:
        # The cancels are computed against current state as this run first saw it, so a
        # re-run after a kill derives the same ones and repairs what was left undone.
        key = run_key(flow.name, target.tables.layer, business_date, mode, file_digest(file))
        run = runs.begin(spark, target, "eod-replace", key)
        if run.resumed:
            _progress(f"resuming the unfinished run begun at {run.started_at:%Y-%m-%d %H:%M:%S}")
        cancels = replacement_cancels(
            flow, run.current(target), rows, business_date, str(file)
        ).persist()
        cancelled = cancels.count()
        _progress(f"replacement: {cancelled} rows of {business_date} absent from the file")
        rows = rows.unionByName(cancels.withColumn(MALFORMED, F.lit(None).cast("string")))
    _progress("applying changes (validate, history, current state, views)")
    result = apply_changes(
        flow, rows, source, target, batch_id=f"eod:{file}", closing_date=business_date
    )
    if layout.unknown:  # every row of the file has the header's undeclared columns
        result.unknown_rows, result.unknown_fields = result.received, layout.unknown
    if run is None or not _recorded_since(target, business_date, file, mode, run.started_at):
        _record_run(spark, target, business_date, file, mode, result)
    if run is not None:
        runs.finish(spark, target, run)
    return result, cancelled


def _recorded_since(
    target: Target, business_date: dt.date, file: Path, mode: str, since: dt.datetime
) -> bool:
    """Whether ``eod_runs`` holds this load, recorded by an attempt of the run begun at
    ``since`` (a resumed run records it once)."""
    found = delta_rows(
        target.tables.eod_runs,
        ["run_at"],
        [
            ("flow", "=", target.flow.name),
            ("layer", "=", target.tables.layer),
            ("business_date", "=", business_date),
            ("file", "=", str(file)),
            ("mode", "=", mode),
            ("run_at", ">=", since),
        ],
    )
    return bool(found)


def _check_dated(
    flow: Flow, rows: DataFrame, business_date: dt.date, file: Path, replace: bool
) -> None:
    """A file none of whose rows is dated ``business_date`` is most likely another day's file,
    or the wrong ``--date``. As a whole-day replacement it would cancel every row of the day:
    refused before anything is written. A delta load goes on (its rows go to their own dates,
    like back-dated corrections delivered on a later day), with a warning."""
    # Parsed as the write path parses it (only this column is computed).
    dates = parse(flow)(rows).select(flow.business_date)
    date = F.col(flow.business_date)
    if not dates.where(date == F.lit(business_date)).isEmpty():
        return
    found = sorted(str(r[0]) for r in dates.where(date.isNotNull()).distinct().limit(4).collect())
    if not found and not replace:
        return  # no data rows (an empty day) or none with a readable date: the rules say so
    seen = (
        f"its rows are dated {', '.join(found[:3])}{', …' if len(found) > 3 else ''}"
        if found
        else "no row has a readable date"
    )
    problem = f"no row of the file is dated {business_date} ({seen})"
    if replace:
        raise BadFileError(
            file,
            None,
            f"{problem}; as the whole of {business_date} it would cancel every row of that day. "
            "Check --date and --file",
        )
    _progress(
        f"warning: {problem}; they are loaded under their own dates and this run is recorded "
        f"as {business_date}'s. If that is not what you meant, check --date"
    )


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
            result.reference,
        )
    ]
    df = spark.createDataFrame(
        row,
        "flow STRING, layer STRING, business_date DATE, file STRING, mode STRING, "
        "received BIGINT, accepted BIGINT, rejected BIGINT, late BIGINT, reference STRING",
    ).withColumn("run_at", F.current_timestamp())
    # mergeSchema: a table written before runs recorded their reference feed gains the column.
    order = [c.split()[0] for c in EOD_RUNS_SCHEMA.split(", ")]
    append(df.select(*order), target.tables.eod_runs, merge_schema=True)


def _progress(message: str) -> None:
    print(f"[eod] {message}", file=sys.stderr, flush=True)
