"""The serving read: what readers get of a flow's tables, and printing them (table or csv).

The serving read follows the stage: ``batch`` serves the batch layer; ``shadow`` serves the
batch layer for business dates an EOD run has closed and the stream layer for later ones
(the Lambda merge); ``stream`` and ``kappa`` serve the stream layer.
"""

from __future__ import annotations

import csv
import datetime as dt
from typing import TextIO

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamshift.control.stages import current_stage
from streamshift.core.catalog import ControlTables
from streamshift.core.contract import APPLIED_AT
from streamshift.core.errors import StreamshiftError
from streamshift.core.flow import Flow
from streamshift.core.formatting import format_table
from streamshift.core.settings import Settings
from streamshift.write.target import Target, closed_dates

SPECIAL_VIEWS = ("current", "quarantine", "late_events")


class UnknownViewError(StreamshiftError):
    pass


def serving_layer(stage: str, business_date: dt.date, closed: set[dt.date]) -> str:
    """Which layer serves ``business_date`` in ``stage``."""
    if stage == "batch":
        return "batch"
    if stage == "shadow":
        return "batch" if business_date in closed else "stream"
    return "stream"


def serving_frame(
    spark: SparkSession,
    settings: Settings,
    flow: Flow,
    table: str,
    business_date: dt.date | None = None,
) -> DataFrame:
    """A view (or ``current``) as readers should see it in the flow's stage."""
    stage = current_stage(spark, settings, flow)
    closed = closed_dates(spark, ControlTables(settings.warehouse).eod_runs, flow)

    def frame(layer: str) -> DataFrame:
        return Target.open(spark, settings, flow, layer).table(table)

    bd = F.col(flow.business_date)
    if business_date is not None:
        return frame(serving_layer(stage, business_date, closed)).where(bd == F.lit(business_date))
    if stage == "shadow":
        closed_list = sorted(closed)
        return (
            frame("batch")
            .where(bd.isin(closed_list))
            .unionByName(frame("stream").where(~bd.isin(closed_list)))
        )
    return frame("batch" if stage == "batch" else "stream")


def view_frame(spark: SparkSession, target: Target, view: str, date: dt.date | None) -> DataFrame:
    """The rows ``streamshift show`` prints, sorted for stable output."""
    flow = target.flow
    if view == "current":
        df, order = target.table("current"), [flow.business_date, flow.key]
        df = df.drop(APPLIED_AT)
    elif view == "quarantine":
        df = target.table("quarantine").where(F.col("flow") == flow.name)
        df, order = df.drop("quarantined_at", "batch_id"), ["source_ref", "rule"]
    elif view == "late_events":
        df = target.table("late_events").where(F.col("flow") == flow.name)
        order = ["business_date", "key", "version"]
    elif view in {v.name for v in flow.views}:
        df, order = target.table(view), list(flow.view(view).group_key)
    else:
        known = ", ".join([v.name for v in flow.views] + list(SPECIAL_VIEWS))
        raise UnknownViewError(f"flow {flow.name} has no view {view!r}; use one of {known}")
    if date is not None:
        df = df.where(F.col("business_date") == F.lit(date))
    return df.orderBy(*order)


def serving_view_frame(
    spark: SparkSession, settings: Settings, flow: Flow, view: str, date: dt.date | None
) -> DataFrame:
    """A view or the current state as served in the flow's migration stage."""
    if view == "current":
        df = serving_frame(spark, settings, flow, "current", date).drop(APPLIED_AT)
        return df.orderBy(flow.business_date, flow.key)
    if view not in {v.name for v in flow.views}:
        names = ", ".join([v.name for v in flow.views] + ["current"])
        raise UnknownViewError(
            f"--layer serving shows views and the current state ({names}), "
            f"not {view!r}; use --layer batch or stream for it"
        )
    return serving_frame(spark, settings, flow, view, date).orderBy(*flow.view(view).group_key)


def show(df: DataFrame, fmt: str, limit: int, out: TextIO) -> int:
    """Print ``df`` as an aligned table (people) or csv (machines); return the row count."""
    if limit:
        df = df.limit(limit)
    rows = [["" if v is None else str(v) for v in r] for r in df.toLocalIterator()]
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(df.columns)
        writer.writerows(rows)
    else:
        out.write(format_table(df.columns, rows))
        out.write(f"({len(rows)} rows)\n")
    return len(rows)
