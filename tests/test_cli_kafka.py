"""`streamshift kafka start|status|stop` as a user runs them, in a subprocess."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from streamshift.store.processes import free_port
from tests.cli_support import run_cli

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _run(home: Path, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        home,
        *args,
        timeout=180,
        kafka_bootstrap_servers=f"127.0.0.1:{port}",
        kafka_controller_port=str(free_port()),
    )


def test_start_status_stop_like_a_user(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient

    port = free_port()
    try:
        started = _run(tmp_path, port, "kafka", "start")
        assert started.returncode == 0, started.stderr
        assert "running (pid" in started.stdout
        assert (tmp_path / "kafka" / "logs" / "meta.properties").exists()  # storage formatted

        # the broker really serves requests, on loopback
        metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10)
        assert [b.host for b in metadata.brokers.values()] == ["127.0.0.1"]

        again = _run(tmp_path, port, "kafka", "start")
        assert again.returncode == 0
        assert "already running" in again.stdout

        status = _run(tmp_path, port, "kafka", "status")
        assert status.returncode == 0 and "running (pid" in status.stdout

        # A replay the broker cannot serve is refused before Spark starts, saying why.
        replays = {
            name: _run(
                tmp_path,
                port,
                *("replay", "--flow", "trades", "--from", start, "--to", end, "--into", "stream"),
            )
            for name, start, end in (
                ("no topic", "2026-11-20T08:00", "2026-11-20T09:00"),
                ("reversed", "2026-11-20T09:00", "2026-11-20T08:00"),
            )
        }
        assert f"topic trades does not exist on 127.0.0.1:{port}" in replays["no topic"].stderr
        assert "must be after --from" in replays["reversed"].stderr
        for refused in replays.values():
            assert refused.returncode == 2 and "starting Spark" not in refused.stderr
    finally:
        stopped = _run(tmp_path, port, "kafka", "stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout

    status = _run(tmp_path, port, "kafka", "status")
    assert status.returncode == 3 and "stopped" in status.stdout

    harmless = _run(tmp_path, port, "kafka", "stop")
    assert harmless.returncode == 0 and "nothing to stop" in harmless.stdout

    # a restart reuses the formatted storage
    try:
        assert _run(tmp_path, port, "kafka", "start").returncode == 0
    finally:
        assert _run(tmp_path, port, "kafka", "stop").returncode == 0


def test_bad_setting_gives_clear_error(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "kafka", "status", timeout=60, kafka_topic_partitions="many")
    assert result.returncode == 2
    assert "STREAMSHIFT_KAFKA_TOPIC_PARTITIONS='many' is not valid" in result.stderr
    assert "Traceback" not in result.stderr
