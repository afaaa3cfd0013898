"""`streamshift produce | stream | serve | replay | reconcile | status` failing the way an
operator needs: saying what to do, before any Spark JVM starts."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest

from streamshift.store.processes import free_port
from tests.cli_support import run_cli


def _run(home: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    return run_cli(home, *args, timeout=120, **settings)


def test_produce_without_a_broker_says_how_to_start_one(tmp_path: Path) -> None:
    csv_file = tmp_path / "t.csv"
    csv_file.write_text(
        "trade_id,version,event_type,business_date,trade_ts,book,instrument,side,quantity,price,currency\n"
        "T1,1,NEW,2026-11-20,2026-11-20T10:00:00Z,EQ-US-FLOW,AAPL,BUY,100,10.5,USD\n"
    )
    result = _run(
        tmp_path,
        "produce",
        "--flow",
        "trades",
        "--file",
        str(csv_file),
        kafka_bootstrap_servers=f"127.0.0.1:{free_port()}",
    )
    assert result.returncode == 2, result.stderr
    assert "cannot reach Kafka" in result.stderr and "streamshift kafka start" in result.stderr
    assert "Traceback" not in result.stderr

    missing = _run(tmp_path, "produce", "--flow", "trades", "--file", str(tmp_path / "nope.csv"))
    assert missing.returncode == 2 and "not found" in missing.stderr


@pytest.mark.slow  # each job waits ~10 s for the broker that is not there
def test_jobs_refuse_what_they_cannot_do_before_starting_spark(tmp_path: Path) -> None:
    nowhere = {"kafka_bootstrap_servers": f"127.0.0.1:{free_port()}"}
    refused = {
        "stream": _run(tmp_path, "stream", "--flow", "trades", **nowhere),
        "serve": _run(tmp_path, "serve", "--flow", "trades", **nowhere),
        "replay": _run(
            tmp_path,
            *("replay", "--flow", "trades", "--into", "stream"),
            *("--from", "2026-11-20T08:00", "--to", "2026-11-20T09:00"),
            **nowhere,
        ),
    }
    for command, result in refused.items():
        assert result.returncode == 2, (command, result.stderr)
        assert "cannot reach Kafka" in result.stderr, command
        assert "streamshift kafka start" in result.stderr, command
        # the one line, without librdkafka's log of every failed connection
        assert "rdkafka" not in result.stderr, (command, result.stderr[:500])
    nothing = tmp_path / "nope.csv"
    refused["reconcile"] = _run(
        tmp_path, "reconcile", "--flow", "trades", "--date", "2026-11-20", "--against", str(nothing)
    )
    assert refused["reconcile"].returncode == 2
    assert f"--against {nothing}: file not found" in refused["reconcile"].stderr
    for command, result in refused.items():
        assert "starting Spark" not in result.stderr, command
        assert "Traceback" not in result.stderr, command


def test_status_and_the_cut_off_without_a_broker_say_so_in_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A stream job that ran before the broker went away: `status` gives its lag at the last
    batch and says the broker did not answer; the kappa close's offset check says how to
    start one. Neither prints librdkafka's log of each failed connection."""
    from streamshift.control.cutoff import CloseRefused, topic_offsets_at
    from streamshift.spec.settings import load_settings
    from streamshift.store.heartbeat import heartbeat_path

    nowhere = f"127.0.0.1:{free_port()}"
    for layer, processed in (("stream", 40), ("batch", 7)):
        beat = heartbeat_path(tmp_path, "trades", layer)
        beat.parent.mkdir(parents=True, exist_ok=True)
        beat.write_text(
            json.dumps(
                {
                    "flow": "trades",
                    "layer": layer,
                    "state": "stopped",
                    "last_batch_id": 3,
                    "last_batch_at": "2026-11-20T10:00:00+00:00",
                    "processed_offsets": {"trades": {"0": processed}},
                    "lag": 2,
                }
            )
        )
    result = _run(tmp_path, "status", kafka_bootstrap_servers=nowhere)
    assert result.returncode == 3, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("trades/")]
    assert len(lines) == 2, result.stdout
    for line in lines:
        assert line.endswith(
            f"lag 2 events (at the last batch, Kafka at {nowhere} not answering: "
            "the lag now is unknown)"
        ), line
    assert "rdkafka" not in result.stderr, result.stderr[:500]

    settings = load_settings(
        {"STREAMSHIFT_HOME": str(tmp_path), "STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS": nowhere}
    )
    with pytest.raises(CloseRefused) as refused:
        topic_offsets_at(settings, "trades", dt.datetime(2026, 11, 20, 18, tzinfo=dt.UTC))
    assert str(refused.value).startswith(
        f"the cut-off needs the offsets of trades: cannot reach Kafka at {nowhere}"
    )
    assert "`streamshift kafka start`" in str(refused.value)
    assert "rdkafka" not in capfd.readouterr().err


