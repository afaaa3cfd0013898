"""Helpers for the streaming tests: per-test settings and topics, the oracle, table snapshots."""

from __future__ import annotations

import contextlib
import csv
import json
import random
import subprocess
import threading
import time
import uuid
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from flows.trades import FLOW
from streamshift.engine.write.target import Target, read
from streamshift.engine.write.transforms import (
    checked_changes,
    distinct_versions,
    latest_per_key,
    raw_schema,
)
from streamshift.spec.contract import FAILED, IS_DELETED, SOURCE, SOURCE_REF
from streamshift.spec.dayfiles import DayFiles
from streamshift.spec.flow import Flow
from streamshift.spec.settings import Settings
from streamshift.store.heartbeat import read_heartbeat
from streamshift.store.produce import read_rows

# Columns that say *when* or *how* a row arrived; equal states may differ in them.
ARRIVAL = ["_applied_at", SOURCE, SOURCE_REF]


def isolated(settings: Settings, home: Path, **changes: Any) -> Settings:
    """Settings with their own home (warehouse, checkpoints, status) on the shared broker."""
    return replace(settings, home=home, **changes)


def new_topic(prefix: str = "trades") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def shuffled_day(files: DayFiles, seed: int, flow: Flow = FLOW) -> list[dict[str, str]]:
    """The day's EOD rows and its corrections as events, in a seeded random order (a
    correction may come before the row it corrects)."""
    rows = read_rows(files.eod, flow) + read_rows(files.corrections, flow)
    random.Random(seed).shuffle(rows)
    return rows


def csv_rows(*paths: Path) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for path in paths:
        with open(path, newline="") as handle:
            rows += list(csv.DictReader(handle))
    return rows


def oracle(spark, rows: list[dict[str, str]], reference, flow: Flow = FLOW) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """What the tables must hold after ``rows`` in any order, computed by the pure transforms
    (``positions``: the flow's first view)."""
    raw = spark.createDataFrame(
        [tuple(r.get(c) for c in flow.columns) + (f"oracle:{i}", "") for i, r in enumerate(rows)],
        raw_schema(flow),
    ).withColumn(SOURCE, F.lit("oracle"))
    checked = checked_changes(flow, raw, reference)
    accepted = checked.where(f"size({FAILED}) = 0")
    latest = latest_per_key(flow, accepted)
    state_columns = [c for c in latest.columns if not c.startswith("_")]
    return {
        "current": sorted((tuple(r) for r in latest.select(*state_columns).collect()), key=repr),
        "history": sorted(
            (
                tuple(r)
                for r in distinct_versions(flow, accepted).select(flow.key, flow.version).collect()
            ),
            key=repr,
        ),
        "positions": sorted(
            (tuple(r) for r in flow.views[0].compute(latest.where(f"NOT {IS_DELETED}")).collect()),
            key=repr,
        ),
        "rejected": checked.where(f"size({FAILED}) > 0").count(),
        "state_columns": state_columns,
    }


def state(spark, target: Target, state_columns: list[str]) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """The same picture read back from a layer's Delta tables."""
    t, flow = target.tables, target.flow
    history = read(spark, t.history)
    return {
        "current": sorted(
            (tuple(r) for r in read(spark, t.current).select(*state_columns).collect()), key=repr
        ),
        "history": sorted(
            (tuple(r) for r in history.select(flow.key, flow.version).collect()), key=repr
        ),
        "positions": sorted(
            (tuple(r) for r in read(spark, t.view(flow.views[0].name)).collect()), key=repr
        ),
    }


def drain(spark, settings: Settings, topic: str, layer: str = "stream", flow: Flow = FLOW):  # type: ignore[no-untyped-def]
    """Run the flow's stream on ``topic`` until it has read everything there (available-now)."""
    from streamshift.engine.jobs.stream import run_stream

    return run_stream(
        spark,
        settings,
        flow,
        layer,
        available_now=True,
        topic=topic,
        handle_signals=False,
        echo=False,
    )


def consume_all(settings, topic: str) -> list[tuple[bytes | None, bytes | None, dict[str, bytes]]]:  # type: ignore[no-untyped-def]
    """Every message of ``topic`` (all partitions) from the beginning."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **settings.kafka_client_config(),
            "group.id": new_topic("check"),
            "enable.auto.commit": False,
        }
    )
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    parts = [TopicPartition(topic, p, 0) for p in meta.partitions]
    ends = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in parts}
    consumer.assign(parts)
    out: list[tuple[bytes | None, bytes | None, dict[str, bytes]]] = []
    while sum(ends.values()) > len(out):
        msg = consumer.poll(10)
        assert msg is not None, f"timed out reading {topic}: {len(out)} of {sum(ends.values())}"
        if msg.error() is None:
            out.append((msg.key(), msg.value(), dict(msg.headers() or [])))
    consumer.close()
    return out


@contextlib.contextmanager
def stream_running(spark, settings: Settings, topic: str, flow: Flow = FLOW):  # type: ignore[no-untyped-def]
    """The flow's stream job on ``topic``, always on while the block runs: one query with a
    processing-time trigger, as ``streamshift stream`` runs it, on a thread of this session.
    Yields once the query has committed its first batch (what the topic held when it started
    is applied); at the end, once it has caught up (no trigger running, no data waiting: every
    batch committed), it is stopped gracefully."""
    from streamshift.engine.jobs.stream import GracefulStop, run_stream
    from streamshift.store.heartbeat import query_name

    stop = GracefulStop()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            run_stream(
                spark,
                settings,
                flow,
                "stream",
                topic=topic,
                handle_signals=False,
                echo=False,
                stop=stop,
            )
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    name = query_name(flow.name, "stream")

    def query():  # type: ignore[no-untyped-def]
        return next((q for q in spark.streams.active if q.name == name), None)

    deadline = time.monotonic() + 300
    while not errors and time.monotonic() < deadline:
        if (running := query()) is not None and running.lastProgress is not None:
            break
        time.sleep(0.2)
    try:
        if errors:
            raise errors[0]
        yield
    finally:
        deadline = time.monotonic() + 300
        while not errors and time.monotonic() < deadline:
            status = running.status if (running := query()) is not None else None
            if status is None or not (status["isTriggerActive"] or status["isDataAvailable"]):
                break
            time.sleep(0.2)
        stop.requested.set()
        thread.join(300)
        if errors:
            raise errors[0]


def served(settings, topic: str) -> dict[tuple[str, ...], tuple[str, ...]]:  # type: ignore[no-untyped-def]
    """The compacted topic read to its end: the last value per group; emptied groups dropped."""
    latest: dict[tuple[str, ...], tuple[str, ...] | None] = {}
    for key, value, _ in consume_all(settings, topic):  # a group's messages share a partition
        group = tuple(str(v) for v in json.loads(key).values())
        latest[group] = (
            None
            if value is None
            else tuple(str(v) for v in json.loads(value, parse_float=Decimal).values())
        )
    return {k: v for k, v in latest.items() if v is not None}


def wait_caught_up(
    home: Path, flow: str, job: subprocess.Popen[bytes], log: Path, timeout: float, poll: float
) -> None:
    """Until the stream job ``job`` (a process of its own) has run a batch and its heartbeat
    says no lag; fails with its log's tail if it exits, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        beat = read_heartbeat(home, flow, "stream")
        if (
            beat.get("pid") == job.pid
            and beat.get("lag") == 0
            and beat.get("last_batch_id") is not None
        ):
            return
        assert job.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"the stream did not catch up: {beat}"
        time.sleep(poll)
