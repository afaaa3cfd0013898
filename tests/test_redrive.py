"""``streamshift redrive`` on real Spark and Delta: a trade quarantined for a book the
reference data lacked is applied once the reference feed has it, with its original line, and
shows in its trace both ways; a row that still fails stays; a second re-drive, from Airflow,
applies nothing twice. In stage stream (real Kafka) the re-driven row goes through the topic
and the stream job applies it, keeping its original ``topic:partition:offset``. Oracles come
from the input rows."""

from __future__ import annotations

import csv
import datetime as dt
import time
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from flows.trades import FLOW
from streamshift.control.cutoff import committed_offsets
from streamshift.control.trace import trace
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.jobs.promote import promote
from streamshift.engine.jobs.requests import run
from streamshift.engine.write.target import Target, read
from streamshift.spec.catalog import ControlTables, LayerTables
from streamshift.spec.requests import RedriveRequest
from streamshift.store.heartbeat import query_name
from streamshift.store.produce import produce_rows
from streamshift.store.tables import rows
from tests.airflow_support import dag_test, migrated_airflow
from tests.cli_support import run_cli
from tests.stream_support import isolated, new_topic, stream_running

pytestmark = [pytest.mark.spark, pytest.mark.airflow]

DAY = dt.date(2026, 11, 20)
HEADER = ["trade_id", "version", "event_type", "business_date", "trade_ts", "book",
          "instrument", "side", "quantity", "price", "currency"]  # fmt: skip
NEW_BOOK = "EQ-NEW-DESK"


def _t(key: str, book: str, side: str, qty: int) -> list[str]:
    return [key, "1", "NEW", str(DAY), f"{DAY}T10:00:00Z", book, "AAPL", side, str(qty),
            "10.5", "USD"]  # fmt: skip


