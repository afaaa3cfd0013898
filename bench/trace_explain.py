"""`streamshift trace` and `streamshift explain` on a big warehouse: seconds from process start.

Builds a batch layer of ``--days`` days of ``--trades`` trades each (3 % of them amended the same
day, so history holds two versions of those keys), through the write path's own transforms
(parse, the reference joins, validation, the stored columns) and the flow's view, written by
Spark as Delta tables partitioned by business date, as EOD loads leave them. Trade ids carry
their date, as the generator's and most desks' do. Then times, each in a new process as a user
runs it (``--repeat`` times, median): a trace of an amended trade of the middle day, an explain
of one position of that day, and the floor, a process that imports the CLI and exits.

Run: .venv/bin/python bench/trace_explain.py [--trades N] [--days K] [--repeat R] [--keep DIR]
(``--keep DIR`` builds there once and keeps it: a second run with the same DIR only times.)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _scratch import scratch

FIRST_DAY = dt.date(2026, 10, 1)
REPO = Path(__file__).resolve().parent.parent


def build(warehouse_home: Path, trades: int, days: int) -> tuple[str, dt.date, str, str]:
    """Write the layer; returns an amended key, its date, and a book and instrument of it."""
    from pyspark.sql import functions as F

    from flows.trades import FLOW, POSITIONS
    from streamshift.engine.spark import get_spark
    from streamshift.engine.write.target import load_reference
    from streamshift.engine.write.transforms import checked_changes, latest_per_key, state_columns
    from streamshift.spec.catalog import LayerTables
    from streamshift.spec.contract import IS_DELETED, SOURCE
    from streamshift.spec.settings import load_settings

    settings = load_settings({}, home=warehouse_home, engine="")
    spark = get_spark(settings, app_name="bench-trace-explain")
    books = [
        r.split(",")[0] for r in (REPO / "flows/trades/reference/books.csv").read_text().split()[1:]
    ]
    instruments = [
        r.split(",")[0]
        for r in (REPO / "flows/trades/reference/instruments.csv").read_text().split()[1:]
        if r.endswith(",USD")
    ]
    n = trades * days
    ids = spark.range(n).select(
        (F.col("id") % trades).alias("i"), (F.col("id") / trades).cast("int").alias("d")
    )
    day = F.date_add(F.lit(FIRST_DAY), F.col("d"))
    base = ids.select(
        F.concat(F.lit("T"), F.date_format(day, "yyyyMMdd"), F.lit("-"), F.lpad(F.col("i").cast("string"), 7, "0")).alias("trade_id"),
        day.cast("string").alias("business_date"),
        F.concat(day.cast("string"), F.lit("T10:00:00Z")).alias("trade_ts"),
        F.element_at(F.array(*map(F.lit, books)), (F.col("i") % len(books) + 1).cast("int")).alias("book"),
        F.element_at(F.array(*map(F.lit, instruments)), (F.col("i") % len(instruments) + 1).cast("int")).alias("instrument"),
        F.when(F.col("i") % 2 == 0, "BUY").otherwise("SELL").alias("side"),
        (F.col("i") % 900 + 1).cast("string").alias("quantity"),
        F.lit("101.25").alias("price"),
        F.lit("USD").alias("currency"),
        F.col("i"),
    )  # fmt: skip
    new = base.select("*", F.lit("1").alias("version"), F.lit("NEW").alias("event_type"))
    amended = base.where(F.col("i") % 33 == 7).select(
        *[c for c in base.columns if c != "quantity"],
        (F.col("quantity").cast("int") + 5).cast("string").alias("quantity"),
        F.lit("2").alias("version"),
        F.lit("AMEND").alias("event_type"),
    )
    raw = new.unionByName(amended).select(
        *FLOW.columns,
        F.concat(F.lit("trades_eod_"), F.col("business_date"), F.lit(".csv:"), (F.col("i") + 2).cast("string")).alias("_source_ref"),
        F.lit(None).cast("string").alias("_raw"),
        F.lit("eod").alias(SOURCE),
    )  # fmt: skip
    history = state_columns(FLOW, checked_changes(FLOW, raw, load_reference(spark, FLOW)))
    tables = LayerTables(settings.warehouse, FLOW, "batch")
    started = time.monotonic()
    (history.repartition(2 * days, "business_date").sortWithinPartitions("trade_id")
     .write.format("delta").partitionBy("business_date").save(tables.history))  # fmt: skip
    history = spark.read.format("delta").load(tables.history)
    current = latest_per_key(FLOW, history)
    (current.repartition(2 * days, "business_date").sortWithinPartitions("trade_id")
     .write.format("delta").partitionBy("business_date").save(tables.current))  # fmt: skip
    live = spark.read.format("delta").load(tables.current).where(~F.col(IS_DELETED))
    POSITIONS.compute(live).write.format("delta").partitionBy("business_date").save(
        tables.view("positions")
    )
    print(f"[bench] wrote {n:,} trades over {days} days in {time.monotonic() - started:.0f}s",
          file=sys.stderr)  # fmt: skip
    middle = FIRST_DAY + dt.timedelta(days=days // 2)
    [row] = (
        spark.read.format("delta").load(tables.current)
        .where((F.col("business_date") == F.lit(middle)) & (F.col("version") == 2))
        .orderBy("trade_id").limit(1).collect()
    )  # fmt: skip
    spark.stop()
    return row["trade_id"], middle, row["book"], row["instrument"]


def timed(args: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=1_000_000, help="trades a day")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="build here (kept) instead of a temp dir")
    args = parser.parse_args()
    home = scratch(args.keep, "bench-trace-")
    built = home / "bench.json"
    if built.is_file():  # a kept warehouse: time it again
        key, day, book, instrument = json.loads(built.read_text())
    else:
        key, day, book, instrument = build(home, args.trades, args.days)
        built.write_text(json.dumps([key, str(day), book, instrument]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMSHIFT_")}
    env["STREAMSHIFT_HOME"] = str(home)
    cli = [str(Path(sys.executable).parent / "streamshift")]
    commands = {
        "floor (import the CLI, exit)": [sys.executable, "-c", "import streamshift.cli"],
        f"trace {key}": [*cli, "trace", "--flow", "trades", "--key", key, "--layer", "batch",
                         "--format", "json"],
        f"explain {day} {book} {instrument}": [
            *cli, "explain", "--flow", "trades", "--date", str(day), "--layer", "batch",
            "--group", f"book={book},instrument={instrument}", "--format", "json"],
    }  # fmt: skip
    results: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.repeat):  # alternating, so a slow moment hits each alike
        for name, command in commands.items():
            results[name].append(timed(command, env))
    print(f"{args.trades:,} trades a day, {args.days} days; medians of {args.repeat}, "
          "seconds from process start to exit:")  # fmt: skip
    floor = statistics.median(results["floor (import the CLI, exit)"])
    for name, seconds in results.items():
        median = statistics.median(seconds)
        print(f"  {name}: {median:.2f} s ({median / floor:.1f}x the floor; runs {seconds})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