def test_status_without_any_stream_job(tmp_path: Path) -> None:
    result = _run(tmp_path, "status")
    assert result.returncode == 3
    assert "no streaming job has run here yet" in result.stdout
    # The warm engine's line first: the suite's engine answers; an address nothing listens on
    # does not, and the line says what to start (the exit status stays the streams').
    from streamshift.store.processes import free_port
    from tests.cli_support import run_cli, suite_engine

    if suite_engine():
        assert result.stdout.startswith(f"engine: answering at {suite_engine()}\n")
    silent = f"sc://127.0.0.1:{free_port()}"
    down = run_cli(tmp_path, "status", engine=silent)
    assert down.returncode == 3
    assert down.stdout.startswith(f"engine: not answering at {silent}: ")
    assert "streamshift engine up" in down.stdout


@pytest.mark.kafka
def test_trace_and_explain_say_when_changes_wait_for_the_stream_job(
    tmp_path: Path, kafka_broker: str
) -> None:
    """Where's my adjustment? A key the stream layer has not received, traced while events
    on the topic wait for the stream job, gets a note saying how many (the broker's end
    offsets against the job's heartbeat); a job that is not running is named as such; a job
    that has caught up adds nothing."""
    import os

    from confluent_kafka import Producer

    from streamshift.spec.settings import load_settings
    from streamshift.store.heartbeat import heartbeat_path
    from streamshift.store.kafka import ensure_topic
    from streamshift.store.processes import process_start
    from tests.stream_support import new_topic

    topic = new_topic()
    ensure_topic(load_settings({"STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS": kafka_broker}), topic, 1)
    producer = Producer({"bootstrap.servers": kafka_broker})
    for n in range(5):
        producer.produce(topic, key=f"T{n}", value=b"{}", partition=0)
    assert producer.flush(30) == 0
    del producer  # closed: its connection does not outlive the test

    def beat(state: str, processed: int) -> None:
        path = heartbeat_path(tmp_path, "trades", "stream")
        path.parent.mkdir(parents=True, exist_ok=True)
        alive = {"pid": os.getpid(), "pid_start": process_start(os.getpid())}
        beat = {"flow": "trades", "layer": "stream", "state": state, **alive}
        beat["processed_offsets"] = {topic: {"0": processed}}
        path.write_text(json.dumps(beat))

    def notes(*command: str) -> list[str]:
        result = _run(tmp_path, *command, kafka_bootstrap_servers=kafka_broker)
        assert result.returncode == 1, result.stdout + result.stderr
        return [line for line in result.stdout.splitlines() if line.startswith("note: ")]

    trace = ("trace", "--flow", "trades", "--key", "T4", "--layer", "stream")
    explain = ("explain", "--flow", "trades", "--view", "positions", "--date", "2026-11-20",
               "--group", "book=EQ-US-FLOW,instrument=AAPL", "--layer", "stream")  # fmt: skip
    beat("running", 2)  # the job has applied offsets 0 and 1 of the five
    waiting = "note: 3 events on the topic are not applied yet"
    assert [n[: len(waiting)] for n in notes(*trace)] == [waiting]
    assert [n[: len(waiting)] for n in notes(*explain)] == [waiting]
    # The Migration page's trace and explain say the same.
    from streamshift.airflow.migration import render_explain, render_trace

    here = load_settings(
        {"STREAMSHIFT_HOME": str(tmp_path), "STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS": kafka_broker}
    )
    page_note = '<p class="note"><strong>Not in this layer yet?</strong> 3 events on the topic'
    assert page_note in render_trace(here, "trades", "T4", "stream")
    group = "book=EQ-US-FLOW,instrument=AAPL"
    assert page_note in render_explain(here, "trades", "positions", "2026-11-20", group, "stream")
    # `status` reads the same end offsets (a new consumer, asked at once: "Unknown partition"
    # unless it reads the topic's metadata first, which it then took for a silent broker).
    status = _run(tmp_path, "status", kafka_bootstrap_servers=kafka_broker)
    assert "trades/stream: running" in status.stdout, status.stdout
    assert "lag 3 events (broker end offsets now)" in status.stdout, status.stdout
    beat("stopped", 2)
    stopped = (
        "note: the stream layer's stream job is not running (stopped): changes sent to its "
        "topic since its last batch are not applied (streamshift status)"
    )
    assert notes(*trace) == [stopped]
    beat("running", 5)
    assert notes(*trace) == []

    # A job whose topic is gone (the broker answers "unknown partition"): no note, and
    # `status` gives the lag at the last batch without blaming the broker.
    topic = new_topic()
    beat("running", 2)
    assert notes(*trace) == []
    status = _run(tmp_path, "status", kafka_bootstrap_servers=kafka_broker)
    assert "(at the last batch)" in status.stdout and "not answering" not in status.stdout