def _feed_gets_the_new_book(feed: Path) -> None:
    """The reference feed (``STREAMSHIFT_REFERENCE_DIR``) gets the shipped books plus one."""
    (feed / FLOW.name).mkdir(parents=True)
    shipped = [r for r in csv.reader(open(FLOW.reference[0].path, newline=""))]  # noqa: SIM115
    with open(feed / FLOW.name / "books.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([*shipped, [NEW_BOOK, "EQUITY", "LE-US"]])


@pytest.mark.slow
def test_redrive_applies_what_the_fixed_reference_data_lets_through_once(
    spark, settings, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    feed = tmp_path / "reference"
    here = replace(settings, home=tmp_path / "home", reference_dir=str(feed))
    file = tmp_path / "day.csv"
    trades = [_t("R1", "EQ-US-FLOW", "BUY", 10), _t("R2", NEW_BOOK, "SELL", 7),
              _t("R3", "EQ-US-FLOW", "HOLD", 5)]  # fmt: skip
    with open(file, "w", newline="") as handle:
        csv.writer(handle).writerows([HEADER, *trades])
    run_eod(spark, Target.open(spark, here, FLOW, "batch"), DAY, file)
    tables = LayerTables(here.warehouse, FLOW, "batch")
    quarantined = {r["source_ref"]: r["rule"] for r in rows(tables.quarantine)}
    assert quarantined == {f"{file}:3": "known_book", f"{file}:4": "known_side"}

    # Before the fix nothing passes: both stay, with the rules they fail now.
    first = run(spark, RedriveRequest(FLOW.name, layer="batch", by="ops"), here).result
    assert (first.tried, first.applied) == (2, 0)
    assert first.still_failing == {"known_book": 1, "known_side": 1}

    # The reference feed gets the new book; the re-drive applies R2 from its original line.
    _feed_gets_the_new_book(feed)
    second = run(spark, RedriveRequest(FLOW.name, layer="batch", by="ops"), here).result
    assert (second.tried, second.applied) == (2, 1), second.describe()
    assert second.still_failing == {"known_side": 1}
    [r2] = rows(tables.current, where=[("trade_id", "=", "R2")])
    assert (r2["_source"], r2["_source_ref"], r2["book"]) == ("redrive", f"{file}:3", NEW_BOOK)
    positions = read(spark, tables.view("positions")).where(F.col("book") == NEW_BOOK).collect()
    assert [(p["net_quantity"], p["trade_count"]) for p in positions] == [(-7, 1)]
    events = trace(FLOW, tables, "R2").events
    assert [(e["outcome"], e["source"], e["source_ref"], e["rule"]) for e in events] == [
        ("applied", "redrive", f"{file}:3", None),  # history first, then the quarantine
        ("quarantined", "eod", f"{file}:3", "known_book"),
    ]

    # Again, from Airflow (the streamshift_redrive DAG, its job on the engine): R2 is not
    # tried (applied), R3 still fails; nothing is applied twice.
    migrated_airflow(here)
    dag = dag_test(here, "streamshift_redrive", "2026-11-21T00:00:00+00:00",
                   {"flow": FLOW.name, "layer": "batch"})  # fmt: skip
    assert dag["state"] == "success", dag["output"][-4000:]
    assert "1 quarantined rows of the batch layer to try: {'known_side': 1}" in dag["output"]
    assert "0 of 1 rows re-driven and applied" in dag["output"]
    assert len(rows(tables.history, where=[("trade_id", "=", "R2")])) == 1
    outcomes = {
        r["source_ref"]: (r["outcome"], r["rules"])
        for r in rows(ControlTables(here.warehouse).redrives)
    }
    assert outcomes == {
        f"{file}:3": ("applied", None),
        f"{file}:4": ("still failing", "known_side"),
    }

    # The CLI says when there is nothing to re-drive, without starting Spark.
    none = run_cli(here.home, "redrive", "--flow", FLOW.name, "--rule", "known_book",
                   "--layer", "batch", reference_dir=str(feed))  # fmt: skip
    assert none.returncode == 0, none.stderr
    assert "nothing to re-drive in the batch layer's quarantine --rule known_book" in none.stdout
    # A rule the quarantine holds no row under is refused, naming the rules it holds.
    typo = run_cli(here.home, "redrive", "--flow", FLOW.name, "--rule", "known_bok",
                   "--layer", "batch", reference_dir=str(feed))  # fmt: skip
    assert typo.returncode != 0
    assert (
        typo.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "trades: the batch layer's quarantine holds no row under rule 'known_bok'; its rules: "
            "known_book (1 row), known_side (1 row)"
        )
    ), typo.stderr
    assert "starting Spark" not in typo.stderr


@pytest.mark.kafka
def test_redrive_in_stage_stream_goes_through_the_topic_and_the_stream_applies_it(
    spark, kafka_settings, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    feed = tmp_path / "reference"
    here = isolated(kafka_settings, tmp_path / "home", reference_dir=str(feed))
    promote(spark, here, FLOW.name, "shadow", by="test")
    promote(spark, here, FLOW.name, "stream", force=True, reason="re-drive test", by="test")
    topic = new_topic()
    tables = LayerTables(here.warehouse, FLOW, "stream")
    trades = [_t("K1", "EQ-US-FLOW", "BUY", 10), _t("K2", NEW_BOOK, "SELL", 7)]
    events = [dict(zip(HEADER, t, strict=True)) for t in trades]
    with stream_running(spark, here, topic, FLOW):
        sent = produce_rows(here, FLOW, events, topic=topic, progress=False)
        deadline = time.monotonic() + 300
        while not (quarantined := rows(tables.quarantine)):
            assert time.monotonic() < deadline, "the stream never quarantined K2"
            time.sleep(1)
        # The stream's delivery of K2: its topic, partition and offset.
        [q] = quarantined
        assert q["rule"] == "known_book"
        origin = q["source_ref"]
        name, partition, offset = origin.rsplit(":", 2)
        assert name == topic and int(offset) < sent.ends[int(partition)], (origin, sent.ends)

    # The reference feed gets the book, and the stream job is restarted to read it (a query
    # reads the reference data when it starts); the re-drive produces K2 to the topic with its
    # original source_ref, and waits until the stream job has applied it.
    _feed_gets_the_new_book(feed)
    with stream_running(spark, here, topic, FLOW):
        done = run(spark, RedriveRequest(FLOW.name, layer="stream", by="ops"), here).result
        assert (done.tried, done.applied) == (1, 1), done.describe()
        again = run(spark, RedriveRequest(FLOW.name, layer="stream", by="ops"), here).result
        assert again.tried == 0

    # Applied by the stream job from the topic: three messages on it, K2 once in history.
    [k2] = rows(tables.current, where=[("trade_id", "=", "K2")])
    assert (k2["_source"], k2["_source_ref"], k2["book"]) == ("redrive", origin, NEW_BOOK)
    assert len(rows(tables.history, where=[("trade_id", "=", "K2")])) == 1
    assert (
        sum(committed_offsets(here.checkpoints / query_name(FLOW.name, "stream"), topic).values())
        == 3
    )
    positions = read(spark, tables.view("positions")).where(F.col("book") == NEW_BOOK).collect()
    assert [(p["net_quantity"], p["trade_count"]) for p in positions] == [(-7, 1)]
    events_of_k2 = trace(FLOW, tables, "K2").events
    # Its trace: the re-driven version keeps K2's first delivery as its source_ref, and names
    # the message that carried it (the third on the topic) as its log_ref.
    carried = {f"{topic}:{p}:{o}" for p, end in sent.ends.items() for o in range(end)}
    [redriven, refused] = events_of_k2
    assert (redriven["outcome"], redriven["source"], redriven["source_ref"]) == (
        "applied", "redrive", origin)  # fmt: skip
    assert redriven["log_ref"].startswith(f"{topic}:") and redriven["log_ref"] not in carried
    assert (refused["outcome"], refused["source"], refused["source_ref"], refused["rule"]) == (
        "quarantined", "kafka", origin, "known_book")  # fmt: skip
