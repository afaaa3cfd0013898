"""The latency floors of bench/stream_latency.py.

* ``--mode append`` (the floor): Kafka → ``foreachBatch`` → one Delta append. No decoding, no
  validation, no MERGE.
* ``--mode merge`` (the floor of a micro-batch that must update rows): Kafka → ``foreachBatch``
  → the batch's events decoded (``from_json``), each trade's highest version MERGEd into a
  current-state table where higher, then the batch's (business date, book, instrument) groups
  recomputed from that table and MERGEd into a positions table: one MERGE into current state
  and one into a view per batch, with none of the write path's checks, history or records.

The same Spark profile, source options and trigger as ``streamshift stream``. Each
micro-batch's commit time, offset range and Spark's phases go to ``--progress`` as JSON lines
shaped like the streaming job's progress log. SIGTERM stops it.

Run by bench/stream_latency.py: python bench/_floor_stream.py --topic T --table P --progress F
[--mode append|merge]
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener

from streamshift.engine.jobs.stream import _offsets, kafka_stream, phases
from streamshift.engine.spark import get_spark
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import load_settings
from streamshift.store.heartbeat import append_progress

GROUP = ("business_date", "book", "instrument")


def merge_writer(spark: SparkSession, table: str):  # type: ignore[no-untyped-def]
    """The ``merge`` floor's micro-batch function over tables under ``table``."""
    schema = get_flow("trades").schema
    current, positions = f"{table}/current", f"{table}/positions"
    spark.createDataFrame([], schema).write.format("delta").save(current)
    spark.createDataFrame(
        [], "business_date date, book string, instrument string, net_quantity decimal(28,4), "
        "trade_count bigint"
    ).write.format("delta").save(positions)  # fmt: skip

    def write(batch: DataFrame, batch_id: int) -> None:
        events = batch.select(F.from_json(F.col("value").cast("string"), schema).alias("e")).select(
            "e.*"
        )
        newest = Window.partitionBy("trade_id").orderBy(F.col("version").desc())
        latest = events.withColumn("_n", F.row_number().over(newest)).where("_n = 1").drop("_n")
        latest = latest.localCheckpoint()
        batch.sparkSession.sql(
            f"MERGE INTO delta.`{current}` t USING {{s}} s ON t.trade_id = s.trade_id "
            "WHEN MATCHED AND s.version > t.version THEN UPDATE SET * "
            "WHEN NOT MATCHED THEN INSERT *",
            s=latest,
        )
        groups = latest.select(*GROUP).distinct()
        state = batch.sparkSession.read.format("delta").load(current)
        recomputed = (
            state.join(F.broadcast(groups), list(GROUP), "left_semi")
            .where(F.col("event_type") != "CANCEL")
            .groupBy(*GROUP)
            .agg(
                F.sum(F.when(F.col("side") == "BUY", 1).otherwise(-1) * F.col("quantity"))
                .cast("decimal(28,4)")
                .alias("net_quantity"),
                F.count(F.lit(1)).alias("trade_count"),
            )
        )
        on = " AND ".join(f"t.{c} = s.{c}" for c in GROUP)
        batch.sparkSession.sql(
            f"MERGE INTO delta.`{positions}` t USING {{s}} s ON {on} "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
            s=recomputed,
        )
        latest.unpersist()

    return write


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True, help="the Delta table appended to")
    parser.add_argument("--progress", type=Path, required=True, help="JSON lines, one per batch")
    parser.add_argument("--trigger", default="1 second")
    parser.add_argument("--mode", choices=["append", "merge"], default="append")
    args = parser.parse_args()
    settings = load_settings()
    spark = get_spark(settings, app_name="bench-floor")
    committed: dict[int, float] = {}

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            if not p.numInputRows:
                return
            source = p.sources[0]
            append_progress(
                args.progress,
                {
                    "batch_id": p.batchId,
                    "timestamp": p.timestamp,
                    "input_rows": p.numInputRows,
                    "views_committed_at": committed.get(p.batchId),
                    "duration_ms": p.durationMs.get("triggerExecution"),
                    "seconds_by_step": phases(p),
                    # the first batch's start offset is not JSON
                    "start_offsets": _offsets(source.startOffset) or {},
                    "processed_offsets": _offsets(source.endOffset) or {},
                },
            )

    spark.streams.addListener(Progress())

    merge = merge_writer(spark, args.table) if args.mode == "merge" else None

    def append(batch: DataFrame, batch_id: int) -> None:
        if merge is not None:
            merge(batch, batch_id)
        else:
            batch.selectExpr(
                "CAST(key AS STRING) AS key",
                "CAST(value AS STRING) AS value",
                "partition",
                "offset",
            ).write.format("delta").mode("append").save(args.table)
        committed[batch_id] = time.time()

    query = (
        kafka_stream(spark, settings, args.topic)
        .writeStream.foreachBatch(append)
        .option("checkpointLocation", f"{args.table}_checkpoint")
        .trigger(processingTime=args.trigger)
        .start()
    )
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    while query.isActive and not stopping:
        time.sleep(0.2)
    query.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
