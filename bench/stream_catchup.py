"""Stream catch-up: how fast the Delta stream works off a backlog, by ``maxOffsetsPerTrigger``.

A stream job that was down (a deploy, an outage, a replay) comes back to a backlog. It works
the backlog off in micro-batches of at most ``maxOffsetsPerTrigger`` events each; every batch
pays the write path's per-batch reads of the day (the touched groups, the current-state MERGE
against the date's partition, the positions recompute) once. This script measures the
catch-up at several caps, in one run:

1. a topic gets the first ``--before`` events of a generated day, and the stream job takes
   them (available-now): a stream layer that already holds the day, and its checkpoint;
2. the topic gets the next ``--backlog`` events of the same day (the backlog);
3. per round, for each cap (``--caps``, alternating): a copy of the layer and checkpoint of
   step 1, and ``run_stream`` available-now with that cap until the backlog is done.

Prints each catch-up's seconds and batches, and per cap the median and its ratio to the first
cap. Every copy ends with the same tables (checked: current state's rows and the positions).
Run: .venv/bin/python bench/stream_catchup.py [--before N] [--backlog N] [--caps A,B] [--rounds K]
(starts its own Kafka broker on free ports; needs scripts/setup to have run)
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _scratch import scratch
from stream_latency import started_broker

from flows.trades.generate import generate_day
from streamshift.engine.jobs.stream import run_stream
from streamshift.engine.spark import get_spark
from streamshift.engine.write.target import Target
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import load_settings
from streamshift.store.kafka import ensure_topic
from streamshift.store.produce import produce_rows, read_rows

DAY = dt.date(2026, 11, 20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=int, default=200_000, help="events the layer holds")
    parser.add_argument("--backlog", type=int, default=1_000_000, help="events to catch up on")
    parser.add_argument("--caps", default="200000,1000000", help="maxOffsetsPerTrigger values")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    caps = [int(c) for c in args.caps.split(",")]
    work = scratch(args.workdir, "streamshift-bench-")
    print("[bench] starting Kafka", flush=True)
    broker = started_broker(work)
    try:
        flow = get_flow("trades")
        files = generate_day(DAY, args.before + args.backlog, work / "files", seed=5)
        rows = read_rows(files.eod, flow)
        topic = "trades-catchup"

        def settings_for(home: Path, cap: int):  # type: ignore[no-untyped-def]
            return load_settings(
                home=home, kafka_bootstrap_servers=broker.bootstrap, max_offsets_per_trigger=cap
            )

        template = work / "template"
        base = settings_for(template, max(caps))
        ensure_topic(base, topic)
        spark = get_spark(base, app_name="bench-stream-catchup")
        print(f"[bench] the layer takes the day's first {args.before} events", flush=True)
        produce_rows(base, flow, rows[: args.before], topic=topic, progress=False)
        first = run_stream(
            spark, base, flow, available_now=True, topic=topic, handle_signals=False, echo=False
        )
        print(f"[bench] {first.describe()}", flush=True)
        print(f"[bench] the backlog: the next {len(rows) - args.before} events", flush=True)
        sent = produce_rows(base, flow, rows[args.before :], topic=topic, progress=False)
        print(f"[bench] {sent.describe()}", flush=True)

        seconds: dict[int, list[float]] = {cap: [] for cap in caps}
        outcomes: dict[tuple[int, int], tuple[int, list[tuple[object, ...]]]] = {}
        for i in range(args.rounds):
            for cap in caps:
                home = work / f"round-{i}-cap-{cap}"
                shutil.copytree(template, home)
                settings = settings_for(home, cap)
                run = run_stream(
                    spark, settings, flow, available_now=True, topic=topic,
                    handle_signals=False, echo=False,
                )  # fmt: skip
                seconds[cap].append(run.seconds)
                print(
                    f"[bench] round {i + 1}, maxOffsetsPerTrigger {cap}: {run.seconds:.1f}s, "
                    f"{run.totals.batches} batches, {run.totals.received} events",
                    flush=True,
                )
                target = Target.open(spark, settings, flow, "stream")
                view = flow.views[0].name
                outcomes[(i, cap)] = (
                    target.table("current").count(),
                    sorted(tuple(r) for r in target.table(view).collect()),
                )
                shutil.rmtree(home / "warehouse", ignore_errors=True)
        if len({repr(o) for o in outcomes.values()}) != 1:
            print("[bench] the catch-ups ended in different tables", file=sys.stderr)
            return 1
        rows_held, groups = next(iter(outcomes.values()))
        print(f"\nthe layer after catch-up:   {rows_held} current rows, {len(groups)} positions")
        print(f"backlog:                    {len(rows) - args.before} events")
        reference = statistics.median(seconds[caps[0]])
        for cap in caps:
            median = statistics.median(seconds[cap])
            runs = ", ".join(f"{s:.1f}" for s in seconds[cap])
            print(
                f"maxOffsetsPerTrigger {cap:>9,}: {median:6.1f} s (runs {runs}), "
                f"{median / reference:.2f} of the first cap's"
            )
        spark.stop()
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
