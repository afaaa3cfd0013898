"""`streamshift produce | status` failing the way an operator needs: saying what to do."""

from __future__ import annotations

import subprocess
from pathlib import Path

from streamshift.core.processes import free_port
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


def test_status_without_any_stream_job(tmp_path: Path) -> None:
    result = _run(tmp_path, "status")
    assert result.returncode == 3
    assert "no streaming job has run here yet" in result.stdout
