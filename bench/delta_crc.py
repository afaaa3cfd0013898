"""A one-row MERGE into a table of many small files, with and without its file list in the
commit's checksum file.

Delta writes a table's file list into each commit's ``.crc`` file while the table has fewer
files than ``spark.databricks.delta.allFilesInCrc.thresholdNumFiles`` (50); the next MERGE then
starts from that list instead of replaying the log. A stream's per-batch appends pass 50 files
within minutes (upkeep compacts them). In one session: a table of ``--files`` one-row files,
then ``--merges`` one-row MERGEs, once with the default threshold and once with it raised above
the file count. Both tables are built first (each commit under its side's threshold), then
``--warmup`` untimed MERGEs per side, then the timed MERGEs alternate between the sides, so the
JIT's warm-up favours neither; prints each side's median and their ratio.

Run: .venv/bin/python bench/delta_crc.py [--files 300] [--merges 12] [--warmup 4]
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
    parser.add_argument("--warmup", type=int, default=4, help="untimed MERGEs per side first")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="streamshift-crc-"))
    try:
        settings = load_settings(home=work / "home", engine="")
        spark = get_spark(settings, profile="local")
        sides = {"default": "50", "raised": str(args.files * 10)}
        for label, threshold in sides.items():
            spark.conf.set(THRESHOLD, threshold)
            path = str(work / label)
            spark.sql(f"CREATE TABLE delta.`{path}` (k INT, v DOUBLE) USING delta")
            for i in range(args.files):
                spark.createDataFrame([(i, 1.0)], "k int, v double").write.format("delta").mode(
                    "append"
                ).save(path)
            print(f"[bench] {label}: {args.files} one-row files ({THRESHOLD}={threshold})")

        def merge(label: str, k: int) -> float:
            spark.conf.set(THRESHOLD, sides[label])
            started = time.perf_counter()
            spark.sql(
                f"MERGE INTO delta.`{work / label}` t USING (SELECT {k} AS k, 2.0 AS v) s "
                "ON t.k = s.k WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
            )
            return time.perf_counter() - started

        for i in range(args.warmup):
            for label in sides:
                merge(label, i)
        times: dict[str, list[float]] = {label: [] for label in sides}
        for i in range(args.merges):
            for label in sides if i % 2 == 0 else reversed(list(sides)):
                times[label].append(merge(label, args.warmup + i))
        medians = {label: statistics.median(t) for label, t in times.items()}
        for label, t in times.items():
            print(
                f"[bench] {label}: MERGEs {', '.join(f'{x:.2f}' for x in t)} s; "
                f"median {medians[label]:.2f} s"
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
