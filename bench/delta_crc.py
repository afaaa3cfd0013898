"""A one-row MERGE into a table of many small files, with and without its file list in the
commit's checksum file.

Delta writes a table's file list into each commit's ``.crc`` file while the table has fewer
files than ``spark.databricks.delta.allFilesInCrc.thresholdNumFiles`` (50); the next MERGE then
starts from that list instead of replaying the log. A stream's per-batch appends pass 50 files
within minutes (upkeep compacts them). In one session: a table of ``--files`` one-row files,
then ``--merges`` one-row MERGEs, once with the default threshold and once with it raised above
the file count (``--raised-first``: in the other order); prints each side's median and their
ratio.

Run: .venv/bin/python bench/delta_crc.py [--files 300] [--merges 12] [--raised-first]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamshift.engine.spark import get_spark
from streamshift.spec.settings import load_settings

THRESHOLD = "spark.databricks.delta.allFilesInCrc.thresholdNumFiles"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300, help="one-row files in the table")
    parser.add_argument("--merges", type=int, default=12, help="timed MERGEs per side")
    parser.add_argument(
        "--raised-first", action="store_true", help="the raised side first (the JIT warms on it)"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="streamshift-crc-"))
    try:
        settings = load_settings(home=work / "home", engine="")
        spark = get_spark(settings, profile="local")
        medians = {}
        sides = [("default", "50"), ("raised", str(args.files * 10))]
        for label, threshold in reversed(sides) if args.raised_first else sides:
            spark.conf.set(THRESHOLD, threshold)
            path = str(work / label)
            spark.sql(f"CREATE TABLE delta.`{path}` (k INT, v DOUBLE) USING delta")
            for i in range(args.files):
                spark.createDataFrame([(i, 1.0)], "k int, v double").write.format("delta").mode(
                    "append"
                ).save(path)
            times = []
            for i in range(args.merges):
                started = time.perf_counter()
                spark.sql(
                    f"MERGE INTO delta.`{path}` t USING (SELECT {i} AS k, 2.0 AS v) s "
                    "ON t.k = s.k WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
                )
                times.append(time.perf_counter() - started)
            medians[label] = statistics.median(times)
            print(
                f"[bench] {label} ({THRESHOLD}={threshold}): {args.files} files, MERGEs "
                f"{', '.join(f'{t:.2f}' for t in times)} s; median {medians[label]:.2f} s"
            )
        print(
            f"raised / default: {medians['raised']:.2f} / {medians['default']:.2f} = "
            f"{medians['raised'] / medians['default']:.2f}"
        )
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
