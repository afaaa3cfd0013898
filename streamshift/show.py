"""Printing a flow's tables for people (table) or machines (csv)."""

from __future__ import annotations

import csv
import datetime as dt
from typing import TextIO

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamshift.errors import StreamshiftError
from streamshift.flow import Flow
from streamshift.settings import Settings
from streamshift.tables import read
from streamshift.writepath import Target

SPECIAL_VIEWS = ("current", "quarantine", "late_events")


class UnknownViewError(StreamshiftError):
    pass


def view_frame(spark: SparkSession, target: Target, view: str, date: dt.date | None) -> DataFrame:
    """The rows ``streamshift show`` prints, sorted for stable output."""
    flow, tables = target.flow, target.tables
    if view == "current":
        df, order = read(spark, tables.current), [flow.business_date, flow.key]
        df = df.drop("_applied_at")
    elif view == "quarantine":
        df = read(spark, tables.quarantine).where(F.col("flow") == flow.name)
        df, order = df.drop("quarantined_at", "batch_id"), ["source_ref", "rule"]
    elif view == "late_events":
        df = read(spark, tables.late_events).where(F.col("flow") == flow.name)
        order = ["business_date", "key", "version"]
    elif view in {v.name for v in flow.views}:
        df, order = read(spark, tables.view(view)), list(flow.view(view).group_key)
    else:
        known = ", ".join([v.name for v in flow.views] + list(SPECIAL_VIEWS))
        raise UnknownViewError(f"flow {flow.name} has no view {view!r}; use one of {known}")
    if date is not None:
        df = df.where(F.col("business_date") == F.lit(date))
    return df.orderBy(*order)


def serving_view_frame(spark: SparkSession, settings: Settings, flow: Flow, view: str,
                       date: dt.date | None) -> DataFrame:
    """A view or the current state as served in the flow's migration stage."""
    from streamshift.stages import serving_frame

    if view == "current":
        df = serving_frame(spark, settings, flow, "current", date).drop("_applied_at")
        return df.orderBy(flow.business_date, flow.key)
    if view not in {v.name for v in flow.views}:
        names = ", ".join([v.name for v in flow.views] + ["current"])
        raise UnknownViewError(f"--layer serving shows views and the current state ({names}), "
                               f"not {view!r}; use --layer batch or stream for it")
    return serving_frame(spark, settings, flow, view, date).orderBy(*flow.view(view).group_key)


def show(spark: SparkSession, target: Target, view: str, date: dt.date | None, fmt: str,
         limit: int, out: TextIO, frame: DataFrame | None = None) -> int:
    df = frame if frame is not None else view_frame(spark, target, view, date)
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


def format_table(columns: list[str], rows: list[list[str]]) -> str:
    """Aligned columns under a ruled header; numbers right-aligned."""
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.rjust(w) if _numeric(v) else v.ljust(w) for v, w in zip(r, widths))
              for r in rows]
    return "\n".join(lines) + "\n"


def _numeric(text: str) -> bool:
    return text.replace(".", "", 1).replace("-", "", 1).isdigit()
