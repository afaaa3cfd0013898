"""Reading Delta tables without Spark or a JVM, through ``deltalake`` (delta-rs).

Only reads: every write stays Spark + Delta. A table that was never written reads as no rows.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from streamshift.core.catalog import ControlTables
from streamshift.core.settings import Settings


def _literal(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.isoformat()}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def rows(
    path: str | Path,
    columns: list[str] | None = None,
    where: list[tuple[str, str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The table's rows as dicts; ``where``: (column, operator, value) conditions, ANDed.

    Read through deltalake's DataFusion engine, which honours deletion vectors (its pyarrow
    dataset path refuses tables that have them, as current state does).
    """
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(str(path))
    except TableNotFoundError:
        return []
    selected = ", ".join(f'"{c}"' for c in columns) if columns else "*"
    sql = f"SELECT {selected} FROM t"
    if where:
        sql += " WHERE " + " AND ".join(f'"{c}" {op} {_literal(v)}' for c, op, v in where)
    result = QueryBuilder().register("t", table).execute(sql).read_all()
    data: list[dict[str, Any]] = pa.table(result).to_pylist()
    return data


def current_stage(settings: Settings, flow: str) -> str:
    """The flow's migration stage: the last recorded change's target (``batch`` before any)."""
    changes = rows(
        ControlTables(settings.warehouse).stage_changes,
        ["to_stage", "changed_at"],
        [("flow", "=", flow)],
    )
    if not changes:
        return "batch"
    return str(max(changes, key=lambda r: r["changed_at"])["to_stage"])


def late_dates_to_reconcile(
    settings: Settings, flow: str, layers: tuple[str, ...] = ("batch", "stream")
) -> list[dt.date]:
    """Business dates with late events that arrived after the date's last reconciliation."""
    runs = rows(
        ControlTables(settings.warehouse).recon_runs,
        ["business_date", "run_at"],
        [("flow", "=", flow)],
    )
    last_recon: dict[dt.date, dt.datetime] = {}
    for r in runs:
        d = r["business_date"]
        last_recon[d] = max(last_recon.get(d, r["run_at"]), r["run_at"])
    dates: set[dt.date] = set()
    for layer in layers:
        path = str(Path(settings.warehouse) / layer / "late_events")
        for r in rows(path, ["business_date", "arrived_at"], [("flow", "=", flow)]):
            d = r["business_date"]
            if d not in last_recon or r["arrived_at"] > last_recon[d]:
                dates.add(d)
    return sorted(dates)
