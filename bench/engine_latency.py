"""One corrected trade through `streamshift eod`, on the warm engine and without it, same run.

Loads a generated day of ``--trades`` trades into a fresh home on a local engine and copies
that home for the other side, so each side corrects tables only it writes, as in use: with an
engine up every batch job goes through it. Runs ``--warmup`` corrections on the engine (an
engine in use has run many jobs: its JIT is warm; a new engine's corrections keep getting
faster through roughly its first six), then, ``--repeat`` times and alternating sides, runs
``streamshift eod`` as a user does (a new process) with a one-row EOD file amending one trade
(a new version and quantity each time, so every run changes current state and the trade's
position): once with ``STREAMSHIFT_ENGINE`` naming the engine, once with it empty (a local Spark
session: a JVM start and a cold JIT per command). On the engine, the command hands its job to
the engine's job runner (a process ready with the Connect client and a session, which computes
the state of the tables it wrote once it has answered; every timed engine run follows a
no-engine one, as corrections come with time between them). Each file is complete when the command
starts (``file_stable_seconds`` 0, as with a done-marker: no wait for the file to settle).
Prints each side's median wall time from process start to exit and engine ÷ no engine (goals:
engine <= 5 s, ratio <= 0.25). Then runs ``--back-to-back`` corrections on the engine one right
after the other, as a user fixing several trades does (each command starts as the one before
exits, while the engine still computes the state the one before wrote; goal: <= 5 s each).
Then runs ``--steps`` more corrections in its own process on
the engine and prints the fastest one's steps, where the job's time goes without a process
start.

Run: .venv/bin/python bench/engine_latency.py [--trades 300] [--repeat 5] [--warmup 8]
     [--back-to-back 3] [--steps 3]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _amend import amendment_file
from _scratch import scratch

from flows.trades.generate import generate_day
from streamshift.engine.spark import submit_env
from streamshift.local.engine import LocalEngine
from streamshift.spec.settings import load_settings
from streamshift.store.processes import free_port, group_alive

DAY = dt.date(2026, 11, 20)
CLI = [sys.executable, "-m", "streamshift.cli"]


@contextlib.contextmanager
def local_engine(work: Path) -> Iterator[str]:
    """A local engine of its own under ``work`` while the block runs: its URL."""
    url = f"sc://127.0.0.1:{free_port()}"
    engine = LocalEngine(load_settings({}, home=work / "engine-home", engine=url))
    print(f"starting the engine at {url} ...", file=sys.stderr, flush=True)
    engine.start()
    try:
        yield url
    finally:
        engine.stop()


def timed_eod(home: Path, engine: str, file: Path, day: dt.date = DAY) -> float:
    """Seconds of one ``streamshift eod`` of ``file`` for ``day``, as a new process, on the
    engine at ``engine`` (empty: a local session), until its prompt would return; refuses a
    run that used the other. Returns once every process the command started has exited: a
    command of its own session leaves its JVM shutting down for a second or two after the
    command exits, and the next run (on the engine) starts after it, not beside it."""
    env = submit_env(home)
    env["STREAMSHIFT_ENGINE"] = engine
    env["STREAMSHIFT_FILE_STABLE_SECONDS"] = "0"  # complete on arrival
    started = time.perf_counter()
    command = subprocess.Popen(
        [*CLI, "eod", "--flow", "trades", "--date", day.isoformat(), "--file", str(file)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own: the JVM it starts joins it
    )
    _out, err = command.communicate()
    seconds = time.perf_counter() - started
    deadline = time.monotonic() + 60
    while group_alive(command.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if command.returncode != 0:
        raise SystemExit(f"streamshift eod failed:\n{err[-3000:]}")
    said = "warm engine" in err and "made ready by the engine's job runner" in err
    if said != bool(engine):
        raise SystemExit(f"expected {'the engine runner' if engine else 'a local session'}:\n{err}")
    return seconds


def corrected(home: Path, engine: str, day_file: Path, version: int, work: Path) -> float:
    """Seconds of one ``streamshift eod`` of a one-row file amending the day's first trade to
    ``version`` (see ``timed_eod``)."""
    return timed_eod(home, engine, amendment_file(day_file, version, work / f"fix-{version}.csv"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=300, help="trades in the loaded day")
    parser.add_argument("--repeat", type=int, default=5, help="timed corrections per side")
    parser.add_argument(
        "--warmup", type=int, default=8, help="untimed corrections on the engine first"
    )
    parser.add_argument(
        "--back-to-back",
        type=int,
        default=3,
        help="then this many corrections on the engine, each started as the one before exits",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=3,
        help="then this many corrections in this process on the engine, timed step by step",
    )
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = scratch(args.workdir, "streamshift-bench-")
    home = work / "home"
    with local_engine(work) as url:
        files = generate_day(DAY, args.trades, work / "files", seed=7, progress=False)
        timed_eod(home, url, files.eod)  # the day, and the engine's first job of this flow
        homes = {"engine": home, "no engine": work / "home-no-engine"}
        shutil.copytree(home, homes["no engine"])  # Delta's log holds relative paths
        for version in range(50, 50 + args.warmup):
            warm = corrected(home, url, files.eod, version, work)
            print(f"warm-up on the engine: {warm:.2f} s", file=sys.stderr, flush=True)
        timings: dict[str, list[float]] = {"engine": [], "no engine": []}
        version = 100
        for i in range(args.repeat):
            for side, address in (("engine", url), ("no engine", "")):
                version += 1
                timings[side].append(corrected(homes[side], address, files.eod, version, work))
                print(f"run {i + 1} {side}: {timings[side][-1]:.2f} s", file=sys.stderr, flush=True)
        in_a_row = []
        for _ in range(args.back_to_back):
            version += 1
            in_a_row.append(corrected(home, url, files.eod, version, work))
            print(f"back to back on the engine: {in_a_row[-1]:.2f} s", file=sys.stderr, flush=True)
        steps = in_process(home, url, files.eod, work, args.steps) if args.steps else None
    warm = statistics.median(timings["engine"])
    cold = statistics.median(timings["no engine"])
    print(
        f"one corrected trade, `streamshift eod`, median of {args.repeat} (cores: {os.cpu_count()})"
    )
    print(f"  engine up:  {warm:6.2f} s")
    print(f"  no engine:  {cold:6.2f} s")
    print(f"  engine / no engine: {warm / cold:.2f}")
    if in_a_row:
        each = ", ".join(f"{s:.2f}" for s in in_a_row)
        print(
            f"  {len(in_a_row)} back to back on the engine: {each} s"
            f" (median {statistics.median(in_a_row):.2f} s, slowest {max(in_a_row):.2f} s)"
        )
    if steps:
        total, eod_steps = steps
        print(
            f"inside the job, in one process on the engine (fastest of {args.steps}): {total:.2f} s"
        )
        width = max(map(len, eod_steps))
        for name, seconds in eod_steps.items():
            print(f"  {name:<{width}} {seconds:5.2f} s")
        print("  (history's MERGE and other side steps run beside the others)")
    return 0


def in_process(
    home: Path, url: str, day_file: Path, work: Path, runs: int
) -> tuple[float, dict[str, float]]:
    """The same correction ``runs`` times through ``run(spark, request)`` in this process, on the
    engine: the fastest run's total and its steps (the write path's own, and the job's around
    it). The process's start, imports and Connect session are not in these figures."""
    from streamshift.engine.jobs.requests import run
    from streamshift.engine.spark import connect_session
    from streamshift.spec.requests import EodRequest

    settings = load_settings({}, home=home, engine=url)
    spark = connect_session(url)
    try:
        best: tuple[float, dict[str, float]] | None = None
        for version in range(200, 200 + runs):
            file = amendment_file(day_file, version, work / f"step-{version}.csv")
            started = time.perf_counter()
            done = run(spark, EodRequest("trades", DAY, file), settings)
            total = time.perf_counter() - started
            apply = done.result.apply.seconds_by_step
            steps = {"the rest (file, run record, close)": total - done.result.apply.seconds}
            steps |= {"apply, in all": done.result.apply.seconds}
            steps |= {f"apply: {k}": v for k, v in apply.items()}
            if best is None or total < best[0]:
                best = (total, steps)
        assert best is not None
        return best
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
