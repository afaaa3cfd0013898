"""Streaming latency: produce → visible, streamshift against Spark's own floor in one run.

Starts a broker, then for each pipeline in turn (own process, own topic of the same layout,
trigger 1 s): warms it up with 2,000 events, then produces generated trade events at a steady
rate (default 1,000/s for 120 s). For every 50th event it records the send time and the
partition/offset Kafka acknowledged; the pipeline's progress log says which micro-batch held
that offset and when that batch became visible. Prints p50/p95/p99 of (visible − sent) per
pipeline, the batch sizes and step timings that explain them, and streamshift's p50 and p99
as multiples of the floor's (issue 14: goal ≤ 2).

* ``floor``: Kafka → ``foreachBatch`` → one Delta append (bench/_floor_stream.py); visible =
  the append committed.
* ``streamshift``: ``streamshift stream --flow trades``; visible = the micro-batch's positions
  MERGE committed, so a reader of the positions view sees the change.

Run: .venv/bin/python bench/stream_latency.py [--rate 1000] [--seconds 120] [--pipelines ...]
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flows.trades.generate import generate_day
from streamshift.core.heartbeat import progress_path, read_progress
from streamshift.core.processes import free_port
from streamshift.core.registry import get_flow
from streamshift.core.settings import Settings, load_settings
from streamshift.local.broker import LocalBroker
from streamshift.sources.events import encode_event
from streamshift.sources.kafka import ensure_topic, producer_config
from streamshift.sources.produce import produce_rows, read_rows

DAY = dt.date(2026, 11, 20)
SAMPLE_EVERY = 50


def _processed(progress: Path, topic: str) -> int:
    """Events a pipeline has committed, from its progress log (offsets start at 0)."""
    highest: dict[str, int] = {}
    for batch in read_progress(progress):
        for partition, offset in (batch.get("processed_offsets") or {}).get(topic, {}).items():
            highest[partition] = max(highest.get(partition, 0), offset)
    return sum(highest.values())


def _wait_caught_up(
    progress: Path, topic: str, job: subprocess.Popen[bytes], total: int, timeout: float
) -> None:
    """Until the pipeline has committed ``total`` events of ``topic``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _processed(progress, topic) >= total:
            return
        if job.poll() is not None:
            raise SystemExit(f"{job.args} exited with {job.returncode}")
        time.sleep(0.5)
    raise SystemExit(f"{job.args} did not catch up in time")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Pipeline:
    """One pipeline under test: how it is started and where it logs its batches."""

    name: str
    visible: str  # what "visible" means for it
    command: list[str]
    progress: Path
    topic: str


def _measure(
    pipeline: Pipeline,
    settings: Settings,
    env: dict[str, str],
    warmup: list[dict[str, str]],
    measured: list[dict[str, str]],
    args: argparse.Namespace,
    work: Path,
) -> dict[str, Any]:
    """Start the pipeline, warm it up, produce ``measured`` at the rate; latencies and batches."""
    from confluent_kafka import Producer

    flow = get_flow("trades")
    topic = pipeline.topic
    ensure_topic(settings, topic)
    log = open(work / f"{pipeline.name}.log", "wb")  # noqa: SIM115 - closed with the job, below
    job = subprocess.Popen(pipeline.command, env=env, stdout=log, stderr=subprocess.STDOUT)
    sent_at: dict[int, float] = {}
    acked: dict[int, tuple[int, int]] = {}
    try:
        print(f"[bench] {pipeline.name}: warming up with {len(warmup)} events", flush=True)
        produce_rows(settings, flow, warmup, topic=topic, progress=False)
        _wait_caught_up(pipeline.progress, topic, job, len(warmup), 300)
        producer = Producer(producer_config(settings) | {"linger.ms": 0})

        def on_delivery(i: int):  # type: ignore[no-untyped-def]
            def report(err, msg) -> None:  # type: ignore[no-untyped-def]
                if err is None:
                    acked[i] = (msg.partition(), msg.offset())

            return report

        print(f"[bench] {pipeline.name}: {len(measured)} events at {args.rate:.0f}/s", flush=True)
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
                behind = len(warmup) + i - _processed(pipeline.progress, topic)
                print(f"[bench] {pipeline.name}: {i} sent, {behind} not yet visible", flush=True)
        producer.flush(60)
        _wait_caught_up(pipeline.progress, topic, job, len(warmup) + len(measured), 900)
    finally:
        job.send_signal(signal.SIGTERM)
        job.wait(120)
        log.close()

    batches = [
        b
        for b in read_progress(pipeline.progress)
        if b.get("views_committed_at") and b.get("input_rows")
    ]
    samples = []  # (sent at, latency)
    for i, (partition, offset) in acked.items():
        for b in batches:
            start = (b.get("start_offsets") or {}).get(topic, {}).get(str(partition), 0)
            end = (b.get("processed_offsets") or {}).get(topic, {}).get(str(partition), 0)
            if start <= offset < end:
                samples.append((sent_at[i], b["views_committed_at"] - sent_at[i]))
                break
    first_sent = min(sent_at.values())
    return {
        "latencies": [latency for _, latency in samples],
        "samples": sorted(samples),
        "sampled": len(sent_at),
        "batches": [b for b in batches if b["views_committed_at"] > first_sent],
    }


