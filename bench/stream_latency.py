"""Streaming latency: produce → visible, streamshift against Spark's own floor in one run.

Starts a broker, then for each pipeline in turn (own process, own topic of the same layout,
trigger 1 s): warms it up with 2,000 events, then produces generated trade events at a steady
rate (default 1,000/s for 120 s). For every 50th event it records the send time and the
partition/offset Kafka acknowledged; the pipeline's progress log says which micro-batch held
that offset and when that batch became visible. Prints p50/p95/p99 of (visible − sent) per
pipeline, the batch sizes and step timings that explain them, and streamshift's p50 and p99
as multiples of the floor's (BENCHMARKS.md holds the goals).

* ``floor``: Kafka → ``foreachBatch`` → one Delta append (bench/_floor_stream.py); visible =
  the append committed.
* ``floor-merge`` (not run by default): Kafka → ``foreachBatch`` → one MERGE into a current-
  state table and one into a positions table per batch (``_floor_stream.py --mode merge``);
  visible = the positions MERGE committed: the floor of a batch that must update rows.
* ``streamshift``: ``streamshift stream --flow trades``; visible = the micro-batch's positions
  MERGE committed, so a reader of the positions view sees the change.
* ``streamshift-cold`` (not run by default): the same job with ``stream_warm_state`` off (no
  side thread computing the written tables' state after a batch), in a home of its own.
* ``streamshift-debugging`` (not run by default): the same job with PySpark's DataFrame
  debugging on (``spark_dataframe_debugging``), in a home of its own.
* ``serving`` (not run by default): ``streamshift serve --flow trades`` — positions in Spark's
  state store, published per batch to a compacted topic; visible = the publish returned, so a
  consumer of the topic sees the change. When it runs beside
  ``streamshift`` (same events), the topic's final positions are checked against the Delta
  positions table.

``--together`` starts the chosen pipelines at the same time on one topic instead of one after
the other (the floor, if chosen, still runs first on its own): e.g. ``--pipelines floor serving
streamshift --together`` is the floor, then the serving path beside the Delta write path it
would run with, both on the machine's two cores. ``--stream-trigger`` and ``--stream-nice``
give the write path a longer trigger and a lower CPU priority: the durable record lagging by a
bounded, measured amount behind the serving path.

``--corrections`` makes the measured events amend warm-up trades instead of adding new ones;
with ``--rate 0.1 --sample-every 1`` each is a quiet stream's lone correction in a batch of its own.

``--rounds N`` runs the whole comparison N times, each on a broker, topics and homes of its
own, the pipelines' order reversed every other round (a pipeline run later can gain from the
broker's and the page cache's warm-up), and prints each round's ratios and their medians.

Run: .venv/bin/python bench/stream_latency.py [--rate 1000] [--seconds 120] [--pipelines ...]
     [--rounds N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _amend import amendments
from _scratch import scratch

from flows.trades.generate import generate_day
from streamshift.engine.jobs.serve import progress_path as serve_progress_path
from streamshift.local.broker import LocalBroker
from streamshift.spec.catalog import LayerTables
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import Settings, load_settings
from streamshift.store.events import encode_event, serving_topic
from streamshift.store.heartbeat import logged_events, progress_path, read_progress
from streamshift.store.kafka import ensure_topic, producer_config
from streamshift.store.processes import cpu_seconds, free_port, process_stats
from streamshift.store.produce import produce_rows, read_rows

DAY = dt.date(2026, 11, 20)
SAMPLE_EVERY = 50


def _wait_caught_up(
    progress: Path, topic: str, job: subprocess.Popen[bytes], total: int, timeout: float
) -> None:
    """Until the pipeline has committed ``total`` events of ``topic``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if logged_events(progress, topic) >= total:
            return
        if job.poll() is not None:
            raise SystemExit(f"{job.args} exited with {job.returncode}")
        time.sleep(0.5)
    raise SystemExit(f"{job.args} did not catch up in time")


