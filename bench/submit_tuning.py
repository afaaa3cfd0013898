"""One EOD load as Airflow submits it (spark-submit spark_jobs/run.py eod), bare vs tuned conf,
and tuned with the driver JVM compiling with C1 only.

``bare``: what every deployment needs (Delta, UTC) and the shuffle partitions; ``tuned``: plus
``spark.tuning_conf`` (Delta log-replay partitions, UI off, ...), as the DAGs now submit;
``tuned_c1``: tuned, with ``SPARK_SUBMIT_OPTS`` = ``spark.SHORT_JOB_JVM_OPTS`` (no C2 JIT: a short
job spends much of its CPU compiling code it runs a few times; the test suite runs this way);
``c1_small_cache``: tuned_c1 with C1 alone's default 48 MB code cache (what the tests ran before);
``c1_interpreted``: tuned_c1 without Spark's code generation (whole-stage and expression codegen
off: small data is evaluated faster than Janino compiles the code for it);
``c1_no_cds``: tuned_c1 without the class-data-sharing archive scripts/setup makes (the driver
loads its ~25,000 classes from the jars; ``streamshift.engine.cds``).
Alternates the three ``--repeat`` times on fresh warehouses and prints each wall time and CPU
time (the job's process tree) and the ratios.
Run: .venv/bin/python bench/submit_tuning.py [--trades N] [--repeat R]
"""

from __future__ import annotations

import argparse
import datetime as dt
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _scratch import scratch

from flows.trades.generate import generate_day
from streamshift.engine.spark import SHORT_JOB_JVM_OPTS, jars, submit_conf, submit_env, tuning_conf
from streamshift.spec.settings import load_settings

DAY = dt.date(2026, 11, 20)
INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def submit(conf: dict[str, str], home: Path, eod: Path, jvm_opts: str = "") -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one spark-submit."""
    settings = load_settings({}, home=home)
    args = [arg for k, v in conf.items() for arg in ("--conf", f"{k}={v}")]
    env = submit_env(home)
    bin_dir = Path(sys.executable).parent
    if jvm_opts:
        env["SPARK_SUBMIT_OPTS"] = jvm_opts
    started, cpu = time.monotonic(), _children_cpu()
    subprocess.run(
        [
            str(bin_dir / "spark-submit"),
            "--master",
            "local[2]",
            "--jars",
            ",".join(jars(settings)),
            *args,
            str(REPO / "spark_jobs" / "run.py"),
            "eod",
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
    return time.monotonic() - started, _children_cpu() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--variants", nargs="*", help="run only these variants")
    args = parser.parse_args()
    work = scratch(None, "submit-tuning-")
    eod = generate_day(DAY, args.trades, work / "files", seed=1, progress=False).eod
    settings = load_settings({}, home=work, spark_shuffle_partitions=2)
    tuned = {**submit_conf(settings), **tuning_conf(settings)}
    no_cds = {
        **tuned,
        "spark.driver.extraJavaOptions": submit_conf(settings)["spark.executor.extraJavaOptions"],
    }
    variants = {
        "bare": ({**submit_conf(settings), "spark.sql.shuffle.partitions": "2"}, ""),
        "tuned": (tuned, ""),
        "tuned_c1": (tuned, SHORT_JOB_JVM_OPTS),
        "c1_small_cache": (tuned, "-XX:TieredStopAtLevel=1"),
        "c1_interpreted": ({**tuned, **INTERPRETED}, SHORT_JOB_JVM_OPTS),
        "c1_no_cds": (no_cds, SHORT_JOB_JVM_OPTS),
    }
    if args.variants:
        variants = {name: variants[name] for name in args.variants}
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(args.repeat):
        for name, (conf, opts) in variants.items():
            seconds, cpu_seconds = submit(conf, work / f"{name}-{i}", eod, opts)
            wall[name].append(seconds)
            cpu[name].append(cpu_seconds)
            print(
                f"{name:8} run {i + 1}: {seconds:.1f} s wall, {cpu_seconds:.1f} s CPU", flush=True
            )
    w = {name: statistics.median(v) for name, v in wall.items()}
    c = {name: statistics.median(v) for name, v in cpu.items()}
    for name in variants:
        print(f"median {name:8} {w[name]:.1f} s wall, {c[name]:.1f} s CPU")
    for a, b in (
        ("tuned", "bare"),
        ("tuned_c1", "tuned"),
        ("c1_interpreted", "tuned_c1"),
        ("tuned_c1", "c1_no_cds"),
    ):
        if a in w and b in w:
            print(f"{a}/{b} wall {w[a] / w[b]:.2f}, CPU {c[a] / c[b]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