def _report(pipeline: Pipeline, result: dict[str, Any]) -> None:
    batches, latencies = result["batches"], result["latencies"]
    sizes = [b["input_rows"] for b in batches]
    durations = [b["duration_ms"] / 1000 for b in batches if b.get("duration_ms") is not None]
    print(f"\n{pipeline.name} (visible = {pipeline.visible})")
    print(
        f"  sampled:    {len(latencies)} of {result['sampled']} sampled events located in a batch"
    )
    print(
        f"  batches:    {len(batches)}, median {statistics.median(sizes):.0f} events, "
        f"median duration {statistics.median(durations):.1f}s, max {max(durations):.1f}s"
    )
    steps: dict[str, list[float]] = {}
    for b in batches:
        for step, seconds in (b.get("seconds_by_step") or {}).items():
            steps.setdefault(step, []).append(seconds)
    if steps:
        medians = ", ".join(f"{k} {statistics.median(v):.2f}s" for k, v in steps.items())
        print(f"  median step: {medians}")
    jobs = [b["spark_jobs"] for b in batches if b.get("spark_jobs") is not None]
    if jobs:
        print(f"  spark jobs: median {statistics.median(jobs):.0f} per batch, max {max(jobs)}")
    for q in (0.50, 0.95, 0.99):
        print(f"  latency p{round(q * 100)}: {_percentile(latencies, q):.2f} s")


def parser(doc: str, seconds: float, pipelines: list[str]) -> argparse.ArgumentParser:
    """The options of this bench and of bench/stream_soak.py (which differ in defaults)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="events per second")
    parser.add_argument("--seconds", type=float, default=seconds, help="how long to produce")
    parser.add_argument("--trigger", default="1 second")
    parser.add_argument(
        "--pipelines",
        nargs="+",
        default=pipelines,
        choices=["floor", "streamshift"],
        help=f"run one after the other on the same broker (default: {' '.join(pipelines)})",
    )
    parser.add_argument("--workdir", type=Path, default=None)
    return parser


def run(args: argparse.Namespace) -> tuple[dict[str, Pipeline], dict[str, dict[str, Any]], Path]:
    """Start a broker, run each pipeline of ``args.pipelines`` in turn; their results."""
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
    n_events = int(args.rate * args.seconds)
    files = generate_day(DAY, n_events + 2000, work / "files", seed=7)
    rows = read_rows(files.eod, get_flow("trades"))
    warmup, measured = rows[:2000], rows[2000 : 2000 + n_events]
    here = Path(__file__).resolve().parent
    pipelines = {
        "floor": Pipeline(
            "floor",
            "its micro-batch's Delta append committed",
            [
                sys.executable,
                str(here / "_floor_stream.py"),
                "--topic",
                "floor",
                "--table",
                str(work / "floor" / "events"),
                "--progress",
                str(work / "floor.progress.jsonl"),
                "--trigger",
                args.trigger,
            ],
            work / "floor.progress.jsonl",
            "floor",
        ),
        "streamshift": Pipeline(
            "streamshift",
            "its micro-batch's positions MERGE committed: a reader of the view sees it",
            [
                sys.executable,
                "-m",
                "streamshift.cli",
                "stream",
                "--flow",
                "trades",
                "--topic",
                "trades",
                "--trigger",
                args.trigger,
            ],
            progress_path(settings.home, "trades", "stream"),
            "trades",
        ),
    }
    results: dict[str, dict[str, Any]] = {}
    try:
        for name in args.pipelines:
            results[name] = _measure(pipelines[name], settings, env, warmup, measured, args, work)
    finally:
        broker.stop()
    return pipelines, results, work


def main() -> int:
    args = parser(__doc__, 120.0, ["floor", "streamshift"]).parse_args()
    pipelines, results, _ = run(args)
    n_events = int(args.rate * args.seconds)
    print(
        f"\nproduced:     {n_events} events at {args.rate:.0f}/s for {args.seconds:.0f}s "
        f"per pipeline (trigger {args.trigger})"
    )
    for name, result in results.items():
        _report(pipelines[name], result)
    if {"floor", "streamshift"} <= set(results):
        for q, goal in ((0.50, "p50"), (0.99, "p99")):
            ours = _percentile(results["streamshift"]["latencies"], q)
            floor = _percentile(results["floor"]["latencies"], q)
            print(
                f"{goal} streamshift / floor: {ours:.2f} / {floor:.2f} = {ours / floor:.2f} (goal <= 2)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
