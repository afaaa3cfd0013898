"""Cost of one corrected trade through apply_changes vs a full-day recompute of positions.

Generates a day of N trades (default 1,000,000), loads it, then in the same run times:
  * one AMEND applied through apply_changes (validate, history, current, view groups, late);
  * a full recompute of the day's positions from the current state, written to the view.
Prints both times and the ratio. Run: .venv/bin/python bench/correction_cost.py [--trades N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _amend import amendment
from pyspark.sql import functions as F

from flows.trades.generate import generate_day
from streamshift.core.contract import IS_DELETED
from streamshift.core.registry import get_flow
from streamshift.core.settings import load_settings
from streamshift.jobs.eod import run_eod
from streamshift.spark import get_spark
from streamshift.write.apply import apply_changes
from streamshift.write.target import Target, read
from streamshift.write.transforms import raw_schema

DAY = dt.date(2026, 11, 20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions of each side")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="streamshift-bench-"))
    settings = load_settings(home=work / "home")
    flow = get_flow("trades")
    print(f"[bench] generating {args.trades} trades in {work}", flush=True)
    files = generate_day(DAY, args.trades, work / "files", seed=3)
    spark = get_spark(settings, app_name="bench-correction-cost")
    target = Target.open(spark, settings, flow, "batch")
    t0 = time.perf_counter()
    load = run_eod(spark, target, DAY, files.eod)
    print(
        f"[bench] day loaded in {time.perf_counter() - t0:.1f}s: {load.apply.describe()}",
        flush=True,
    )

    some = read(spark, target.tables.current).where(~F.col(IS_DELETED)).limit(args.repeat).collect()
    correction_times, recompute_times = [], []
    for i, row in enumerate(some):
        amend = [amendment(row, f"bench:{i}")]
        changes = spark.createDataFrame(amend, raw_schema(flow))
        t = time.perf_counter()
        result = apply_changes(flow, changes, "bench", target)
        correction_times.append(time.perf_counter() - t)
        assert result.applied == 1 and result.touched_groups == {"positions": 1}, result
        steps = ", ".join(f"{k} {v:.2f}s" for k, v in result.seconds_by_step.items())
        print(f"[bench] correction {i + 1}: {correction_times[-1]:.2f}s ({steps})", flush=True)

        t = time.perf_counter()
        live = read(spark, target.tables.current).where(
            (F.col("business_date") == F.lit(DAY)) & ~F.col(IS_DELETED)
        )
        full = flow.view("positions").compute(live)
        (
            full.write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", f"business_date = DATE'{DAY}'")
            .save(target.tables.view("positions"))
        )
        recompute_times.append(time.perf_counter() - t)
        print(f"[bench] full-day recompute {i + 1}: {recompute_times[-1]:.2f}s", flush=True)

    correction = statistics.median(correction_times)
    recompute = statistics.median(recompute_times)
    print(f"\ntrades in the day:            {args.trades}")
    print(f"one correction (median of {len(correction_times)}): {correction:.2f} s")
    print(f"full-day recompute (median):  {recompute:.2f} s")
    print(f"ratio correction/recompute:   {correction / recompute:.3f} (goal <= 0.020)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
