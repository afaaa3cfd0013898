"""The demo: a generated trading day through the one write path, on the embedded local stack."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time

from pyspark.sql import functions as F

from streamshift.settings import Settings

DEMO_DATE = dt.date(2026, 11, 20)
DEMO_TRADES = 20_000


def _say(message: str) -> None:
    print(f"\n== {message}", flush=True)


def run_demo(settings: Settings, trades: int = DEMO_TRADES) -> int:
    from streamshift.batch import run_eod
    from streamshift.generate import generate_day
    from streamshift.registry import get_flow
    from streamshift.spark import get_spark
    from streamshift.tables import read
    from streamshift.writepath import Target

    out = settings.home / "demo" / str(DEMO_DATE)
    _say(f"generating {trades} trades for {DEMO_DATE} into {out}")
    files = generate_day(DEMO_DATE, trades, out, seed=42)

    print(f"starting Spark ({settings.spark_master}); warehouse {settings.warehouse}",
          file=sys.stderr, flush=True)
    spark = get_spark(settings, app_name="streamshift-demo")
    target = Target.open(spark, settings, get_flow("trades"), "batch")

    for title, path in (("the day's EOD file", files.eod),
                        ("the corrections (delta) file", files.corrections),
                        ("a file of poison rows", files.poison)):
        _say(f"loading {title}")
        print(run_eod(spark, target, DEMO_DATE, path).describe())

    _say(f"positions for {DEMO_DATE}, largest 15 by gross notional (batch layer)")
    positions = read(spark, target.tables.view("positions")).where(
        F.col("business_date") == F.lit(DEMO_DATE)
    )
    top = positions.orderBy(F.col("gross_notional_usd").desc()).limit(15)
    _print_rows(top)
    totals = positions.agg(F.count("*").alias("positions"), F.sum("trade_count").alias("trades"),
                           F.sum("gross_notional_usd").alias("gross_usd")).first()
    print(f"{totals.positions} positions over {totals.trades} live trades, "
          f"gross {totals.gross_usd:,.2f} USD")

    _say("quarantine summary (rows rejected, by rule)")
    summary = (read(spark, target.tables.quarantine).groupBy("rule").count().orderBy("rule"))
    _print_rows(summary)

    _stream_part(spark, settings, files)

    _say("try it yourself")
    print(f"  STREAMSHIFT_HOME={settings.home} .venv/bin/streamshift show --flow trades "
          f"--view positions --date {DEMO_DATE}")
    print(f"  STREAMSHIFT_HOME={settings.home} .venv/bin/streamshift eod --flow trades "
          f"--date {DEMO_DATE} --file {files.replacement} --replace")
    return 0


def _print_rows(df) -> None:  # type: ignore[no-untyped-def]
    from streamshift.show import format_table

    rows = [["" if v is None else str(v) for v in r] for r in df.collect()]
    print(format_table(df.columns, rows), end="")


# ---- the streaming part ------------------------------------------------------------------
def _stream_part(spark, settings: Settings, files) -> None:  # type: ignore[no-untyped-def]
    """Broker + stream job: the day on Kafka, one correction visible in seconds, parity."""
    from streamshift.kafka import LocalBroker

    broker = LocalBroker.from_settings(settings)
    _say(f"starting the local Kafka broker on {broker.bootstrap}")
    started_broker = broker.start()
    print(f"Kafka broker {broker.status().describe()}"
          + ("" if started_broker else " (already running; left running at the end)"))
    job = None
    try:
        job = _start_stream_job(settings)
        _stream_scenario(spark, settings, files, job)
    finally:
        if job is not None and job.poll() is None:
            _say("stopping the stream job (SIGTERM: it finishes the batch in flight)")
            job.send_signal(signal.SIGTERM)
            try:
                job.wait(120)
            except subprocess.TimeoutExpired:
                job.kill()
            print(f"stream job exited with code {job.returncode}")
        if started_broker:
            broker.stop()
            print("Kafka broker stopped")


def _start_stream_job(settings: Settings) -> subprocess.Popen[bytes]:
    from streamshift.heartbeat import heartbeat_path

    log = settings.home / "logs" / "stream-trades.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "STREAMSHIFT_HOME": str(settings.home),
           "STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers}
    _say(f"starting the streaming job: streamshift stream --flow trades (log: {log})")
    beat = heartbeat_path(settings.home, "trades", "stream")
    beat.unlink(missing_ok=True)
    job = subprocess.Popen([sys.executable, "-m", "streamshift.cli", "stream", "--flow", "trades"],
                           env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT)
    _wait_for(settings, job, lambda b: b.get("state") == "running", "the query to start", 180)
    return job


def _beat(settings: Settings) -> dict:  # type: ignore[type-arg]
    import json

    from streamshift.heartbeat import heartbeat_path

    try:
        return json.loads(heartbeat_path(settings.home, "trades", "stream").read_text())
    except (OSError, ValueError):
        return {}


def _wait_for(settings: Settings, job, done, what: str, timeout: float) -> dict:  # type: ignore[no-untyped-def,type-arg]
    deadline = time.monotonic() + timeout
    last_print = 0.0
    while time.monotonic() < deadline:
        beat = _beat(settings)
        if beat.get("pid") == job.pid and done(beat):
            return beat
        if job.poll() is not None:
            raise RuntimeError(f"the stream job exited (code {job.returncode}); see "
                               f"{settings.home / 'logs' / 'stream-trades.log'}")
        if time.monotonic() - last_print > 5:
            last_print = time.monotonic()
            print(f"  waiting for {what}: last batch {beat.get('last_batch_id')}, "
                  f"lag {beat.get('lag')}", flush=True)
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what}")


def _caught_up(settings: Settings, job, after_batch) -> dict:  # type: ignore[no-untyped-def,type-arg]
    return _wait_for(
        settings, job,
        lambda b: b.get("lag") == 0 and (b.get("last_batch_id") or -1) > after_batch,
        "the stream to catch up", 600)


def _stream_scenario(spark, settings: Settings, files, job) -> None:  # type: ignore[no-untyped-def]
    from streamshift.produce import produce_file, produce_rows, read_rows
    from streamshift.registry import get_flow
    from streamshift.tables import LayerTables, read

    flow = get_flow("trades")
    stream = LayerTables(settings.warehouse, flow, "stream")
    batch = LayerTables(settings.warehouse, flow, "batch")

    _say("producing the day's EOD trades to Kafka topic 'trades'")
    before = _beat(settings).get("last_batch_id") or -1
    print(produce_file(settings, flow, files.eod).describe())
    beat = _caught_up(settings, job, before)
    print(f"stream layer caught up: batch {beat['last_batch_id']}, lag 0")

    # One correction, alone, timed from produce to the positions table.
    correction = next(r for r in read_rows(files.corrections, flow)
                      if r["event_type"] == "AMEND")
    group = (F.col("business_date") == F.lit(correction["business_date"])) & (
        F.col("book") == F.lit(correction["book"])) & (
        F.col("instrument") == F.lit(correction["instrument"]))
    positions = lambda: read(spark, stream.view("positions")).where(group)
    old = positions().collect()
    _say(f"one correction on Kafka: {correction['trade_id']} v{correction['version']} "
         f"AMEND ({correction['side']} {correction['quantity']} {correction['instrument']} "
         f"in {correction['book']})")
    print("its position before:")
    _print_rows(positions())
    sent = time.monotonic()
    produce_rows(settings, flow, [correction], progress=False)
    while positions().collect() == old:
        if time.monotonic() - sent > 120:
            raise RuntimeError("the correction did not reach the positions in 120 s")
        time.sleep(0.2)
    print(f"its position {time.monotonic() - sent:.1f} s after the correction was produced:")
    _print_rows(positions())

    _say("the rest of the corrections and the poison rows, on Kafka")
    before = _beat(settings).get("last_batch_id") or -1
    print(produce_file(settings, flow, files.corrections, progress=False).describe())
    print(produce_file(settings, flow, files.poison, progress=False).describe())
    _caught_up(settings, job, before)

    _say(f"parity: stream layer vs batch layer positions for {DEMO_DATE}")
    on_day = F.col("business_date") == F.lit(DEMO_DATE)
    s_pos = read(spark, stream.view("positions")).where(on_day)
    b_pos = read(spark, batch.view("positions")).where(on_day)
    only_stream, only_batch = s_pos.exceptAll(b_pos).count(), b_pos.exceptAll(s_pos).count()
    print(f"{s_pos.count()} stream positions, {b_pos.count()} batch positions: "
          f"{only_stream + only_batch} differences")
    quarantined = read(spark, stream.quarantine).count()
    print(f"stream quarantine holds {quarantined} rejected events (topic:partition:offset, rule)")
    from streamshift.heartbeat import read_status

    for status in read_status(settings.home):
        print(f"streamshift status: {status.describe()}")
