"""`evolve` of a view change over a long history, against one day's EOD load, same run.

Builds a batch layer of ``--days`` days of ``--trades`` trades each (``bench/trace_explain.py``'s
builder: the write path's own transforms, Delta tables partitioned by business date), loads
the next day's EOD file through the write path (the reference: what one night costs), then
changes the ``positions`` view (a measure added) and times ``streamshift evolve``'s job on it:
the plan (fingerprints of both versions), the view recomputed for every date from current
state, the version recorded. Prints both and evolve ÷ one day's load.

``--shadow``: the same change built beside the live version instead (``streamshift evolve
--shadow``: history re-applied through the new code, every view recomputed, each table compared
with the live one and the differences recorded).

Run: .venv/bin/python bench/evolve_view.py [--trades 1000000] [--days 30] [--keep DIR] [--shadow]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _scratch import scratch
from trace_explain import FIRST_DAY, build


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=1_000_000, help="trades a day")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--keep", type=Path, help="build here (kept) instead of a temp dir")
    parser.add_argument("--shadow", action="store_true", help="time evolve --shadow instead")
    args = parser.parse_args()
    home = scratch(args.keep, "bench-evolve-")
    if not (home / "warehouse" / "batch" / "trades").is_dir():
        build(home, args.trades, args.days)

    from pyspark.sql.types import LongType

    from flows.trades import FLOW, POSITION_KEY, POSITION_MEASURES
    from flows.trades.generate import generate_day
    from streamshift.engine.jobs.eod import run_eod
    from streamshift.engine.shadow import build_shadow
    from streamshift.engine.spark import get_spark
    from streamshift.engine.versions import evolve
    from streamshift.engine.write.target import Target, read
    from streamshift.spec.flow import Measure, View
    from streamshift.spec.settings import load_settings

    settings = load_settings({}, home=home, engine="")
    spark = get_spark(settings, app_name="bench-evolve-view")
    day = FIRST_DAY + dt.timedelta(days=args.days)
    files = generate_day(day, args.trades, home / "files", seed=7, progress=False)
    started = time.monotonic()
    run_eod(spark, Target.open(spark, settings, FLOW, "batch"), day, files.eod)
    load = time.monotonic() - started
    print(f"[bench] one day's EOD load ({args.trades:,} trades): {load:.1f}s", flush=True)

    measures = (*POSITION_MEASURES, Measure("max_quantity", LongType(), "quantity", kind="max"))
    changed = dataclasses.replace(
        FLOW, views=(View.of_measures("positions", POSITION_KEY, measures, {}),)
    )
    started = time.monotonic()
    result = (build_shadow if args.shadow else evolve)(spark, settings, changed)
    seconds = time.monotonic() - started
    print(result.describe(), flush=True)
    groups = read(spark, str(settings.warehouse / "batch" / "positions")).count()
    what = "evolve --shadow" if args.shadow else "evolve"
    print(
        f"{what} of a view change over {args.days + 1} days × {args.trades:,} trades "
        f"({groups:,} groups): {seconds:.1f}s; one day's EOD load: {load:.1f}s; "
        f"{what} ÷ load = {seconds / load:.2f}"
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
