"""What a Delta write of a layer's rows spends on file statistics: every column's (Delta's
default, the first 32) against the key's and the version's only (the kit's state tables:
``streamshift.engine.write.target.ensure_state_table``).

One Spark session loads a generated day of ``--trades`` trades through ``run_eod``, then appends
its history rows (the layer's 23 columns, read once and cached) to new tables of each kind,
alternating, ``--repeat`` times, as one task each (a date's rows are one task's in the write
path's MERGEs). It prints the median seconds per write, their ratio, and how many columns
each table's statistics hold (``store.tables.stats_columns``).

Run: .venv/bin/python bench/write_stats.py [--trades N] [--repeat R]
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
from streamshift.engine.write.target import (
    Target,
    ensure_state_table,
    ensure_table,
    read,
    state_schema,
)
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import load_settings
from streamshift.store.tables import stats_columns

DAY = dt.date(2026, 11, 20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = scratch(None, "streamshift-bench-")
    flow = get_flow("trades")
    settings = load_settings(home=work / "home")
    spark = get_spark(settings, app_name="bench-write-stats")
    files = generate_day(DAY, args.trades, work / "files", seed=3)
    target = Target.open(spark, settings, flow, "batch")
    print(f"[bench] loading {args.trades:,} trades", flush=True)
    run_eod(spark, target, DAY, files.eod)
    rows = read(spark, target.tables.history).coalesce(1).persist()
    count = rows.count()
    kinds = {
        "every column": lambda p: ensure_table(
            spark, p, state_schema(spark, flow), (flow.business_date,)
        ),
        "key and version": lambda p: ensure_state_table(spark, flow, p),
    }
    seconds: dict[str, list[float]] = {k: [] for k in kinds}
    held: dict[str, int] = {}
    for round_ in range(args.repeat + 1):  # round 0 warms the JIT up and is not counted
        for name, create in kinds.items():
            path = work / "tables" / f"{name.replace(' ', '-')}-{round_}"
            create(str(path))
            started = time.perf_counter()
            rows.write.format("delta").mode("append").save(str(path))
            if round_:
                seconds[name].append(time.perf_counter() - started)
            held[name] = len(stats_columns(path))
        print(f"[bench] round {round_} done", flush=True)
    every = statistics.median(seconds["every column"])
    print(f"\n{count:,} rows of {len(rows.columns)} columns, one task, median of {args.repeat}:")
    for name, values in seconds.items():
        median = statistics.median(values)
        print(
            f"  statistics of {name:16s} {median:6.2f} s  {median / every:.2f}  "
            f"({held[name]} columns in a file's statistics)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
