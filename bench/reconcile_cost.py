"""A small day's reconciliation against its floor, in one Spark session.

Every EOD run of a shadow, stream or kappa day reconciles, and every test of those stages
does too; on a small day the cost is Spark's and Delta's fixed cost, not the data. One
session loads a day of ``--trades`` trades into both layers, then, ``--repeat`` times each,
alternating:

  reconcile   ``reconcile_date`` against the EOD file and the external (clearing) file:
              the file parsed and validated, both sides compared, breaks and runs recorded
              (two Delta appends per reconciliation);
  floor       a hand-written job doing the same work's bare minimum: the CSV read, the
              layer's current state for the date read, a full outer join on the key counted,
              and two one-row Delta appends.

It prints each median and the ratio of the two medians.

Run: .venv/bin/python bench/reconcile_cost.py [--trades N] [--repeat R]
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import functions as F

from flows.trades.generate import generate_day
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.jobs.reconcile import reconcile_date
from streamshift.engine.spark import get_spark
from streamshift.engine.write.target import Target, read
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import load_settings

DAY = dt.date(2026, 11, 20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=60, help="size of the day")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="streamshift-reconcile-cost-"))
    try:
        return run(work, args.trades, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(work: Path, trades: int, repeat: int) -> int:
    settings = load_settings(home=work / "home")
    spark = get_spark(settings, app_name="bench-reconcile-cost")
    flow = get_flow("trades")
    files = generate_day(DAY, trades, work / "files", seed=11, progress=False)
    for layer in ("batch", "stream"):
        run_eod(spark, Target.open(spark, settings, flow, layer), DAY, files.eod)
    current_path = Target.open(spark, settings, flow, "stream").tables.current
    floor_out = str(work / "floor_out")

    def reconcile() -> None:
        reconcile_date(
            spark,
            settings,
            flow,
            DAY,
            against=files.external,
            eod_file=files.eod,
            parity=False,
            stage="stream",
        )

    def floor() -> None:
        in_file = spark.read.option("header", True).csv(str(files.eod))
        current = read(spark, current_path).where(F.col(flow.business_date) == F.lit(DAY))
        joined = in_file.select(flow.key).join(current.select(flow.key), flow.key, "full_outer")
        found = joined.count()
        for _ in range(2):
            spark.createDataFrame([(found,)], "n LONG").write.format("delta").mode("append").save(
                floor_out
            )

    reconcile()  # warm both code paths once
    floor()
    times: dict[str, list[float]] = {"reconcile": [], "floor": []}
    for i in range(repeat):
        for name, op in (("reconcile", reconcile), ("floor", floor)):
            started = time.perf_counter()
            op()
            times[name].append(time.perf_counter() - started)
        print(
            f"[bench] run {i + 1}: reconcile {times['reconcile'][-1]:.2f}s, "
            f"floor {times['floor'][-1]:.2f}s",
            flush=True,
        )
    medians = {k: statistics.median(v) for k, v in times.items()}
    print(f"reconcile (EOD file + external) median {medians['reconcile']:.2f}s")
    print(f"floor (read, join, count, 2 appends) median {medians['floor']:.2f}s")
    print(f"ratio {medians['reconcile'] / medians['floor']:.2f}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
