"""A generated trade's next version as a raw amendment row (the write path's input)."""

from __future__ import annotations

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
