"""`streamshift generate | eod | show` as a user runs them, in subprocesses."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import subprocess
from pathlib import Path

import pytest

from flows.trades import FLOW
from streamshift.spec.settings import load_settings
from streamshift.store.quality import holds_nothing
from tests.cli_support import CLI, LOCAL_SPARK, cli_env, run_cli

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DAY = "2026-11-20"


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(home, *args, **LOCAL_SPARK)


def test_generate_load_show_and_a_bad_file(tmp_path: Path) -> None:
    out = tmp_path / "files"
    gen = _run(
        tmp_path,
        "generate",
        "--flow",
        "trades",
        "--date",
        DAY,
        "--rows",
        "200",
        "--out",
        str(out),
        "--seed",
        "9",
    )
    assert gen.returncode == 0, gen.stderr
    assert "100%" in gen.stderr  # progress is shown
    eod_file = out / f"trades_eod_{DAY}.csv"

    before = _run(tmp_path, "show", "--flow", "trades", "--view", "positions")
    assert before.returncode == 0 and before.stdout == ""
    assert "batch layer has no positions table yet" in before.stderr
    assert "streamshift eod --flow trades" in before.stderr

    # As a user runs `.venv/bin/streamshift` without activating the venv: no PYSPARK_PYTHON,
    # and the `python3` first on PATH is another interpreter (here one that only fails). Spark
    # would run its Python workers, and find its home, with that one.
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "python3").write_text("#!/bin/sh\necho 'not the venv python' >&2\nexit 3\n")
    (shims / "python3").chmod(0o755)
    env = cli_env(tmp_path, **LOCAL_SPARK)
    del env["PYSPARK_PYTHON"]
    env["PATH"] = f"{shims}:{env['PATH']}"
    load = run_cli(
        tmp_path, "eod", "--flow", "trades", "--date", DAY, "--file", str(eod_file), env=env
    )
    assert load.returncode == 0, load.stderr
    assert "200 rows: 200 accepted, 0 quarantined" in load.stdout

    shown = _run(
        tmp_path,
        "show",
        "--flow",
        "trades",
        "--view",
        "positions",
        "--date",
        DAY,
        "--format",
        "csv",
    )
    assert shown.returncode == 0, shown.stderr
    rows = list(csv.DictReader(io.StringIO(shown.stdout)))
    assert sum(int(r["trade_count"]) for r in rows) == 200
    expected_net = {}
    for line in eod_file.read_text().splitlines()[1:]:
        f = line.split(",")
        qty = int(f[8]) * (-1 if f[7] == "SELL" else 1)
        expected_net[(f[5], f[6])] = expected_net.get((f[5], f[6]), 0) + qty
    assert {(r["book"], r["instrument"]): int(r["net_quantity"]) for r in rows} == expected_net

    # Where a trade came from, without a JVM: the file's line 2 (line 1 is the header).
    first = eod_file.read_text().splitlines()[1].split(",")
    traced = _run(tmp_path, "trace", "--flow", "trades", "--key", first[0])
    assert traced.returncode == 0, traced.stderr
    assert f"trades key {first[0]} in the batch layer: current version {first[1]} from " in (
        traced.stdout
    )
    assert f"trades_eod_{DAY}.csv:2" in traced.stdout and "applied*" in traced.stdout
    as_json = json.loads(_run(tmp_path, "trace", "--flow", "trades", "--key", first[0],
                              "--format", "json").stdout)  # fmt: skip
    assert [(e["version"], e["outcome"]) for e in as_json["events"]] == [(int(first[1]), "applied")]
    nothing = _run(tmp_path, "trace", "--flow", "trades", "--key", "NO-SUCH-TRADE")
    assert nothing.returncode == 1 and "has received nothing for key 'NO-SUCH-TRADE'" in (
        nothing.stdout
    )

    # The day's report, without a JVM: a headline, then where the pages are.
    report = _run(tmp_path, "report", "--flow", "trades", "--date", DAY)
    assert report.returncode == 0, report.stderr
    headline, html_line, _json_line = report.stdout.splitlines()
    assert headline == (
        f"trades {DAY} (stage batch): no reconciliation for this date yet; "
        "data quality: no data-quality run for this date yet"
    )
    assert Path(html_line.removeprefix("report: ")).is_file()

    bad = tmp_path / "bad.csv"
    bad.write_text(eod_file.read_text().replace(",", ";"))
    failed = _run(tmp_path, "eod", "--flow", "trades", "--date", DAY, "--file", str(bad))
    assert failed.returncode == 2
    assert f"{bad}, line 1: wrong delimiter" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert "starting Spark" not in failed.stderr  # refused before a session starts
    against = _run(tmp_path, "reconcile", "--flow", "trades", "--date", DAY, "--eod-file", str(bad))
    assert against.returncode == 2, against.stderr
    assert f"{bad}, line 1: wrong delimiter" in against.stderr
    assert "starting Spark" not in against.stderr

    missing = _run(tmp_path, "eod", "--flow", "trades", "--date", DAY, "--file", "nope.csv")
    assert missing.returncode == 2 and "not found" in missing.stderr

    elsewhere = _run(
        tmp_path, "show", "--flow", "trades", "--view", "positions", "--date", "2026-01-02"
    )
    assert elsewhere.returncode == 0 and "(0 rows)" in elsewhere.stdout
    assert (
        f"the batch layer holds no positions rows for 2026-01-02; it holds {DAY}"
        in elsewhere.stderr
    )

    unknown = _run(tmp_path, "show", "--flow", "trades", "--view", "pnl")
    assert unknown.returncode == 2 and "no view 'pnl'" in unknown.stderr
    negative = _run(tmp_path, "show", "--flow", "trades", "--view", "positions", "--limit", "-1")
    assert negative.returncode == 2 and "--limit -1: give 0 (every row)" in negative.stderr

    # Data quality of a date the layer does not hold, or of a dataset with no suite: refused
    # before Spark starts, saying what to do. The date it holds is not refused.
    held = load_settings({}, home=tmp_path)
    assert not holds_nothing(held, FLOW, dt.date.fromisoformat(DAY), "batch")
    assert holds_nothing(held, FLOW, dt.date.fromisoformat(DAY), "stream")
    never = _run(tmp_path, "quality", "--flow", "trades", "--date", "2026-01-02")
    assert never.returncode == 2, never.stderr
    assert "nothing to validate: the batch layer holds no rows of trades for 2026-01-02" in (
        never.stderr
    )
    assert "streamshift eod --flow trades --date 2026-01-02" in never.stderr
    no_suite = _run(tmp_path, "quality", "--flow", "trades", "--date", DAY, "--dataset", "pnl")
    assert no_suite.returncode == 2 and "no suite for pnl" in no_suite.stderr
    for refused in (never, no_suite):
        assert "starting Spark" not in refused.stderr and "Traceback" not in refused.stderr


def test_every_command_has_help() -> None:
    import argparse

    from streamshift.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    commands = list(sub.choices)
    assert {"eod", "show", "generate", "produce", "stream", "status", "demo"} <= set(commands)
    for command in commands:
        result = subprocess.run(
            [*CLI, command, "--help"], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0 and "usage: streamshift" in result.stdout, command
