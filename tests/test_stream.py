"""The streaming job on a real broker, real Spark and real Delta tables."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections import Counter

import pytest
from pyspark.sql import Row

from flows.trades import FLOW
from flows.trades.generate import generate_day
from streamshift.control.trace import trace
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.write.target import Target, read
from streamshift.spec.registry import get_generator
from streamshift.store.events import UNDECODABLE_RULES, dlq_topic, encode_event
from streamshift.store.kafka import ensure_topic, producer_config
from streamshift.store.produce import produce_rows, read_rows
from streamshift.store.tables import stats_columns
from tests.stream_support import (
    consume_all,
    drain,
    isolated,
    new_topic,
    oracle,
    shuffled_day,
    state,
)

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

DAY = dt.date(2026, 11, 20)


@pytest.fixture(scope="module")
def day(tmp_path_factory):  # type: ignore[no-untyped-def]
    return generate_day(DAY, 600, tmp_path_factory.mktemp("stream-day"), seed=21, progress=False)


def _send_raw(settings, topic: str, messages: list[tuple[bytes | None, bytes | None]]) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import Producer

    ensure_topic(settings, topic)
    producer = Producer(producer_config(settings))
    for key, value in messages:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(60) == 0


def test_stream_and_eod_batch_reach_the_same_state(
    spark, kafka_settings, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A day plus corrections: EOD files into the batch layer, the same rows shuffled across
    partitions into the stream layer (corrections before what they correct, several
    micro-batches). The path is the kit's, whatever the flow; every flow's stream and batch
    layers are compared again by test_migration's parity reconciliation, once per flow. Then
    late trades for the closed date are recorded as late and change its positions, and re-sent
    messages change nothing."""
    from streamshift.store import heartbeat

    # Every heartbeat the job writes, as written (the file keeps only the latest).
    beats: list[dict[str, object]] = []
    write_beat = heartbeat.update_heartbeat

    def recorded(path, beat, **changes):  # type: ignore[no-untyped-def]
        write_beat(path, beat, **changes)
        beats.append(dict(beat))

    monkeypatch.setattr(heartbeat, "update_heartbeat", recorded)
    flow = FLOW
    day = get_generator(flow.name)(DAY, 600, tmp_path / "day", seed=21, progress=False)
    # Each batch's share of a partition (about 83 events) read by tasks of at most 40.
    settings = isolated(
        kafka_settings,
        tmp_path / "home",
        max_offsets_per_trigger=250,
        kafka_max_records_per_partition=40,
    )
    topic = new_topic(flow.name)
    ensure_topic(settings, topic, partitions=3)
    rows = shuffled_day(day, seed=3, flow=flow)
    sent = produce_rows(settings, flow, rows, topic=topic, progress=False)
    assert sent.acknowledged == len(rows) and sent.failed == 0

    run = drain(spark, settings, topic, flow=flow)
    assert run.totals.batches >= 3  # maxOffsetsPerTrigger split the topic
    assert run.totals.received == len(rows)

    batch = Target.open(spark, settings, flow, "batch")
    run_eod(spark, batch, DAY, day.eod)
    run_eod(spark, batch, DAY, day.corrections)
    stream = Target.open(spark, settings, flow, "stream")

    expected = oracle(spark, rows, stream.reference, flow)
    columns = expected["state_columns"]
    got_stream, got_batch = state(spark, stream, columns), state(spark, batch, columns)
    assert expected["current"] and expected["positions"]
    assert got_stream["current"] == got_batch["current"] == expected["current"]
    assert got_stream["positions"] == got_batch["positions"] == expected["positions"]
    assert got_stream["history"] == got_batch["history"] == expected["history"]
    # Files of the flow's rows carry statistics of the key and the version only.
    for path in (stream.tables.current, stream.tables.history):
        assert stats_columns(path) == {flow.key, flow.version}, path

    # The heartbeat and per-batch progress were written for `streamshift status`.
    from streamshift.store.heartbeat import progress_path, read_progress, read_status

    [status] = read_status(settings.home)
    assert (status.flow, status.layer, status.running) == (flow.name, "stream", False)
    assert status.beat["state"] == "stopped" and status.beat["lag"] == 0
    batches = list(read_progress(progress_path(settings.home, flow.name, "stream")))
    assert sum(b["input_rows"] for b in batches) == len(rows)
    assert batches[-1]["lag"] == 0 and all(b["accepted"] is not None for b in batches)
    # Each batch reports the Spark jobs it ran (its query's job group), for the speed work.
    assert all(b["spark_jobs"] >= 3 for b in batches if b["input_rows"]), batches
    # Mid-batch, the heartbeat was written as each of the batch's steps ended (a batch of a
    # whole backlog runs for minutes; the supervisor restarts a job whose heartbeat is old).
    for b in (b for b in batches if b["input_rows"]):
        steps = [
            w["step_done"]
            for w in (beat.get("working_on") for beat in beats)
            if isinstance(w, dict) and w["batch_id"] == b["batch_id"]
        ]
        assert sorted(steps) == sorted(b["seconds_by_step"]), (steps, b["seconds_by_step"])
    assert status.beat["working_on"] is None

    # A second run finds nothing new and changes nothing.
    again = drain(spark, settings, topic, flow=flow)
    assert again.totals.received == 0
    assert state(spark, stream, columns) == got_stream

    # Late trades for the date the EOD run closed, arriving on Kafka afterwards: applied,
    # recorded as late, and in the positions.
    assert read(spark, stream.tables.late_events).count() == 0
    before = state(spark, stream, columns)["positions"]
    late_rows = read_rows(day.late, flow)
    assert late_rows  # the generator wrote late trades for the day
    produce_rows(settings, flow, late_rows, topic=topic, progress=False)
    assert drain(spark, settings, topic, flow=flow).totals.late == len(late_rows)
    late = read(spark, stream.tables.late_events).collect()
    assert sorted(r["key"] for r in late) == sorted(r[flow.key] for r in late_rows)
    assert {(r["business_date"], r["source"]) for r in late} == {(DAY, "kafka")}
    with_late = oracle(spark, rows + late_rows, stream.reference, flow)
    got_stream = state(spark, stream, columns)
    assert got_stream["positions"] == with_late["positions"] != before
    assert got_stream["current"] == with_late["current"]

    # Messages sent again (a producer's retry, a desk re-sending): accepted versions the layer
    # holds, three of them twice (so one batch holds two copies). They change nothing, and each
    # is recorded as a delivery at its own offset, after the first one's, and traced as stale.
    held = set(expected["history"])
    picked = random.Random(8).sample(
        [r for r in rows if (r[flow.key], int(r[flow.version])) in held], 12
    )
    resent = picked + picked[:3]
    produce_rows(settings, flow, resent, topic=topic, progress=False)
    assert drain(spark, settings, topic, flow=flow).totals.received == len(resent)
    assert state(spark, stream, columns) == got_stream

    def delivered(r: Row) -> tuple[str, int, int]:
        name, partition, offset = (r._log_ref or r._source_ref).rsplit(":", 2)
        return name, int(partition), int(offset)

    recorded = read(spark, stream.tables.redeliveries).collect()
    assert Counter((r[flow.key], r[flow.version]) for r in recorded) == Counter(
        (r[flow.key], int(r[flow.version])) for r in resent
    )
    firsts = {
        (r[flow.key], r[flow.version]): delivered(r)
        for r in read(spark, stream.tables.history).collect()
    }
    refs = [delivered(r) for r in recorded]
    assert len(set(refs)) == len(resent) and all(n == topic for n, _, _ in refs)
    for r, (_, partition, offset) in zip(recorded, refs, strict=True):
        first = firsts[(r[flow.key], r[flow.version])]
        assert first[1] == partition and first[2] < offset
    key = picked[0][flow.key]
    events = trace(flow, stream.tables, key).events
    copies = [e for e in events if e["version"] == int(picked[0][flow.version])]
    assert len(copies) == 3  # picked[0] was sent three times: the two later ones are stale
    assert [e["outcome"] for e in copies[1:]] == ["stale", "stale"]


