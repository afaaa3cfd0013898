"""The latency floor of bench/stream_latency.py: Kafka → ``foreachBatch`` → one Delta append.

The same Spark profile, source options and trigger as ``streamshift stream``, and nothing else:
no decoding, no validation, no MERGE. Each micro-batch's commit time, offset range and Spark's
phases go to ``--progress`` as JSON lines shaped like the streaming job's progress log.
SIGTERM stops it.

Run by bench/stream_latency.py: python bench/_floor_stream.py --topic T --table P --progress F
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQueryListener

from streamshift.engine.jobs.serve import phases
from streamshift.engine.jobs.stream import _offsets, kafka_stream
from streamshift.engine.spark import get_spark
from streamshift.spec.settings import load_settings
from streamshift.store.heartbeat import append_progress


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True, help="the Delta table appended to")
    parser.add_argument("--progress", type=Path, required=True, help="JSON lines, one per batch")
    parser.add_argument("--trigger", default="1 second")
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

    def append(batch: DataFrame, batch_id: int) -> None:
        batch.selectExpr(
            "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset"
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
