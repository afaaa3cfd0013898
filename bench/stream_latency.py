"""Streaming latency: produce → the change visible in the positions table.

Starts a broker and the streaming job (`streamshift stream`, its own process, trigger 1 s),
warms it up, then produces generated trade events at a steady rate (default 1,000/s for
120 s). For every 50th event it records the send time and the partition/offset Kafka
acknowledged; the job's progress log says which micro-batch held that offset and when that
batch's positions MERGE committed. Prints p50/p95/p99 of (committed − sent) and the batch
sizes and step timings that explain them.

Run: .venv/bin/python bench/stream_latency.py [--rate 1000] [--seconds 120]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flows.trades.generate import generate_day
from streamshift.core.heartbeat import (
    processed_events,
    progress_path,
    read_heartbeat,
    read_progress,
)
from streamshift.core.processes import free_port
from streamshift.core.registry import get_flow
from streamshift.core.settings import load_settings
from streamshift.local.broker import LocalBroker
from streamshift.sources.events import encode_event
from streamshift.sources.kafka import ensure_topic, producer_config
from streamshift.sources.produce import produce_rows, read_rows

DAY = dt.date(2026, 11, 20)
SAMPLE_EVERY = 50


def _wait_caught_up(home: Path, job: subprocess.Popen[bytes], total: int, timeout: float) -> None:
    """Until the job has processed ``total`` events (offsets start at 0 in a new topic)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        beat = read_heartbeat(home, "trades", "stream")
        if beat.get("pid") == job.pid and processed_events(beat) >= total:
            return
        if job.poll() is not None:
            raise SystemExit(f"stream job exited with {job.returncode}")
        time.sleep(0.5)
    raise SystemExit("stream job did not catch up in time")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="events per second")
    parser.add_argument("--seconds", type=float, default=120.0, help="how long to produce")
    parser.add_argument("--trigger", default="1 second")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    from confluent_kafka import Producer

    work = args.workdir or Path(tempfile.mkdtemp(prefix="streamshift-bench-"))
    base = load_settings()
    broker = LocalBroker(
        work / "kafka",
        free_port(),
        free_port(),
        base.kafka_jars,
        base.jars_dir / "log4j2-kafka.properties",
    )
    broker.start()
    settings = load_settings(home=work / "home", kafka_bootstrap_servers=broker.bootstrap)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMSHIFT_")}
    env.update(
        STREAMSHIFT_HOME=str(settings.home), STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap
    )
    flow = get_flow("trades")
    n_events = int(args.rate * args.seconds)
    files = generate_day(DAY, n_events + 2000, work / "files", seed=7)
    rows = read_rows(files.eod, flow)
    warmup, measured = rows[:2000], rows[2000 : 2000 + n_events]
    topic = "trades"
    ensure_topic(settings, topic)
    log = open(work / "stream.log", "wb")  # noqa: SIM115 - closed with the job, below
    job = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamshift.cli",
            "stream",
            "--flow",
            "trades",
            "--trigger",
            args.trigger,
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        print("[bench] warming up the stream job with 2,000 events", flush=True)
        produce_rows(settings, flow, warmup, topic=topic, progress=False)
        _wait_caught_up(settings.home, job, len(warmup), 300)

        producer = Producer(producer_config(settings) | {"linger.ms": 0})
        sent_at: dict[int, float] = {}
        acked: dict[int, tuple[int, int]] = {}

        def on_delivery(i: int):  # type: ignore[no-untyped-def]
            def report(err, msg) -> None:  # type: ignore[no-untyped-def]
                if err is None:
                    acked[i] = (msg.partition(), msg.offset())

            return report

        print(f"[bench] producing {n_events} events at {args.rate:.0f}/s", flush=True)
        started = time.monotonic()
        for i, row in enumerate(measured):
            wait = started + i / args.rate - time.monotonic()
            if wait > 0:
                producer.poll(wait)
            key, value = encode_event(flow, row)
            sample = i % SAMPLE_EVERY == 0
            if sample:
                sent_at[i] = time.time()
            producer.produce(
                topic, key=key, value=value, on_delivery=on_delivery(i) if sample else None
            )
            producer.poll(0)
            if i and i % (int(args.rate) * 10) == 0:
                beat = read_heartbeat(settings.home, "trades", "stream")
                behind = len(warmup) + i - processed_events(beat)
                print(f"[bench] {i} sent, {behind} not yet applied", flush=True)
        producer.flush(60)
        _wait_caught_up(settings.home, job, len(warmup) + n_events, 900)
    finally:
        job.send_signal(signal.SIGTERM)
        job.wait(120)
        log.close()
        broker.stop()

    batches = [
        b
        for b in read_progress(progress_path(settings.home, "trades", "stream"))
        if b.get("views_committed_at") and b.get("input_rows")
    ]
    latencies = []
    for i, (partition, offset) in acked.items():
        for b in batches:
            start = (b.get("start_offsets") or {}).get(topic, {}).get(str(partition), 0)
            end = (b.get("processed_offsets") or {}).get(topic, {}).get(str(partition), 0)
            if start <= offset < end:
                latencies.append(b["views_committed_at"] - sent_at[i])
                break
    measured_batches = [b for b in batches if b["views_committed_at"] > min(sent_at.values())]
    sizes = [b["input_rows"] for b in measured_batches]
    durations = [b["duration_ms"] / 1000 for b in measured_batches]
    print(
        f"\nproduced:     {n_events} events at {args.rate:.0f}/s for {args.seconds:.0f}s "
        f"(trigger {args.trigger})"
    )
    print(f"sampled:      {len(latencies)} of {len(sent_at)} sampled events located in a batch")
    print(
        f"batches:      {len(measured_batches)}, median {statistics.median(sizes):.0f} events, "
        f"median duration {statistics.median(durations):.1f}s, max {max(durations):.1f}s"
    )
    steps: dict[str, list[float]] = {}
    for b in measured_batches:
        for step, seconds in (b.get("seconds_by_step") or {}).items():
            steps.setdefault(step, []).append(seconds)
    print(
        "median step:  " + ", ".join(f"{k} {statistics.median(v):.2f}s" for k, v in steps.items())
    )
    jobs = [b["spark_jobs"] for b in measured_batches if b.get("spark_jobs") is not None]
    if jobs:
        print(f"spark jobs:   median {statistics.median(jobs):.0f} per batch, max {max(jobs)}")
    print(f"latency p50:  {_percentile(latencies, 0.50):.2f} s (goal <= 1 s)")
    print(f"latency p95:  {_percentile(latencies, 0.95):.2f} s")
    print(f"latency p99:  {_percentile(latencies, 0.99):.2f} s (goal <= 3 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