def _poison_messages() -> list[tuple[str, bytes | None, bytes | None]]:
    """(expected outcome, key, value): 'dlq' for undecodable, 'quarantine' for rule failures."""
    fields = {
        "trade_id": "PX-1",
        "version": 1,
        "event_type": "NEW",
        "business_date": "2026-11-20",
        "trade_ts": "2026-11-20T10:00:00Z",
        "book": "EQ-US-FLOW",
        "instrument": "AAPL",
        "side": "BUY",
        "quantity": 10,
        "price": 101.5,
        "currency": "USD",
    }

    def obj(**changes: object) -> bytes:
        doc = {**fields, **changes}
        return json.dumps({k: v for k, v in doc.items() if v is not ...}).encode()

    huge = json.dumps(
        {**fields, "trade_id": "PX-HUGE", "instrument": "NOPE", "comment": "x" * 900_000}
    ).encode()
    return [
        ("dlq", b"PX-2", b"{not json"),
        ("dlq", b"PX-3", b"[1, 2, 3]"),
        ("dlq", b"PX-4", b"\xff\xfe\x00binary"),
        ("dlq", None, None),
        ("dlq", b"PX-5", obj(trade_id="PX-5", price=...)),  # a field missing
        ("dlq", b"PX-6", obj(trade_id="PX-6", quantity="ten")),  # wrong type
        ("dlq", b"PX-7", obj(trade_id="PX-7", version=[1])),  # wrong type
        ("dlq", b"PX-8", b'{"trade_id": "PX-8", ' + b'"pad": "' + b"y" * 900_000 + b'"'),
        ("quarantine", b"PX-9", obj(trade_id="PX-9", instrument="NOSUCH")),
        ("quarantine", b"PX-10", obj(trade_id="PX-10", quantity=-5)),
        ("quarantine", b"PX-HUGE", huge),
        ("accepted", b"PX-1", obj()),
    ]


