"""`streamshift promote | stage | reconcile` as an operator runs them, in subprocesses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cli_support import LOCAL_SPARK, run_cli

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(home, *args, promotion_window="2", **LOCAL_SPARK)


def test_promote_is_gated_and_recorded_and_reconcile_fails_on_breaks_when_asked(
    tmp_path: Path,
) -> None:
    shadow = _run(tmp_path, "promote", "--flow", "trades", "--to", "shadow")
    assert shadow.returncode == 0, shadow.stderr
    assert "trades: batch → shadow" in shadow.stdout

    refused = _run(tmp_path, "promote", "--flow", "trades", "--to", "stream")
    assert refused.returncode == 2
    assert "only 0 of the 2 business dates needed have been reconciled" in refused.stderr
    assert "--force --reason" in refused.stderr and "Traceback" not in refused.stderr

    # A break: the batch layer has a trade the stream layer does not.
    eod = tmp_path / "eod.csv"
    eod.write_text(
        "trade_id,version,event_type,business_date,trade_ts,book,instrument,side,quantity,price,currency\n"
        "T1,1,NEW,2026-11-20,2026-11-20T10:00:00Z,EQ-US-FLOW,AAPL,BUY,100,10.5,USD\n"
    )
    assert (
        _run(
            tmp_path, "eod", "--flow", "trades", "--date", "2026-11-20", "--file", str(eod)
        ).returncode
        == 0
    )
    recon = _run(
        tmp_path, "reconcile", "--flow", "trades", "--date", "2026-11-20", "--fail-on-breaks"
    )
    assert recon.returncode == 1, recon.stderr
    assert (
        "parity 2026-11-20: batch (1 rows) vs stream (0 rows): 1 breaks (1 missing_right)"
        in recon.stdout
    )

    before = _run(tmp_path, "stage", "--flow", "trades")
    assert "evidence for stream (last 2 reconciled dates, stream vs batch, in stage shadow)" in (
        before.stdout
    )
    assert "2026-11-20  1 breaks" in before.stdout
    forced = _run(
        tmp_path,
        "promote",
        "--flow",
        "trades",
        "--to",
        "stream",
        "--force",
        "--reason",
        "pilot desk",
    )
    assert forced.returncode == 0 and "FORCED: pilot desk" in forced.stdout
    stage = _run(tmp_path, "stage", "--flow", "trades")
    assert "trades: stage stream" in stage.stdout
    # In stream, the evidence shown is what kappa needs: the EOD file's reconciliations.
    assert (
        "evidence for kappa" in stage.stdout and "the EOD file vs the stream layer" in stage.stdout
    )
    assert "not enough: only 0 of the 2" in stage.stdout
    # So the gate into kappa refuses: the shadow parity run of 2026-11-20 is no evidence for it.
    kappa = _run(tmp_path, "promote", "--flow", "trades", "--to", "kappa")
    assert kappa.returncode == 2, kappa.stdout + kappa.stderr
    assert "only 0 of the 2" in kappa.stderr and "Traceback" not in kappa.stderr
    # The EOD load closed its date in both layers; later changes for it are late.
    assert "2026-11-20  batch layer  eod_load  by" in stage.stdout
    assert "2026-11-20  stream layer  eod_load  by" in stage.stdout
    assert "shadow → stream  by" in stage.stdout and "FORCED (pilot desk)" in stage.stdout
