"""Publish an EOD-format CSV's rows as flow events (``streamshift produce``).

Idempotent producer, ``acks=all``; every delivery report is checked, and the run fails if any
message was not acknowledged. ``rate`` paces the sends (events per second) for latency tests.
"""

from __future__ import annotations

import csv
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.flow import Flow
from streamshift.store.eodfile import check_file
from streamshift.store.events import encode_event, topic_for
from streamshift.store.kafka import ensure_topic, producer_config, unreachable

if TYPE_CHECKING:
    from streamshift.spec.settings import Settings


class ProduceError(StreamshiftError):
    pass


@dataclass
class ProduceResult:
    topic: str
    sent: int = 0
    acknowledged: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # Per partition, one past the highest offset acknowledged: what a consumer must reach.
    ends: dict[int, int] = field(default_factory=dict)

    def describe(self) -> str:
        rate = self.acknowledged / self.seconds if self.seconds else 0.0
        text = (
            f"{self.acknowledged} of {self.sent} events acknowledged by {self.topic} "
            f"in {self.seconds:.1f}s ({rate:,.0f}/s)"
        )
        if self.failed:
            text += f"; {self.failed} NOT delivered, first error: {self.errors[0]}"
        return text


def read_rows(path: Path, flow: Flow) -> list[dict[str, str]]:
    """The CSV's data rows (the file-level checks of EOD files apply first)."""
    check_file(path, flow, whole_day=False)
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        reader.fieldnames = [h.strip().lower() for h in reader.fieldnames or []]
        return [row for row in reader if any((v or "").strip() for v in row.values())]


def produce_rows(
    settings: Settings,
    flow: Flow,
    rows: Sequence[Mapping[str, Any]],
    *,
    topic: str | None = None,
    rate: float = 0.0,
    progress: bool = True,
    on_sent=None,
    timestamp_ms: int | None = None,
    headers: Callable[[Mapping[str, Any]], list[tuple[str, bytes]]] | None = None,
) -> ProduceResult:  # type: ignore[no-untyped-def]
    """Send ``rows`` as events; ``on_sent(i, t)`` is called with each row's send time.
    ``timestamp_ms`` stamps every message with that time (default: the send time), as a
    source system that sends what it recorded earlier does. ``headers(row)`` gives a row's
    Kafka headers."""
    stamp = {} if timestamp_ms is None else {"timestamp": timestamp_ms}
    from confluent_kafka import KafkaException, Producer

    topic = topic or topic_for(flow)
    try:
        ensure_topic(settings, topic)
    except KafkaException as exc:
        raise ProduceError(unreachable(settings, exc)) from None
    result = ProduceResult(topic)
    producer = Producer(producer_config(settings))

    def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            result.acknowledged += 1
            end = msg.offset() + 1
            if end > result.ends.get(msg.partition(), 0):
                result.ends[msg.partition()] = end
        else:
            result.failed += 1
            if len(result.errors) < 5:
                result.errors.append(str(err))

    started = time.monotonic()
    last_report = started
    for i, row in enumerate(rows):
        if rate:
            wait = started + i / rate - time.monotonic()
            if wait > 0:
                producer.poll(wait)
        key, value = encode_event(flow, row)
        extra = {**stamp, "headers": headers(row)} if headers is not None else stamp
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=delivered, **extra)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)
            except KafkaException as exc:
                raise ProduceError(f"cannot send to {topic}: {exc}") from None
        if on_sent is not None:
            on_sent(i, time.time())
        result.sent += 1
        producer.poll(0)
        now = time.monotonic()
        if progress and now - last_report >= 2:
            last_report = now
            print(
                f"[produce] {result.sent}/{len(rows)} sent, {result.acknowledged} acknowledged",
                file=sys.stderr,
                flush=True,
            )
    remaining = producer.flush(60)
    if remaining:
        result.failed += remaining
        result.errors.append(f"{remaining} messages still queued after 60s (is the broker up?)")
    result.seconds = time.monotonic() - started
    return result


def produce_file(
    settings: Settings,
    flow: Flow,
    path: Path,
    *,
    topic: str | None = None,
    rate: float = 0.0,
    progress: bool = True,
) -> ProduceResult:
    rows = read_rows(path, flow)
    if progress:
        print(
            f"[produce] {len(rows)} rows from {path} → {topic or topic_for(flow)} "
            f"at {settings.kafka_bootstrap_servers}",
            file=sys.stderr,
            flush=True,
        )
    return produce_rows(settings, flow, rows, topic=topic, rate=rate, progress=progress)
