"""A generated trade's next version: as a raw amendment row (the write path's input), as rows
of the flow's columns (a file's or an event's), or as a one-row EOD file."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from streamshift.spec.flow import Flow


def amendment(row: Any, source_ref: str) -> tuple[str, ...]:
    """``row`` (a current-state trade) amended: version + 1, quantity + 1, as raw text."""
    return (
        row.trade_id,
        str(row.version + 1),
        "AMEND",
        str(row.business_date),
        row.trade_ts.strftime("%Y-%m-%dT%H:%M:%SZ"),
        row.book,
        row.instrument,
        row.side,
        str(row.quantity + 1),
        str(row.price),
        row.currency,
        source_ref,
        "",
    )


def amendment_file(day_file: Path, version: int, out: Path) -> Path:
    """The day's first trade at ``version``, its quantity the original plus ``version`` (each
    version moves the trade's position, so its view changes too): a one-row EOD file."""
    with day_file.open(newline="") as f:
        reader = csv.DictReader(f)
        row = next(reader)
        fields = reader.fieldnames
    assert fields is not None
    row.update(
        version=str(version), event_type="AMEND", quantity=str(int(row["quantity"]) + version)
    )
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerow(row)
    return out


def amendments(flow: Flow, rows: list[dict[str, str]], n: int) -> list[dict[str, str]]:
    """``n`` live trades of ``rows`` spread over the day, each as its next version with quantity
    + 1; past the number of live trades, each is amended again (version + 2, quantity + 2, ...)."""
    highest: dict[str, dict[str, str]] = {}
    for row in rows:
        known = highest.get(row[flow.key])
        if known is None or int(row[flow.version]) > int(known[flow.version]):
            highest[row[flow.key]] = row
    live = [r for r in highest.values() if r["event_type"] != "CANCEL"]
    out = []
    for i in range(n):
        again, j = divmod(i, len(live))
        in_round = min(n - again * len(live), len(live))
        r = live[j * len(live) // in_round]
        out.append(
            r
            | {
                flow.version: str(int(r[flow.version]) + 1 + again),
                "event_type": "AMEND",
                "quantity": str(int(r["quantity"]) + 1 + again),
            }
        )
    return out
