"""One corrected trade vs what Lambda does today: re-run the whole day's EOD load, corrected.

For each day size in ``--trades`` (default 100,000 and 1,000,000) the script generates a day,
loads it through ``run_eod``, then ``--repeat`` times, alternating, in one Spark session:

* **correction**: one AMEND of one trade through ``apply_changes`` — what ``streamshift
  correct`` and the stream run (validate, history, current state, the touched view groups,
  the late-event record: the day was closed by its load);
* **re-run**: the same day loaded again with the corrected file (the day's file plus that
  amendment) as a whole-day replacement — ``run_eod(replace=True)``, what the Lambda batch
  layer does for a correction today;
* with ``--hand``, also the minimal hand-written PySpark job of ``bench/eod_load.py`` run on
  the corrected file (no validation, no history): the cheapest possible re-run.

Prints the medians, correction ÷ re-run per size (goal <= 1/50 = 0.020) and the correction's
cost at the largest size ÷ at the smallest (goal <= 1.3: a correction costs its change, not its
day). Run: .venv/bin/python bench/correction_cost.py [--trades N ...] [--repeat K] [--hand]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _amend import amendment
from _scratch import scratch
from eod_load import hand_written
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from flows.trades.generate import generate_day
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.spark import get_spark
from streamshift.engine.write.apply import apply_changes
from streamshift.engine.write.target import Target, read
from streamshift.engine.write.transforms import raw_schema
from streamshift.spec.contract import IS_DELETED
from streamshift.spec.flow import Flow
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import load_settings

DAY = dt.date(2026, 11, 20)


def corrected_file(day_file: Path, amends: list[tuple[str, ...]], out: Path, flow: Flow) -> Path:
    """The day's file with the amendments appended: the file a Lambda batch layer re-runs."""
    shutil.copyfile(day_file, out)
    with out.open("a", newline="") as f:
        writer = csv.writer(f)
        for amend in amends:
            writer.writerow(amend[: len(flow.columns)])
    return out


def measure(
    spark: SparkSession, flow: Flow, trades: int, repeat: int, hand: bool, work: Path
) -> dict[str, float]:
    print(f"[bench] {trades} trades: generating the day in {work}", flush=True)
    files = generate_day(DAY, trades, work / "files", seed=3)
    target = Target.open(spark, load_settings(home=work / "home"), flow, "batch")
    t = time.perf_counter()
    load = run_eod(spark, target, DAY, files.eod)
    day_load = time.perf_counter() - t
    print(f"[bench] day loaded in {day_load:.1f}s: {load.apply.describe()}", flush=True)

    some = read(spark, target.tables.current).where(~F.col(IS_DELETED)).limit(repeat).collect()
    times: dict[str, list[float]] = {"correction": [], "rerun": [], "hand": []}
    amends: list[tuple[str, ...]] = []
    for i, row in enumerate(some):
        amends.append(amendment(row, f"bench:{i}"))
        changes = spark.createDataFrame(amends[-1:], raw_schema(flow))
        t = time.perf_counter()
        result = apply_changes(flow, changes, "bench", target)
        times["correction"].append(time.perf_counter() - t)
        assert result.applied == 1 and result.touched_groups == {"positions": 1}, result
        steps = ", ".join(f"{k} {v:.2f}" for k, v in result.seconds_by_step.items())
        print(
            f"[bench] correction {i + 1}: {times['correction'][-1]:.2f}s (steps, s: {steps})",
            flush=True,
        )

        fixed = corrected_file(files.eod, amends, work / f"corrected-{i}.csv", flow)
        t = time.perf_counter()
        rerun = run_eod(spark, target, DAY, fixed, replace=True)
        times["rerun"].append(time.perf_counter() - t)
        print(f"[bench] re-run {i + 1}: {times['rerun'][-1]:.1f}s ({rerun.describe()})", flush=True)
        if hand:
            t = time.perf_counter()
            hand_written(spark, flow, fixed, work / "hand")
            times["hand"].append(time.perf_counter() - t)
            print(f"[bench] hand-written re-run {i + 1}: {times['hand'][-1]:.1f}s", flush=True)
            shutil.rmtree(work / "hand", ignore_errors=True)
    return {k: statistics.median(v) for k, v in times.items() if v} | {"load": day_load}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions of each side")
    parser.add_argument("--hand", action="store_true", help="also re-run the hand-written job")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = scratch(args.workdir, "streamshift-bench-")
    flow = get_flow("trades")
    spark = get_spark(load_settings(home=work / "spark"), app_name="bench-correction-cost")
    sizes = sorted(args.trades)
    figures = {n: measure(spark, flow, n, args.repeat, args.hand, work / str(n)) for n in sizes}

    print(f"\n{'trades':>10} {'load':>8} {'correction':>11} {'re-run':>8} {'ratio':>7}", end="")
    print(f" {'hand':>7} {'ratio':>7}" if args.hand else "")
    for n, f in figures.items():
        line = f"{n:>10} {f['load']:>7.1f}s {f['correction']:>10.2f}s {f['rerun']:>7.1f}s"
        line += f" {f['correction'] / f['rerun']:>7.3f}"
        if args.hand:
            line += f" {f['hand']:>6.1f}s {f['correction'] / f['hand']:>7.3f}"
        print(line)
    print("goal: correction / re-run <= 0.020")
    print_scaling(figures)
    return 0


def print_scaling(figures: dict[int, dict[str, float]]) -> None:
    """The correction at the largest day size ÷ at the smallest (goal <= 1.3)."""
    sizes = sorted(figures)
    if len(sizes) > 1:
        small, large = figures[sizes[0]], figures[sizes[-1]]
        print(
            f"correction at {sizes[-1]} / at {sizes[0]}: "
            f"{large['correction'] / small['correction']:.2f} (goal <= 1.3)"
        )


if __name__ == "__main__":
    sys.exit(main())
