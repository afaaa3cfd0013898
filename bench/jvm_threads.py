"""Where the JVMs a command starts spend their CPU, by thread: the JIT's compilers, the
collector, Spark's tasks, and the threads that plan and run PySpark's calls.

Runs the command after ``--`` (e.g. a pytest selection in one worker), reading the CPU of every
thread of each JVM it starts directly (the pytest worker's own Spark session, the suite's warm
engine) from ``/proc`` twice a second; a thread's last reading is its CPU. Prints the command's
wall time and each JVM kind's threads by name (numbers folded: ``Executor task launch worker
for task 12`` counts with the others). ``TESTS_WORKER_JVM_OPTS`` in the environment replaces the
JVM options of the suite's worker sessions (``tests/conftest.py``) and ``TESTS_GENERATED_CODE=1``
keeps their code generation on (they run interpreted otherwise), e.g. to compare C1 only:

Run: TESTS_WORKER_JVM_OPTS="-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m
     -XX:+UseSerialGC" .venv/bin/python bench/jvm_threads.py -- .venv/bin/python -m pytest -q
     -p no:cacheprovider tests/test_eod_files.py tests/test_hostile_keys.py
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamshift.store.processes import cpu_seconds, process_stats, stat_fields

ROOT = Path(__file__).resolve().parent.parent


def jvm_kind(pid: int) -> str | None:
    """``engine`` or ``session`` for a JVM, None for any other process."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if not command or not command[0].endswith(b"java"):
        return None
    return "engine" if any(b"SparkConnectServer" in part for part in command) else "session"


def sample(parent: int, seen: dict[tuple[int, int], tuple[str, float]]) -> None:
    """Each thread's CPU now, of the JVMs ``parent`` started, keyed by (pid, thread id)."""
    for pid, fields in process_stats():
        if int(fields[1]) != parent or (kind := jvm_kind(pid)) is None:
            continue
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                stat = stat_fields((task / "stat").read_text())
                name = (task / "comm").read_text().strip()
            except OSError:
                continue  # the thread ended while we looked
            folded = re.sub(r"(?<!C)\d+", "N", name)  # digits folded, not C1's and C2's
            seen[(pid, int(task.name))] = (f"{kind}: {folded}", cpu_seconds(stat))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=20, help="thread kinds to print")
    parser.add_argument("command", nargs="+", help="after --: the command to run")
    args = parser.parse_args()
    seen: dict[tuple[int, int], tuple[str, float]] = {}
    started = time.monotonic()
    command = subprocess.Popen(args.command, cwd=ROOT)
    while command.poll() is None:
        sample(command.pid, seen)
        time.sleep(0.5)
    wall = time.monotonic() - started
    cpu: Counter[str] = Counter()
    for name, seconds in seen.values():
        cpu[name] += seconds
    total = sum(cpu.values())
    print(f"\nexit {command.returncode}, {wall:.0f} s; the JVMs' CPU {total:.0f} s")
    for name, seconds in cpu.most_common(args.top):
        print(f"  {seconds:7.1f} s  {seconds / max(total, 1e-9):5.1%}  {name}")
    return command.returncode


if __name__ == "__main__":
    sys.exit(main())
