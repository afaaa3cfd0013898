"""Kappa reprocessing: read a time range of the flow's topic as a bounded batch and apply it.

The batch path as a finite stream: Spark's Kafka source in batch mode between two timestamps,
the same decode as the streaming job, the same ``apply_changes``. Before reading, the range is
checked against what the broker still retains: if retention (or a records deletion) has
removed events at or after ``start`` in any partition, the replay is refused — replaying a
partial range would silently lose changes.
"""

from __future__ import annotations

import datetime as dt
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streamshift.engine.decode import decode
from streamshift.engine.write.apply import ApplyResult, apply_changes
from streamshift.engine.write.target import Target
from streamshift.spec.errors import StreamshiftError
from streamshift.spec.flow import Flow
from streamshift.store.events import KAFKA_SOURCE, TRANSPORT_COLUMNS, topic_for
from streamshift.store.kafka import unreachable

if TYPE_CHECKING:
    from streamshift.spec.settings import Settings


class ReplayRefused(StreamshiftError):
    final = True


@dataclass
class RetainedRange:
    partition: int
    low: int  # first retained offset
    high: int  # next offset to be written
    first_timestamp: dt.datetime | None  # of the first retained event


def _ms(ts: dt.datetime) -> int:
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)
    return int(ts.timestamp() * 1000)


def retained(settings: Settings, topic: str) -> list[RetainedRange]:
    """Per partition: the retained offsets and the timestamp of the first retained event."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {
            **settings.kafka_client_config(),
            "group.id": "streamshift-replay-check",
            "enable.auto.commit": False,
        }
    )
    try:
        try:
            meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        except KafkaException as exc:
            raise ReplayRefused(unreachable(settings, exc)) from None
        if meta is None or meta.error is not None or not meta.partitions:
            raise ReplayRefused(
                f"topic {topic} does not exist on {settings.kafka_bootstrap_servers}"
            )
        ranges = []
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            first = None
            if high > low:
                consumer.assign([TopicPartition(topic, p, low)])
                msg = consumer.poll(10)
                if msg is not None and msg.error() is None:
                    first = dt.datetime.fromtimestamp(msg.timestamp()[1] / 1000, dt.UTC)
            ranges.append(RetainedRange(p, low, high, first))
        return ranges
    finally:
        consumer.close()


def check_retention(ranges: list[RetainedRange], start: dt.datetime) -> None:
    """Refuse when events at or after ``start`` may already be gone from some partition."""
    start = start if start.tzinfo else start.replace(tzinfo=dt.UTC)
    gone = [
        r for r in ranges if r.low > 0 and (r.first_timestamp is None or r.first_timestamp > start)
    ]
    if gone:
        detail = "; ".join(
            f"partition {r.partition} retains offsets {r.low}.. only from "
            f"{r.first_timestamp.isoformat() if r.first_timestamp else 'nothing'}"
            for r in gone
        )
        raise ReplayRefused(
            f"cannot replay from {start.isoformat()}: the topic no longer retains that range "
            f"({detail}). Replay from a later time, or rebuild the dates before it from the EOD "
            "files (streamshift eod)"
        )


@dataclass
class ReplayResult:
    topic: str
    events: int
    apply: ApplyResult

    def describe(self) -> str:
        return f"replayed {self.events} events from {self.topic}: {self.apply.describe()}"


def check_replay(
    settings: Settings, flow: Flow, start: dt.datetime, end: dt.datetime, topic: str | None
) -> str:
    """The topic to replay, once the range is known valid and retained (no JVM: the CLI asks
    before it starts Spark)."""
    if end <= start:
        raise ReplayRefused(f"--to ({end.isoformat()}) must be after --from ({start.isoformat()})")
    topic = topic or topic_for(flow)
    check_retention(retained(settings, topic), start)
    return topic


def replay(
    spark: SparkSession,
    settings: Settings,
    flow: Flow,
    start: dt.datetime,
    end: dt.datetime,
    layer: str,
    topic: str | None = None,
) -> ReplayResult:
    topic = check_replay(settings, flow, start, end, topic)
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
        .option("startingTimestamp", str(_ms(start)))
        .option("endingTimestamp", str(_ms(end)))
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
        flow, decoded, KAFKA_SOURCE, target, batch_id=f"replay:{topic}:{_ms(start)}-{_ms(end)}"
    )
    return ReplayResult(topic, result.received, result)
