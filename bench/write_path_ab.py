"""What a change to the write path costs: this checkout's write path against an earlier
commit's, A/B.

Work added to every apply shows most on small applies, whose cost is the write path's fixed
cost. The integrity work (``--base afb2e0c``) added a second window over each key's versions
(the version-conflict rule), a log listing after the view MERGEs (no lost update), and, for a
whole-day replacement, two run-journal commits and a time-travel read of current state; the
delivery record (``--base c61503c``) writes every later delivery of a held version, so a
trace lists it. The measures:

* ``apply``: a batch of ``--rows`` amendments through ``apply_changes`` on a loaded day (a
  stream's micro-batch, a corrections file);
* ``resend``: the same batch plus a tenth as many copies of versions the day holds, sent again
  (a producer's retry, a desk re-sending): the base drops them unrecorded;
* ``replace``: that day replaced by a file lacking ``--rows`` of its trades (``run_eod``
  with ``replace=True``: cancels, journal, apply);
* ``load``: the next day's EOD file, ``--trades`` new trades, into a date current state never
  held (``run_eod``).

Each side runs in its own process (its own Spark session) against the same files, one warm-up
then ``--repeat`` timed runs per measure; the sides alternate ``--rounds`` times and the script
prints the median seconds per measure and side, and the ratio of this checkout to the base.
The base side runs the base commit's code from a ``git worktree`` with this checkout's venv and
jars. Run:

    .venv/bin/python bench/write_path_ab.py [--base REV] [--trades N] [--rows R]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASE = "afb2e0c"  # the write path before the integrity work
MEASURES = ("apply", "resend", "replace", "load")
# The jars folder of this checkout's settings, handed to both sides (the base may look elsewhere).
JARS_VAR = "WRITE_PATH_AB_JARS"


def side(code: str, work: Path, trades: int, rows: int, repeat: int) -> dict[str, list[float]]:
    """One side's timings, in this process, with the code under ``code``."""
    sys.path.insert(0, code)
    import csv
    import datetime as dt

    from flows.trades import FLOW
    from streamshift.engine.jobs.eod import run_eod
    from streamshift.engine.spark import get_spark
    from streamshift.engine.write.apply import apply_changes
    from streamshift.engine.write.target import Target, load_reference
    from streamshift.engine.write.transforms import raw_schema
    from streamshift.spec.catalog import LayerTables
    from streamshift.spec.settings import load_settings

    assert Path(sys.modules["streamshift"].__file__ or "").is_relative_to(code)
    day = dt.date(2026, 11, 20)
    settings = load_settings(
        {},
        home=work / "home",
        jars_dir=Path(os.environ[JARS_VAR]),  # this checkout's jars, whatever the base expects
        spark_master="local[2]",
        spark_shuffle_partitions=2,
    )
    spark = get_spark(settings, app_name="write-path-ab")
    reference = load_reference(spark, FLOW)
    header = [f.name for f in FLOW.schema.fields]

    def trade(i: int, version: int, quantity: int, on: dt.date = day) -> list[str]:
        event = "NEW" if version == 1 else "AMEND"
        return [f"T{on:%m%d}-{i:07}", str(version), event, str(on), f"{on}T10:00:00Z"] + [
            "EQ-US-FLOW",
            "AAPL",
            "BUY",
            str(quantity),
            "10.00",
            "USD",
        ]

    def write(path: Path, data: list[list[str]]) -> Path:
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(data)
        old = time.time() - 3600  # complete: unchanged for an hour
        os.utime(path, (old, old))
        return path

    full = [trade(i, 1, 100) for i in range(trades)]
    day_file = write(work / "day.csv", full)
    replacement = write(work / "replacement.csv", full[rows:])
    next_day = day + dt.timedelta(days=1)
    next_file = write(work / "next.csv", [trade(i, 1, 100, next_day) for i in range(trades)])
    base_root = work / "base"
    run_eod(
        spark, Target(spark, FLOW, LayerTables(base_root, FLOW, "batch"), reference), day, day_file
    )

    times: dict[str, list[float]] = {m: [] for m in MEASURES}
    for n in range(repeat + 1):
        for measure in MEASURES:
            root = work / f"{measure}-{n}"
            shutil.copytree(base_root, root)
            target = Target(spark, FLOW, LayerTables(root, FLOW, "batch"), reference)
            started = time.perf_counter()
            if measure in ("apply", "resend"):
                amended = [(*trade(i, 2, 7), f"bench:{i}", "") for i in range(rows)]
                if measure == "resend":
                    amended += [
                        (*trade(i, 1, 100), f"bench-again:{i}", "")
                        for i in range(rows, rows + max(1, rows // 10))
                    ]
                apply_changes(FLOW, spark.createDataFrame(amended, raw_schema(FLOW)), "b", target)
            elif measure == "replace":
                run_eod(spark, target, day, replacement, replace=True)
            else:
                run_eod(spark, target, next_day, next_file)
            if n:  # the first round warms up
                times[measure].append(time.perf_counter() - started)
            shutil.rmtree(root)
    spark.stop()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=BASE, help=f"the commit to compare with ({BASE})")
    parser.add_argument("--trades", type=int, default=5_000, help="trades in the day (5,000)")
    parser.add_argument("--rows", type=int, default=60, help="rows amended or dropped (60)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per side (3)")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the sides (2)")
    parser.add_argument("--side", nargs=2, metavar=("CODE", "WORK"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        timings = side(args.side[0], Path(args.side[1]), args.trades, args.rows, args.repeat)
        print(json.dumps(timings))
        return

    scratch = Path(tempfile.mkdtemp(prefix="write-path-ab-"))
    worktree = scratch / "base-code"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(worktree), args.base],
        check=True,
        capture_output=True,
    )
    from streamshift.spec.settings import load_settings

    env = {**os.environ, JARS_VAR: str(load_settings().jars_dir)}
    results: dict[str, dict[str, list[float]]] = {"base": {}, "head": {}}
    try:
        for round_ in range(args.rounds):
            for name, code in (("base", worktree), ("head", REPO)):
                print(f"[bench] round {round_ + 1}: {name} ({code})", file=sys.stderr, flush=True)
                work = scratch / f"{name}-{round_}"
                work.mkdir()
                out = subprocess.run(
                    [sys.executable, __file__, "--side", str(code), str(work)]
                    + ["--trades", str(args.trades), "--rows", str(args.rows)]
                    + ["--repeat", str(args.repeat)],
                    env={**env, "PYTHONPATH": str(code)},
                    check=False,
                    capture_output=True,
                    text=True,
                )
                if out.returncode:
                    sys.exit(f"the {name} side failed:\n{out.stderr[-3000:]}")
                timings = json.loads(out.stdout.strip().splitlines()[-1])
                for measure, seconds in timings.items():
                    results[name].setdefault(measure, []).extend(seconds)
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)],
            check=False,
        )
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{args.trades:,}-trade day, {args.rows} rows; medians of {args.repeat * args.rounds}")
    print(f"{'measure':10} {'base s':>8} {'head s':>8} {'head/base':>10}")
    for measure in MEASURES:
        base = statistics.median(results["base"][measure])
        head = statistics.median(results["head"][measure])
        print(f"{measure:10} {base:8.2f} {head:8.2f} {head / base:10.2f}")


if __name__ == "__main__":
    main()
