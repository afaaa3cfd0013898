"""A class-data-sharing archive of the Spark driver's classes, made once by scripts/setup.

A Spark + Delta driver JVM loads tens of thousands of classes; reading, verifying and laying out
each one is a large part of a short job's CPU, most of it before its data matters. Java's
dynamic class-data sharing (JEP 350) dumps the classes a JVM loaded into an archive at exit
(``-XX:ArchiveClassesAtExit``); every later JVM started with ``-XX:SharedArchiveFile`` maps them
instead of loading them (bench/submit_tuning.py). The archive is made by a training run: a
small generated EOD load of the kit's bundled example flow (the project ``streamshift init``
writes) and its corrections, through spark-submit as Airflow runs them.

The archive is only valid for the JVM and classpath that made it: a JVM that cannot use it
runs without it (the warning is turned off), so a stale archive costs speed, never a job.
scripts/setup (a kit's repository) and ``streamshift setup`` (an installed kit) make it.

Run: .venv/bin/python -m streamshift.engine.cds [--output PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from streamshift.engine.spark import archive_path, submit_args, submit_env
from streamshift.spec.project import ENV as PROJECT_ENV
from streamshift.spec.registry import flow_names, get_generator
from streamshift.spec.scaffold import init_project
from streamshift.spec.settings import load_settings

TRAINING_DAY = dt.date(2026, 1, 5)


def train(output: Path) -> float:
    """Run the training jobs under ``-XX:ArchiveClassesAtExit``; returns seconds taken."""
    started = time.monotonic()
    output.unlink(missing_ok=True)  # the training driver must not map an old archive
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="streamshift-cds-") as tmp:
        home = Path(tmp) / "home"
        example = Path(tmp) / "example"
        init_project(example)
        os.environ[PROJECT_ENV] = str(example)
        flow = flow_names()[0]
        generate_day = get_generator(flow)
        files = generate_day(TRAINING_DAY, 200, Path(tmp) / "files", seed=7, progress=False)
        partial = output.with_suffix(".jsa.part")
        partial.unlink(missing_ok=True)
        env = submit_env(home)
        env["SPARK_SUBMIT_OPTS"] = f"-XX:ArchiveClassesAtExit={partial}"
        # One driver loads the day, then its corrections (MERGE with deletion vectors): the
        # classes of the write path, Delta's log and CSV reading.
        script = Path(tmp) / "train.py"
        script.write_text(
            "import datetime, pathlib, sys\n"
            "from streamshift.engine.jobs.execute import run_here\n"
            "from streamshift.spec.requests import EodRequest\n"
            f"day = datetime.date.fromisoformat('{TRAINING_DAY}')\n"
            f"run_here(EodRequest({flow!r}, day, pathlib.Path({str(files.eod)!r})))\n"
            f"sys.exit(run_here(EodRequest({flow!r}, day, pathlib.Path({str(files.corrections)!r}))))\n"
        )
        local = load_settings({}, home=home, spark_master="local[2]")
        args = submit_args(local)
        done = subprocess.run(
            [str(Path(sys.executable).parent / "spark-submit"), *args, str(script)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not partial.is_file():
            raise SystemExit(
                "the class-data-sharing training run failed; Spark jobs still run, only slower. "
                f"Its output:\n{(done.stdout + done.stderr)[-3000:]}"
            )
        partial.replace(output)
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streamshift.engine.cds",
        description="Make the Spark driver's class-data-sharing archive (scripts/setup runs it).",
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="archive path (default: this virtualenv's, share/streamshift/classes.jsa)",
    )
    args = parser.parse_args(argv)
    output = args.output or archive_path()
    print(f"[setup] training the Spark driver's class-data-sharing archive ({output})", flush=True)
    seconds = train(output)
    size = output.stat().st_size / 2**20
    print(f"[setup] class-data-sharing archive ready: {size:.0f} MiB in {seconds:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
