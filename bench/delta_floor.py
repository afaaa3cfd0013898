"""The fixed cost of Spark + Delta operations on this machine, before any data moves.

Every write-path step is one or more of these; their floor bounds what a one-trade
correction (bench/correction_cost.py) or one micro-batch (bench/stream_latency.py) can cost,
however little data it carries. In one Spark session, on a 1,000-row Delta table, median of
--repeat runs each:

  * a trivial Spark job (``spark.range(10).collect()``);
  * a filtered read of the Delta table, collected;
  * a one-row blind append;
  * a one-row MERGE (update or insert), deletion vectors off and on;
  * the same MERGE into a table with Change Data Feed on (what a view MERGE pays).

Run: .venv/bin/python bench/delta_floor.py [--repeat N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamshift.engine.spark import get_spark
from streamshift.spec.settings import load_settings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="timed runs of each operation")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="streamshift-floor-"))
    try:
        return run(work, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(work: Path, repeat: int) -> int:
    from delta.tables import DeltaTable

    settings = load_settings(home=work / "home")
    spark = get_spark(settings, app_name="bench-delta-floor")

    def table(name: str, properties: dict[str, str]) -> str:
        path = str(work / name)
        spark.range(1000).selectExpr("CAST(id AS STRING) AS k", "id AS v").write.format(
            "delta"
        ).save(path)
        props = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({props})")
        return path

    plain = table("plain", {"delta.enableDeletionVectors": "false"})
    with_dv = table("dv", {"delta.enableDeletionVectors": "true"})
    with_cdf = table(
        "cdf", {"delta.enableDeletionVectors": "false", "delta.enableChangeDataFeed": "true"}
    )

    def merge(path: str) -> Callable[[int], None]:
        def op(i: int) -> None:
            source = spark.createDataFrame([(str(i % 2000), i)], "k STRING, v LONG")
            (
                DeltaTable.forPath(spark, path)
                .alias("t")
                .merge(source.alias("s"), "t.k = s.k")
                .whenMatchedUpdateAll()
                .whenNotMatchedInsertAll()
                .execute()
            )

        return op

    def append(i: int) -> None:
        spark.createDataFrame([(f"new-{i}", i)], "k STRING, v LONG").write.format("delta").mode(
            "append"
        ).save(plain)

    operations: list[tuple[str, Callable[[int], None]]] = [
        ("trivial Spark job", lambda i: spark.range(10).collect()),
        (
            "filtered read, collected",
            lambda i: spark.read.format("delta").load(plain).where(f"k = '{i}'").collect(),
        ),
        ("one-row append", append),
        ("one-row MERGE", merge(plain)),
        ("one-row MERGE, deletion vectors", merge(with_dv)),
        ("one-row MERGE, change data feed", merge(with_cdf)),
    ]
    for _, op in operations:  # warm the JVM once over every code path
        op(-1)
    print(f"{'operation':36} {'median':>8} {'min':>8}   ({repeat} runs each)")
    for label, op in operations:
        times = []
        for i in range(repeat):
            started = time.perf_counter()
            op(i)
            times.append(time.perf_counter() - started)
        print(f"{label:36} {statistics.median(times):7.3f}s {min(times):7.3f}s", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