def test_poison_messages_are_quarantined_and_undecodable_ones_dead_lettered(  # type: ignore[no-untyped-def]
    spark, kafka_settings, day, tmp_path
) -> None:
    settings = isolated(kafka_settings, tmp_path, max_offsets_per_trigger=400)
    topic = new_topic()
    good = read_rows(day.eod, FLOW)[:500]
    poison = _poison_messages()
    rng = random.Random(8)
    messages: list[tuple[bytes | None, bytes | None]] = [encode_event(FLOW, r) for r in good]
    for _, key, value in poison:
        messages.insert(rng.randrange(len(messages) + 1), (key, value))
    _send_raw(settings, topic, messages)

    run = drain(spark, settings, topic)
    n_dlq = sum(1 for kind, _, _ in poison if kind == "dlq")
    n_rule = sum(1 for kind, _, _ in poison if kind == "quarantine")
    assert run.totals.received == len(messages)
    assert run.totals.rejected == n_dlq + n_rule
    assert run.totals.accepted == len(good) + 1
    assert run.totals.dead_lettered == n_dlq

    target = Target.open(spark, settings, FLOW, "stream")
    quarantine = read(spark, target.tables.quarantine).collect()
    history_refs = {
        r[0] for r in read(spark, target.tables.history).select("_source_ref").collect()
    }
    quarantine_refs = {r["source_ref"] for r in quarantine}
    # Every message is accounted for exactly once, by its topic:partition:offset.
    assert len(history_refs) + len(quarantine_refs) == len(messages)
    assert not history_refs & quarantine_refs
    by_rule = {r["rule"] for r in quarantine}
    assert {"known_instrument", "quantity_positive"} <= by_rule
    assert {r["rule"] for r in quarantine if r["rule"].startswith("json_")} <= set(
        UNDECODABLE_RULES
    )
    assert all(r["source_ref"].startswith(f"{topic}:") for r in quarantine)

    dlq = consume_all(settings, dlq_topic(topic))
    expected = sorted((v or b"") for kind, _, v in poison if kind == "dlq")
    assert sorted((v or b"") for _, v, _ in dlq) == expected
    assert all(h["streamshift.source_ref"].decode() in quarantine_refs for _, _, h in dlq)
    assert {h["streamshift.rule"].decode() for _, _, h in dlq} == {
        "json_invalid",
        "json_not_object",
        "json_missing_field",
        "json_wrong_type",
    }

    # Replaying the topic from scratch into a fresh checkpoint changes nothing and forwards
    # nothing twice: quarantine and DLQ are idempotent per message.
    import shutil

    from streamshift.engine.jobs.stream import checkpoint_path

    shutil.rmtree(checkpoint_path(settings, FLOW, "stream"))
    drain(spark, settings, topic)
    assert read(spark, target.tables.quarantine).count() == len(quarantine)
    assert len(consume_all(settings, dlq_topic(topic))) == n_dlq
