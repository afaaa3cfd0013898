"""spark-submit decides master and resources: the job's code never overrides them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from flows.trades import FLOW
from flows.trades.generate import generate_day
from streamshift.engine.spark import submit_args
from streamshift.engine.write.target import read
from streamshift.spec.catalog import LayerTables
from streamshift.spec.settings import load_settings

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
DAY = "2026-11-20"


def test_spark_submit_master_wins_and_the_eod_job_loads(spark, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import datetime as dt

    files = generate_day(
        dt.date.fromisoformat(DAY), 300, tmp_path / "files", seed=4, progress=False
    )
    home = tmp_path / "home"
    gc_log = tmp_path / "gc.log"
    settings = load_settings(
        {}, home=home, spark_driver_java_options=f"-XX:+UseParallelGC -Xlog:gc:file={gc_log}"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMSHIFT_")}
    env.update(
        STREAMSHIFT_HOME=str(home),
        # What the local Airflow gives spark-submit: the venv's Spark, loopback, this Python.
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
    )
    # The local deployment's arguments (jars, tuning), with spark-submit's own master: the
    # settings say local[*], spark-submit says local[1], and spark-submit must win.
    env["STREAMSHIFT_SPARK_MASTER"] = "local[*]"
    # The suite's JVMs run the serial collector; this one runs as a job outside the suite does
    # (the options are chosen against the environment the job is submitted from).
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "").replace("-XX:+UseSerialGC", "")
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", opts)
    env["SPARK_SUBMIT_OPTS"] = opts
    args = submit_args(settings)
    args[args.index("--master") + 1] = "local[1]"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "spark-submit"),
            *args,
            str(REPO / "spark_jobs" / "run.py"),
            "eod",
            "--flow",
            "trades",
            "--date",
            DAY,
            "--file",
            str(files.eod),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # spark-submit's PythonRunner merges the Python driver's stderr into its stdout.
    output = done.stdout + done.stderr
    spark_lines = [line for line in output.splitlines() if line.startswith("Spark ")]
    assert spark_lines == ["Spark local[1] (submitted profile)"], output[-3000:]
    assert "accepted" in done.stdout
    # The driver ran with the configured collector (the JVM's default here is G1).
    assert "Using Parallel" in gc_log.read_text()

    # The load happened: every trade of the file is live in the batch layer's current state.
    current = read(spark, LayerTables(settings.warehouse, FLOW, "batch").current)
    in_file = {line.split(",")[0] for line in files.eod.read_text().splitlines()[1:] if line}
    stored = {
        r[0] for r in current.where(F.col("business_date") == DAY).select("trade_id").collect()
    }
    assert stored == in_file
