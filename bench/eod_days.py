"""EOD loads day after day: does a day's load grow with the history the layer already holds?

Generates ``--days`` consecutive days of ``--trades`` trades each and loads them one after the
other with ``run_eod`` into one batch layer (one SparkSession, after an untimed warm-up load of a
small day elsewhere), as a team's EOD DAG does night after night. Prints each day's wall time and
steps, then the last day's time over the second's (the first pays for the JVM's warm-up), and
the same for the two steps that read history.

A day's load reads history twice: to find the groups its keys lived in (``touched``) and to add
only the versions history lacks (the ``history`` MERGE). Both are limited to the batch's key
range, so keys that grow with time (the generated trade ids carry their date) let Delta skip the
earlier days' files; without that both steps scan the whole history, and a load gets slower
every night.

Run: .venv/bin/python bench/eod_days.py [--trades N] [--days K]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _scratch import scratch

from flows.trades.generate import generate_day
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.spark import get_spark
from streamshift.engine.write.target import Target
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import load_settings

FIRST_DAY = dt.date(2026, 11, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=1_000_000, help="trades per day")
    parser.add_argument("--days", type=int, default=6, help="days loaded one after the other")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    if args.days < 2:
        parser.error("--days must be at least 2 (the ratio is last day ÷ second day)")
    work = scratch(args.workdir, "streamshift-bench-")
    flow = get_flow("trades")
    spark = get_spark(load_settings(home=work / "spark"), app_name="bench-eod-days")
    warm_day = FIRST_DAY - dt.timedelta(days=30)
    warm = generate_day(warm_day, 10_000, work / "warm-up", seed=4, progress=False)
    print("[bench] warm-up: one small load elsewhere", flush=True)
    run_eod(
        spark,
        Target.open(spark, load_settings(home=work / "warm"), flow, "batch"),
        warm_day,
        warm.eod,
    )
    target = Target.open(spark, load_settings(home=work / "home"), flow, "batch")
    took, reads = [], []
    for i in range(args.days):
        day = FIRST_DAY + dt.timedelta(days=i)
        print(f"[bench] generating day {i + 1} of {args.days} ({day})", flush=True)
        files = generate_day(day, args.trades, work / f"files-{i}", seed=10 + i, progress=False)
        started = time.perf_counter()
        result = run_eod(spark, target, day, files.eod)
        took.append(time.perf_counter() - started)
        by_step = result.apply.seconds_by_step
        reads.append(by_step.get("touched", 0.0) + by_step.get("history", 0.0))
        steps = ", ".join(f"{k} {v:.1f}" for k, v in by_step.items())
        print(
            f"[bench] day {i + 1} ({day}), history {i * args.trades:,} rows before it: "
            f"{took[-1]:.1f}s; steps (s, side steps overlap): {steps}",
            flush=True,
        )
    print(f"\ntrades per day:               {args.trades}")
    print(f"days loaded:                  {args.days}")
    print(f"second day's load:            {took[1]:.1f} s")
    print(f"last day's load:              {took[-1]:.1f} s")
    print(f"last ÷ second:                {took[-1] / took[1]:.2f} (a day costs its day: ~1)")
    print(
        f"touched + history (the steps that read history): {reads[1]:.1f} s on the second day, "
        f"{reads[-1]:.1f} s on the last ({reads[-1] / reads[1]:.2f})"
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
