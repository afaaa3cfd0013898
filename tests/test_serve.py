"""`streamshift serve`: a view kept in Spark's state store, published to a compacted topic."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import signal
import subprocess
import time

import pytest

from flows.trades import FLOW
from flows.trades.generate import generate_day
from streamshift.engine.write.target import load_reference
from streamshift.spec.registry import get_flow
from streamshift.store.events import serving_topic
from streamshift.store.heartbeat import logged_events, processed_events, progress_path, read_status
from streamshift.store.produce import produce_rows
from tests.cli_support import CLI, LOCAL_SPARK, cli_env, run_cli
from tests.stream_support import new_topic, oracle, served, shuffled_day

DAY = dt.date(2026, 11, 20)


def _expected(spark, rows) -> dict[tuple[str, ...], tuple[str, ...]]:  # type: ignore[no-untyped-def]
    """The flow's own view over the rows' latest versions (what the Delta view holds)."""
    width = len(FLOW.views[0].group_key)
    positions = oracle(spark, rows, load_reference(spark, FLOW))["positions"]
    return {
        tuple(str(v) for v in row[:width]): tuple(str(v) for v in row[width:]) for row in positions
    }


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["jvm", "python"])
def test_serve_publishes_the_flows_view_and_resumes_without_double_counting(
    spark, kafka_settings, tmp_path, engine
) -> None:  # type: ignore[no-untyped-def]
    """A day with amends, cancels, book moves and poison rows, in a shuffled order and in two
    deliveries (the second repeats part of the first); the job is stopped in between and
    resumes from its checkpoint. After each run the topic holds exactly the flow's view —
    with the state processor in the JVM and in Python workers alike."""
    topic = new_topic()
    files = generate_day(DAY, 300, tmp_path / "day", seed=31, progress=False)
    rows = shuffled_day(files, seed=5)
    first, second = rows[: len(rows) // 2], rows[len(rows) // 2 :] + rows[:40]
    # Some keys of the first delivery get a higher version in the second: their old
    # contribution must leave its group (a stored version is read back from the state store).
    first_keys = {r["trade_id"] for r in first}
    assert {r["trade_id"] for r in second[:-40] if r["version"] != "1"} & first_keys
    home = tmp_path / "home"
    bootstrap = {"kafka_bootstrap_servers": kafka_settings.kafka_bootstrap_servers}
    served_topic = serving_topic(topic, "positions")

    produce_rows(kafka_settings, FLOW, first, topic=topic, progress=False)
    done = run_cli(
        home, "serve", "--flow", "trades", "--topic", topic, "--available-now",
        "--engine", engine, **LOCAL_SPARK, **bootstrap,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{engine} state processor" in done.stderr, done.stderr[-3000:]
    # Reading a key the state does not hold yet is the normal case (a new trade), not a
    # warning: no line per event in the job's log.
    assert "doesn't contain key" not in done.stderr, done.stderr[-3000:]
    published = re.search(r"(\d+) changed groups published to (\S+)", done.stdout)
    assert published is not None, done.stdout
    assert published[2] == served_topic
    expected = _expected(spark, first)
    assert len(expected) > 20
    assert int(published[1]) >= len(expected)  # every group at least once
    assert served(kafka_settings, served_topic) == expected
    [status] = read_status(home)  # the heartbeat, in the stream job's format
    assert (status.flow, status.layer, status.running) == ("trades", "serve-positions", False)
    assert status.beat["state"] == "stopped"
    assert processed_events(status.beat, topic) == len(first)

    produce_rows(kafka_settings, FLOW, second, topic=topic, progress=False)
    done = run_cli(
        home, "serve", "--flow", "trades", "--topic", topic, "--available-now",
        "--engine", engine, **LOCAL_SPARK, **bootstrap,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    everything = _expected(spark, first + second)
    assert everything != expected  # the second delivery moved positions
    assert served(kafka_settings, served_topic) == everything
    shown = run_cli(home, "status", "--flow", "trades", **bootstrap)
    assert shown.returncode == 3, shown.stderr  # 3: a job shown is not running
    assert "trades/serve-positions: not running (stopped)" in shown.stdout, shown.stdout
    assert "lag 0 events (broker end offsets now)" in shown.stdout, shown.stdout


def test_serve_refuses_a_view_that_is_not_additive(tmp_path) -> None:
    """telemetry's hourly view has a minimum and a maximum: no deltas; refused before Spark."""
    assert not get_flow("telemetry").views[0].is_additive
    done = run_cli(tmp_path, "serve", "--flow", "telemetry", timeout=60)
    assert done.returncode == 2
    assert "not declared by additive measures" in done.stderr
    assert "starting Spark" not in done.stderr


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.slow
def test_serve_killed_at_random_points_then_stopped_by_sigterm_loses_and_doubles_nothing(
    spark, kafka_settings, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL twice mid-stream (small batches), restart, SIGTERM once caught up: the
    topic holds exactly the flow's view — no change lost, none counted twice."""
    topic = new_topic()
    files = generate_day(DAY, 2000, tmp_path / "day", seed=47, progress=False)
    rows = shuffled_day(files, seed=9)
    produce_rows(kafka_settings, FLOW, rows, topic=topic, progress=False)
    home, log = tmp_path / "home", tmp_path / "serve.log"
    env = cli_env(
        home,
        kafka_bootstrap_servers=kafka_settings.kafka_bootstrap_servers,
        max_offsets_per_trigger="100",
        **LOCAL_SPARK,
    )
    progress = progress_path(home, "trades", "serve-positions")
    command = [*CLI, "serve", "--flow", "trades", "--topic", topic, "--trigger", "1s"]

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            command,
            env=env,
            stdout=open(log, "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the JVM dies with it
        )

    rng = random.Random(3)
    for _ in range(2):
        before = logged_events(progress, topic)
        job = start()
        deadline = time.monotonic() + 180
        while logged_events(progress, topic) == before:  # running: a batch got through
            assert job.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.3)
        [status] = read_status(home)
        assert status.running and status.beat["pid"] == job.pid, status.describe()
        time.sleep(rng.uniform(0.2, 2))
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
        [status] = read_status(home)
        assert not status.running and "killed?" in status.describe(), status.describe()
    assert logged_events(progress, topic) < len(rows), "killed too late to test anything"

    job = start()
    deadline = time.monotonic() + 300
    while logged_events(progress, topic) < len(rows):
        assert job.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "serve did not catch up"
        time.sleep(0.5)
    os.kill(job.pid, signal.SIGTERM)  # the driver only, as a supervisor would
    assert job.wait(120) == 0, log.read_text()[-3000:]
    [status] = read_status(home)
    assert status.beat["state"] == "stopped" and processed_events(status.beat, topic) == len(rows)
    assert served(kafka_settings, serving_topic(topic, "positions")) == _expected(spark, rows)


