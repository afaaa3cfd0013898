"""What a topic still retains, and the replay's check against it (no JVM: the CLI and the job
refuse a range the broker cannot serve before Spark reads it)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.flow import Flow
from streamshift.spec.settings import Settings
from streamshift.store.events import topic_for
from streamshift.store.kafka import reader_config, unreachable


class ReplayRefused(StreamshiftError):
    final = True


@dataclass
class RetainedRange:
    partition: int
    low: int  # first retained offset
    high: int  # next offset to be written
    first_timestamp: dt.datetime | None  # of the first retained event


def epoch_ms(ts: dt.datetime) -> int:
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)
    return int(ts.timestamp() * 1000)


def retained(settings: Settings, topic: str) -> list[RetainedRange]:
    """Per partition: the retained offsets and the timestamp of the first retained event."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(reader_config(settings, "streamshift-replay-check"))
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


def replay_topic(
    settings: Settings, flow: Flow, start: dt.datetime, end: dt.datetime, topic: str | None
) -> str:
    """The topic to replay, once the range is known valid and retained."""
    if end <= start:
        raise ReplayRefused(f"--to ({end.isoformat()}) must be after --from ({start.isoformat()})")
    topic = topic or topic_for(flow)
    check_retention(retained(settings, topic), start)
    return topic
