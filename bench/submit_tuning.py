"""One EOD load as Airflow submits it (spark-submit spark_jobs/eod.py), bare vs tuned conf.

``bare``: what every deployment needs (Delta, UTC) and the shuffle partitions; ``tuned``: plus
``spark.tuning_conf`` (Delta log-replay partitions, UI off, ...), as the DAGs now submit.
Alternates the two ``--repeat`` times on fresh warehouses and prints each time and the ratio.
Run: .venv/bin/python bench/submit_tuning.py [--trades N] [--repeat R]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from flows.trades.generate import generate_day
from streamshift.core.settings import load_settings
from streamshift.spark import jars, submit_conf, tuning_conf

DAY = dt.date(2026, 11, 20)


def submit(conf: dict[str, str], home: Path, eod: Path) -> float:
    settings = load_settings({}, home=home)
    args = [arg for k, v in conf.items() for arg in ("--conf", f"{k}={v}")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMSHIFT_")}
    bin_dir = Path(sys.executable).parent
    env.update(
        STREAMSHIFT_HOME=str(home),
        PATH=f"{bin_dir}{os.pathsep}{env['PATH']}",
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
    )
    started = time.monotonic()
    subprocess.run(
        [
            str(bin_dir / "spark-submit"),
            "--master",
            "local[2]",
            "--jars",
            ",".join(jars(settings)),
            *args,
            str(REPO / "spark_jobs" / "eod.py"),
            "--flow",
            "trades",
            "--date",
            str(DAY),
            "--file",
            str(eod),
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="submit-tuning-"))
    eod = generate_day(DAY, args.trades, work / "files", seed=1, progress=False).eod
    settings = load_settings({}, home=work, spark_shuffle_partitions=2)
    confs = {
        "bare": {**submit_conf(settings), "spark.sql.shuffle.partitions": "2"},
        "tuned": {**submit_conf(settings), **tuning_conf(settings)},
    }
    times: dict[str, list[float]] = {name: [] for name in confs}
    for i in range(args.repeat):
        for name, conf in confs.items():
            seconds = submit(conf, work / f"{name}-{i}", eod)
            times[name].append(seconds)
            print(f"{name:6} run {i + 1}: {seconds:.1f} s", flush=True)
    bare, tuned = statistics.median(times["bare"]), statistics.median(times["tuned"])
    print(f"median bare {bare:.1f} s, tuned {tuned:.1f} s, tuned/bare {tuned / bare:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
