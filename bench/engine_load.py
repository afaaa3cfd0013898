"""A large EOD load through `streamshift eod`, on the warm engine and without it, same run.

The other side of bench/engine_latency.py: the engine must not make a big day slower. Starts a
local engine, then ``--repeat`` times and alternating sides loads a generated day of
``--trades`` trades (default 1,000,000) for a date of its own into one warehouse with
``streamshift eod`` as a user runs it (a new process; the file complete on arrival): once with
``STREAMSHIFT_ENGINE`` naming the engine (the job runs there), once with it empty (a local
Spark session of the command's own, as every command ran before the engine). One untimed load
of a small day on the engine first (the engine's first job of the flow pays its class loading).
Each load is checked against its file: the day's rows in current state (one per trade), read
without Spark, equal the file's distinct trades.

Prints each side's median wall time from process start to exit and engine ÷ no engine (goal:
no slower, <= 1).

Run: .venv/bin/python bench/engine_load.py [--trades 1000000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _scratch import scratch
from engine_latency import local_engine, timed_eod

from flows.trades.generate import generate_day
from streamshift.spec.catalog import LayerTables
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import load_settings
from streamshift.store.tables import select

FIRST_DAY = dt.date(2026, 11, 2)


def file_trades(path: Path) -> int:
    """Distinct trades in an EOD file (the oracle of the day's current state)."""
    with path.open(newline="") as f:
        return len({row["trade_id"] for row in csv.DictReader(f)})


def loaded_trades(home: Path, day: dt.date) -> int:
    """Trades of ``day`` in the batch layer's current state, read without Spark."""
    tables = LayerTables(load_settings({}, home=home).warehouse, get_flow("trades"), "batch")
    table = select(tables.current, ["trade_id"], where=[("business_date", "=", day)])
    return 0 if table is None else table.num_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=1_000_000, help="trades in each loaded day")
    parser.add_argument("--repeat", type=int, default=2, help="timed loads per side")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = scratch(args.workdir, "streamshift-bench-")
    home = work / "home"
    timings: dict[str, list[float]] = {"engine": [], "no engine": []}
    with local_engine(work) as url:
        warm_day = FIRST_DAY - dt.timedelta(days=1)
        small = generate_day(warm_day, 300, work / "files-warm", seed=3, progress=False)
        print(f"warm-up on the engine: {timed_eod(home, url, small.eod, warm_day):.2f} s")
        day = FIRST_DAY
        for i in range(args.repeat):
            for side, address in (("engine", url), ("no engine", "")):
                print(f"generating {args.trades:,} trades for {day} ...", file=sys.stderr)
                files = generate_day(
                    day, args.trades, work / f"files-{day}", seed=11, progress=False
                )
                seconds = timed_eod(home, address, files.eod, day)
                expected, got = file_trades(files.eod), loaded_trades(home, day)
                if got != expected:
                    raise SystemExit(
                        f"{day}: {got} trades in current state, the file has {expected}"
                    )
                timings[side].append(seconds)
                print(f"run {i + 1} {side}: {seconds:.1f} s ({got:,} trades checked)", flush=True)
                day += dt.timedelta(days=1)
    warm = statistics.median(timings["engine"])
    cold = statistics.median(timings["no engine"])
    print(
        f"an EOD load of {args.trades:,} trades, `streamshift eod`, median of {args.repeat} "
        f"(cores: {os.cpu_count()})"
    )
    print(f"  engine up:  {warm:7.1f} s")
    print(f"  no engine:  {cold:7.1f} s")
    print(f"  engine / no engine: {warm / cold:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
