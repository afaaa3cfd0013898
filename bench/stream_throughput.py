"""Streaming throughput: Spark's raw Kafka read vs the full pipeline, on one preloaded topic.

A topic is preloaded with N generated trade events (default 1,000,000). Then, in one run
and with the same ``maxOffsetsPerTrigger``:
  * raw: an available-now streaming query whose foreachBatch only counts the rows;
  * pipeline: the streaming job (decode, validate, history, current state, positions) with
    ``--available-now`` into an empty stream layer.
Prints events/s of each and the ratio (goal: pipeline >= 0.5 x raw).

Run: .venv/bin/python bench/stream_throughput.py [--events N]
(starts its own Kafka broker on free ports; needs scripts/setup to have run)
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flows.trades.generate import generate_day
from streamshift.core.processes import free_port
from streamshift.core.registry import get_flow
from streamshift.core.settings import load_settings
from streamshift.jobs.stream import kafka_stream, run_stream
from streamshift.local.broker import LocalBroker
from streamshift.sources.kafka import ensure_topic
from streamshift.sources.produce import produce_rows, read_rows
from streamshift.spark import get_spark

DAY = dt.date(2026, 11, 20)


def raw_read(spark, settings, topic: str, checkpoint: Path) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    counted = [0]

    def count(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        counted[0] += batch.count()

    started = time.perf_counter()
    query = (
        kafka_stream(spark, settings, topic)
        .writeStream.foreachBatch(count)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return counted[0], time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="streamshift-bench-"))
    broker = LocalBroker(
        work / "kafka",
        free_port(),
        free_port(),
        load_settings().kafka_jars,
        load_settings().jars_dir / "log4j2-kafka.properties",
    )
    print(f"[bench] starting Kafka on {broker.bootstrap}", flush=True)
    broker.start()
    try:
        settings = load_settings(home=work / "home", kafka_bootstrap_servers=broker.bootstrap)
        flow = get_flow("trades")
        files = generate_day(DAY, args.events, work / "files", seed=3)
        rows = read_rows(files.eod, flow)
        topic = "trades-bench"
        ensure_topic(settings, topic)
        print(f"[bench] preloading {len(rows)} events into {topic}", flush=True)
        sent = produce_rows(settings, flow, rows, topic=topic)
        print(f"[bench] {sent.describe()}", flush=True)
        spark = get_spark(settings, app_name="bench-stream-throughput")

        n_raw, raw_s = raw_read(spark, settings, topic, work / "raw-checkpoint")
        print(f"[bench] raw read: {n_raw} events in {raw_s:.1f}s", flush=True)
        run = run_stream(
            spark, settings, flow, "stream", available_now=True, topic=topic, handle_signals=False
        )
        pipe_s = run.seconds
        for batch_id, result in sorted(run.totals.last.items()):
            steps = ", ".join(f"{k} {v:.1f}s" for k, v in result.seconds_by_step.items())
            print(f"[bench] batch {batch_id}: {result.received} events ({steps})", flush=True)
        print(f"[bench] pipeline: {run.describe()}", flush=True)

        raw_rate, pipe_rate = n_raw / raw_s, run.totals.received / pipe_s
        print(
            f"\nevents in the topic:        {len(rows)} ({settings.kafka_topic_partitions} partitions, "
            f"maxOffsetsPerTrigger {settings.max_offsets_per_trigger})"
        )
        print(f"raw Kafka read (count):     {raw_rate:,.0f} events/s ({raw_s:.1f} s)")
        print(
            f"full pipeline:              {pipe_rate:,.0f} events/s ({pipe_s:.1f} s, "
            f"{run.totals.batches} batches)"
        )
        print(f"ratio pipeline/raw:         {pipe_rate / raw_rate:.3f} (goal >= 0.5)")
        spark.stop()
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
