"""What a fresh warehouse's tables cost: created by Delta, or copied from templates.

Every test of the suite that writes starts from a fresh warehouse, whose layer opens by
creating its tables (current state, history, quarantine, late events, the run journal, day
closes, each view): one Delta commit each. With ``STREAMSHIFT_TABLE_TEMPLATES`` set, a table is
copied from an empty template of its definition instead (made by Delta once). This script opens
``--layers`` fresh layers of the trades flow each way in one Spark session, alternating, and
prints the median seconds per layer and the ratio. Run:

    .venv/bin/python bench/table_templates.py [--layers N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flows.trades import FLOW
from streamshift.engine.spark import get_spark
from streamshift.engine.write.target import Target, load_reference
from streamshift.spec.catalog import LayerTables
from streamshift.spec.settings import load_settings

VARIABLE = "STREAMSHIFT_TABLE_TEMPLATES"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=8, help="fresh layers per side (8)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="table-templates-") as tmp:
        root = Path(tmp)
        settings = load_settings(
            {}, home=root / "home", spark_master="local[2]", spark_shuffle_partitions=2
        )
        spark = get_spark(settings, app_name="table-templates")
        reference = load_reference(spark, FLOW)

        def open_layer(name: str, templates: str) -> float:
            os.environ[VARIABLE] = templates
            try:
                tables = LayerTables(root / name, FLOW, "batch")
                started = time.perf_counter()
                Target(spark, FLOW, tables, reference).create_tables()
                return time.perf_counter() - started
            finally:
                os.environ.pop(VARIABLE, None)

        templates = str(root / "templates")
        open_layer("warm-up-created", "")
        open_layer("warm-up-copied", templates)  # (makes the templates)
        seconds: dict[str, list[float]] = {"created": [], "copied": []}
        for i in range(args.layers):
            seconds["created"].append(open_layer(f"created-{i}", ""))
            seconds["copied"].append(open_layer(f"copied-{i}", templates))
        spark.stop()
    medians = {side: statistics.median(values) for side, values in seconds.items()}
    for side, value in medians.items():
        print(f"{side}: a fresh layer's tables in {value:.2f} s (median of {args.layers})")
    print(f"copied / created: {medians['copied'] / medians['created']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
