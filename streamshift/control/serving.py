"""The serving read: what readers get of a flow's tables, and printing them (table or csv).

The serving read follows the stage: ``batch`` serves the batch layer; ``shadow`` serves the
batch layer for business dates an EOD run has closed and the stream layer for later ones
(the Lambda merge); ``stream`` and ``kappa`` serve the stream layer.

Everything here reads without a JVM (deltalake); Spark jobs that need the serving read as a
DataFrame (reconciliation) pick the layer with the same :func:`serving_layer`.
"""

from __future__ import annotations

import csv
import datetime as dt
from dataclasses import dataclass
from typing import Any, TextIO

from streamshift.spec import stages
from streamshift.spec.catalog import LayerTables
from streamshift.spec.contract import APPLIED_AT
from streamshift.spec.errors import StreamshiftError
from streamshift.spec.flow import Flow
from streamshift.spec.formatting import format_table
from streamshift.spec.settings import Settings
from streamshift.store.records import closed_dates, current_stage
from streamshift.store.tables import exists, select
from streamshift.store.versions import live_tables

SPECIAL_VIEWS = ("current", "quarantine", "late_events")


# The quarantine's raw record (``QUARANTINE_SCHEMA``), shown last: it is the widest column.
RAW_PAYLOAD = "raw_payload"


class UnknownViewError(StreamshiftError):
    final = True


def serving_layer(stage: str, business_date: dt.date, closed: set[dt.date]) -> str:
    """Which layer serves ``business_date`` in ``stage``."""
    return stages.stage(stage).serving_layer(business_date in closed)


@dataclass
class Rows:
    """A read's result: column names and rows of Python values."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def as_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


def _shape(flow: Flow, view: str) -> tuple[str, list[str], list[str], bool]:
    """(table name in the layer, columns to drop, sort order, rows carry ``flow``)."""
    if view == "current":
        return "current", [APPLIED_AT], [flow.business_date, flow.key], False
    if view == "quarantine":
        return "quarantine", ["quarantined_at", "batch_id"], ["source_ref", "rule"], True
    if view == "late_events":
        return "late_events", [], ["business_date", "key", "version"], True
    if view in {v.name for v in flow.views}:
        return view, [], list(flow.view(view).group_key), False
    known = ", ".join([v.name for v in flow.views] + list(SPECIAL_VIEWS))
    raise UnknownViewError(f"flow {flow.name} has no view {view!r}; use one of {known}")


def held_dates(settings: Settings, flow: Flow, layer: str, view: str) -> list[dt.date] | None:
    """The business dates a layer's table holds, from its partitions (no data read); ``None``
    for a table not partitioned by date (quarantine) or never written."""
    from deltalake import DeltaTable

    table, _, _, by_flow = _shape(flow, view)
    path = _path(live_tables(settings.warehouse, flow, layer), table)
    bd = "business_date" if by_flow else flow.business_date
    if not exists(path):
        return None
    found = {p.get(bd) for p in DeltaTable(path).partitions()}
    if None in found:
        return None
    return sorted(dt.date.fromisoformat(str(d)) for d in found)


def _path(tables: LayerTables, table: str) -> str:
    if table in ("current", "quarantine", "late_events"):
        return str(getattr(tables, table))
    return tables.view(table)


def view_rows(
    settings: Settings,
    flow: Flow,
    layer: str,
    view: str,
    dates: list[dt.date] | None = None,
    exclude_dates: list[dt.date] | None = None,
    limit: int = 0,
) -> Rows:
    """The rows ``streamshift show`` prints of one layer, sorted for stable output.

    ``dates`` keeps only those business dates, ``exclude_dates`` drops them.
    """
    table, drop, order, by_flow = _shape(flow, view)
    where: list[tuple[str, str, Any]] = [("flow", "=", flow.name)] if by_flow else []
    bd = "business_date" if by_flow else flow.business_date
    if dates is not None:
        where.append((bd, "IN", tuple(dates)))
    for d in exclude_dates or []:
        where.append((bd, "<>", d))
    data = select(_path(live_tables(settings.warehouse, flow, layer), table), None, where, order)
    if data is None:  # never written: no rows
        return Rows([], [])
    data = data.drop_columns([c for c in drop if c in data.column_names])
    if RAW_PAYLOAD in data.column_names:  # the rule beside the row's reference
        data = data.select([c for c in data.column_names if c != RAW_PAYLOAD] + [RAW_PAYLOAD])
    if limit:
        data = data.slice(0, limit)
    return Rows(data.column_names, [tuple(r.values()) for r in data.to_pylist()])


def serving_view_rows(
    settings: Settings, flow: Flow, view: str, date: dt.date | None, limit: int = 0
) -> Rows:
    """A view or the current state as served in the flow's migration stage."""
    if view != "current" and view not in {v.name for v in flow.views}:
        names = ", ".join([v.name for v in flow.views] + ["current"])
        raise UnknownViewError(
            f"--layer serving shows views and the current state ({names}), "
            f"not {view!r}; use --layer batch or stream for it"
        )
    stage = current_stage(settings, flow.name)
    closed = closed_dates(settings, flow.name)
    if date is not None:
        return view_rows(
            settings, flow, serving_layer(stage, date, closed), view, [date], None, limit
        )
    if stage != "shadow":
        return view_rows(
            settings, flow, serving_layer(stage, dt.date.min, closed), view, None, None, limit
        )
    batch = view_rows(settings, flow, "batch", view, sorted(closed))
    stream = view_rows(settings, flow, "stream", view, None, sorted(closed))
    columns = batch.columns or stream.columns
    _, _, order, _ = _shape(flow, view)
    index = [columns.index(c) for c in order]
    merged = sorted(
        batch.rows + stream.rows,
        key=lambda r: tuple((r[i] is not None, r[i]) for i in index),
    )
    return Rows(columns, merged[:limit] if limit else merged)


def show(result: Rows, fmt: str, out: TextIO) -> int:
    """Print rows as an aligned table (people) or csv (machines); return the row count."""
    text = [["" if v is None else str(v) for v in r] for r in result.rows]
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows(text)
    else:
        out.write(format_table(result.columns, text))
        out.write(f"({len(text)} rows)\n")
    return len(text)