def _tree_cpu(pid: int) -> float:
    """CPU seconds used so far by process ``pid`` and its descendants (its JVM)."""
    stats = dict(process_stats())
    tree, grew = {pid}, True
    while grew:
        more = {c for c, fields in stats.items() if int(fields[1]) in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(cpu_seconds(stats[p]) for p in tree if p in stats)


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
    visible_field: str = "views_committed_at"  # the progress line's "visible at" time
    env: dict[str, str] = field(default_factory=dict)  # over the bench's job environment


def _measure(
    group: list[Pipeline],
    settings: Settings,
    env: dict[str, str],
    warmup: list[dict[str, str]],
    measured: list[dict[str, str]],
    args: argparse.Namespace,
    work: Path,
) -> dict[str, dict[str, Any]]:
    """Start the pipelines (one topic), warm up, produce ``measured`` at the rate; results each."""
    from confluent_kafka import Producer

    flow = get_flow("trades")
    (topic,) = {p.topic for p in group}
    label = " + ".join(p.name for p in group)
    ensure_topic(settings, topic)
    logs = [open(work / f"{p.name}.log", "wb") for p in group]  # noqa: SIM115 - closed below
    jobs = [
        subprocess.Popen(p.command, env=env | p.env, stdout=log, stderr=subprocess.STDOUT)
        for p, log in zip(group, logs, strict=True)
    ]
    sent_at: dict[int, float] = {}
    acked: dict[int, tuple[int, int]] = {}

    def caught_up(total: int, timeout: float) -> None:
        for p, job in zip(group, jobs, strict=True):
            _wait_caught_up(p.progress, topic, job, total, timeout)

    try:
        print(f"[bench] {label}: warming up with {len(warmup)} events", flush=True)
        produce_rows(settings, flow, warmup, topic=topic, progress=False)
        caught_up(len(warmup), 300)
        producer = Producer(producer_config(settings) | {"linger.ms": 0})

        def on_delivery(i: int):  # type: ignore[no-untyped-def]
            def report(err, msg) -> None:  # type: ignore[no-untyped-def]
                if err is None:
                    acked[i] = (msg.partition(), msg.offset())

            return report

        idle = None
        if args.idle_seconds:
            print(f"[bench] {label}: idle for {args.idle_seconds:g}s", flush=True)
            time.sleep(5)  # the warm-up's last batch and its side work end
            idle_before = [_tree_cpu(job.pid) for job in jobs]
            time.sleep(args.idle_seconds)
            idle = [
                (_tree_cpu(j.pid) - b) * 60 / args.idle_seconds
                for j, b in zip(jobs, idle_before, strict=True)
            ]
        print(f"[bench] {label}: {len(measured)} events at {args.rate:g}/s", flush=True)
        cpu_before = [_tree_cpu(job.pid) for job in jobs]
        started = time.monotonic()
        for i, row in enumerate(measured):
            # poll returns at the first delivery report: wait until the event's time is due
            while (wait := started + i / args.rate - time.monotonic()) > 0:
                producer.poll(wait)
            key, value = encode_event(flow, row)
            sample = i % args.sample_every == 0
            if sample:
                sent_at[i] = time.time()
            producer.produce(
                topic, key=key, value=value, on_delivery=on_delivery(i) if sample else None
            )
            producer.poll(0)
            if i and i % max(1, round(args.rate * 10)) == 0:
                behind = ", ".join(
                    f"{p.name} {len(warmup) + i - logged_events(p.progress, topic)}" for p in group
                )
                print(f"[bench] {i} sent; not yet visible: {behind}", flush=True)
        producer.flush(60)
        caught_up(len(warmup) + len(measured), 900)
        minutes = (time.monotonic() - started) / 60
        cpu = [(_tree_cpu(j.pid) - b) / minutes for j, b in zip(jobs, cpu_before, strict=True)]
    finally:
        for job in jobs:
            job.send_signal(signal.SIGTERM)
        for job, log in zip(jobs, logs, strict=True):
            job.wait(120)
            log.close()
    return {
        p.name: _latencies(p, topic, sent_at, acked)
        | {"cpu_per_minute": c, "idle_cpu_per_minute": idle[n] if idle else None}
        for n, (p, c) in enumerate(zip(group, cpu, strict=True))
    }


def _latencies(
    pipeline: Pipeline, topic: str, sent_at: dict[int, float], acked: dict[int, tuple[int, int]]
) -> dict[str, Any]:
    """Each sampled event's latency: the batch that held its offset became visible − sent."""
    visible = pipeline.visible_field
    batches = [
        b for b in read_progress(pipeline.progress) if b.get(visible) and b.get("input_rows")
    ]
    samples = []  # (sent at, latency)
    waits = []  # the batch's trigger fired − sent: what an event waits before its batch starts
    for i, (partition, offset) in acked.items():
        for b in batches:
            start = (b.get("start_offsets") or {}).get(topic, {}).get(str(partition), 0)
            end = (b.get("processed_offsets") or {}).get(topic, {}).get(str(partition), 0)
            if start <= offset < end:
                samples.append((sent_at[i], b[visible] - sent_at[i]))
                if b.get("timestamp"):
                    fired = dt.datetime.fromisoformat(b["timestamp"])
                    waits.append(fired.timestamp() - sent_at[i])
                break
    first_sent = min(sent_at.values())
    return {
        "latencies": [latency for _, latency in samples],
        "waits": waits,
        "samples": sorted(samples),
        "sampled": len(sent_at),
        "batches": [b for b in batches if b[visible] > first_sent],
    }


def _median_seconds(batches: list[dict[str, Any]], field: str) -> str:
    """The batches' ``field`` (seconds by name) as each name's median, or "" if none has it."""
    seconds: dict[str, list[float]] = {}
    for b in batches:
        for name, value in (b.get(field) or {}).items():
            seconds.setdefault(name, []).append(value)
    return ", ".join(f"{k} {statistics.median(v):.2f}s" for k, v in seconds.items())


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
    if steps := _median_seconds(batches, "seconds_by_step"):
        print(f"  median step: {steps}")
    jobs = [b["spark_jobs"] for b in batches if b.get("spark_jobs") is not None]
    if jobs:
        print(f"  spark jobs: median {statistics.median(jobs):.0f} per batch, max {max(jobs)}")
    if phases := _median_seconds(batches, "spark_phases"):
        print(f"  Spark's phases (median): {phases}")
    if result.get("waits"):
        print(
            f"  before the batch: median {statistics.median(result['waits']):.2f}s from sent to "
            "the trigger that took it (negative: the batch had started, the event came in time)"
        )
    print(
        f"  CPU while measured: {result['cpu_per_minute']:.1f} CPU-s a minute (the job's "
        "process and its JVM)"
    )
    if result.get("idle_cpu_per_minute") is not None:
        print(f"  CPU while idle: {result['idle_cpu_per_minute']:.2f} CPU-s a minute")
    for q in (0.50, 0.95, 0.99):
        print(f"  latency p{round(q * 100)}: {_percentile(latencies, q):.2f} s")
    print(f"  latency max: {max(latencies):.2f} s")


def parser(doc: str, seconds: float, pipelines: list[str]) -> argparse.ArgumentParser:
    """The options of this bench and of bench/stream_soak.py (which differ in defaults)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="events per second")
    parser.add_argument("--seconds", type=float, default=seconds, help="how long to produce")
    parser.add_argument("--trigger", default="1 second")
    parser.add_argument(
        "--sample-every",
        type=int,
        default=SAMPLE_EVERY,
        help=f"time every Nth event (default {SAMPLE_EVERY}; 1 on a quiet stream)",
    )
    parser.add_argument(
        "--corrections",
        action="store_true",
        help="the measured events amend warm-up trades (the next version, one more of the "
        "quantity) instead of adding new ones: with a low --rate, a quiet stream's correction",
    )
    parser.add_argument(
        "--pipelines",
        nargs="+",
        default=pipelines,
        choices=[
            "floor",
            "floor-merge",
            "streamshift",
            "streamshift-cold",
            "streamshift-debugging",
            "serving",
            "serving-python",
        ],
        help=f"run one after the other on the same broker (default: {' '.join(pipelines)})",
    )
    parser.add_argument(
        "--together",
        action="store_true",
        help="run the pipelines at the same time on one topic (they share the two cores)",
    )
    parser.add_argument(
        "--stream-trigger",
        help="the streamshift pipeline's trigger (default: --trigger); a longer one makes the "
        "Delta write path a durable record that lags by about a batch",
    )
    parser.add_argument(
        "--stream-nice",
        type=int,
        default=0,
        help="run the streamshift pipeline at this CPU niceness (e.g. 10): beside `serving` on "
        "the same cores, the durable writer takes what serving leaves",
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=0,
        help="after the warm-up, measure each job's CPU for this long with no events (what its "
        "trigger costs a stream that waits)",
    )
    parser.add_argument("--workdir", type=Path, default=None)
    return parser


def started_broker(work: Path) -> LocalBroker:
    """A local Kafka broker under ``work`` on free ports, started."""
    base = load_settings()
    broker = LocalBroker(
        work / "kafka",
        free_port(),
        free_port(),
        base.kafka_jars,
        base.jars_dir / "log4j2-kafka.properties",
    )
    broker.start()
    return broker


def job_env(settings: Settings) -> dict[str, str]:
    """The environment of a streamshift job started as its own process with ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMSHIFT_")}
    return env | {
        "STREAMSHIFT_HOME": str(settings.home),
        "STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
    }


def run(args: argparse.Namespace) -> tuple[dict[str, Pipeline], dict[str, dict[str, Any]], Path]:
    """Start a broker, run each pipeline of ``args.pipelines`` in turn; their results."""
    work = scratch(args.workdir, "streamshift-bench-")
    broker = started_broker(work)
    settings = load_settings(home=work / "home", kafka_bootstrap_servers=broker.bootstrap)
    env = job_env(settings)
    n_events = int(args.rate * args.seconds)
    files = generate_day(DAY, n_events + 2000, work / "files", seed=7)
    rows = read_rows(files.eod, get_flow("trades"))
    warmup, measured = rows[:2000], rows[2000 : 2000 + n_events]
    if args.corrections:
        measured = amendments(get_flow("trades"), warmup, n_events)
    here = Path(__file__).resolve().parent

    def topic(own: str) -> str:
        """Each pipeline reads its own topic, or one shared topic when it runs together with
        others (the floor always runs alone, on its own topic)."""
        return "trades" if args.together and not own.startswith("floor") else own

    pipelines = {
        "floor": Pipeline(
            "floor",
            "its micro-batch's Delta append committed",
            [
                sys.executable,
                str(here / "_floor_stream.py"),
                "--topic",
                topic("floor"),
                "--table",
                str(work / "floor" / "events"),
                "--progress",
                str(work / "floor.progress.jsonl"),
                "--trigger",
                args.trigger,
            ],
            work / "floor.progress.jsonl",
            topic("floor"),
        ),
        "floor-merge": Pipeline(
            "floor-merge",
            "its micro-batch's MERGE into current state, then into positions, committed",
            [
                sys.executable,
                str(here / "_floor_stream.py"),
                "--topic",
                topic("floor-merge"),
                "--table",
                str(work / "floor-merge" / "tables"),
                "--progress",
                str(work / "floor-merge.progress.jsonl"),
                "--trigger",
                args.trigger,
                "--mode",
                "merge",
            ],
            work / "floor-merge.progress.jsonl",
            topic("floor-merge"),
        ),
        **{
            name: Pipeline(
                name,
                "its micro-batch's changed positions published to the compacted topic",
                [
                    sys.executable,
                    "-m",
                    "streamshift.cli",
                    "serve",
                    "--flow",
                    "trades",
                    "--topic",
                    topic(name),
                    "--trigger",
                    args.trigger,
                    "--engine",
                    engine,
                ],
                serve_progress_path(settings, "trades", "positions"),
                topic(name),
                visible_field="visible_at",
            )
            for name, engine in (("serving", "jvm"), ("serving-python", "python"))
        },
        "streamshift": Pipeline(
            "streamshift",
            "its micro-batch's positions MERGE committed: a reader of the view sees it",
            [
                *(["nice", "-n", str(args.stream_nice)] if args.stream_nice else []),
                sys.executable,
                "-m",
                "streamshift.cli",
                "stream",
                "--flow",
                "trades",
                "--topic",
                topic("trades"),
                "--trigger",
                args.stream_trigger or args.trigger,
            ],
            progress_path(settings.home, "trades", "stream"),
            topic("trades"),
        ),
    }
    variants = {  # the same job with one setting changed, in a home and on a topic of its own
        "streamshift-cold": (
            "no state warmed after a batch",
            {"STREAMSHIFT_STREAM_WARM_STATE": "false"},
        ),
        "streamshift-debugging": (
            "PySpark's DataFrame debugging on",
            {"STREAMSHIFT_SPARK_DATAFRAME_DEBUGGING": "true"},
        ),
    }
    for name, (what, changed) in variants.items():
        home, own_topic = work / f"home-{name}", topic(name.replace("streamshift", "trades"))
        pipelines[name] = Pipeline(
            name,
            f"{pipelines['streamshift'].visible} ({what})",
            [
                *pipelines["streamshift"].command[:-4],
                "--topic",
                own_topic,
                "--trigger",
                args.stream_trigger or args.trigger,
            ],
            progress_path(home, "trades", "stream"),
            own_topic,
            env={"STREAMSHIFT_HOME": str(home), **changed},
        )
    results: dict[str, dict[str, Any]] = {}
    try:
        # Together: the floor (if asked for) still runs first on its own, the rest at once.
        alone = [n for n in args.pipelines if not args.together or n.startswith("floor")]
        rest = [n for n in args.pipelines if n not in alone]
        groups = [[name] for name in alone] + ([rest] if rest else [])
        for names in groups:
            group = [pipelines[name] for name in names]
            results |= _measure(group, settings, env, warmup, measured, args, work)
        if {"serving", "streamshift"} <= set(results):
            _check_serving(settings, serving_topic(pipelines["serving"].topic, "positions"))
    finally:
        broker.stop()
    return pipelines, results, work


def _served_positions(settings: Settings, served: str) -> dict[tuple[str, ...], tuple[str, ...]]:
    """The compacted topic read to its end: the last value per group, emptied groups dropped."""
    import json
    from decimal import Decimal

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        settings.kafka_client_config()
        | {"group.id": "bench-check", "enable.auto.commit": False, "log_level": 3}
    )
    topic = consumer.list_topics(served, timeout=10).topics[served]
    ends = {}
    for p in topic.partitions:
        _, high = consumer.get_watermark_offsets(TopicPartition(served, p), timeout=10)
        ends[p] = high
    consumer.assign([TopicPartition(served, p, 0) for p in ends])
    latest: dict[tuple[str, ...], tuple[str, ...] | None] = {}
    done = {p for p, high in ends.items() if high == 0}
    while len(done) < len(ends):
        msg = consumer.poll(5)
        if msg is None or msg.error():
            continue
        group = json.loads(msg.key())
        key = tuple(str(group[c]) for c in ("business_date", "book", "instrument"))
        value = json.loads(msg.value(), parse_float=Decimal) if msg.value() is not None else None
        latest[key] = None if value is None else tuple(str(v) for v in value.values())
        if msg.offset() + 1 >= ends[msg.partition()]:
            done.add(msg.partition())
    consumer.close()
    return {k: v for k, v in latest.items() if v is not None}


