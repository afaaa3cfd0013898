"""Cost of data quality: validating a day's current state vs loading that day.

Generates a day of N trades (default 1,000,000) and, in the same run:
  * loads it into the batch layer (``run_eod``: read, check, history, current state, views);
  * validates that day's current state with the ``trades.current`` suite (Great Expectations on
    the Spark DataFrame, parameters computed from the tables, results recorded, Data Docs built)
    — ``--repeat`` times, reporting the median.
Prints both times and the ratio (goal ≤ 0.2: quality must not double the EOD run).
Run: .venv/bin/python bench/quality_cost.py [--trades N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _scratch import scratch

from flows.trades.generate import generate_day
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.spark import get_spark
from streamshift.engine.validate import run_quality
from streamshift.engine.write.target import Target
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import load_settings

DAY = dt.date(2026, 11, 20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="timed validations (median)")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = scratch(args.workdir, "streamshift-bench-")
    settings = load_settings(home=work / "home")
    flow = get_flow("trades")
    print(f"[bench] generating {args.trades} trades in {work}", flush=True)
    files = generate_day(DAY, args.trades, work / "files", seed=3)
    spark = get_spark(settings, app_name="bench-quality-cost")
    target = Target.open(spark, settings, flow, "batch")

    t0 = time.perf_counter()
    load = run_eod(spark, target, DAY, files.eod)
    load_seconds = time.perf_counter() - t0
    print(f"[bench] day loaded in {load_seconds:.1f}s: {load.apply.describe()}", flush=True)

    times = []
    for i in range(args.repeat):
        t0 = time.perf_counter()
        run = run_quality(spark, settings, flow, DAY, "batch", only=["current"])
        times.append(time.perf_counter() - t0)
        print(f"[bench] validation {i + 1}: {times[-1]:.1f}s ({run.summary()})", flush=True)
    quality_seconds = statistics.median(times)
    print()
    print(f"trades in the day:                    {args.trades:,}")
    print(f"load the day (run_eod):               {load_seconds:8.1f} s")
    print(f"validate its current state (median):  {quality_seconds:8.1f} s")
    print(
        f"ratio validate / load:                {quality_seconds / load_seconds:8.3f}  (goal ≤ 0.2)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
