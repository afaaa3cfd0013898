"""A serving-path prototype for issue 14: positions kept in Spark's state store, not in Delta.

The query runs the flow's own front (``decode`` → parse → ``prepare`` → rules) on the Kafka
stream, then one ``transformWithStateInPandas`` operator (RocksDB state store, exactly once
through the checkpoint) keeps, per trade, the version and contribution it last applied and,
per position group, the running totals. Each micro-batch publishes the groups it changed to a
compacted Kafka topic: key = the group as JSON, value = its totals as JSON (null when the
group emptied, a tombstone). A reader of that topic — a KTable, a cache — sees the new
position once the batch's publish returned.

Prototype limits, on purpose (a floor measurement, not the product):
* the view's aggregation is re-expressed incrementally here for the trades flow's
  ``positions`` (sums and a count move by signed deltas: old contribution out, new in); the
  product would need views declared as additive measures so the kit can derive this form;
* all trades sit under one state key (a constant), so one Python call per batch sees them
  all; a trade's CANCEL carries no book, so the state must be reachable by trade id alone;
* rejected rows are dropped (the Delta path quarantines them); the publish is at least once,
  harmless because values are absolute totals, not deltas.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from streamshift.core.contract import FAILED, IS_DELETED, SOURCE_REF
from streamshift.core.flow import Flow
from streamshift.sources.decode import decode
from streamshift.sources.events import TRANSPORT_COLUMNS
from streamshift.write.target import load_reference
from streamshift.write.transforms import checked_changes

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
GROUP = ("business_date", "book", "instrument")
TRADE_STATE = (
    "version INT, live BOOLEAN, business_date DATE, book STRING, instrument STRING, "
    "q BIGINT, sn DECIMAL(38,6), n DECIMAL(38,6)"
)
GROUP_KEY = "business_date DATE, book STRING, instrument STRING"
TOTALS = "q BIGINT, sn DECIMAL(38,6), n DECIMAL(38,6), c BIGINT"
OUTPUT = (
    "business_date DATE, book STRING, instrument STRING, net_quantity BIGINT, "
    "net_notional_usd DECIMAL(28,2), gross_notional_usd DECIMAL(28,2), trade_count BIGINT"
)
CENT = Decimal("0.01")


def _money(value: Decimal) -> Decimal:
    """Spark's ``round(x, 2)`` (half up)."""
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


class PositionState(StatefulProcessor):
    """Per trade: the last applied version and contribution; per group: the running totals."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.trades = handle.getMapState("trades", "trade_id STRING", TRADE_STATE)
        self.groups = handle.getMapState("groups", GROUP_KEY, TOTALS)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        with localcontext(prec=60):  # exact sums, as Spark's decimal(38, 6) sum is
            yield from self._apply(pd.concat(list(rows), ignore_index=True))

    def _apply(self, frame: pd.DataFrame) -> Iterator[pd.DataFrame]:
        # The highest version per trade in the batch (ties by source reference, as
        # ``latest_per_key`` breaks them).
        frame = frame.sort_values(["version", "source_ref"], ascending=[False, True])
        frame = frame.drop_duplicates("trade_id")
        moves: dict[tuple[Any, ...], list[Any]] = defaultdict(
            lambda: [0, Decimal(0), Decimal(0), 0]
        )
        for r in frame.itertuples(index=False):
            version = int(r.version)
            old = self.trades.getValue((r.trade_id,))
            if old is not None and old[0] >= version:
                continue  # a replay or an older version: no change
            if old is not None and old[1]:
                move = moves[(old[2], old[3], old[4])]
                move[0] -= old[5]
                move[1] -= old[6]
                move[2] -= old[7]
                move[3] -= 1
            live = not bool(getattr(r, IS_DELETED))
            if live:
                group = (r.business_date, r.book, r.instrument)
                q, sn, n = int(r.signed_quantity), r.signed_notional_usd, r.notional_usd
                move = moves[group]
                move[0] += q
                move[1] += sn
                move[2] += n
                move[3] += 1
                self.trades.updateValue((r.trade_id,), (version, True, *group, q, sn, n))
            else:
                self.trades.updateValue(
                    (r.trade_id,), (version, False, r.business_date, None, None, None, None, None)
                )
        out = []
        for group, move in moves.items():
            if move == [0, 0, 0, 0]:
                continue
            old = self.groups.getValue(group) or (0, Decimal(0), Decimal(0), 0)
            q, sn, n, c = (a + b for a, b in zip(old, move, strict=True))
            if c == 0:
                self.groups.removeKey(group)
                out.append((*group, None, None, None, 0))
            else:
                self.groups.updateValue(group, (q, sn, n, c))
                out.append((*group, q, _money(sn), _money(n), c))
        if out:
            yield pd.DataFrame(out, columns=[c.split()[0] for c in OUTPUT.split(", ")])

    def close(self) -> None:
        pass


def positions_stream(spark: SparkSession, flow: Flow, kafka: DataFrame) -> DataFrame:
    """Changed positions per micro-batch, from a Kafka stream of the flow's events."""
    raw = kafka.transform(decode(flow)).drop(*TRANSPORT_COLUMNS)
    checked = checked_changes(flow, raw, load_reference(spark, flow))
    accepted = checked.where(F.size(FAILED) == 0).select(
        "trade_id",
        "version",
        # (the pandas frames name columns that start with "_" by position)
        F.col(SOURCE_REF).alias("source_ref"),
        IS_DELETED,
        *GROUP,
        "signed_quantity",
        F.col("signed_notional_usd").cast("decimal(38,6)").alias("signed_notional_usd"),
        F.col("notional_usd").cast("decimal(38,6)").alias("notional_usd"),
        F.lit(0).alias("all"),
    )
    return accepted.groupBy("all").transformWithStateInPandas(
        statefulProcessor=PositionState(),
        outputStructType=OUTPUT,
        outputMode="Update",
        timeMode="None",
    )


def as_messages(positions: DataFrame) -> DataFrame:
    """Kafka rows for the compacted topic: key = the group, value = totals (null = emptied)."""
    values = ["net_quantity", "net_notional_usd", "gross_notional_usd", "trade_count"]
    return positions.select(
        F.to_json(F.struct(*GROUP)).alias("key"),
        F.when(F.col("trade_count") > 0, F.to_json(F.struct(*values))).alias("value"),
    )
