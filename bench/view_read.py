"""The write path's reads through deltalake in the apply's process, against Spark's: a view's
recompute after a correction (current state at the version the apply's own MERGE just made),
or with ``--history`` a small batch's history lookup (the "touched" step: history at the
version the batch before appended).

Spark computes a new version's whole file list before its first read of it; deltalake brings
the copy of the table it read before forward by the commits since. A view's groups are read by
date; history, which no date prunes for a lookup by key, is read whole and its keys matched in
Arrow (the write path does so up to ``HISTORY_READ_HERE_BYTES`` of history's files, which the
bench raises to the history it loads, so the two reads are compared at any size). One Spark
session loads ``--days`` days of ``--trades`` trades each, then applies one-trade corrections
in blocks of ``--block``, the two reads alternating block by block (a block's first apply pays
for what the other read left undone, so it is not counted). With ``--warm``, Spark computes
the tables' state between applies, untimed, as the stream's side thread does on a quiet stream
and the engine's job runner does after a job; without it the applies follow each other with
nothing between, as a busy stream's batches do. Prints each read's median apply and step, their
ratio and the size of the table read.

Run: .venv/bin/python bench/view_read.py [--history] [--trades 2000] [--days 1] [--blocks 4]
     [--block 6] [--warm]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _scratch import scratch

from flows.trades import FLOW
from streamshift.engine.spark import get_spark
from streamshift.engine.write import batches, views
from streamshift.engine.write.apply import apply_changes
from streamshift.engine.write.target import Target, load_reference, warm_state
from streamshift.spec.catalog import LayerTables
from streamshift.spec.settings import load_settings
from streamshift.store import storage
from tests.trades_data import D2, frame, trade

READS = ("deltalake", "spark")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", action="store_true", help="the history lookup's read")
    parser.add_argument("--trades", type=int, default=2000, help="trades in each loaded day")
    parser.add_argument("--days", type=int, default=1, help="days loaded, the last corrected")
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
    last = dt.date.fromisoformat(D2)
    for day in range(args.days):
        date = (last - dt.timedelta(days=args.days - 1 - day)).isoformat()
        print(f"[bench] loading {date}: {args.trades} trades", file=sys.stderr, flush=True)
        rows = [trade(f"{date}-k{i}", 1, date=date, quantity=i) for i in range(args.trades)]
        apply_changes(FLOW, frame(spark, rows), "bench", target)
    read_table = tables.history if args.history else tables.current
    table_bytes = storage.tree_bytes(read_table)
    history_here = max(batches.HISTORY_READ_HERE_BYTES, table_bytes * 2)
    step = "touched" if args.history else "view positions"
    applies: dict[str, list[float]] = {r: [] for r in READS}
    steps: dict[str, list[float]] = {r: [] for r in READS}
    n = 0
    for block in range(args.blocks * 2):
        read = READS[block % 2]
        if args.history:
            batches.HISTORY_READ_HERE_BYTES = history_here if read == "deltalake" else -1
        else:
            views.READ_HERE_GROUPS = 1_000 if read == "deltalake" else 0
        for i in range(args.block):
            if args.warm:
                warm_state(spark, paths)
            n += 1
            started = time.perf_counter()
            amend = trade(f"{D2}-k{n % args.trades}", 1 + n, event="AMEND", quantity=n)
            result = apply_changes(FLOW, frame(spark, [amend]), "bench", target)
            took = time.perf_counter() - started
            assert args.history or result.views_read == read, (result.views_read, read)
            print(f"[bench] block {block + 1} {read}: {took:.2f} s", file=sys.stderr, flush=True)
            if i:  # a block's first apply pays for what the other read left undone
                applies[read].append(took)
                steps[read].append(result.seconds_by_step[step])
    print(
        f"one-trade corrections, {args.days} x {args.trades} trades loaded,"
        f" {'history' if args.history else 'current state'} {table_bytes / 2**20:.1f} MB on disk,"
        f" {'tables warmed' if args.warm else 'nothing'} between applies;"
        f" medians of {len(applies['spark'])} per read (cores: {os.cpu_count()})"
    )
    for read in READS:
        print(
            f"  {read:9s}  apply {statistics.median(applies[read]):.2f} s,"
            f" {step} step {statistics.median(steps[read]):.2f} s"
        )
    a, b = (statistics.median(applies[r]) for r in READS)
    print(f"  deltalake / spark: {a / b:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
