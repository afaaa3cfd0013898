"""A generated trade's next version: as a raw amendment row (the write path's input), or as a
one-row EOD file."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any


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
