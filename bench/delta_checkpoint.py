"""What a cold reader pays for a sparser Delta checkpoint: the first read of a table by a new
process, the table at ``delta.checkpointInterval`` 10 (Delta's default) and at 100.

A long-lived session (the engine, a running stream) updates its snapshot commit by commit, so
fewer checkpoints spare the committing batch the checkpoint's write
(``bench/small_apply.py --variants base checkpoint_100``). A new process instead starts from the
last checkpoint and replays the commits after it: up to 9 at the default, up to 99 at 100. Here
two tables get ``--commits`` one-row appends each (one per interval), then ``--readers`` new
processes (one JVM each, as a command without the engine) each read a third table first (JVM
and Delta warm-up, untimed), then both tables in alternating order, timing each first read
(``count()``: the snapshot is built, then the files scanned). Prints each side's median and their
ratio.

Run: .venv/bin/python bench/delta_checkpoint.py [--commits 95] [--readers 6]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

READER = """
import json, sys, time
sys.path.insert(0, {root!r})
from streamshift.engine.spark import get_spark
from streamshift.spec.settings import load_settings
spark = get_spark(load_settings(home={home!r}, engine=""), profile="local")
spark.read.format("delta").load({warm!r}).count()
out = {{}}
for label, path in {order!r}:
    t = time.perf_counter()
    spark.read.format("delta").load(path).count()
    out[label] = time.perf_counter() - t
print("RESULT " + json.dumps(out))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=95, help="one-row appends per table")
    parser.add_argument("--readers", type=int, default=6, help="new processes, one read each")
    args = parser.parse_args()
    root = str(Path(__file__).resolve().parent.parent)
    work = Path(tempfile.mkdtemp(prefix="streamshift-checkpoint-"))
    try:
        from streamshift.engine.spark import get_spark
        from streamshift.spec.settings import load_settings

        home = str(work / "home")
        spark = get_spark(load_settings(home=home, engine=""), profile="local")
        tables = {"interval 10": str(work / "ten"), "interval 100": str(work / "hundred")}
        for (label, path), interval in zip(tables.items(), (10, 100), strict=True):
            spark.sql(
                f"CREATE TABLE delta.`{path}` (k INT, v DOUBLE) USING delta "
                f"TBLPROPERTIES ('delta.checkpointInterval' = '{interval}')"
            )
            for i in range(args.commits):
                spark.createDataFrame([(i, 1.0)], "k int, v double").write.format("delta").mode(
                    "append"
                ).save(path)
            checkpoints = sorted((Path(path) / "_delta_log").glob("*.checkpoint.parquet"))
            print(f"[bench] {label}: {args.commits} commits, {len(checkpoints)} checkpoints")
        warm = str(work / "warm")
        spark.createDataFrame([(0, 1.0)], "k int, v double").write.format("delta").save(warm)
        spark.stop()
        times: dict[str, list[float]] = {label: [] for label in tables}
        for r in range(args.readers):
            order = list(tables.items())
            order = order if r % 2 == 0 else order[::-1]
            code = READER.format(root=root, home=home, warm=warm, order=order)
            done = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            )
            line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
            for label, seconds in json.loads(line.removeprefix("RESULT ")).items():
                times[label].append(seconds)
            print(
                f"[bench] reader {r + 1}: "
                + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items())
            )
        medians = {label: statistics.median(t) for label, t in times.items()}
        print(
            f"first read, interval 100 / interval 10: {medians['interval 100']:.2f} / "
            f"{medians['interval 10']:.2f} = {medians['interval 100'] / medians['interval 10']:.2f}"
        )
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
