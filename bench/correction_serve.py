"""One corrected trade through ``streamshift serve`` vs re-running the whole day's EOD load.

Issue 14 grants a serving path outside Delta; this measures a correction on it. Per day size in
``--trades`` (default 100,000 and 1,000,000), in one run:

1. **re-run** (what the Lambda batch layer does for a correction today): the generated day is
   loaded through ``run_eod``, then ``--repeat`` times re-loaded with the corrected file (the
   day plus the ``--corrections`` amendments) as a whole-day replacement
   (``run_eod(replace=True)``, what ``streamshift eod --replace`` runs); median time.
2. **correction via serve**: the day's events go to a topic and ``streamshift serve --flow
   trades`` (its own process, ``--trigger``, default 1 s as serve's) takes them all into its
   state. Then each amendment
   (version + 1, quantity + 1 of a live trade) is produced on its own, and its latency is the
   time from the send until the serving batch that held its offset had published its changed
   positions to the compacted topic (``visible_at`` in serve's progress log): what a reader of
   the position waits for.
3. **check**: the compacted topic, read to its end, must equal the batch layer's ``positions``
   table after the re-run, group by group (both have every amendment).

Prints the medians, correction ÷ re-run (goal <= 1/50 = 0.020) and the correction at the largest
size ÷ at the smallest (goal <= 1.3). The durable Delta record of the same correction is what
bench/correction_cost.py measures. Run: .venv/bin/python bench/correction_serve.py
[--trades N ...] [--repeat K] [--corrections C] [--trigger T]  (starts its own Kafka broker)
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _amend import amendments
from _scratch import scratch
from correction_cost import print_scaling
from stream_latency import (
    _served_positions,
    _wait_caught_up,
    job_env,
    started_broker,
    stored_positions,
)

from flows.trades.generate import generate_day
from streamshift.engine.jobs.serve import progress_path as serve_progress_path
from streamshift.spec.flow import Flow
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import Settings, load_settings
from streamshift.store.events import encode_event, serving_topic
from streamshift.store.heartbeat import read_progress
from streamshift.store.kafka import ensure_topic, producer_config
from streamshift.store.produce import produce_rows, read_rows

DAY = dt.date(2026, 11, 20)


def rerun_seconds(
    settings: Settings, flow: Flow, day_file: Path, amends: list[dict[str, str]], repeat: int
) -> tuple[float, float]:
    """(first load, median re-run with the corrected file), batch layer, one Spark session."""
    from streamshift.engine.jobs.eod import run_eod
    from streamshift.engine.spark import get_spark
    from streamshift.engine.write.target import Target

    fixed = day_file.with_name("corrected.csv")
    shutil.copyfile(day_file, fixed)
    with fixed.open("a", newline="") as handle:
        writer = csv.writer(handle)
        for row in amends:
            writer.writerow([row[c] for c in flow.columns])
    spark = get_spark(settings, app_name="bench-correction-serve")
    target = Target.open(spark, settings, flow, "batch")
    started = time.perf_counter()
    run_eod(spark, target, DAY, day_file)
    load = time.perf_counter() - started
    print(f"[bench] day loaded in {load:.1f}s", flush=True)
    times = []
    for i in range(repeat):
        started = time.perf_counter()
        rerun = run_eod(spark, target, DAY, fixed, replace=True)
        times.append(time.perf_counter() - started)
        print(f"[bench] re-run {i + 1}: {times[-1]:.1f}s ({rerun.describe()})", flush=True)
    spark.stop()
    return load, statistics.median(times)


def correct_via_serve(
    settings: Settings,
    flow: Flow,
    rows: list[dict[str, str]],
    amends: list[dict[str, str]],
    trigger: str,
) -> tuple[float, list[float]]:
    """(seconds serve took to take in the day, latency of each correction)."""
    from confluent_kafka import Producer

    topic = "trades"
    ensure_topic(settings, topic)
    produce_rows(settings, flow, rows, topic=topic, progress=False)
    env = job_env(settings)
    progress = serve_progress_path(settings, flow.name, "positions")
    command = [sys.executable, "-m", "streamshift.cli", "serve", "--flow", flow.name]
    command += ["--topic", topic, "--trigger", trigger]
    with open(settings.home / "serve.log", "wb") as log:
        job = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            started = time.perf_counter()
            print(f"[bench] serve is taking in {len(rows)} events", flush=True)
            _wait_caught_up(progress, topic, job, len(rows), 3600)
            intake = time.perf_counter() - started
            print(f"[bench] serve took in the day in {intake:.1f}s", flush=True)
            producer = Producer(producer_config(settings) | {"linger.ms": 0})
            latencies = []
            for i, row in enumerate(amends):
                time.sleep(3)  # the previous correction's batch is over; serve is idle
                acked: list[tuple[int, int]] = []
                key, value = encode_event(flow, row)
                sent = time.time()
                producer.produce(
                    topic,
                    key=key,
                    value=value,
                    on_delivery=lambda err, msg, acked=acked: acked.append(
                        (msg.partition(), msg.offset())
                    ),
                )
                producer.flush(30)
                (partition, offset) = acked[0]
                visible = _visible_at(progress, topic, partition, offset, job)
                latencies.append(visible - sent)
                print(f"[bench] correction {i + 1}: visible after {latencies[-1]:.2f}s", flush=True)
        finally:
            job.send_signal(signal.SIGTERM)
            job.wait(120)
    return intake, latencies


def _visible_at(
    progress: Path, topic: str, partition: int, offset: int, job: subprocess.Popen[bytes]
) -> float:
    """When the serving batch holding ``offset`` had published (its progress line's time)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for batch in read_progress(progress):
            start = (batch.get("start_offsets") or {}).get(topic, {}).get(str(partition), 0)
            end = (batch.get("processed_offsets") or {}).get(topic, {}).get(str(partition), 0)
            if start <= offset < end and batch.get("visible_at"):
                return float(batch["visible_at"])
        if job.poll() is not None:
            raise SystemExit(f"serve exited with {job.returncode}; see its log")
        time.sleep(0.05)
    raise SystemExit(f"offset {partition}:{offset} not served within 300 s")


def measure(flow: Flow, trades: int, args: argparse.Namespace, work: Path) -> dict[str, float]:
    broker = started_broker(work)
    try:
        settings = load_settings(home=work / "home", kafka_bootstrap_servers=broker.bootstrap)
        print(f"[bench] {trades} trades: generating the day in {work}", flush=True)
        files = generate_day(DAY, trades, work / "files", seed=3)
        rows = read_rows(files.eod, flow)
        amends = amendments(flow, rows, args.corrections)
        load, rerun = rerun_seconds(settings, flow, files.eod, amends, args.repeat)
        intake, latencies = correct_via_serve(settings, flow, rows, amends, args.trigger)
        served = _served_positions(settings, serving_topic("trades", "positions"))
        stored = stored_positions(settings, "batch")
        differ = [k for k in stored.keys() | served.keys() if stored.get(k) != served.get(k)]
        print(
            f"[bench] served positions vs the batch layer's after the re-run: {len(served)} / "
            f"{len(stored)} groups, " + ("equal" if not differ else f"{len(differ)} differ"),
            flush=True,
        )
        if differ:
            raise SystemExit(f"served positions differ from the batch layer: {sorted(differ)[:3]}")
    finally:
        broker.stop()
    return {
        "load": load,
        "rerun": rerun,
        "intake": intake,
        "correction": statistics.median(latencies),
        "worst": max(latencies),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=2, help="timed re-runs per size")
    parser.add_argument("--corrections", type=int, default=3, help="corrections per size")
    parser.add_argument("--trigger", default="1 second", help="serve's trigger (its default)")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = scratch(args.workdir, "streamshift-bench-")
    flow = get_flow("trades")
    sizes = sorted(args.trades)
    figures = {n: measure(flow, n, args, work / str(n)) for n in sizes}
    print(
        f"\n{'trades':>10} {'load':>7} {'re-run':>7} {'serve intake':>13} "
        f"{'correction':>11} {'worst':>6} {'ratio':>6}"
    )
    for n, f in figures.items():
        print(
            f"{n:>10} {f['load']:>6.1f}s {f['rerun']:>6.1f}s {f['intake']:>12.1f}s "
            f"{f['correction']:>10.2f}s {f['worst']:>5.2f}s {f['correction'] / f['rerun']:>6.3f}"
        )
    print("goal: correction / re-run <= 0.020 (correction = median time until served)")
    print_scaling(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
