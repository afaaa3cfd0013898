"""The apply's validate step with its two ways of ranking a batch by key, on a batch of new keys
and on one where every key comes twice.

* ``by-keys``: ``checked_batch`` then ``ranked_batch``: one job counts the accepted rows per key
  (filling the cache), and only the keys received more than once are ranked by a window; beyond
  ``RANK_APART_AT_MOST`` such keys, the whole batch is ranked from the cache;
* ``in-the-pass``: ``checked_batch(ranked=True)``: the whole batch ranked by one window in the
  pass that fills the cache (what the apply does for a layer whose last batch repeated many keys).

Each side then runs the apply's counting pass (``batch_counts``). One session, the input held in
memory, one untimed round then ``--rounds`` alternating; prints the medians and the ratio.

Run: .venv/bin/python bench/rank_keys.py [--rows 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _scratch import scratch
from pyspark.sql import functions as F

from flows.trades import FLOW
from streamshift.engine.spark import get_spark
from streamshift.engine.write.apply import batch_counts, checked_batch, ranked_batch
from streamshift.engine.write.target import load_reference
from streamshift.spec.contract import SOURCE
from streamshift.spec.settings import load_settings
from tests.trades_data import frame, trade


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = scratch(None, "streamshift-bench-")
    spark = get_spark(load_settings({}, home=work / "home"), app_name="bench-rank-keys")
    reference = load_reference(spark, FLOW)

    def by_keys(df):  # type: ignore[no-untyped-def]
        persisted = checked_batch(FLOW, df, reference)
        ranked = ranked_batch(FLOW, persisted)
        rows = batch_counts(FLOW, ranked.frame)
        ranked.unpersist()
        persisted.unpersist()
        return rows

    def in_the_pass(df):  # type: ignore[no-untyped-def]
        persisted = checked_batch(FLOW, df, reference, ranked=True)
        rows = batch_counts(FLOW, persisted)
        persisted.unpersist()
        return rows

    sides = {"by-keys": by_keys, "in-the-pass": in_the_pass}
    for twice in (False, True):
        keys = args.rows // 2 if twice else args.rows
        rows = [trade(f"K{i:08}", 1, ref=f"f:{i}") for i in range(keys)]
        if twice:
            rows += [
                trade(f"K{i:08}", 2, event="AMEND", quantity=7, ref=f"f:{keys + i}")
                for i in range(keys)
            ]
        df = frame(spark, rows).withColumn(SOURCE, F.lit("eod")).repartition(2).persist()
        df.count()
        seconds: dict[str, list[float]] = {name: [] for name in sides}
        for round_ in range(args.rounds + 1):  # round 0 warms up, not counted
            order = list(sides.items()) if round_ % 2 else list(sides.items())[::-1]
            for name, side in order:
                started = time.perf_counter()
                counts = side(df)
                if round_:
                    seconds[name].append(time.perf_counter() - started)
                versions = sum(r["versions"] for r in counts if r["rule"] is None)
                assert versions == len(rows), (name, versions, len(rows))
        new, old = (statistics.median(seconds[n]) for n in sides)
        label = "every key twice" if twice else "new keys"
        print(
            f"{label}: {len(rows):,} rows, by-keys {new:.2f} s, in-the-pass {old:.2f} s, "
            f"ratio {new / old:.2f} (medians of {args.rounds})",
            flush=True,
        )
        df.unpersist()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
