"""The fixed cost of a small apply (a micro-batch, a correction file), A/B over session confs.

A stream's micro-batch of ~1,000 events, a corrections file of a few hundred rows and every
EOD day in the test suite are small applies: their cost is the write path's fixed cost (Spark
jobs, Delta commits and log reads), not their data. One Spark session loads a day of
``--trades`` trades, then applies ``--batches`` batches of ``--rows`` amendments per variant,
the variants alternating batch by batch, and prints the median seconds per apply, the median
per step, and each variant's ratio to the first.

Variants are Spark session confs set before each of that variant's applies:
  base            the local profile as shipped (a small apply on a small day runs interpreted)
  codegen         base, but every apply with generated code (``INTERPRET_BELOW_BYTES = 0``)
  no_aqe          ``spark.sql.adaptive.enabled=false``: one job per query instead of one per
                  query stage, with no re-planning between them
  crc_files       each commit's checksum file lists the table's files up to 100,000 (Delta's
                  default: 50), so a new snapshot needs no log-replay job; a table's checksums
                  are written by its commits, so run this variant alone
  no_wscg         codegen, with ``spark.sql.codegen.wholeStage=false``: expressions are still
                  generated, comment-stripped and compiled by Janino
  interpreted     every apply interpreted (``streamshift.engine.spark.INTERPRETED_CONF``), whatever
                  the size of the day
  interval_10     base, its tables' ``delta.checkpointInterval`` set to Delta's default 10 (a
                  checkpoint written by every 10th commit, which that commit waits for)
  compare_first   base, each view's groups compared with the stored view before its MERGE
                  (the write path's way when an apply changed no current-state row) instead of
                  in the MERGE's conditions
  interval_100    base, into a second copy of the day (the stream layer's tables) whose tables
                  have ``delta.checkpointInterval`` 100 (the kit's tables as created)
``--engine``: the applies run on a local warm engine (a Spark Connect server started for the
bench) instead of in a session of the bench's own: the session confs are the client
session's on the engine, and the engine's JIT and generated-code cache stay warm between
applies, as they do between jobs.

Run: .venv/bin/python bench/small_apply.py [--trades N] [--rows R] [--batches B] [--variants ...]
     [--engine]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _amend import amendment
from _scratch import scratch
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from flows.trades.generate import generate_day
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.spark import INTERPRETED_CONF, connect_session, get_spark
from streamshift.engine.write import target as write_target
from streamshift.engine.write import views as write_views
from streamshift.engine.write.apply import apply_changes
from streamshift.engine.write.target import Target, read
from streamshift.engine.write.transforms import raw_schema
from streamshift.local.engine import LocalEngine
from streamshift.spec.contract import IS_DELETED
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import load_settings
from streamshift.store.processes import free_port

DAY = dt.date(2026, 11, 20)
VARIANTS: dict[str, dict[str, str]] = {
    "base": {},
    "no_aqe": {"spark.sql.adaptive.enabled": "false"},
    "crc_files": {"spark.databricks.delta.allFilesInCrc.thresholdNumFiles": "100000"},
    "codegen": {},
    "no_wscg": {"spark.sql.codegen.wholeStage": "false"},
    "interpreted": INTERPRETED_CONF,
    "interval_10": {},
    "interval_100": {},
    "compare_first": {},
}
# The write path's own size rule, per variant (default: as shipped).
INTERPRET_BELOW = {"codegen": 0, "no_wscg": 0, "interpreted": 1 << 62}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=5_000, help="size of the loaded day")
    parser.add_argument("--rows", type=int, default=60, help="amendments per apply")
    parser.add_argument("--batches", type=int, default=6, help="applies per variant")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument(
        "--engine", action="store_true", help="apply on a local warm engine (Spark Connect)"
    )
    args = parser.parse_args()
    work = scratch(None, "streamshift-small-apply-")
    if not args.engine:
        return run(
            args, work, get_spark(load_settings(home=work / "home"), app_name="bench-small-apply")
        )
    url = f"sc://127.0.0.1:{free_port()}"
    engine = LocalEngine(load_settings(home=work / "engine-home", engine=url))
    print(f"[bench] starting the engine at {url} ...", flush=True)
    engine.start()
    try:
        spark = connect_session(url)
        try:
            return run(args, work, spark)
        finally:
            spark.stop()
    finally:
        engine.stop()


def run(args: argparse.Namespace, work: Path, spark: SparkSession) -> int:
    settings = load_settings(home=work / "home")
    flow = get_flow("trades")
    files = generate_day(DAY, args.trades, work / "files", seed=5, progress=False)
    target = Target.open(spark, settings, flow, "batch")
    run_eod(spark, target, DAY, files.eod)
    targets = dict.fromkeys(args.variants, target)

    def interval(layer: str, n: int) -> None:
        for path in sorted(str(p.parent) for p in (work / "home").rglob(f"{layer}/**/_delta_log")):
            spark.sql(
                f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '{n}')"
            )

    if "interval_10" in args.variants:
        interval("batch", 10)
    if "interval_100" in args.variants:
        sparse = Target.open(spark, settings, flow, "stream")
        run_eod(spark, sparse, DAY, files.eod)
        interval("stream", 100)
        targets["interval_100"] = sparse
    live = read(spark, target.tables.current).where(~F.col(IS_DELETED))
    pool = live.limit(args.rows * args.batches * len(args.variants) + args.rows).collect()
    on = "the engine" if args.engine else "a session of this process"
    print(
        f"[bench] loaded {args.trades} trades on {on}; {args.batches} applies of {args.rows} rows"
    )
    defaults = {k: spark.conf.get(k, None) for conf in VARIANTS.values() for k in conf}
    shipped = write_target.INTERPRET_BELOW_BYTES

    def amendments(rows: list, tag: str) -> object:  # type: ignore[type-arg]
        data = [amendment(r, f"{tag}:{i}") for i, r in enumerate(rows)]
        return spark.createDataFrame(data, raw_schema(flow))

    # A warm-up apply: the first touch of each code path is not what a micro-batch pays.
    for warm in {id(t): t for t in targets.values()}.values():
        apply_changes(flow, amendments(pool[: args.rows], "warm"), "bench", warm)
    seconds: dict[str, list[float]] = {v: [] for v in args.variants}
    steps: dict[str, dict[str, list[float]]] = {v: {} for v in args.variants}
    at = args.rows
    for b in range(args.batches):
        for name in args.variants:
            for k, v in defaults.items():
                spark.conf.set(k, v) if v is not None else spark.conf.unset(k)
            for k, v in VARIANTS[name].items():
                spark.conf.set(k, v)
            write_target.INTERPRET_BELOW_BYTES = INTERPRET_BELOW.get(name, shipped)
            write_views.COMPARE_IN_MERGE = name != "compare_first"
            batch, at = pool[at : at + args.rows], at + args.rows
            t = time.perf_counter()
            result = apply_changes(flow, amendments(batch, f"{name}-{b}"), "bench", targets[name])
            seconds[name].append(time.perf_counter() - t)
            assert result.applied == len(batch), result.describe()
            for step, s in result.seconds_by_step.items():
                steps[name].setdefault(step, []).append(s)
            print(f"[bench] {name} apply {b + 1}: {seconds[name][-1]:.2f}s", flush=True)
    first = statistics.median(seconds[args.variants[0]])
    for name in args.variants:
        median = statistics.median(seconds[name])
        per_step = ", ".join(f"{s} {statistics.median(v):.2f}" for s, v in steps[name].items())
        p90 = statistics.quantiles(seconds[name], n=10)[-1] if len(seconds[name]) > 1 else median
        print(
            f"{name:15} median {median:.2f}s ({median / first:.2f} of {args.variants[0]}), "
            f"p90 {p90:.2f}s, max {max(seconds[name]):.2f}s"
        )
        print(f"{'':15} steps: {per_step}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
