"""Inline test data for the trades flow, in the write path's raw (text) form."""

from __future__ import annotations

from typing import Any

from flows.trades import FLOW
from streamshift.engine.write.transforms import raw_schema

D1, D2 = "2026-11-19", "2026-11-20"


def trade(
    trade_id: str,
    version: int,
    event: str = "NEW",
    date: str = D2,
    book: str = "EQ-US-FLOW",
    instrument: str = "AAPL",
    side: str = "BUY",
    quantity: Any = 100,
    price: Any = "10.00",
    currency: str = "USD",
    ts: str | None = None,
    ref: str | None = None,
) -> tuple[Any, ...]:
    if event == "CANCEL":
        values = [trade_id, str(version), event, date] + [None] * 7
    else:
        values = [
            trade_id,
            str(version),
            event,
            date,
            ts or f"{date}T10:00:00Z",
            book,
            instrument,
            side,
            str(quantity),
            str(price),
            currency,
        ]
    ref = ref or f"test:{trade_id}:{version}"
    return (*values, ref, ",".join("" if v is None else v for v in values))


def frame(spark, rows: list[tuple[Any, ...]]):  # type: ignore[no-untyped-def]
    return spark.createDataFrame(rows, raw_schema(FLOW))


def two_writers_round(v: int) -> list[tuple[Any, ...]]:
    """Round ``v`` (2, 3, ...) of two writers carrying the same versions at once, over ``a``
    and ``b`` at version 1: both amended to ``v`` (``a``'s quantity ``v``), ``n<v>`` new."""
    return [
        trade("a", v, event="AMEND", quantity=v),
        trade("b", v, event="AMEND"),
        trade(f"n{v}", 1),
    ]
