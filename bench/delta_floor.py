"""The fixed cost of Spark + Delta operations on this machine, before any data moves.

Every write-path step is one or more of these; their floor bounds what a one-trade
correction (bench/correction_cost.py) or one micro-batch (bench/stream_latency.py) can cost,
however little data it carries. In one Spark session, on a 1,000-row Delta table, median of
--repeat runs each, the operations taken in turn:

  * a trivial Spark job (``spark.range(10).collect()``);
  * a filtered read of the Delta table, collected;
  * a table created by the write path's ``ensure_table`` (``CREATE TABLE ... USING delta``);
  * a one-row blind append;
  * a one-row MERGE (update or insert), deletion vectors off and on;
  * the same MERGE into a table with Change Data Feed on (what a view MERGE pays);
  * the first MERGE with its source not materialised first (``materializeSource=none``);
  * a one-row MERGE into a table just created, interpreted (as the write path applies a small
    date: the tests' tables are new and small);
  * a filtered read right after a one-row MERGE, of its new version and again, and of the
    version before it (time travel) and again: what a view recomputed from the state a MERGE
    started from would pay.

``--anatomy``: then one more one-row MERGE (the plain table), taken apart through Spark's
monitoring REST API (the session starts its web UI): each query Delta runs inside it, with
its description, its Spark jobs and its duration, and the wall time of the whole MERGE.

Each operation's CPU time is its session's (the JVM's and this process's), beside its wall time.

``--suite DIR``: then the floor of a finished test run (``DIR``: its pytest base temp folder,
``/tmp/pytest-of-$USER/pytest-N``): the Delta commits its tables hold, by operation (every
test writes tables of its own under it), each kind costed at its measured median CPU (a MERGE at
the cheapest one-row MERGE's, a WRITE at the append's, a CREATE TABLE at the create's), against
the CPU a ten-minute run on this machine's cores has. Commits a test removed with its tables
are not counted, nor is any other work: the figure is a floor.

Run: .venv/bin/python bench/delta_floor.py [--repeat N] [--anatomy] [--suite DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamshift.engine.spark import get_spark, interpreted
from streamshift.engine.write.target import ensure_table
from streamshift.spec.settings import load_settings
from streamshift.store.processes import cpu_seconds, process_stats

# Delta materialises a MERGE's source (one more Spark job) unless told it is deterministic.
MATERIALIZE = "spark.databricks.delta.merge.materializeSource"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="timed runs of each operation")
    parser.add_argument(
        "--anatomy", action="store_true", help="then one MERGE's queries, from Spark's REST API"
    )
    parser.add_argument(
        "--suite",
        type=Path,
        metavar="DIR",
        help="a finished test run's base temp folder: its Delta commits costed at these floors",
    )
    args = parser.parse_args()
    if args.suite and not args.suite.is_dir():
        parser.error(f"--suite {args.suite}: no such folder (a pytest run's base temp folder)")
    work = Path(tempfile.mkdtemp(prefix="streamshift-floor-"))
    try:
        return run(work, args.repeat, args.anatomy, args.suite)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def session_cpu() -> float:
    """CPU seconds of this process and its children still running (the session's JVM)."""
    children = (cpu_seconds(f) for _, f in process_stats() if int(f[1]) == os.getpid())
    return time.process_time() + sum(children)


# A Delta log's commit operation → the operations above it is costed at: the cheapest of them.
COMMIT_FLOORS = {
    "MERGE": "one-row MERGE",  # every operation whose label starts so
    "WRITE": "one-row append",
    "CREATE TABLE": "table created",
}


def commits_under(folder: Path) -> Counter[str]:
    """The operations of every Delta commit under ``folder`` (one JSON file each)."""
    operations: Counter[str] = Counter()
    for log in folder.rglob("_delta_log"):
        for commit in log.glob("*.json"):
            for line in commit.read_text().splitlines():
                if '"commitInfo"' in line:
                    operations[json.loads(line)["commitInfo"]["operation"]] += 1
    return operations


def suite_floor(folder: Path, cpu: dict[str, float]) -> None:
    operations = commits_under(folder)
    print(f"\nthe Delta commits of {folder}: {sum(operations.values())}")
    floor = 0.0
    for operation, count in operations.most_common():
        prefix = COMMIT_FLOORS.get(operation)
        costs = {label: c for label, c in cpu.items() if prefix and label.startswith(prefix)}
        label = min(costs, key=costs.__getitem__) if costs else None
        each = costs[label] if label else 0.0
        floor += count * each
        costed = f"x {each:.3f} CPU-s ({label})" if label else "(not costed)"
        print(f"  {count:6d} {operation:20} {costed}")
    cores = os.cpu_count() or 1
    budget = 600 * cores
    print(
        f"  {floor:.0f} CPU-s at the floors above; ten minutes of {cores} cores: {budget} CPU-s "
        f"({floor / budget:.2f} of it)"
    )


def run(work: Path, repeat: int, anatomy: bool = False, suite: Path | None = None) -> int:
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    settings = load_settings(home=work / "home", spark_ui=anatomy)
    spark = get_spark(settings, app_name="bench-delta-floor")

    def table(name: str, **properties: bool) -> str:
        """A 1,000-row table, created by the write path's ``ensure_table``."""
        path = str(work / name)
        ensure_table(spark, path, "k STRING, v BIGINT", **properties)
        rows = spark.range(1000).selectExpr("CAST(id AS STRING) AS k", "id AS v")
        rows.write.format("delta").mode("append").save(path)
        return path

    plain = table("plain")
    with_dv = table("dv", deletion_vectors=True)
    with_cdf = table("cdf", change_data_feed=True)

    def merge(path: str, **conf: str) -> Callable[[int], None]:
        def op(i: int) -> None:
            for key, value in conf.items():
                spark.conf.set(key, value)
            source = spark.createDataFrame([(str(i % 2000), i)], "k STRING, v LONG")
            (
                DeltaTable.forPath(spark, path)
                .alias("t")
                .merge(source.alias("s"), "t.k = s.k")
                .whenMatchedUpdateAll()
                .whenNotMatchedInsertAll()
                .execute()
            )
            for key in conf:
                spark.conf.unset(key)

        return op

    def append(i: int) -> None:
        spark.createDataFrame([(f"new-{i}", i)], "k STRING, v LONG").write.format("delta").mode(
            "append"
        ).save(plain)

    def create(i: int, folder: str = "created") -> None:
        ensure_table(spark, str(work / folder / str(i)), "k STRING, v BIGINT")

    def into_new_table(i: int) -> None:
        with interpreted(spark):  # as the write path applies a small date
            merge(str(work / "new" / str(i)))(i)

    # The reads after a MERGE: of its new version (whose state Delta computes on first use),
    # again, and of the version before it (time travel), as a view recomputed from the state
    # the MERGE started from would read.
    merged = table("merged")
    before_merge: list[int] = []

    def merge_first(i: int) -> None:
        before_merge[:] = [DeltaTable.forPath(spark, merged).history(1).first()["version"]]
        merge(merged)(i)

    def read_merged(version: bool = False) -> Callable[[int], None]:
        def op(i: int) -> None:
            reader = spark.read.format("delta")
            if version:
                reader = reader.option("versionAsOf", before_merge[0])
            reader.load(merged).where(F.col("k") == str(i)).collect()

        return op

    # Run before an operation, untimed: the new table a MERGE goes into; the MERGE a read follows.
    prepare: dict[str, Callable[[int], None]] = {
        "one-row MERGE into a new table, interpreted": lambda i: create(i, "new"),
        "read after a MERGE, its new version": merge_first,
        "read after a MERGE, the version before it": merge_first,
    }
    operations: list[tuple[str, Callable[[int], None]]] = [
        ("trivial Spark job", lambda i: spark.range(10).collect()),
        ("table created", create),
        (
            "filtered read, collected",
            lambda i: spark.read.format("delta").load(plain).where(F.col("k") == str(i)).collect(),
        ),
        ("one-row append", append),
        ("one-row MERGE", merge(plain)),
        ("one-row MERGE, deletion vectors", merge(with_dv)),
        ("one-row MERGE, change data feed", merge(with_cdf)),
        ("one-row MERGE, source not materialised", merge(plain, **{MATERIALIZE: "none"})),
        ("one-row MERGE into a new table, interpreted", into_new_table),
        ("read after a MERGE, its new version", read_merged()),
        ("the same read again", read_merged()),
        ("read after a MERGE, the version before it", read_merged(version=True)),
        ("the same read again (that version)", read_merged(version=True)),
    ]
    for label, op in operations:  # warm the JVM once over every code path
        prepare.get(label, lambda i: None)(-1)
        op(-1)
    times: dict[str, list[float]] = {label: [] for label, _ in operations}
    cpu: dict[str, list[float]] = {label: [] for label, _ in operations}
    for i in range(repeat):  # round robin: a slower minute weighs on every operation alike
        for label, op in operations:
            prepare.get(label, lambda i: None)(i)
            started, used = time.perf_counter(), session_cpu()
            op(i)
            times[label].append(time.perf_counter() - started)
            cpu[label].append(session_cpu() - used)
    print(
        f"{'operation':42} {'median':>8} {'min':>8} {'CPU':>8}   ({repeat} runs each; CPU: median)"
    )
    for label, taken in times.items():
        print(
            f"{label:42} {statistics.median(taken):7.3f}s {min(taken):7.3f}s "
            f"{statistics.median(cpu[label]):7.3f}s",
            flush=True,
        )
    if suite:
        suite_floor(suite, {label: statistics.median(c) for label, c in cpu.items()})
    if anatomy:
        taken_apart(spark, lambda: merge(plain)(repeat + 1))
    spark.stop()
    return 0


def taken_apart(spark, operation: Callable[[], None]) -> None:  # type: ignore[no-untyped-def]
    """Run ``operation`` once and print the queries Spark ran for it (from its REST API)."""
    ui = spark.sparkContext.uiWebUrl
    api = f"{ui}/api/v1/applications/{spark.sparkContext.applicationId}"

    def executions() -> list[dict]:  # type: ignore[type-arg]
        with urllib.request.urlopen(f"{api}/sql?details=false&length=100000") as answer:
            return json.load(answer)  # type: ignore[no-any-return]

    before = {q["id"] for q in executions()}
    started = time.perf_counter()
    operation()
    wall = time.perf_counter() - started
    print(f"\none one-row MERGE taken apart: {wall:.3f} s of wall time")
    ran = sorted((q for q in executions() if q["id"] not in before), key=lambda q: q["id"])
    # The MERGE command is one query; what Delta runs for it are queries nested under it.
    nested = [q for q in ran if q.get("rootExecutionId", q["id"]) != q["id"]]
    jobs = 0
    for q in nested:
        ids = q.get("successJobIds", []) + q.get("failedJobIds", [])
        jobs += len(ids)
        print(f"  {q['duration'] / 1000:6.3f} s  {len(ids)} job(s)  {q['description'][:90]}")
    in_queries = sum(q["duration"] for q in nested) / 1000
    print(
        f"  {len(nested)} queries inside it, {jobs} Spark jobs, {in_queries:.3f} s in them; "
        f"{wall - in_queries:.3f} s outside them (planning, reading the log, the commit)"
    )


if __name__ == "__main__":
    sys.exit(main())
