"""The local stack end to end: real broker, Spark's Kafka source, Delta tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamshift.spec.settings import Settings
from streamshift.store.kafka import ensure_topic, producer_config

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

N_EVENTS = 10_000


def _events(n: int) -> list[dict[str, object]]:
    return [{"id": i, "book": f"B{i % 7}", "qty": (i * 37) % 1000 + 1} for i in range(n)]


def _produce(settings: Settings, topic: str, events: list[dict[str, object]]) -> None:
    from confluent_kafka import Producer

    producer = Producer(producer_config(settings))
    failures: list[str] = []

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            failures.append(str(err))

    for event in events:
        producer.produce(
            topic, key=str(event["id"]), value=json.dumps(event), on_delivery=on_delivery
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    assert failures == []


def _decoded(df):  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    schema = "id INT, book STRING, qty INT"
    return df.select(F.from_json(F.col("value").cast("string"), schema).alias("e")).select("e.*")


@pytest.fixture(scope="module")
def topic(kafka_settings: Settings) -> str:
    name = "foundation-events"
    assert ensure_topic(kafka_settings, name, partitions=3) is True
    assert ensure_topic(kafka_settings, name) is False  # second call: already there
    _produce(kafka_settings, name, _events(N_EVENTS))
    return name


def test_batch_read_from_kafka_into_delta(
    spark, kafka_settings: Settings, topic: str, tmp_path: Path
) -> None:
    raw = (
        spark.read.format("kafka")
        .options(**kafka_settings.spark_kafka_options())
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    path = str(tmp_path / "events")
    _decoded(raw).write.format("delta").save(path)
    back = spark.read.format("delta").load(path)
    assert back.count() == N_EVENTS
    rows = {(r.id, r.book, r.qty) for r in back.collect()}
    assert rows == {(e["id"], e["book"], e["qty"]) for e in _events(N_EVENTS)}


def test_available_now_stream_twice_adds_nothing_the_second_time(
    spark, kafka_settings: Settings, topic: str, tmp_path: Path
) -> None:
    path, checkpoint = str(tmp_path / "events"), str(tmp_path / "checkpoint")

    def run_once() -> None:
        stream = (
            spark.readStream.format("kafka")
            .options(**kafka_settings.spark_kafka_options())
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
        )
        query = (
            _decoded(stream)
            .writeStream.format("delta")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start(path)
        )
        query.awaitTermination(300)
        assert query.exception() is None

    run_once()
    first = spark.read.format("delta").load(path)
    assert first.count() == N_EVENTS
    assert first.select("id").distinct().count() == N_EVENTS
    version_after_first = (
        spark.sql(f"DESCRIBE HISTORY delta.`{path}`").agg({"version": "max"}).first()[0]
    )

    run_once()
    assert spark.read.format("delta").load(path).count() == N_EVENTS
    version_after_second = (
        spark.sql(f"DESCRIBE HISTORY delta.`{path}`").agg({"version": "max"}).first()[0]
    )
    assert version_after_second == version_after_first  # no new commit at all
