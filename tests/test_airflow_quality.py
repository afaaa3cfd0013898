"""The EOD DAG's data-quality task in a real DAG run (``dag.test()``, Great Expectations on
Spark): a `fail` expectation fails the task naming it, and the summary is not published. (A
`warn` expectation letting a run succeed with the warning in its summary is asserted by
test_airflow.py's REST-triggered run, whose day carries an implausible price.)"""

from __future__ import annotations

import datetime as dt
import json
import re
import urllib.request
from urllib.parse import urljoin

import pytest

from streamshift.store.records import current_stage
from tests.airflow_support import dag_test, edit_first_new_trade, land_day
from tests.cli_support import run_cli

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]

FAIL_DAY = dt.date(2027, 9, 7)


def test_a_failed_expectation_stops_the_eod_run(airflow_stack) -> None:  # type: ignore[no-untyped-def]
    settings, client = airflow_stack
    # The stack is shared: a test before this one may have promoted the flow. The runs here
    # load the batch layer, so the flow goes back to stage batch first (demotion is allowed).
    if current_stage(settings, "trades") != "batch":
        back = run_cli(
            settings.home, "promote", "--flow", "trades", "--to", "batch", "--by", "test"
        )
        assert back.returncode == 0, back.stderr[-2000:]

    # fail: a book nobody knows (policy fail in trades.raw).
    fail_files = land_day(settings, FAIL_DAY, trades=60)
    edit_first_new_trade(fail_files.eod, book="NO-SUCH-BOOK")
    failed = dag_test(settings, "eod_trades", f"{FAIL_DAY}T22:00:00+00:00", {})

    assert failed["state"] == "failed", failed["output"][-4000:]
    assert failed["tasks"]["data_quality"] == "failed"  # once it wrote the report (below)
    assert failed["tasks"]["publish_summary"] != "success"
    assert f"SUMMARY trades {FAIL_DAY}" not in failed["output"]
    assert re.search(
        r"data_quality failed: data quality failed: trades.raw books_known: observed 1 of \d+ "
        r"unexpected \(NO-SUCH-BOOK\), expected one of \d+ known values",
        failed["output"],
    )
    report = json.loads((settings.reports / "trades" / str(FAIL_DAY) / "report.json").read_text())
    assert report["quality"]["counts"]["fail"] >= 1

    # The Migration page and the report link to the day's Data Docs, served by the plugin.
    stack_url = f"http://127.0.0.1:{settings.airflow_port}"
    flows = _get(f"{stack_url}/streamshift/api/flows", client.token())
    quality = next(f for f in json.loads(flows) if f["flow"] == "trades")["quality"]
    assert quality["business_date"] == str(FAIL_DAY) and quality["counts"]["fail"] >= 1
    for href in quality["data_docs"].values():
        assert "<html" in _get(f"{stack_url}/streamshift/{href}", client.token()).lower()
    # With what the pages load: the local copies of GE's CDN files (Data Docs render offline).
    page_url = f"{stack_url}/streamshift/{next(iter(quality['data_docs'].values()))}"
    copies = re.findall(r'(?:src|href)="((?:\.\./)+vendor/[^"]+)"', _get(page_url, client.token()))
    assert len(copies) >= 10, copies
    for copy in copies:
        assert _get(urljoin(page_url, copy), client.token())  # a 404 raises
    report_url = f"{stack_url}/streamshift/reports/trades/{FAIL_DAY}"
    report_html = _get(report_url, client.token())
    links = re.findall(r"href='(\.\./\.\./data_docs/[^']+)'", report_html)
    assert links
    for link in links:
        assert "<html" in _get(urljoin(report_url, link), client.token()).lower()


def _get(url: str, token: str) -> str:
    request = urllib.request.Request(url)
    request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=60) as resp:
        return str(resp.read().decode())
