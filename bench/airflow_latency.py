"""One corrected trade through Airflow: REST trigger of ``eod_trades`` → the run succeeded.

Starts the local stack (Airflow 3: API server, scheduler, DAG processor, triggerer; the warm
engine) in a fresh home, loads a generated day of ``--trades`` trades through one ``eod_trades``
run, then ``--repeat`` times triggers a run whose file is a one-row EOD file amending one trade
(a new version and quantity each time, so every run moves current state and the trade's
position) and times it from the POST to the run's ``success``, polled every 0.2 s. The file is
complete on arrival (``file_stable_seconds`` 0, as for a flow with a done-marker). Data
quality, the report and the published summary are in the run. Prints each run's wall time,
their median (goal: <= 20 s), and, for the median run, each task's wait (scheduled → started)
and its run time, so the scheduler's share and the jobs' share are seen apart. The median of
the same correction as ``streamshift eod`` on the same engine in the same run is the floor
(the job with no orchestration).

Run: .venv/bin/python bench/airflow_latency.py [--trades 300] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _amend import amendment_file
from _scratch import scratch
from engine_latency import DAY, timed_eod

from flows.trades.generate import generate_day
from streamshift.local.airflow import LocalAirflow, airflow_env
from streamshift.spec.catalog import landing_dir
from streamshift.spec.settings import load_settings
from streamshift.store.processes import free_port

DAG = "eod_trades"


def _when(value: str | None) -> float | None:
    return dt.datetime.fromisoformat(value).timestamp() if value else None


Run = tuple[float, list[dict[str, Any]], float, float]


def _run(client: Any, conf: dict[str, str], run_id: str) -> Run:
    """Trigger, poll until the run ends; (seconds, its task instances, the clock at the
    trigger and when the end was seen)."""
    posted = time.time()
    started = time.perf_counter()
    client.trigger(DAG, conf, run_id=run_id)
    while (state := client.run(DAG, run_id)["state"]) not in ("success", "failed"):
        time.sleep(0.2)
    seconds = time.perf_counter() - started
    tasks = client.task_instances(DAG, run_id)
    if state != "success":
        states = {t["task_id"]: t["state"] for t in tasks}
        raise SystemExit(f"{run_id} failed: {states}")
    return seconds, tasks, posted, time.time()


def _breakdown(run: Run) -> list[str]:
    _, tasks, posted, seen = run
    ran = [t for t in tasks if t["start_date"] and t["state"] == "success"]
    ran.sort(key=lambda t: t["start_date"])
    lines, previous_end = [], posted
    for t in ran:
        start, end = _when(t["start_date"]), _when(t["end_date"])
        assert start is not None and end is not None
        lines.append(
            f"  {t['task_id']:<24} waited {start - previous_end:5.2f} s, ran {end - start:5.2f} s"
        )
        previous_end = max(end, previous_end)
    lines.append(f"  {'(the run marked done)':<24} waited {seen - previous_end:5.2f} s")
    return lines


IDLE_SLEEP = "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME"


def _idle_cpu(stack: LocalAirflow, seconds: float = 20) -> float:
    """The scheduler's CPU share (of one core) over ``seconds`` with nothing to run: what a
    shorter idle sleep costs."""
    import psutil

    group = psutil.Process(stack.status().running["scheduler"])  # its restart loop
    tree = [group, *group.children(recursive=True)]  # the scheduler and its executor's workers

    def used() -> float:
        return sum(sum(p.cpu_times()[:2]) for p in tree if p.is_running())

    before = used()
    time.sleep(seconds)
    return (used() - before) / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=300, help="trades in the loaded day")
    parser.add_argument("--repeat", type=int, default=3, help="timed corrections")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = scratch(args.workdir, "streamshift-bench-")
    settings = load_settings(
        {},
        home=work / "home",
        airflow_port=free_port(),
        engine=f"sc://127.0.0.1:{free_port()}",
        file_stable_seconds=0,
    )
    stack = LocalAirflow(settings)
    print(f"starting the local stack under {work} ...", file=sys.stderr, flush=True)
    stack.up()
    try:
        client = stack.client()
        client.wait_for_dag(DAG)
        client.unpause(DAG)
        folder = landing_dir(settings, "trades") / DAY.isoformat()
        files = generate_day(DAY, args.trades, folder, seed=7, progress=False)
        first = _run(client, {"business_date": DAY.isoformat()}, "day")[0]
        print(f"the day's load: {first:.2f} s", file=sys.stderr, flush=True)
        timings: list[Run] = []
        cli: list[float] = []
        version = 100
        for i in range(args.repeat):
            version += 1
            name = f"fix-{version}.csv"
            amendment_file(files.eod, version, folder / name)
            conf = {"business_date": DAY.isoformat(), "file": f"{DAY}/{name}"}
            timings.append(_run(client, conf, f"fix-{version}"))
            version += 1
            cli.append(
                timed_eod(
                    settings.home,
                    settings.engine,
                    amendment_file(files.eod, version, work / f"cli-{version}.csv"),
                )
            )
            print(
                f"run {i + 1}: trigger → success {timings[-1][0]:.2f} s; "
                f"`streamshift eod` {cli[-1]:.2f} s",
                file=sys.stderr,
                flush=True,
            )
        client.pause(DAG)
        idle = _idle_cpu(stack)
    finally:
        stack.down()
    ordered = sorted(timings, key=lambda t: t[0])
    median_run = ordered[len(ordered) // 2]
    wall = statistics.median(t[0] for t in timings)
    floor = statistics.median(cli)
    print(f"one corrected trade, Airflow REST trigger → success, median of {args.repeat} "
          f"(cores: {os.cpu_count()})")  # fmt: skip
    print(f"  trigger → success:        {wall:6.2f} s  (runs: "
          + ", ".join(f"{t[0]:.2f}" for t in timings) + ")")  # fmt: skip
    print(f"  `streamshift eod`, engine: {floor:6.2f} s")
    print(f"  Airflow / CLI: {wall / floor:.2f}")
    sleep = airflow_env(settings, 0).get(IDLE_SLEEP, "Airflow's default")
    print(f"  the scheduler's CPU while idle: {idle:.0%} of a core (idle sleep: {sleep})")
    print("the median run, task by task (wait: since the previous task ended, or the trigger):")
    print("\n".join(_breakdown(median_run)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
