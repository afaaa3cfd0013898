"""The floor and the serving prototype of bench/stream_latency.py, one Kafka query each.

* ``--mode append`` (the floor): Kafka → ``foreachBatch`` → one Delta append of the raw
  records. The same Spark profile, source options and trigger as ``streamshift stream``, and
  nothing else: no decoding, no validation, no MERGE.
* ``--mode serving``: the serving-path prototype of ``bench/_serving.py`` (the flow's decode,
  rules and enrichment, positions in the state store), each batch's changed positions
  published to the compacted topic ``--publish``.

Each micro-batch's visible time (append committed / publish returned) and offset range go to
``--progress`` as JSON lines shaped like the streaming job's progress log. SIGTERM stops it.

Run by bench/stream_latency.py: python bench/_floor_stream.py --topic T --table P --progress F
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQueryListener

from streamshift.core.heartbeat import append_progress
from streamshift.core.settings import load_settings
from streamshift.jobs.stream import _offsets
from streamshift.spark import get_spark


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True, help="the Delta table appended to")
    parser.add_argument("--progress", type=Path, required=True, help="JSON lines, one per batch")
    parser.add_argument("--trigger", default="1 second")
    parser.add_argument("--mode", choices=["append", "serving"], default="append")
    parser.add_argument("--publish", help="serving: the compacted topic positions go to")
    parser.add_argument(
        "--state-partitions",
        type=int,
        default=None,
        help="serving: partitions of the state store (default: spark.sql.shuffle.partitions)",
    )
    args = parser.parse_args()
    settings = load_settings()
    # Python workers (the serving mode's state processor) run this interpreter, with pandas.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = get_spark(settings, app_name=f"bench-{args.mode}")
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
                    "input_rows": p.numInputRows,
                    "views_committed_at": committed.get(p.batchId),
                    "duration_ms": p.durationMs.get("triggerExecution"),
                    # where a batch's time goes (Spark's phases; the state store's share)
                    "seconds_by_step": {
                        **{
                            k: v / 1000
                            for k, v in p.durationMs.items()
                            if k in ("latestOffset", "queryPlanning", "addBatch", "walCommit")
                        },
                        **{
                            f"state {k}": sum(getattr(op, k) for op in p.stateOperators) / 1000
                            for k in ("allUpdatesTimeMs", "commitTimeMs")
                            if p.stateOperators
                        },
                    },
                    # the first batch's start offset is not JSON
                    "start_offsets": _offsets(source.startOffset) or {},
                    "processed_offsets": _offsets(source.endOffset) or {},
                },
            )

    spark.streams.addListener(Progress())

    def append(batch: DataFrame, batch_id: int) -> None:
        batch.selectExpr(
            "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset"
        ).write.format("delta").mode("append").save(args.table)
        committed[batch_id] = time.time()

    def publish(batch: DataFrame, batch_id: int) -> None:
        from _serving import as_messages

        as_messages(batch).write.format("kafka").options(**settings.spark_kafka_options()).option(
            "topic", args.publish
        ).save()
        committed[batch_id] = time.time()

    kafka = (
        spark.readStream.format("kafka")
        .options(**settings.spark_kafka_options())
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
        .load()
    )
    if args.mode == "serving":
        import _serving
        from _serving import ROCKSDB, positions_stream
        from pyspark import cloudpickle

        # The Python workers do not have bench/ on their path: ship the module's code itself.
        cloudpickle.register_pickle_by_value(_serving)

        from streamshift.core.registry import get_flow

        if args.state_partitions:  # fixed by the checkpoint's first batch
            spark.conf.set("spark.sql.shuffle.partitions", str(args.state_partitions))
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        spark.conf.set(
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true"
        )
        stream, sink = positions_stream(spark, get_flow("trades"), kafka), publish
    else:
        stream, sink = kafka, append
    query = (
        stream.writeStream.foreachBatch(sink)
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
