"""Data quality with Great Expectations 1.x on real Spark DataFrames of real Delta tables.

Each suite passes on generated clean days, and names the expectation that breaks on days built
to break it: a duplicated trade in current state, half the usual rows, an unknown book, a
quarantine spike. Data Docs are produced, list the run, and render in headless chromium.
"""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from flows.trades import FLOW
from flows.trades.generate import generate_day
from streamshift.control.report import write_report
from streamshift.control.stages import PromotionRefused, check_promotion
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.jobs.promote import promote
from streamshift.engine.recon import ReconResult, record
from streamshift.engine.validate import data_docs_dir, run_quality
from streamshift.engine.write.target import Target, read
from streamshift.spec.catalog import ControlTables
from streamshift.store.data_docs import remaining_addresses
from streamshift.store.quality import QualityError, QualityRun
from streamshift.store.records import quality_results
from tests.stream_support import isolated

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DAYS = [dt.date(2026, 10, 5) + dt.timedelta(days=i) for i in range(4)]  # Mon-Thu
TRADES = 80


def _verdicts(run: QualityRun) -> dict[tuple[str, str], str]:
    return {(c.suite, c.expectation): c.verdict for c in run.checks}


def _broken_day(clean: Path, out: Path) -> Path:
    """Half the usual rows; one trade on a book nobody knows; ten trades with a negative price
    (quarantined by the flow's rules: a spike)."""
    with open(clean, newline="") as handle:
        reader = csv.DictReader(handle)
        fields, rows = reader.fieldnames or [], list(reader)
    rows = [r for r in rows if r["event_type"] == "NEW"][: TRADES // 2]
    rows[0]["book"] = "NO-SUCH-BOOK"
    for r in rows[1:11]:
        r["price"] = "-1"
    with open(out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return out


def test_suites_pass_on_clean_days_and_name_what_breaks(spark, settings, tmp_path, browser) -> None:  # type: ignore[no-untyped-def]
    s = isolated(
        settings, tmp_path / "home", promotion_quality_suites="trades.current", promotion_window=1
    )
    batch = Target.open(spark, s, FLOW, "batch")
    files = {
        d: generate_day(d, TRADES, tmp_path / str(d), seed=40 + i, progress=False)
        for i, d in enumerate(DAYS)
    }
    for d in DAYS[:3]:
        run_eod(spark, batch, d, files[d].eod)

    # A clean day: every suite (raw file, current state, positions, quarantine) passes.
    clean = run_quality(spark, s, FLOW, DAYS[2], "batch", file=files[DAYS[2]].eod)
    assert {c.suite for c in clean.checks} == {
        "trades.raw",
        "trades.current",
        "trades.positions",
        "trades.quarantine",
    }
    assert not clean.failures and not clean.warnings, clean.table()
    recorded = quality_results(s, "trades", DAYS[2])
    assert len(recorded) == len(clean.checks) and all(r["success"] for r in recorded)
    sums = {c.expectation: c for c in clean.checks if c.suite == "trades.positions"}
    live = (
        read(spark, batch.tables.current)
        .where((F.col("business_date") == DAYS[2]) & ~F.col("is_deleted"))
        .count()
    )
    assert sums["trade_count_sums_to_live_trades"].observed == f"{float(live)}"

    # Data Docs: produced, listing the run, readable in a browser.
    index = data_docs_dir(s) / "index.html"
    page = data_docs_dir(s) / clean.docs["trades.current"]
    assert page.exists() and clean.run_id in index.read_text()
    # Offline, as here: every script, style sheet and image comes from the machine (npm
    # copies under data_docs/vendor), so the page renders styled, with its tables and charts.
    assert remaining_addresses(data_docs_dir(s)) == {}
    browser.get(page.as_uri())
    assert "trades.current" in browser.page_source
    rendered = browser.execute_script(
        "const nav = document.querySelector('nav.navbar');"
        "return [typeof jQuery, typeof vegaEmbed, typeof jQuery.fn.bootstrapTable,"
        " getComputedStyle(nav).display, nav.querySelector('img').naturalWidth > 0];"
    )
    assert rendered == ["function", "function", "function", "flex", True]
    overview = browser.execute_script("return document.querySelector('.alert').innerText")
    assert "Data asset: trades.current" in " ".join(overview.split()), overview
    shot = tmp_path / "data-docs.png"
    browser.save_screenshot(str(shot))
    print(f"screenshot of the Data Docs page: {shot}")

    # A day built to break: half the rows (warn), an unknown book (fail), a quarantine spike
    # (fail). The load itself quarantines the bad rows, as it should.
    broken = _broken_day(files[DAYS[3]].eod, tmp_path / "broken.csv")
    run_eod(spark, batch, DAYS[3], broken)
    run = run_quality(spark, s, FLOW, DAYS[3], "batch", file=broken)
    verdicts = _verdicts(run)
    assert verdicts[("trades.raw", "row_count_near_recent_median")] == "warn"
    assert verdicts[("trades.raw", "books_known")] == "FAIL"
    assert verdicts[("trades.quarantine", "quarantine_share_below_threshold")] == "FAIL"
    assert verdicts[("trades.current", "one_row_per_trade")] == "pass"
    books = next(c for c in run.checks if (c.suite, c.expectation) == ("trades.raw", "books_known"))
    assert "NO-SUCH-BOOK" in books.observed and "1 of 40" in books.observed
    line = run.failure_line()
    assert "trades.raw books_known: observed 1 of 40 unexpected" in line
    assert "quarantine_share_below_threshold: observed 11" in line

    # A duplicated trade version in current state (written behind the write path's back).
    current = batch.tables.current
    one = read(spark, current).where(F.col("business_date") == DAYS[2]).limit(1)
    one.write.format("delta").mode("append").save(current)
    dup = run_quality(spark, s, FLOW, DAYS[2], "batch", only=["current"])
    assert _verdicts(dup)[("trades.current", "one_row_per_trade")] == "FAIL"
    assert [c.expectation for c in dup.failures] == ["one_row_per_trade"]

    # The report shows the day's pass/warn/fail counts and links to its Data Docs pages.
    html_path, _ = write_report(s, "trades", DAYS[2])
    text = html_path.read_text()
    assert "<b class='q-fail'>1</b> fail" in text
    for link in [p for p in text.split("href='")[1:] if p.startswith("../../data_docs/")]:
        assert (html_path.parent / link.split("'")[0]).resolve().exists(), link

    # With trades.current among the gating suites, a date whose current state failed its
    # `fail` expectations is unclean for promotion, even with clean parity.
    recorded_rows = read(spark, ControlTables(s.warehouse).quality_runs).count()
    assert recorded_rows == len(clean.checks) + len(run.checks) + len(dup.checks)
    promote(spark, s, "trades", "shadow", by="test")
    clean_parity = spark.createDataFrame(
        [],
        "kind STRING, key STRING, column STRING, "
        "left_value STRING, right_value STRING, difference DOUBLE",
    )
    record(
        spark,
        s,
        FLOW,
        clean_parity,
        ReconResult("run-q", "parity", DAYS[2], "batch", "stream", 1, 1),
        "shadow",
    )
    with pytest.raises(PromotionRefused) as refused:
        check_promotion(s, "trades", "stream")
    assert f"{DAYS[2]} failed data quality (trades.current one_row_per_trade)" in str(refused.value)
    assert "breaks" not in str(refused.value)  # parity itself was clean

    # A date the layer never held: refused before anything is validated or recorded, saying
    # what to do (it used to run, and fail the positions sum with "observed None").
    never = DAYS[3] + dt.timedelta(days=1)
    with pytest.raises(QualityError) as nothing:
        run_quality(spark, s, FLOW, never, "batch")
    assert f"the batch layer holds no rows of trades for {never}" in str(nothing.value)
    assert f"streamshift eod --flow trades --date {never}" in str(nothing.value)
    assert read(spark, ControlTables(s.warehouse).quality_runs).count() == recorded_rows

    # An empty business day (a header-only EOD file) loads nothing; its quality run warns on
    # the row counts and fails nothing: no positions and no live trades is not a broken sum.
    empty = tmp_path / "empty.csv"
    empty.write_text(files[DAYS[0]].eod.read_text().splitlines()[0] + "\n")
    assert run_eod(spark, batch, never, empty).apply.received == 0
    quiet = run_quality(spark, s, FLOW, never, "batch", file=empty)
    assert not quiet.failures, quiet.table()
    assert {c.suite for c in quiet.checks} == {"trades.raw", "trades.current", "trades.quarantine"}
    assert _verdicts(quiet)[("trades.current", "row_count_near_recent_median")] == "warn"


@pytest.mark.kafka
def test_sampled_stream_batches_show_in_status_and_a_failing_one_does_not_stop_the_stream(  # type: ignore[no-untyped-def]
    spark, kafka_settings, tmp_path
) -> None:
    from streamshift.store.produce import produce_rows, read_rows
    from tests.cli_support import run_cli
    from tests.stream_support import drain, new_topic

    s = isolated(
        kafka_settings, tmp_path / "home", stream_quality_every=1, max_offsets_per_trigger=10
    )
    topic = new_topic()
    day = generate_day(DAYS[0], 40, tmp_path, seed=5, progress=False)
    rows = [r for r in read_rows(day.eod, FLOW) if r["event_type"] == "NEW"][:30]
    rows[24]["book"] = "NO-SUCH-BOOK"

    def stream(part: list[dict[str, str]]) -> None:
        produce_rows(s, FLOW, part, topic=topic, progress=False)
        drain(spark, s, topic)

    stream(rows[:20])  # clean batches
    stream(rows[20:25])  # one batch, with a book nobody knows: its sample fails
    status = run_cli(
        s.home, "status", timeout=60, kafka_bootstrap_servers=s.kafka_bootstrap_servers
    )
    failed = "1 fail (books_known: observed 1 of 5 unexpected (NO-SUCH-BOOK))"
    assert "(trades.current): " in status.stdout and failed in status.stdout, status.stdout
    stream(rows[25:])  # the stream goes on

    from streamshift.store.heartbeat import progress_path, read_progress

    samples = [p["quality"] for p in read_progress(progress_path(s.home, "trades", "stream"))]
    samples = [q for q in samples if q]
    assert all("error" not in q for q in samples), samples
    assert sum(q["fail"] for q in samples) == 1 and samples[-1]["fail"] == 0
    current = read(spark, Target.open(spark, s, FLOW, "stream").tables.current)
    assert current.count() == 29  # every row but the unknown book's (quarantined by the rules)
