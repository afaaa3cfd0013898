"""Kappa reprocessing: replaying a time range of the topic reproduces the stream layer."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from flows.trades import FLOW
from flows.trades.generate import generate_day
from streamshift.engine.jobs.requests import run
from streamshift.engine.write.target import Target
from streamshift.spec.requests import ReplayRequest
from streamshift.store.kafka import admin_client
from streamshift.store.produce import produce_rows
from streamshift.store.retention import ReplayRefused
from tests.stream_support import drain, isolated, new_topic, shuffled_day, state

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

DAY = dt.date(2026, 11, 20)


def test_replay_reproduces_the_stream_layer_and_refuses_a_range_past_retention(  # type: ignore[no-untyped-def]
    spark, kafka_settings, tmp_path
) -> None:
    settings = isolated(kafka_settings, tmp_path / "home")
    files = generate_day(DAY, 300, tmp_path / "files", seed=41, progress=False)
    rows = shuffled_day(files, seed=2)
    topic = new_topic()
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    produce_rows(settings, FLOW, rows[:200], topic=topic, progress=False)
    time.sleep(1.5)
    middle = dt.datetime.now(dt.UTC)
    time.sleep(1.5)
    produce_rows(settings, FLOW, rows[200:], topic=topic, progress=False)
    after = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    drain(spark, settings, topic)

    # The range [middle, after) alone holds exactly the later events.
    def replay(start: dt.datetime, end: dt.datetime):  # type: ignore[no-untyped-def]
        return run(spark, ReplayRequest(FLOW.name, start, end, "batch", topic), settings).result

    part = replay(middle, after)
    assert part.events == len(rows) - 200
    # Then the whole range: the batch layer now equals the stream layer, row for row.
    whole = replay(before, after)
    assert whole.events == len(rows)
    stream = Target.open(spark, settings, FLOW, "stream")
    batch = Target.open(spark, settings, FLOW, "batch")
    columns = [*FLOW.columns, "is_deleted"]
    assert state(spark, batch, columns) == state(spark, stream, columns)

    # Retention: records before offset 50 of partition 0 are gone (what retention.ms does to
    # old segments); a replay from `before` is refused, one from after the gap is not.
    from confluent_kafka import TopicPartition

    admin = admin_client(settings)
    [future] = admin.delete_records([TopicPartition(topic, 0, 50)]).values()
    future.result(timeout=30)
    with pytest.raises(ReplayRefused, match="no longer retains"):
        replay(before, after)
    assert replay(after, after + dt.timedelta(seconds=5)).events == 0