def _state_metadata(checkpoint, operator: str) -> None:  # type: ignore[no-untyped-def]
    """What Spark 4 writes for a checkpoint's state operator (state/0/_metadata/v2/<batch>)."""
    path = checkpoint / "state" / "0" / "_metadata" / "v2" / "0"
    path.parent.mkdir(parents=True)
    info = {"operatorInfo": {"operatorId": 0, "operatorName": operator}, "stateStoreInfo": []}
    path.write_text("v2\n" + json.dumps(info))


def test_serve_refuses_a_checkpoint_of_the_other_engine_before_spark(tmp_path) -> None:
    """A checkpoint the Python processor wrote where the JVM one's go (as before each engine
    kept its own): refused with what to do, before Spark starts; its own engine's passes."""
    from streamshift.engine.jobs.serve import ServeError, check_checkpoint

    checkpoint = tmp_path / "checkpoints" / "trades-serve-positions"
    _state_metadata(checkpoint, "transformWithStateInPandasExec")
    done = run_cli(tmp_path, "serve", "--flow", "trades", timeout=60)
    assert done.returncode == 2, done.stderr
    assert "holds the state of the python state processor" in done.stderr
    assert f"--engine python after moving it to {checkpoint}-python" in done.stderr
    assert "starting Spark" not in done.stderr
    check_checkpoint(checkpoint, "python")  # its own engine: no error

    jvm = tmp_path / "jvm"
    _state_metadata(jvm, "transformWithStateExec")
    check_checkpoint(jvm, "jvm")
    check_checkpoint(tmp_path / "absent", "jvm")  # a new checkpoint
    with pytest.raises(ServeError, match="serve with --engine jvm, or remove it"):
        check_checkpoint(jvm, "python")
