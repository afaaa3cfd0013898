"""Building a micro-batch's plan from Python: PySpark's DataFrame debugging off ÷ on.

PySpark can record the Python line of every column function it is called with, so that
Spark's runtime errors name it (``spark.python.sql.dataFrameDebugging.enabled``; the kit's
``spark_dataframe_debugging`` setting, off by default). Spark reads that setting when the
session starts, so each side runs in a process of its own, the two alternating. Each builds,
``--plans`` times after ``--warmup`` untimed, the front of the stream's micro-batch on 600
Kafka messages: the decoded changes and the apply's persisted frame (parse, the reference
joins, the rules), which the apply then ranks by key and counts. Nothing runs on the
data: the figure is the plan's building alone, in seconds and in the JVM round trips it
takes. The stream builds this front for every micro-batch, before its first Spark job.

Run: .venv/bin/python bench/plan_build.py [--rounds 3] [--plans 20]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _scratch import scratch

DAY = dt.date(2026, 11, 20)
MESSAGES = 600


def _side(debugging: bool, plans: int, warmup: int, work: Path) -> dict[str, float]:
    """One process's medians: seconds and JVM round trips per plan."""
    import py4j.clientserver as py4j_client
    from pyspark.sql import functions as F

    from flows.trades.generate import generate_day
    from streamshift.engine.decode import decode
    from streamshift.engine.spark import get_spark
    from streamshift.engine.write.apply import checked_batch
    from streamshift.engine.write.target import load_reference
    from streamshift.spec.contract import SOURCE
    from streamshift.spec.registry import get_flow
    from streamshift.spec.settings import load_settings
    from streamshift.store.events import encode_event
    from streamshift.store.produce import read_rows

    flow = get_flow("trades")
    files = generate_day(DAY, MESSAGES, work / "files", seed=5)
    messages = [encode_event(flow, row) for row in read_rows(files.eod, flow)][:MESSAGES]
    settings = load_settings(home=work / "home", engine="", spark_dataframe_debugging=debugging)
    spark = get_spark(settings, app_name="bench-plan-build")
    reference = load_reference(spark, flow)
    now = dt.datetime.now(dt.UTC)
    rows = [(k, v, "trades", i % 3, i, now) for i, (k, v) in enumerate(messages)]
    schema = (
        "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP"
    )
    calls = [0]
    send = py4j_client.ClientServerConnection.send_command

    def counted(self, command):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return send(self, command)

    py4j_client.ClientServerConnection.send_command = counted  # type: ignore[method-assign]
    seconds, trips = [], []
    for n in range(warmup + plans):
        kafka = spark.createDataFrame(rows, schema)
        calls[0] = 0
        started = time.perf_counter()
        changes = kafka.transform(decode(flow)).withColumn(SOURCE, F.lit("kafka"))
        checked = checked_batch(flow, changes, reference)
        if n >= warmup:
            seconds.append(time.perf_counter() - started)
            trips.append(calls[0])
        checked.unpersist()
    spark.stop()
    return {"seconds": statistics.median(seconds), "round_trips": statistics.median(trips)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="processes per side")
    parser.add_argument("--plans", type=int, default=20, help="timed plans per process")
    parser.add_argument("--warmup", type=int, default=5, help="untimed plans first")
    parser.add_argument("--side", choices=["on", "off"], help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(_side(args.side == "on", args.plans, args.warmup, args.work)))
        return 0
    work = scratch(None, "streamshift-bench-")
    found: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for round_ in range(args.rounds):
        for side in ("off", "on"):
            out = subprocess.run(
                [sys.executable, __file__, "--side", side, "--work", str(work / side)]
                + ["--plans", str(args.plans), "--warmup", str(args.warmup)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            found[side].append(json.loads(out.strip().splitlines()[-1]))
            print(f"[bench] round {round_ + 1}, debugging {side}: {found[side][-1]}", flush=True)
    medians = {
        side: {k: statistics.median(r[k] for r in runs) for k in ("seconds", "round_trips")}
        for side, runs in found.items()
    }
    print(
        f"\nthe front of a {MESSAGES}-message micro-batch's plan, medians of {args.rounds} "
        f"processes × {args.plans} plans:"
    )
    for side, m in medians.items():
        print(
            f"  debugging {side:3s}  {m['seconds']:.3f} s  {m['round_trips']:.0f} JVM round trips"
        )
    ratio = medians["off"]["seconds"] / medians["on"]["seconds"]
    print(
        f"off ÷ on: {ratio:.2f} ({medians['off']['seconds']:.3f} s vs "
        f"{medians['on']['seconds']:.3f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