def stored_positions(settings: Settings, layer: str) -> dict[tuple[str, ...], tuple[str, ...]]:
    """A layer's Delta ``positions`` table, keyed and rendered like :func:`_served_positions`."""
    from deltalake import DeltaTable

    flow = get_flow("trades")
    table = DeltaTable(LayerTables(settings.warehouse, flow, layer).view("positions"))
    rows = table.to_pyarrow_table().to_pylist()
    columns = ("net_quantity", "net_notional_usd", "gross_notional_usd", "trade_count")
    return {
        tuple(str(r[c]) for c in ("business_date", "book", "instrument")): tuple(
            str(r[c]) for c in columns
        )
        for r in rows
    }


def _check_serving(settings: Settings, served_topic: str) -> None:
    """The serving topic's positions equal streamshift's Delta positions table, group by group."""
    stored = stored_positions(settings, "stream")
    served = _served_positions(settings, served_topic)
    differ = [k for k in stored.keys() | served.keys() if stored.get(k) != served.get(k)]
    verdict = "equal" if not differ else f"{len(differ)} differ, e.g. {sorted(differ)[:3]}"
    print(
        f"\nserving topic vs streamshift's positions table: {len(served)} / {len(stored)} groups, {verdict}"
    )


def _ratios(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Each streamshift or serving pipeline's p50 and p99 over each floor's, of one run."""
    ratios: dict[str, float] = {}
    for name in (
        "streamshift",
        "streamshift-cold",
        "streamshift-debugging",
        "serving",
        "serving-python",
    ):
        for floor_name in ("floor", "floor-merge"):
            if {floor_name, name} <= set(results):
                for q, goal in ((0.50, "p50"), (0.99, "p99")):
                    ours = _percentile(results[name]["latencies"], q)
                    floor = _percentile(results[floor_name]["latencies"], q)
                    label = f"{goal} {name} / {floor_name}"
                    print(f"{label}: {ours:.2f} / {floor:.2f} = {ours / floor:.2f}")
                    ratios[label] = ours / floor
    return ratios


def main() -> int:
    cli = parser(__doc__, 120.0, ["floor", "streamshift"])
    cli.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the comparison this many times, the pipelines' order reversed every other "
        "round; prints each round's ratios and their medians",
    )
    args = cli.parse_args()
    n_events = int(args.rate * args.seconds)
    by_round: list[dict[str, float]] = []
    for round_ in range(args.rounds):
        order = args.pipelines if round_ % 2 == 0 else list(reversed(args.pipelines))
        workdir = args.workdir / f"round-{round_ + 1}" if args.workdir and args.rounds > 1 else None
        pipelines, results, _ = run(
            argparse.Namespace(
                **{**vars(args), "pipelines": order, "workdir": workdir or args.workdir}
            )
        )
        print(
            (
                f"\nround {round_ + 1} of {args.rounds} ({' then '.join(order)})\n"
                if args.rounds > 1
                else "\n"
            )
            + f"produced:     {n_events} {'corrections' if args.corrections else 'events'} at "
            f"{args.rate:g}/s for {args.seconds:.0f}s "
            f"per pipeline (trigger {args.trigger}"
            + (f"; streamshift: trigger {args.stream_trigger}" if args.stream_trigger else "")
            + (f", nice {args.stream_nice}" if args.stream_nice else "")
            + ")"
        )
        for name, result in results.items():
            _report(pipelines[name], result)
        by_round.append(_ratios(results))
    if args.rounds > 1:
        print(f"\nmedians of {args.rounds} rounds:")
        for label in by_round[0]:
            values = [r[label] for r in by_round if label in r]
            each = ", ".join(f"{v:.2f}" for v in values)
            print(f"{label}: {statistics.median(values):.2f} ({each})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
