"""Reconciliation records: the runs and breaks of comparing two versions of a view.

``compare`` (:mod:`streamshift.engine.compare`) is the pure diff. The three reconciliations
of a business date build on it:

* ``parity``: stream layer vs batch layer (the view, e.g. positions);
* ``external``: the serving layer vs an external EOD positions file (the clearing house's);
* ``eod_file``: the current state vs the EOD file (rows the stream missed or holds
  at another version).

Runs are recorded in ``recon_runs`` (one row per reconciliation) and their breaks in
``recon_breaks``, both Delta tables under ``<warehouse>/control``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from streamshift.engine.compare import (
    BREAK_COLUMNS,
    KINDS,
    MISSING_LEFT,
    MISSING_RIGHT,
    VALUE_MISMATCH,
)
from streamshift.engine.write.commits import append
from streamshift.engine.write.target import ensure_table
from streamshift.spec.catalog import RECON_BREAKS_SCHEMA, RECON_RUNS_SCHEMA, ControlTables
from streamshift.spec.errors import ReconcileError
from streamshift.spec.flow import Flow

if TYPE_CHECKING:
    from streamshift.spec.settings import Settings


# ---- the reconciliations ------------------------------------------------------------------
@dataclass
class ReconResult:
    run_id: str
    recon: str
    business_date: dt.date
    left_side: str
    right_side: str
    left_rows: int
    right_rows: int
    by_kind: dict[str, int] = field(default_factory=dict)
    worst: list[dict[str, object]] = field(default_factory=list)

    @property
    def breaks(self) -> int:
        return sum(self.by_kind.values())

    @property
    def clean(self) -> bool:
        return self.breaks == 0

    def describe(self) -> str:
        head = (
            f"{self.recon} {self.business_date}: {self.left_side} ({self.left_rows} rows) vs "
            f"{self.right_side} ({self.right_rows} rows): "
        )
        if self.clean and not (self.left_rows or self.right_rows):
            return head + "nothing to compare (neither side holds a row; not promotion evidence)"
        if self.clean:
            return head + "clean"
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.by_kind.items()) if n)
        return head + f"{self.breaks} breaks ({kinds})"


def recon_runs_path(settings: Settings) -> str:
    return ControlTables(settings.warehouse).recon_runs


def recon_breaks_path(settings: Settings) -> str:
    return ControlTables(settings.warehouse).recon_breaks


def ensure_recon_tables(spark: SparkSession, settings: Settings) -> None:
    ensure_table(spark, recon_runs_path(settings), RECON_RUNS_SCHEMA, ("business_date",))
    ensure_table(spark, recon_breaks_path(settings), RECON_BREAKS_SCHEMA, ("business_date",))


def record(
    spark: SparkSession,
    settings: Settings,
    flow: Flow,
    breaks: DataFrame,
    result: ReconResult,
    stage: str,
) -> ReconResult:
    """Write the breaks and the run summary (breaks first: a run row means complete breaks)."""
    ensure_recon_tables(spark, settings)
    breaks = breaks.localCheckpoint()  # computed once for its counts, rows and the worst
    counts = {r["kind"]: r["count"] for r in breaks.groupBy("kind").count().collect()}
    result.by_kind = {k: counts.get(k, 0) for k in KINDS}
    if result.breaks:
        append(
            breaks.select(
                F.lit(result.run_id).alias("run_id"),
                F.lit(flow.name).alias("flow"),
                F.lit(result.business_date).alias("business_date"),
                F.lit(result.recon).alias("recon"),
                *BREAK_COLUMNS,
                F.current_timestamp().alias("found_at"),
            ),
            recon_breaks_path(settings),
        )
        worst = breaks.orderBy(F.abs(F.coalesce("difference", F.lit(float("inf")))).desc())
        result.worst = [r.asDict() for r in worst.limit(10).collect()]
    run = spark.createDataFrame(
        [
            (
                result.run_id,
                flow.name,
                result.business_date,
                result.recon,
                result.left_side,
                result.right_side,
                result.left_rows,
                result.right_rows,
                result.breaks,
                result.by_kind[MISSING_LEFT],
                result.by_kind[MISSING_RIGHT],
                result.by_kind[VALUE_MISMATCH],
                result.clean,
                stage,
            )
        ],
        "run_id STRING, flow STRING, business_date DATE, recon STRING, left_side STRING, "
        "right_side STRING, left_rows BIGINT, right_rows BIGINT, breaks BIGINT, "
        "missing_left BIGINT, missing_right BIGINT, value_mismatch BIGINT, clean BOOLEAN, "
        "stage STRING",
    ).withColumn("run_at", F.current_timestamp())
    append(run, recon_runs_path(settings))
    return result


def _on(df: DataFrame, flow: Flow, business_date: dt.date) -> DataFrame:
    return df.where(F.col(flow.business_date) == F.lit(business_date))


def read_external_view(
    spark: SparkSession, path: Path, view_key: Sequence[str], schema: StructType
) -> DataFrame:
    """An external file of a view (CSV, header: the view's key and some of its columns),
    typed like the view table (``schema``); columns the view does not have are ignored."""
    if not path.exists():
        raise ReconcileError(
            f"external file {path} not found; pass the external view file of the date (e.g. a clearing house's positions)"
        )
    types = {f.name: f.dataType for f in schema.fields}
    raw = spark.read.option("header", True).csv(str(path))
    header = [c.strip().lower() for c in raw.columns]
    missing = [c for c in view_key if c not in header]
    if missing:
        raise ReconcileError(
            f"{path}: missing columns {', '.join(missing)}; the header has {', '.join(header)}"
        )
    raw = raw.toDF(*header)
    return raw.select(*[F.trim(F.col(c)).try_cast(types[c]).alias(c) for c in header if c in types])


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
