"""Where the test suite's CPU goes, by kind of process, and the floor its Delta commits set.

Runs ``bin/test`` (set-up, lint, the whole suite on two workers) with its pytest base temp
folder kept, reading every process's CPU time from ``/proc`` once a second meanwhile; a
process's last reading is its CPU (one living under a second may be missed; the kernel's and
the machine's own processes are left out). Then prints the CPU by kind of process, the share of
the cores the run kept busy, and runs ``bench/delta_floor.py --suite`` on the kept folder: the
run's Delta commits costed at the one-commit CPU floors, against ten minutes of the cores.

Run: .venv/bin/python bench/suite_cpu.py [--repeat N] [-- PYTEST ARGS]   (about half an hour)
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamshift.store.processes import cpu_seconds, process_stats

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Seen:
    command: str
    cpu: float


def machine_ticks() -> tuple[int, int]:
    """(all, idle) jiffies of the machine since boot."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]


def sample(seen: dict[tuple[int, int], Seen], before: set[int]) -> None:
    """Every process's CPU now, keyed by (pid, start time); those of ``before`` skipped."""
    for pid, fields in process_stats():
        if pid in before:
            continue
        key = (pid, int(fields[19]))
        if key not in seen or seen[key].command.startswith("bash "):
            # a script (spark-submit, spark-class) becomes the JVM it executes
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue  # gone since its stat was read
            seen[key] = Seen(raw.replace(b"\0", b" ").decode(), seen.get(key, Seen("", 0)).cpu)
        seen[key].cpu = cpu_seconds(fields)


def kind(process: Seen) -> str:
    """What a process is, from its command line (a JVM's first one may be spark-class's)."""
    command = process.command
    jvm = command.startswith(("java ", "/usr/lib/jvm")) or "spark-class" in command
    if "SparkConnectServer" in command:
        return "the warm engine (Spark Connect server)"
    if jvm and "streamshift-tests" in command:
        return "the pytest workers' own Spark sessions"
    if jvm and "/kafka/lib/" in command:
        return "the Kafka broker"
    if jvm and ("deploy.master" in command or "deploy.worker" in command):
        return "the standalone cluster's master and worker"
    if jvm and "CoarseGrainedExecutorBackend" in command:
        return "the standalone cluster's executors"
    if jvm:
        return "other Spark JVMs (streams, spark-submit, commands without the engine)"
    if "chrom" in command:
        return "Chromium and its driver"
    if "airflow" in command or "streamshift_dags" in command:
        return "Airflow (its components, tasks, DAG parsing)"
    if "pyspark.daemon" in command or "pyspark.worker" in command:
        return "PySpark's Python workers"
    if "exec(eval(sys.stdin" in command or "pytest" in command:
        return "pytest (its controller and workers, Python side)"
    if "streamshift" in command or "streaming/run.py" in command or "spark_jobs" in command:
        return "streamshift's Python processes (commands, the runner, stream drivers)"
    return "other processes"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each floor operation")
    parser.add_argument("pytest_args", nargs="*", help="after --: more arguments for pytest")
    args = parser.parse_args()
    basetemp = Path(tempfile.mkdtemp(prefix="streamshift-suite-"))
    before = {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()}
    seen: dict[tuple[int, int], Seen] = {}
    done = threading.Event()

    def sampler() -> None:
        while not done.is_set():
            sample(seen, before)
            done.wait(1.0)

    thread = threading.Thread(target=sampler, daemon=True)
    print(f"[bench] bin/test --basetemp {basetemp} (about half an hour) ...", file=sys.stderr)
    start, (all0, idle0) = time.monotonic(), machine_ticks()
    thread.start()
    test = subprocess.run(
        ["bin/test", f"--basetemp={basetemp}", *args.pytest_args], cwd=ROOT, check=False
    )
    done.set()
    thread.join()
    wall = time.monotonic() - start
    all1, idle1 = machine_ticks()
    cpu: Counter[str] = Counter()
    for process in seen.values():  # this process was running before: not among them
        cpu[kind(process)] += process.cpu
    total = sum(cpu.values())
    busy = 1 - (idle1 - idle0) / max(1, all1 - all0)
    print(f"\nbin/test: exit {test.returncode}, {wall:.0f} s, the cores {busy:.0%} busy")
    print(f"CPU of the processes it started: {total:.0f} s")
    for name, seconds in cpu.most_common():
        print(f"  {seconds:7.0f} s  {seconds / total:5.1%}  {name}")
    sys.stdout.flush()
    floor = subprocess.run(
        [sys.executable, "bench/delta_floor.py", "--repeat", str(args.repeat), "--suite", basetemp],
        cwd=ROOT,
        check=False,
    )
    shutil.rmtree(basetemp, ignore_errors=True)
    return test.returncode or floor.returncode


if __name__ == "__main__":
    sys.exit(main())
