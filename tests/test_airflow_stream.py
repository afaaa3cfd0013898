"""Stage ``stream`` under Airflow, for real: the EOD DAG's correction goes through the topic
while a producer keeps sending events of the same business date, and the stream job applies
both (the layer's single writer); the supervisor restarts
a streaming job killed with SIGKILL and leaves a healthy one alone, and ``late_data`` re-
reconciles exactly the date that received late events; in stage ``kappa`` the EOD DAG waits for
no file and closes the day at its cut-off."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from flows.trades import FLOW
from streamshift.airflow.supervise import read_restarts
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.jobs.promote import promote
from streamshift.engine.jobs.requests import run as run_job
from streamshift.engine.recon import recon_runs_path
from streamshift.engine.write.apply import apply_changes
from streamshift.engine.write.target import Target, read
from streamshift.engine.write.transforms import raw_schema
from streamshift.spec.catalog import LayerTables
from streamshift.spec.requests import ReconcileRequest
from streamshift.spec.settings import load_settings
from streamshift.store.heartbeat import broker_lag, processed_events, read_heartbeat
from streamshift.store.processes import pid_alive
from streamshift.store.produce import produce_rows, read_rows
from streamshift.store.records import day_closes
from streamshift.store.tables import rows
from tests.airflow_support import asset_events, dag_test, land_day, land_external, migrated_airflow
from tests.cli_support import CLI, cli_env, suite_engine
from tests.stream_support import drain, new_topic, oracle, state

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

DAY = dt.date(2026, 11, 9)


def _wait_caught_up(settings, topic: str, pid: int | None = None, timeout: float = 300) -> dict:  # type: ignore[no-untyped-def, type-arg]
    """The stream job's heartbeat once it has processed everything the topic holds (its own
    events and the corrections the EOD DAG produced to it)."""
    deadline = time.monotonic() + timeout
    beat: dict = {}  # type: ignore[type-arg]
    while time.monotonic() < deadline:
        beat = read_heartbeat(settings.home, "trades", "stream")
        if (pid is None or beat.get("pid") == pid) and broker_lag(settings, beat) == 0:
            return beat
        time.sleep(1)
    raise AssertionError(f"the stream did not catch up with {topic} in {timeout}s: {beat}")


def _wait_processed(
    settings, topic: str, n: int, pid: int | None = None, timeout: float = 300
) -> dict:  # type: ignore[no-untyped-def, type-arg]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        beat = read_heartbeat(settings.home, "trades", "stream")
        if (pid is None or beat.get("pid") == pid) and processed_events(beat, topic) >= n:
            return beat
        time.sleep(1)
    raise AssertionError(f"the stream did not process {n} events in {timeout}s: {beat}")


def test_two_writers_and_the_stream_supervisor(spark, kafka_settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = replace(kafka_settings, home=tmp_path / "home", spark_master="local[2]")
    migrated_airflow(settings)  # dag.test() needs the metadata database
    promote(spark, settings, FLOW.name, "shadow", by="test")
    promote(spark, settings, FLOW.name, "stream", force=True, reason="two-writers test", by="test")
    files = land_day(settings, DAY, trades=300)
    eod_rows = read_rows(files.eod, FLOW)
    # The stream misses 20 trades that the EOD file has; the correction must bring them in.
    day_events = [r for i, r in enumerate(eod_rows) if i % 15 != 7]
    corrections = read_rows(files.corrections, FLOW)
    events = day_events + corrections
    topic = new_topic()

    log = open(tmp_path / "stream.log", "wb")  # noqa: SIM115 - closed at the end
    env = cli_env(
        settings.home,
        spark_master="local[2]",
        spark_shuffle_partitions="2",
        kafka_bootstrap_servers=settings.kafka_bootstrap_servers,
    )
    job = subprocess.Popen(
        [*CLI, "stream", "--flow", "trades", "--topic", topic],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    restarted: int | None = None
    try:
        # Writer one: events for DAY at a steady rate — the day's trades, then, once the
        # correction has begun committing, the day's corrections; writer two: the EOD DAG.
        current_path = LayerTables(settings.warehouse, FLOW, "stream").current

        def feed() -> None:
            produce_rows(settings, FLOW, day_events, topic=topic, rate=15, progress=False)
            deadline = time.monotonic() + 900
            while not rows(current_path, ["trade_id"], [("_source", "=", "eod_correction")]):
                assert time.monotonic() < deadline, "the correction never committed"
                time.sleep(1)
            produce_rows(settings, FLOW, corrections, topic=topic, rate=15, progress=False)

        producer = threading.Thread(target=feed)
        _wait_processed(settings, topic, 0, job.pid, timeout=180)  # the query is up
        producer.start()
        run = dag_test(settings, "eod_trades", f"{DAY}T22:00:00+00:00", {})
        producer.join()
        assert run["state"] == "success", run["output"][-4000:]
        assert run["tasks"]["correct_stream_layer"] == "success"
        assert run["tasks"]["load_eod_file"] == "skipped"  # stage stream: no batch load
        beat = _wait_caught_up(settings, topic, job.pid)
        assert processed_events(beat, topic) >= len(events)
        assert job.poll() is None, "the stream job died while the correction ran"

        stream = Target.open(spark, settings, FLOW, "stream")
        expected = oracle(spark, eod_rows + events, stream.reference)
        got = state(spark, stream, expected["state_columns"])
        assert got["current"] == expected["current"]  # nothing lost, nothing double-counted
        assert got["positions"] == expected["positions"]
        current = read(spark, stream.tables.current)
        corrected = current.where(F.col("_source") == "eod_correction")
        assert corrected.count() >= 1  # the missed trades came from the correction
        # Both writers really wrote the same date at the same time: stream commits went on
        # after the correction's.
        first_fix = corrected.agg(F.min("_applied_at")).first()[0]
        last_event = current.where(F.col("_source") == "kafka").agg(F.max("_applied_at")).first()[0]
        assert last_event > first_fix

        # SIGKILL the job; the supervisor restarts it from its checkpoint and it catches up.
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
        more = read_rows(files.late, FLOW)
        produce_rows(settings, FLOW, more, topic=topic, progress=False)
        supervised = dag_test(settings, "stream_supervisor", "2026-11-09T12:00:00+00:00", {})
        assert supervised["state"] == "success", supervised["output"][-4000:]
        restarts = read_restarts(settings, "trades")
        assert restarts["restarts"] == 1 and restarts["last_reason"].startswith("dead")
        restarted = int(restarts["pid"])
        _wait_caught_up(settings, topic, timeout=420)
        expected = oracle(spark, eod_rows + events + more, stream.reference)
        got = state(spark, stream, expected["state_columns"])
        assert got["current"] == expected["current"] and got["positions"] == expected["positions"]

        # A healthy job is left alone.
        beat = read_heartbeat(settings.home, "trades", "stream")
        again = dag_test(settings, "stream_supervisor", "2026-11-09T12:05:00+00:00", {})
        assert again["state"] == "success"
        assert read_restarts(settings, "trades")["restarts"] == 1
        assert read_heartbeat(settings.home, "trades", "stream")["pid"] == beat["pid"]
        assert "healthy" in again["output"]
    finally:
        for pid in (job.pid, restarted):
            if pid and pid_alive(pid):
                os.killpg(pid, signal.SIGTERM)
        job.wait(120)
        log.close()


def test_late_data_re_reconciles_exactly_the_late_date(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = load_settings(
        {},
        home=tmp_path / "home",
        spark_master="local[2]",
        spark_shuffle_partitions=2,
        engine=suite_engine(),
    )
    migrated_airflow(settings)
    d1, d2 = dt.date(2026, 11, 10), dt.date(2026, 11, 11)
    batch = Target.open(spark, settings, FLOW, "batch")
    days = {d: land_day(settings, d, trades=150) for d in (d1, d2)}
    for d, files in days.items():
        run_eod(spark, batch, d, files.eod)  # closes the date
        external = land_external(settings, files, d)  # the clearing house's positions
        run_job(spark, ReconcileRequest(FLOW.name, d, against=external, parity=False), settings)
    runs = read(spark, recon_runs_path(settings))
    before = {d: runs.where(F.col("business_date") == d).count() for d in (d1, d2)}

    # Late trades of d1 arrive after its reconciliation (as from Kafka: no EOD closes them).
    late = read_rows(days[d1].late, FLOW)
    raw = spark.createDataFrame(
        [tuple(r.get(c) for c in FLOW.columns) + (f"late:{i}", "") for i, r in enumerate(late)],
        raw_schema(FLOW),
    )
    assert apply_changes(FLOW, raw, "kafka", batch).late == len(late)

    run = dag_test(settings, "late_data_trades", "2026-11-12T10:00:00+00:00", {})
    assert run["state"] == "success", run["output"][-4000:]
    assert "1 dates to re-reconcile: 2026-11-10" in run["output"]
    runs = read(spark, recon_runs_path(settings))
    after = {d: runs.where(F.col("business_date") == d).count() for d in (d1, d2)}
    assert after[d1] == before[d1] + 1 and after[d2] == before[d2]
    report = settings.reports / "trades" / str(d1) / "report.html"
    assert report.exists()
    # The date is published again: one event of the flow's asset, for d1 only.
    events = asset_events(settings, "trades_eod_published")
    assert [(e["business_date"], e["cause"], e["reconciliations"]) for e in events] == [
        (str(d1), "late data", 1)  # the latest reconciliation of each kind: the external one
    ]


def test_the_eod_dag_in_kappa_waits_for_no_file_and_closes_the_day_at_its_cut_off(
    spark, kafka_settings, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    settings = replace(kafka_settings, home=tmp_path / "home", spark_master="local[2]")
    migrated_airflow(settings)
    for step in ("shadow", "stream", "kappa"):
        promote(spark, settings, FLOW.name, step, force=True, reason="kappa DAG test", by="test")
    day = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)  # its cut-off has passed
    files = land_day(settings, day, trades=60)
    (files.eod).unlink()  # kappa has no EOD file
    topic = new_topic()
    cut_off = FLOW.cut_off.at(day)
    before = int((cut_off - dt.timedelta(hours=2)).timestamp() * 1000)
    produce_rows(
        settings,
        FLOW,
        read_rows(files.corrections, FLOW),
        topic=topic,
        progress=False,
        timestamp_ms=before,
    )
    drain(spark, settings, topic)  # the stream has read everything sent before the cut-off

    run = dag_test(settings, "eod_trades", f"{day}T22:00:00+00:00", {})
    assert run["state"] == "success", run["output"][-4000:]
    tasks = run["tasks"]
    assert tasks["wait_for_cut_off"] == "success" and tasks["close_day"] == "success"
    for skipped in ("wait_for_eod_file", "load_eod_file", "correct_stream_layer"):
        assert tasks[skipped] == "skipped", skipped
    assert tasks["data_quality"] == "success" and tasks["publish_summary"] == "success"
    [close] = day_closes(settings, FLOW.name, day)
    assert (close["layer"], close["how"]) == ("stream", "cut_off")
    assert json.loads(close["detail"])["topic"] == topic
