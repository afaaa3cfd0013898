"""The view's recompute after a correction: current state read through deltalake in the
apply's process, against Spark's read of the version the apply's own MERGE just made.

Spark computes a new version's whole file list before its first read of it; deltalake brings
the copy of the table it read before forward by that commit. One Spark session loads a day of
``--trades`` trades, then applies one-trade corrections in blocks of ``--block``, the two
reads alternating block by block (a block's first apply pays for what the other read left
undone, so it is not counted). With ``--warm``, Spark computes the tables' state between
applies, untimed, as the stream's side thread does on a quiet stream and the engine's job
runner does after a job; without it the applies follow each other with nothing between, as a
busy stream's batches do. Prints each read's median apply and view step and their ratio.

Run: .venv/bin/python bench/view_read.py [--trades 2000] [--blocks 4] [--block 6] [--warm]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _scratch import scratch

from flows.trades import FLOW
from streamshift.engine.spark import get_spark
from streamshift.engine.write import views
from streamshift.engine.write.apply import apply_changes
from streamshift.engine.write.target import Target, load_reference, warm_state
from streamshift.spec.catalog import LayerTables
from streamshift.spec.settings import load_settings
from tests.trades_data import frame, trade

READS = ("deltalake", "spark")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=2000, help="trades in the loaded day")
    parser.add_argument("--blocks", type=int, default=4, help="blocks per read, alternating")
    parser.add_argument("--block", type=int, default=6, help="corrections per block")
    parser.add_argument("--warm", action="store_true", help="tables' state computed between")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = scratch(args.workdir, "streamshift-bench-")
    spark = get_spark(load_settings(home=work / "home", engine=""), "bench-view-read")
    target = Target(spark, FLOW, LayerTables(work, FLOW, "batch"), load_reference(spark, FLOW))
    tables = target.tables
    paths = [tables.history, tables.current, *(tables.view(v.name) for v in FLOW.views)]
    print(f"[bench] loading a day of {args.trades} trades", file=sys.stderr, flush=True)
    apply_changes(
        FLOW,
        frame(spark, [trade(f"k{i}", 1, quantity=i) for i in range(args.trades)]),
        "bench",
        target,
    )
    applies: dict[str, list[float]] = {r: [] for r in READS}
    view_steps: dict[str, list[float]] = {r: [] for r in READS}
    n = 0
    for block in range(args.blocks * 2):
        read = READS[block % 2]
        views.READ_HERE_GROUPS = 1_000 if read == "deltalake" else 0
        for i in range(args.block):
            if args.warm:
                warm_state(spark, paths)
            n += 1
            started = time.perf_counter()
            result = apply_changes(
                FLOW,
                frame(spark, [trade(f"k{n % args.trades}", 1 + n, event="AMEND", quantity=n)]),
                "bench",
                target,
            )
            took = time.perf_counter() - started
            assert result.views_read == read, (result.views_read, read)
            print(f"[bench] block {block + 1} {read}: {took:.2f} s", file=sys.stderr, flush=True)
            if i:  # a block's first apply pays for what the other read left undone
                applies[read].append(took)
                view_steps[read].append(result.seconds_by_step["view positions"])
    print(
        f"one-trade corrections on a {args.trades}-trade day, {'tables warmed' if args.warm else 'nothing'}"
        f" between applies; medians of {len(applies['spark'])} per read (cores: {os.cpu_count()})"
    )
    for read in READS:
        print(
            f"  {read:9s}  apply {statistics.median(applies[read]):.2f} s,"
            f" view step {statistics.median(view_steps[read]):.2f} s"
        )
    a, b = (statistics.median(applies[r]) for r in READS)
    print(f"  deltalake / spark: {a / b:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
