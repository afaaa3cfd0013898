"""The migration story on generated days, end to end on real Kafka, Spark and Delta — for
every flow (trades, telemetry): the kit runs them unchanged.

batch for day 1; shadow for days 2-4 with a gap in the stream on day 2 (found, named, and
blocking promotion while it is among the last two reconciled days, the promotion window);
days 3-4 clean, so promotion to stream succeeds; in stream, day 5's missed row is repaired by
the EOD correction and the second reconciliation is clean.
Then the day's report renders with numbers that match the tables.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from html.parser import HTMLParser

import pytest
from pyspark.sql import functions as F

from streamshift.control.report import write_report
from streamshift.control.serving import serving_view_rows
from streamshift.control.stages import PromotionRefused
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.jobs.promote import promote
from streamshift.engine.jobs.reconcile import eod_correct, reconcile_date
from streamshift.engine.recon import recon_breaks_path, recon_runs_path
from streamshift.engine.validate import run_quality
from streamshift.engine.write.target import Target, read
from streamshift.spec.registry import get_generator
from streamshift.store import tables as jvm_free
from streamshift.store.produce import produce_rows, read_rows
from streamshift.store.quality import datasets
from streamshift.store.records import current_stage
from tests.stream_support import drain, isolated, new_topic, oracle

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

DAYS = [dt.date(2026, 11, 2) + dt.timedelta(days=i) for i in range(5)]  # day 1 = DAYS[0]


class _Charts(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.svgs, self.figures, self.tables = 0, 0, 0

    def handle_starttag(self, tag: str, attrs) -> None:  # type: ignore[no-untyped-def]
        self.svgs += tag == "svg"
        self.figures += tag == "figure"
        self.tables += tag == "table"


def test_batch_to_shadow_to_stream_with_gate_and_eod_correction(
    spark, kafka_settings, any_flow, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    FLOW = any_flow
    key, view = FLOW.key, FLOW.views[0]
    settings = isolated(kafka_settings, tmp_path / "home", promotion_window=2)
    topic = new_topic(FLOW.name)
    generate_day = get_generator(FLOW.name)
    files = {
        d: generate_day(d, 60, tmp_path / str(d), seed=100 + i, progress=False)
        for i, d in enumerate(DAYS)
    }
    batch = Target.open(spark, settings, FLOW, "batch")

    def group_keys(rows: list[dict[str, str]]) -> set[str]:
        """The view groups ``rows`` fall in, as reconciliation names them (JSON of the key)."""
        groups = oracle(spark, rows, batch.reference, FLOW)["positions"]
        frame = spark.createDataFrame(groups, read(spark, batch.tables.view(view.name)).schema)
        named = F.to_json(F.struct(*[F.col(k).cast("string").alias(k) for k in view.group_key]))
        return {r[0] for r in frame.select(named).collect()}

    # Day 1, stage batch: the EOD file into the batch layer; no stream job yet.
    run_eod(spark, batch, DAYS[0], files[DAYS[0]].eod)
    promote(spark, settings, FLOW.name, "shadow", by="test")
    assert current_stage(settings, FLOW.name) == "shadow"

    # Days 2-4, stage shadow: the stream job writes the stream layer as the day goes; day 2's
    # stream misses two trades.
    gap_day = DAYS[1]
    missed: list[dict[str, str]] = []
    for d in DAYS[1:4]:
        rows = read_rows(files[d].eod, FLOW)
        if d == gap_day:
            missed, rows = rows[:2], rows[2:]
        produce_rows(settings, FLOW, rows, topic=topic, progress=False)
    drain(spark, settings, topic, flow=FLOW)

    def eod_day(d: dt.date):  # type: ignore[no-untyped-def]
        run_eod(spark, batch, d, files[d].eod)
        return reconcile_date(spark, settings, FLOW, d)

    for d in DAYS[1:3]:
        [parity] = eod_day(d)
        if d == gap_day:
            assert not parity.clean
            keys = {b["key"] for b in parity.worst}
            assert keys == group_keys(missed)
            assert parity.by_kind["missing_left"] == 0  # the stream lacks, never adds
        else:
            assert parity.clean, parity.describe()

    with pytest.raises(PromotionRefused) as refused:
        promote(spark, settings, FLOW.name, "stream")
    assert f"{gap_day} had" in str(refused.value)

    [parity] = eod_day(DAYS[3])
    assert parity.clean, parity.describe()
    change = promote(spark, settings, FLOW.name, "stream", by="test")
    assert [e["business_date"] for e in change.evidence.dates] == DAYS[2:4][::-1]

    # The serving read follows the stage: stream layer now (batch for closed dates in shadow).
    served = serving_view_rows(settings, FLOW, view.name, gap_day)
    stream_positions = read(
        spark, Target.open(spark, settings, FLOW, "stream").tables.view(view.name)
    ).where(f"{FLOW.business_date} = DATE'{gap_day}'")
    assert sorted(served.rows) == sorted(tuple(r) for r in stream_positions.collect())

    # Day 5, stage stream: the stream misses one trade; the EOD run reconciles the EOD file
    # against the stream layer, applies the difference as a correction, and reconciles again.
    last = DAYS[4]
    eod_rows = read_rows(files[last].eod, FLOW)
    corrections = read_rows(files[last].corrections, FLOW)
    corrected = {r[key] for r in corrections}
    lost = next(r for r in eod_rows if r[key] not in corrected)
    produce_rows(
        settings,
        FLOW,
        [r for r in eod_rows + corrections if r is not lost],
        topic=topic,
        progress=False,
    )
    drain(spark, settings, topic, flow=FLOW)
    final = {r[key]: r for r in eod_rows}
    final.update({r[key]: r for r in corrections})
    eod_file = tmp_path / f"{FLOW.name}_final_{last}.csv"
    with open(eod_file, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FLOW.columns)
        writer.writeheader()
        writer.writerows(final.values())

    clearing = files[last].external
    first = {
        r.recon: r
        for r in reconcile_date(
            spark, settings, FLOW, last, against=clearing, eod_file=eod_file, parity=False
        )
    }
    assert first["eod_file"].by_kind == {"missing_left": 1, "missing_right": 0, "value_mismatch": 0}
    assert [b["key"] for b in first["eod_file"].worst] == [
        json.dumps({key: lost[key]}, separators=(",", ":"))
    ]
    applied = eod_correct(spark, settings, FLOW, last, eod_file)
    assert applied.applied == 1
    second = {
        r.recon: r
        for r in reconcile_date(
            spark, settings, FLOW, last, against=clearing, eod_file=eod_file, parity=False
        )
    }
    assert second["eod_file"].clean
    # What is left against the external file is exactly its four deliberate breaks: two
    # values off, a group missing from it, a group only it has.
    assert second["external"].by_kind == {
        "missing_left": 1,
        "missing_right": 1,
        "value_mismatch": 2,
    }
    source = (
        read(spark, Target.open(spark, settings, FLOW, "stream").tables.current)
        .where(F.col(key) == F.lit(lost[key]))
        .first()
    )
    assert source["_source"] == "eod_correction"

    # Data quality with the flow's own suites on day 5's stream layer; the report shows it.
    quality = run_quality(spark, settings, FLOW, last, "stream", file=files[last].eod)
    assert {c.suite for c in quality.checks} == {f"{FLOW.name}.{d}" for d in datasets(FLOW.name)}
    assert len(quality.checks) >= 10 and quality.failures == [], quality.table()

    # The report: renders, charts present, numbers equal to the tables.
    html_path, json_path = write_report(settings, FLOW.name, last)
    parser = _Charts()
    parser.feed(html_path.read_text())
    assert parser.figures == 5 and parser.svgs >= 5 and parser.tables >= 2
    summary = json.loads(json_path.read_text())
    assert summary["stage"] == "stream"
    assert sum(summary["quality"]["counts"].values()) == len(quality.checks)
    assert summary["breaks_by_kind"] == second["external"].by_kind  # eod_file is clean
    # The adjustment is visible: the EOD file's break before, the corrected key with its line,
    # the clean run after.
    line = [r[key] for r in final.values()].index(lost[key]) + 2  # the header is line 1
    assert [
        (a["layer"], a["key"], a["source"], a["source_ref"]) for a in summary["adjustments"]
    ] == [("stream", lost[key], "eod_correction", f"{eod_file}:{line}")]
    eod_runs = [r for r in summary["reconciliation_runs"] if r["recon"] == "eod_file"]
    assert [r["missing_left"] for r in eod_runs] == [1, 0]
    runs = read(spark, recon_runs_path(settings)).where(f"business_date = DATE'{last}'")
    assert len(summary["reconciliations"]) == 2 and runs.count() == 4  # two runs of two recons
    breaks_today = (
        read(spark, recon_breaks_path(settings))
        .where(f"run_id = '{second['external'].run_id}'")
        .count()
    )
    assert breaks_today == len(summary["worst_breaks"]) == 4
    streak = {s["business_date"]: s["breaks"] for s in summary["parity_streak"]}
    assert set(streak) == {str(d) for d in DAYS[1:4]} and streak[str(gap_day)] > 0
    assert [(c["from_stage"], c["to_stage"]) for c in summary["stage_history"]] == [
        ("batch", "shadow"),
        ("shadow", "stream"),
    ]

    # Every table of the warehouse reads the same without a JVM (deltalake, what show, stage,
    # the report and the Airflow page use) as through Spark, deletion vectors and all: day 5's
    # corrections applied to the batch layer after its EOD file update rows in place.
    run_eod(spark, batch, last, files[last].eod)
    run_eod(spark, batch, last, files[last].corrections)
    tables = jvm_free.delta_tables(settings.warehouse)
    assert len(tables) >= 12
    for path in tables:
        through_spark = sorted(
            (sorted(r.asDict().items()) for r in read(spark, str(path)).collect()), key=repr
        )
        without_jvm = sorted((sorted(r.items()) for r in jvm_free.rows(path)), key=repr)
        assert without_jvm == through_spark, path
    with_deletion_vectors = [
        path
        for path in tables
        if any(
            '"deletionVector":{' in log.read_text() for log in (path / "_delta_log").glob("*.json")
        )
    ]
    assert batch.tables.current in {str(p) for p in with_deletion_vectors}
