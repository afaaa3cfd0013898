"""A one-trade EOD correction of the stream layer with 1 and with N days of history, same run.

Stage stream's correction compares the EOD file with the stream layer's current state; it
reads only the dates the file holds, so its cost should not grow with the layer's history.
The script loads ``--trades`` trades a day into two stream layers — one day, and ``--days``
days — then, ``--repeat`` times, alternating sides in one Spark session, corrects one trade of
the last day from a one-row EOD file (the derivation of the differences against the pinned
current state, then the write path; ``eod_correct``, which ``reconcile --correct`` shares
with its produce-to-the-topic path). Prints the medians and N days ÷ 1 day (goal <= 1.3).

Run: .venv/bin/python bench/correction_history.py [--days 30] [--trades 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _amend import amendment
from _scratch import scratch
from pyspark.sql import functions as F

from flows.trades.generate import generate_day
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.jobs.reconcile import eod_correct
from streamshift.engine.spark import get_spark
from streamshift.engine.write.target import Target, read
from streamshift.spec.contract import IS_DELETED
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import load_settings

LAST = dt.date(2026, 11, 20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30, help="days of history on the long side")
    parser.add_argument("--trades", type=int, default=2_000, help="trades a day")
    parser.add_argument("--repeat", type=int, default=3, help="timed corrections per side")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = scratch(args.workdir, "streamshift-bench-")
    flow = get_flow("trades")
    spark = get_spark(load_settings(home=work / "spark"), app_name="bench-correction-history")
    days = [LAST - dt.timedelta(days=i) for i in range(args.days)][::-1]
    sides = {1: days[-1:], args.days: days}
    targets = {}
    for n, dates in sides.items():
        settings = load_settings(home=work / f"home-{n}")
        target = Target.open(spark, settings, flow, "stream")
        for i, day in enumerate(dates):
            files = generate_day(day, args.trades, work / f"files-{n}" / str(day), seed=i + 1)
            run_eod(spark, target, day, files.eod, closes=("stream",))
        print(f"[bench] {n} days of {args.trades} trades loaded", flush=True)
        targets[n] = (settings, target)

    times: dict[int, list[float]] = {n: [] for n in sides}
    for r in range(args.repeat):
        for n, (settings, target) in targets.items():
            [row] = (
                read(spark, target.tables.current)
                .where((F.col(flow.business_date) == F.lit(LAST)) & ~F.col(IS_DELETED))
                .orderBy(flow.key)
                .limit(1)
                .collect()
            )
            file = work / f"correction-{n}-{r}.csv"
            with file.open("w", newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(flow.columns)
                writer.writerow(amendment(row, "")[: len(flow.columns)])
            t = time.perf_counter()
            result = eod_correct(spark, settings, flow, LAST, file, target)
            times[n].append(time.perf_counter() - t)
            assert result.applied == 1, result.describe()
            print(f"[bench] {n} days, correction {r + 1}: {times[n][-1]:.2f}s", flush=True)

    medians = {n: statistics.median(v) for n, v in times.items()}
    print(f"\n{'history':>10} {'correction (median)':>20}")
    for n, m in medians.items():
        print(f"{n:>6} days {m:>19.2f}s")
    print(f"{args.days} days / 1 day: {medians[args.days] / medians[1]:.2f} (goal <= 1.3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
