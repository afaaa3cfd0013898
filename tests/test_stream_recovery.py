"""`streamshift stream` as an operator runs it: killed with SIGKILL, restarted, stopped by SIGTERM."""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from flows.trades import FLOW
from flows.trades.generate import generate_day
from streamshift.engine.write.target import Target
from streamshift.store.heartbeat import read_heartbeat
from streamshift.store.produce import produce_rows
from tests.cli_support import CLI, LOCAL_SPARK, cli_env, run_cli
from tests.stream_support import isolated, new_topic, oracle, shuffled_day, state, wait_caught_up

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

DAY = dt.date(2026, 11, 20)


def _env(home: Path, bootstrap: str) -> dict[str, str]:
    return cli_env(
        home,
        kafka_bootstrap_servers=bootstrap,
        max_offsets_per_trigger="150",
        stream_nice="5",  # the job and its JVM below the test's priority
        **LOCAL_SPARK,
    )


def _start(home: Path, bootstrap: str, topic: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*CLI, "stream", "--flow", "trades", "--topic", topic, "--trigger", "1 second"],
        env=_env(home, bootstrap),
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the JVM child dies with it
    )


def _beat(home: Path) -> dict:  # type: ignore[type-arg]
    return read_heartbeat(home, "trades", "stream")


def _status(home: Path, bootstrap: str) -> subprocess.CompletedProcess[str]:
    return run_cli(home, "status", timeout=60, kafka_bootstrap_servers=bootstrap)


def test_sigkill_at_random_points_then_sigterm_ends_in_the_oracle_state(  # type: ignore[no-untyped-def]
    spark, kafka_settings, tmp_path
) -> None:
    settings = isolated(kafka_settings, tmp_path / "home")
    files = generate_day(DAY, 900, tmp_path / "files", seed=31, progress=False)
    rows = shuffled_day(files, seed=5)
    topic = new_topic()
    produce_rows(settings, FLOW, rows, topic=topic, progress=False)
    bootstrap = settings.kafka_bootstrap_servers
    log = tmp_path / "stream.log"
    rng = random.Random(17)

    kills = 0
    while kills < 2:
        job = _start(settings.home, bootstrap, topic, log)
        # Wait until the query runs, then kill at a random point of its batches.
        deadline = time.monotonic() + 180
        while (
            _beat(settings.home).get("pid") != job.pid
            or _beat(settings.home).get("state") != "running"
        ):
            assert job.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "stream job did not start"
            time.sleep(0.5)
        assert _beat(settings.home)["nice"] == {"driver": 5, "jvm": 5}
        time.sleep(rng.uniform(2, 25))
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
        kills += 1
        killed = _status(settings.home, bootstrap)
        assert killed.returncode == 3 and "killed?" in killed.stdout, killed.stdout

    # Restart; once everything is processed, SIGTERM stops it cleanly.
    job = _start(settings.home, bootstrap, topic, log)
    wait_caught_up(settings.home, "trades", job, log, timeout=600, poll=1)
    running = _status(settings.home, bootstrap)
    assert running.returncode == 0 and f"running (pid {job.pid})" in running.stdout
    os.kill(job.pid, signal.SIGTERM)  # the driver only, as a supervisor would
    assert job.wait(120) == 0, log.read_text()[-3000:]
    assert _beat(settings.home)["state"] == "stopped"
    assert "stopped on request" in log.read_text()
    # Every batch here outlasts the 1-s trigger; Spark's warning about it is not the log's news.
    assert "falling behind" not in log.read_text()

    target = Target.open(spark, settings, FLOW, "stream")
    expected = oracle(spark, rows, target.reference)
    got = state(spark, target, expected["state_columns"])
    assert got["history"] == expected["history"]  # every version once, none twice
    assert got["current"] == expected["current"]
    assert got["positions"] == expected["positions"]
