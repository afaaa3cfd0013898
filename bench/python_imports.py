"""CPU of the imports every process of a run pays, with and without the bytecode cache.

Every Airflow component, CLI call and spark-submit driver is a new Python process that
imports its modules from .venv. scripts/setup compiles .venv (and the project) to bytecode;
without that, and with PYTHONDONTWRITEBYTECODE set or a read-only .venv, each process compiles
every module it imports from source. Here each import set runs in a new interpreter, the two
variants alternating, ``--repeat`` times each; "no cache" points PYTHONPYCACHEPREFIX at an empty
folder (Python then finds no .pyc) and forbids writing one. Figures: median user+system CPU of
the child, and the ratio cached / uncached, all in one run.

Run: .venv/bin/python bench/python_imports.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What a kind of process imports before it does any work.
IMPORTS = {
    "CLI / spark-submit driver (streamshift.cli, pyspark.sql)": "import streamshift.cli, pyspark.sql",
    "EOD job's quality step (great_expectations)": "import great_expectations",
    "Airflow task or component (airflow.sdk, the Spark provider)": (
        "import airflow.sdk, airflow.providers.apache.spark.operators.spark_submit"
    ),
    "the DAG file (dags/streamshift_dags.py)": "import runpy; runpy.run_path('dags/streamshift_dags.py')",
}


def cpu_of(code: str, env: dict[str, str]) -> float:
    """User + system CPU seconds of a new interpreter running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each variant")
    args = parser.parse_args()
    cached = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    cached.pop("PYTHONPYCACHEPREFIX", None)
    with tempfile.TemporaryDirectory(prefix="streamshift-nopyc-") as empty:
        uncached = {**cached, "PYTHONPYCACHEPREFIX": empty}
        print(f"{'imports':<62} {'no cache':>9} {'cached':>8} {'ratio':>6}")
        totals = [0.0, 0.0]
        for name, code in IMPORTS.items():
            runs: dict[str, list[float]] = {"no cache": [], "cached": []}
            for i in range(args.repeat):
                print(f"  {name}: run {i + 1}/{args.repeat}", file=sys.stderr, flush=True)
                runs["no cache"].append(cpu_of(code, uncached))
                runs["cached"].append(cpu_of(code, cached))
            slow, fast = (statistics.median(runs[k]) for k in ("no cache", "cached"))
            totals[0] += slow
            totals[1] += fast
            print(f"{name:<62} {slow:8.2f}s {fast:7.2f}s {fast / slow:6.2f}")
        print(f"{'all four':<62} {totals[0]:8.2f}s {totals[1]:7.2f}s {totals[1] / totals[0]:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
