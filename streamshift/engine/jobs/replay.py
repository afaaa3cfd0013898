"""Kappa reprocessing: read a time range of the flow's topic as a bounded batch and apply it.

The batch path as a finite stream: Spark's Kafka source in batch mode between two timestamps,
the same decode as the streaming job, the same ``apply_changes``. Before reading, the range is
checked against what the broker still retains: if retention (or a records deletion) has
removed events at or after ``start`` in any partition, the replay is refused — replaying a
partial range would silently lose changes.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streamshift.engine.decode import decode
from streamshift.engine.write.apply import ApplyResult, apply_changes
from streamshift.engine.write.target import Target
from streamshift.store.events import KAFKA_SOURCE, TRANSPORT_COLUMNS
from streamshift.store.retention import epoch_ms, replay_topic

if TYPE_CHECKING:
    from streamshift.control.jobs import JobContext
    from streamshift.spec.requests import ReplayRequest


@dataclass
class ReplayResult:
    topic: str
    events: int
    apply: ApplyResult

    def describe(self) -> str:
        return f"replayed {self.events} events from {self.topic}: {self.apply.describe()}"


def run(spark: SparkSession, context: JobContext, request: ReplayRequest) -> ReplayResult:
    """Replay the request's time range of the topic into its layer."""
    settings, flow, start, end = context.settings, context.flow, request.start, request.end
    layer = request.into
    topic = replay_topic(settings, flow, start, end, request.topic)
    print(
        f"[replay] reading {topic} from {start.isoformat()} to {end.isoformat()}",
        file=sys.stderr,
        flush=True,
    )
    events = (
        spark.read.format("kafka")
        .options(**settings.spark_kafka_options())
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .option("startingTimestamp", str(epoch_ms(start)))
        .option("endingTimestamp", str(epoch_ms(end)))
        .option("startingOffsetsByTimestampStrategy", "latest")
        .load()
        # endingTimestamp bounds by offset lookup; keep the range exact by timestamp too.
        .where((F.col("timestamp") >= F.lit(start)) & (F.col("timestamp") < F.lit(end)))
    )
    # Not persisted: the apply's own frame is the one cache of the events (as in the stream).
    decoded = events.transform(decode(flow)).drop(*TRANSPORT_COLUMNS)
    print(f"[replay] applying the events to the {layer} layer", file=sys.stderr, flush=True)
    target = Target.open(spark, settings, flow, layer)
    result = apply_changes(
        flow,
        decoded,
        KAFKA_SOURCE,
        target,
        batch_id=f"replay:{topic}:{epoch_ms(start)}-{epoch_ms(end)}",
    )
    return ReplayResult(topic, result.received, result)
