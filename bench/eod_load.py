"""EOD load: a generated day through streamshift vs a minimal hand-written PySpark job.

Both sides load the same N-trade EOD file (default 1,000,000) into empty Delta tables, in one
SparkSession, alternating, ``--repeat`` times each, after one untimed warm-up load of a small day
each (the JVM's first load pays for class loading and JIT); the figure is the median wall time.

* streamshift: ``run_eod`` (the file checks, every rule with quarantine, history, the
  current-state MERGE, the positions view, the eod_runs record) — what ``streamshift eod`` and
  the EOD DAG's load task run;
* hand-written: read the CSV with the flow's schema, keep the latest version per trade, join
  the reference data (the flow's own ``prepare``), write current state and positions (the flow's
  own view) as Delta overwrites. No validation, no quarantine, no history, no idempotence: the
  floor a team would write by hand for the same tables.

With ``--floors``, two more sides in the same rotation measure what stands under the goal:

* validate: streamshift's read and checks of the day alone (the file checks, line numbers,
  parse, ``prepare``, every rule, the ranking of versions), persisted and counted by rule as
  the write path does; nothing written;
* written once: the same frame, then the day written ONCE: every accepted version appended to
  one date-partitioned table (no history/current-state split, no MERGE), rejects appended to a
  quarantine, positions from the batch's latest rows. The cheapest load that still validates
  like streamshift; a layout no reader uses today, measured only.

Prints the medians and each side's ratio to the hand-written job (goal: streamshift <= 1.5x).
Run: .venv/bin/python bench/eod_load.py [--trades N] [--repeat K] [--floors]
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _scratch import scratch
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from flows.trades.generate import generate_day
from streamshift.engine.eodread import read_eod_file
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.spark import get_spark
from streamshift.engine.write.apply import Ranked, checked_batch, ranked_batch
from streamshift.engine.write.target import Target, load_reference
from streamshift.engine.write.transforms import FIRST_VERSION, LATEST_VERSION, state_columns
from streamshift.spec.contract import FAILED, IS_DELETED, RAW, SOURCE, SOURCE_REF
from streamshift.spec.flow import Flow, Reference
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import load_settings
from streamshift.store.eodfile import check_file

DAY = dt.date(2026, 11, 20)


def hand_written(spark: SparkSession, flow: Flow, file: Path, out: Path) -> int:
    """The minimal PySpark job: CSV → latest per key → reference joins → two Delta tables."""
    typed = spark.read.csv(str(file), header=True, schema=flow.schema, mode="PERMISSIVE")
    latest = (
        typed.withColumn(
            "_n",
            F.row_number().over(Window.partitionBy(flow.key).orderBy(F.col(flow.version).desc())),
        )
        .where(F.col("_n") == 1)
        .drop("_n")
    )
    current = flow.prepare(latest, load_reference(spark, flow))
    current.write.format("delta").mode("overwrite").partitionBy(flow.business_date).save(
        str(out / "current")
    )
    written = spark.read.format("delta").load(str(out / "current"))
    live = written.where(~flow.deleted())
    view = flow.views[0]
    view.compute(live).write.format("delta").mode("overwrite").save(str(out / view.name))
    return int(spark.read.format("delta").load(str(out / view.name)).count())


def validated(
    spark: SparkSession, flow: Flow, reference: Reference, file: Path
) -> tuple[DataFrame, Ranked, int]:
    """The write path's persisted frame for ``file`` (``checked_batch``), ranked as the
    write path ranks it (``ranked_batch``), and its rejected rows, counted by rule as
    ``apply_changes`` counts them."""
    file = file.resolve()
    layout = check_file(file, flow, whole_day=False)
    rows = read_eod_file(spark, file, flow, layout).withColumn(SOURCE, F.lit("eod"))
    persisted = checked_batch(flow, rows, reference)
    ranked = ranked_batch(flow, persisted)
    rule = F.try_element_at(F.col(FAILED), F.lit(1))
    counts = ranked.frame.groupBy(rule.alias("rule")).count().collect()
    return persisted, ranked, sum(r["count"] for r in counts if r["rule"] is not None)


def validate_only(spark: SparkSession, flow: Flow, reference: Reference, file: Path) -> int:
    persisted, ranked, rejected = validated(spark, flow, reference, file)
    ranked.unpersist()
    persisted.unpersist()
    return rejected


def written_once(
    spark: SparkSession, flow: Flow, reference: Reference, file: Path, out: Path
) -> int:
    """Validated as streamshift does, then the day written once (see the module's doc)."""
    persisted, ranked, rejected = validated(spark, flow, reference, file)
    checked = ranked.frame
    if rejected:
        checked.where(F.size(FAILED) > 0).select(SOURCE_REF, RAW, FAILED).write.format(
            "delta"
        ).mode("append").save(str(out / "quarantine"))
    state_columns(flow, checked.where(F.col(FIRST_VERSION))).write.format("delta").mode(
        "append"
    ).partitionBy(flow.business_date).save(str(out / "versions"))
    latest = state_columns(flow, checked.where(F.col(LATEST_VERSION)))
    view = flow.views[0]
    view.compute(latest.where(~F.col(IS_DELETED))).write.format("delta").mode("overwrite").save(
        str(out / view.name)
    )
    ranked.unpersist()
    persisted.unpersist()
    return int(spark.read.format("delta").load(str(out / view.name)).count())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2, help="timed loads of each side")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--floors",
        action="store_true",
        help="also time validate-only and written-once loads (what stands under the goal)",
    )
    args = parser.parse_args()
    work = scratch(args.workdir, "streamshift-bench-")
    flow = get_flow("trades")
    print(f"[bench] generating {args.trades} trades in {work}", flush=True)
    files = generate_day(DAY, args.trades, work / "files", seed=3)
    # The driver as the EOD DAG submits it (STREAMSHIFT_SPARK_DRIVER_JAVA_OPTIONS).
    spark = get_spark(load_settings(home=work / "home-0"), app_name="bench-eod-load")
    warm = generate_day(DAY, min(10_000, args.trades), work / "warm-up", seed=4, progress=False)
    print("[bench] warm-up: one small load of each side", flush=True)
    run_eod(
        spark, Target.open(spark, load_settings(home=work / "warm"), flow, "batch"), DAY, warm.eod
    )
    hand_written(spark, flow, warm.eod, work / "warm" / "hand")

    reference = load_reference(spark, flow)
    floors = {
        "validate": lambda out: validate_only(spark, flow, reference, files.eod),
        "written once": lambda out: written_once(spark, flow, reference, files.eod, out),
    }
    if args.floors:
        for name, side in floors.items():  # their warm-up
            side(work / "warm" / name.replace(" ", "-"))
    ours, theirs = [], []
    floor_times: dict[str, list[float]] = {name: [] for name in floors} if args.floors else {}
    for i in range(args.repeat):
        home = work / f"home-{i}"
        settings = load_settings(home=home)
        target = Target.open(spark, settings, flow, "batch")
        t = time.perf_counter()
        result = run_eod(spark, target, DAY, files.eod)
        ours.append(time.perf_counter() - t)
        steps = ", ".join(f"{k} {v:.1f}" for k, v in result.apply.seconds_by_step.items())
        print(
            f"[bench] streamshift load {i + 1}: {ours[-1]:.1f}s ({result.describe()}); "
            f"steps (s, side steps overlap): {steps}; views from the {result.apply.views_from}",
            flush=True,
        )

        out = work / f"hand-{i}"
        t = time.perf_counter()
        groups = hand_written(spark, flow, files.eod, out)
        theirs.append(time.perf_counter() - t)
        print(
            f"[bench] hand-written load {i + 1}: {theirs[-1]:.1f}s ({groups} positions)", flush=True
        )
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(home / "warehouse", ignore_errors=True)
        for name, seconds in floor_times.items():
            out = work / f"{name.replace(' ', '-')}-{i}"
            t = time.perf_counter()
            floors[name](out)
            seconds.append(time.perf_counter() - t)
            print(f"[bench] {name} {i + 1}: {seconds[-1]:.1f}s", flush=True)
            shutil.rmtree(out, ignore_errors=True)

    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"\ntrades in the day:             {args.trades}")
    print(f"streamshift EOD load (median):  {a:.1f} s")
    print(f"hand-written PySpark (median):  {b:.1f} s")
    print(f"ratio streamshift/hand-written: {a / b:.2f} (goal <= 1.5)")
    for name, seconds in floor_times.items():
        m = statistics.median(seconds)
        print(f"{name + ' (median):':31s} {m:.1f} s, {m / b:.2f} of the hand-written job")
    return 0


if __name__ == "__main__":
    sys.exit(main())
