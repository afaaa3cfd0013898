"""Streaming throughput: Spark's raw Kafka read vs the full pipeline, on one preloaded topic.

A topic is preloaded with N generated trade events (default 1,000,000). Then, in one run
and with the same ``maxOffsetsPerTrigger``:
  * raw: an available-now streaming query whose foreachBatch only counts the rows, run twice:
    the first run pays the JVM's warm-up (class loading, JIT, the Kafka consumers), so the
    second, warm, is the one the ratios divide by;
  * floors (unless ``--no-floors``), the least a pipeline writing Delta per event does, each an
    available-now query on the same topic: ``append`` appends the records as text to a Delta
    table (the latency floor's pipeline, bench/_floor_stream.py); ``decode+append`` decodes
    each batch with the flow's decode and appends the typed rows to a Delta table partitioned
    by date; ``decode+merge`` upserts the latest row per key of each batch into such a table
    instead (one MERGE, written in its tasks as the write path writes a batch of 100,000
    rows or more a date);
  * pipeline: the streaming job (decode, validate, history, current state, positions) with
    ``--available-now`` into an empty stream layer;
  * serving (unless ``--no-serving``): ``streamshift serve``'s query with ``--available-now``
    (decode, rules, ``prepare``, positions in the state store, changed groups published to the
    compacted topic), the hot path issue 14 allows beside the Delta record; run twice, each
    from an empty state (its own checkpoint), the second, warm, counting.
Prints events/s of each and the ratios (goal: pipeline >= 0.5 x raw).

Run: .venv/bin/python bench/stream_throughput.py [--events N] [--no-floors] [--no-serving]
     [--no-pipeline]
(starts its own Kafka broker on free ports; needs scripts/setup to have run)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _scratch import scratch
from stream_latency import started_broker

from flows.trades.generate import generate_day
from streamshift.engine.decode import decode
from streamshift.engine.jobs.serve import progress_path as serve_progress_path
from streamshift.engine.jobs.serve import run_serve
from streamshift.engine.jobs.stream import kafka_stream, run_stream
from streamshift.engine.spark import get_spark, written_in_tasks
from streamshift.spec.contract import MALFORMED
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import load_settings
from streamshift.store.kafka import ensure_topic
from streamshift.store.produce import produce_rows, read_rows

DAY = dt.date(2026, 11, 20)


def available_now(spark, settings, topic: str, checkpoint: Path, each=None) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    """Events read and seconds taken by an available-now query on ``topic`` running ``each``
    (batch, batch_id) per micro-batch; without ``each`` it only counts (the raw read)."""
    counted = [0]

    def run(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        if each is None:
            counted[0] += batch.count()
        else:
            batch.persist()
            counted[0] += batch.count()
            each(batch, batch_id)
            batch.unpersist()

    started = time.perf_counter()
    query = (
        kafka_stream(spark, settings, topic)
        .writeStream.foreachBatch(run)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return counted[0], time.perf_counter() - started


def floors(flow, table: Path) -> dict[str, Callable]:  # type: ignore[no-untyped-def,type-arg]
    """The floor pipelines' batch functions, writing under ``table``."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    typed = [F.col(f.name).try_cast(f.dataType).alias(f.name) for f in flow.schema]

    def decoded(batch):  # type: ignore[no-untyped-def]
        return batch.transform(decode(flow)).where(F.col(MALFORMED).isNull()).select(*typed)

    def raw(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        batch.selectExpr(
            "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset"
        ).write.format("delta").mode("append").save(str(table / "raw"))

    def append(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        path = str(table / "append")
        decoded(batch).write.format("delta").mode("append").partitionBy(flow.business_date).option(
            "txnAppId", "floor-append"
        ).option("txnVersion", batch_id).save(path)

    def merge(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        path = str(table / "merge")
        rows = decoded(batch)
        latest = (
            rows.groupBy(flow.key)
            .agg(F.max_by(F.struct(*flow.columns), F.col(flow.version)).alias("r"))
            .select("r.*")
        )
        if not DeltaTable.isDeltaTable(batch.sparkSession, path):
            latest.limit(0).write.format("delta").partitionBy(flow.business_date).save(path)
        on = f"t.{flow.key} = s.{flow.key}"
        # Each batch here is the whole topic, so it writes in its tasks as the write path
        # writes a batch of that size (WRITE_IN_TASKS_FROM).
        with written_in_tasks(batch.sparkSession):
            (
                DeltaTable.forPath(batch.sparkSession, path)
                .alias("t")
                .merge(latest.alias("s"), on)
                .whenMatchedUpdateAll(f"s.{flow.version} >= t.{flow.version}")
                .whenNotMatchedInsertAll()
                .execute()
            )

    return {"append": raw, "decode+append": append, "decode+merge": merge}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--no-floors", action="store_true", help="skip the floor pipelines")
    parser.add_argument(
        "--no-serving", action="store_true", help="skip the serving query (streamshift serve)"
    )
    parser.add_argument(
        "--no-pipeline", action="store_true", help="skip the Delta pipeline (streamshift stream)"
    )
    args = parser.parse_args()
    work = scratch(args.workdir, "streamshift-bench-")
    print("[bench] starting Kafka", flush=True)
    broker = started_broker(work)
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

        _, cold_s = available_now(spark, settings, topic, work / "raw-cold")
        print(f"[bench] raw read, cold JVM: {cold_s:.1f}s", flush=True)
        n_raw, raw_s = available_now(spark, settings, topic, work / "raw-checkpoint")
        print(f"[bench] raw read: {n_raw} events in {raw_s:.1f}s", flush=True)
        floor_s: dict[str, float] = {}
        for name, each in ({} if args.no_floors else floors(flow, work / "floors")).items():
            _, floor_s[name] = available_now(spark, settings, topic, work / f"cp-{name}", each)
            print(f"[bench] floor {name}: {floor_s[name]:.1f}s", flush=True)
        run = None
        if not args.no_pipeline:
            run = run_stream(
                spark, settings, flow, "stream", available_now=True, topic=topic,
                handle_signals=False,
            )  # fmt: skip
            for batch_id, result in sorted(run.totals.last.items()):
                steps = ", ".join(f"{k} {v:.1f}s" for k, v in result.seconds_by_step.items())
                print(
                    f"[bench] batch {batch_id}: {result.received} events ({steps}; "
                    f"views from the {result.views_from})",
                    flush=True,
                )
            print(f"[bench] pipeline: {run.describe()}", flush=True)
        served = None
        if not args.no_serving:
            first = load_settings(
                home=work / "serve-cold", kafka_bootstrap_servers=broker.bootstrap
            )
            cold = run_serve(spark, first, flow, topic=topic, available_now=True, echo=False)
            print(f"[bench] serving, first run: {cold.describe()}", flush=True)
            served = run_serve(spark, settings, flow, topic=topic, available_now=True, echo=False)
            log = serve_progress_path(settings, flow.name, flow.views[0].name)
            for line in log.read_text().splitlines():
                batch = json.loads(line)
                steps = ", ".join(f"{k} {v:.1f}s" for k, v in batch["seconds_by_step"].items())
                print(
                    f"[bench] serving batch {batch['batch_id']}: {batch['input_rows']} events in "
                    f"{batch['duration_ms'] / 1000:.1f}s ({steps})",
                    flush=True,
                )
            print(f"[bench] serving: {served.describe()}", flush=True)

        raw_rate = n_raw / raw_s
        print(
            f"\nevents in the topic:        {len(rows)} ({settings.kafka_topic_partitions} partitions, "
            f"maxOffsetsPerTrigger {settings.max_offsets_per_trigger})"
        )
        print(
            f"raw Kafka read (count):     {raw_rate:,.0f} events/s ({raw_s:.1f} s; "
            f"{cold_s:.1f} s on the cold JVM)"
        )
        for name, seconds in floor_s.items():
            rate = n_raw / seconds
            print(
                f"floor {name + ':':21s}{rate:,.0f} events/s ({seconds:.1f} s), "
                f"{rate / raw_rate:.3f} of raw"
            )
        if run is not None:
            pipe_rate = run.totals.received / run.seconds
            print(
                f"full pipeline:              {pipe_rate:,.0f} events/s ({run.seconds:.1f} s, "
                f"{run.totals.batches} batches)"
            )
            print(f"ratio pipeline/raw:         {pipe_rate / raw_rate:.3f} (goal >= 0.5)")
            if "decode+merge" in floor_s:
                print(
                    f"pipeline ÷ decode+merge:    {run.seconds / floor_s['decode+merge']:.2f} "
                    f"({run.seconds:.1f} s vs {floor_s['decode+merge']:.1f} s; goal <= 1.5)"
                )
        if served is not None:
            serve_rate = served.events / served.seconds
            print(
                f"serving (streamshift serve): {serve_rate:,.0f} events/s ({served.seconds:.1f} s, "
                f"{served.batches} batches), {serve_rate / raw_rate:.3f} of raw"
            )
        spark.stop()
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
