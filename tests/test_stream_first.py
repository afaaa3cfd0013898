"""The stream-first destination on real Kafka, Spark and Delta: in stage stream
the EOD file's reconciliation closes the day, a replacement cancels what the whole-day file
lacks, and late events after the close are recorded and reconcile as late, not as breaks; in
stage kappa a day closes at its cut-off only once the stream has committed the offsets the
topic held then, and later events for it are late.

Oracles come from the input files: the whole-day file says which keys live at which version.
Both run once per flow; ``serve`` keeps only views whose measures add up (trades' positions,
not telemetry's hourly min/max/mean), so its step runs where the flow has one.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
from pyspark.sql import functions as F

from streamshift.control.cutoff import CloseRefused, check_cut_off
from streamshift.control.jobs import check
from streamshift.control.serving import view_rows
from streamshift.engine.jobs.promote import promote
from streamshift.engine.jobs.requests import run as run_job
from streamshift.engine.write.target import Target, read
from streamshift.spec.contract import IS_DELETED
from streamshift.spec.errors import ReconcileError
from streamshift.spec.registry import get_generator
from streamshift.spec.requests import CloseRequest, ReconcileRequest, ReplayRequest
from streamshift.store.events import serving_topic
from streamshift.store.produce import produce_rows, read_rows
from streamshift.store.records import closed_dates, day_closes, late_dates_to_reconcile
from tests.cli_support import LOCAL_SPARK, run_cli
from tests.stream_support import drain, isolated, new_topic, oracle, served, stream_running

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

TODAY = dt.datetime.now(dt.UTC).date()


def _live(spark, target: Target, day: dt.date) -> dict[str, int]:  # type: ignore[no-untyped-def]
    flow = target.flow
    rows = (
        read(spark, target.tables.current)
        .where((F.col(flow.business_date) == F.lit(day)) & ~F.col(IS_DELETED))
        .select(flow.key, flow.version)
        .collect()
    )
    return {str(r[0]): int(r[1]) for r in rows}


def _rows(spark, target: Target, columns: list[str]) -> list[tuple]:  # type: ignore[no-untyped-def, type-arg]
    return sorted(
        (tuple(r) for r in read(spark, target.tables.current).select(*columns).collect()), key=repr
    )


def _forced_to(spark, settings, flow: str, stage: str) -> None:  # type: ignore[no-untyped-def]
    for step in ("shadow", "stream", "kappa")[: ("shadow", "stream", "kappa").index(stage) + 1]:
        promote(spark, settings, flow, step, force=True, reason="test set-up", by="test")


def test_stage_stream_closes_replaces_and_takes_late_data(
    spark, kafka_settings, any_flow, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    FLOW = any_flow
    settings = isolated(kafka_settings, tmp_path / "home", promotion_window=1)
    topic = new_topic(FLOW.name)
    day = TODAY - dt.timedelta(days=1)
    files = get_generator(FLOW.name)(day, 40, tmp_path / "day", seed=7, progress=False)
    _forced_to(spark, settings, FLOW.name, "stream")
    stream = Target.open(spark, settings, FLOW, "stream")

    # The stream misses the file's first row.
    started = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    eod_rows = read_rows(files.eod, FLOW)
    produce_rows(settings, FLOW, eod_rows[1:], topic=topic, progress=False)
    drain(spark, settings, topic, flow=FLOW)
    assert day not in closed_dates(settings, FLOW.name)

    # The EOD file's reconciliation produces its differences to the topic; the stream job
    # applies them; the day closes in the stream layer.
    with stream_running(spark, settings, topic, FLOW):
        run = run_job(
            spark,
            ReconcileRequest(FLOW.name, day, eod_file=files.eod, parity=False, correct=True),
            settings,
        ).result
        assert run.before_correction[0].by_kind["missing_left"] == 1
        assert run.correction is not None and run.correction.produced == 1
        assert run.results[0].clean, run.describe()
        closes = day_closes(settings, FLOW.name, day)
        assert [(c["layer"], c["how"]) for c in closes] == [("stream", "eod_file")]
        missed = eod_rows[0][FLOW.key].strip()
        [fixed] = (
            read(spark, stream.tables.current)
            .where(F.col(FLOW.key) == F.lit(missed))
            .select("_source", "_source_ref", "_log_ref")
            .collect()
        )
        assert fixed["_source"] == "eod_correction"
        assert fixed["_source_ref"] == f"{files.eod}:2"  # the header is line 1
        assert fixed["_log_ref"].startswith(f"{topic}:")
        expected = oracle(spark, eod_rows, stream.reference, FLOW)
        columns = expected["state_columns"]
        k, v, bd, dl = (
            columns.index(c) for c in (FLOW.key, FLOW.version, FLOW.business_date, IS_DELETED)
        )
        live_eod = {str(r[k]): int(r[v]) for r in expected["current"] if r[bd] == day and not r[dl]}
        assert _live(spark, stream, day) == live_eod

        # A whole-day replacement: what the file lacks is cancelled, what it changed applied.
        replaced = run_job(
            spark,
            ReconcileRequest(
                FLOW.name, day, eod_file=files.replacement, parity=False, correct=True, replace=True
            ),
            settings,
        ).result
        in_replacement = {
            r[FLOW.key].strip(): int(r[FLOW.version]) for r in read_rows(files.replacement, FLOW)
        }
        assert _live(spark, stream, day) == in_replacement
        assert set(live_eod) - set(in_replacement), "the replacement drops keys"
        assert replaced.results[0].clean, replaced.describe()
        # The EOD process's own changes to its date are not late.
        assert view_rows(settings, FLOW, "stream", "late_events").rows == []
        positions = FLOW.views[0]
        want = oracle(spark, read_rows(files.replacement, FLOW), stream.reference, FLOW)
        got = sorted(
            (
                tuple(r)
                for r in read(spark, stream.tables.view(positions.name))
                .where(F.col(FLOW.business_date) == F.lit(day))
                .collect()
            ),
            key=repr,
        )
        assert got == want["positions"]

        # Late events after the close: applied, recorded as late, and not breaks.
        late_rows = read_rows(files.late, FLOW)
        produce_rows(settings, FLOW, late_rows, topic=topic, progress=False)
        late_keys = {r[FLOW.key].strip() for r in late_rows}
        deadline = time.monotonic() + 300
        while {r["key"] for r in view_rows(settings, FLOW, "stream", "late_events").as_dicts()} != (
            late_keys
        ):
            assert time.monotonic() < deadline, "the late events were not recorded"
            time.sleep(1)
    recorded = view_rows(settings, FLOW, "stream", "late_events").as_dicts()
    assert {r["business_date"] for r in recorded} == {day}
    assert late_dates_to_reconcile(settings, FLOW.name) == [day]
    again = run_job(
        spark, ReconcileRequest(FLOW.name, day, eod_file=files.replacement, parity=False), settings
    ).result
    assert again.results[0].clean, again.describe()
    assert set(_live(spark, stream, day)) == set(in_replacement) | late_keys

    # Every change went through the log: a replay of the topic into the empty batch layer
    # reproduces the stream layer, corrections and cancels included.
    run_job(
        spark, ReplayRequest(FLOW.name, started, dt.datetime.now(dt.UTC), "batch", topic), settings
    )
    batch = Target.open(spark, settings, FLOW, "batch")
    stored = [c for c in read(spark, stream.tables.current).columns if not c.startswith("_")]
    assert _rows(spark, batch, stored) == _rows(spark, stream, stored)

    # `serve` sees every correction and cancel too: its compacted topic holds the Delta view.
    if positions.is_additive:
        done = run_cli(
            tmp_path / "serve-home",
            *("serve", "--flow", FLOW.name, "--topic", topic, "--available-now"),
            **LOCAL_SPARK,
            kafka_bootstrap_servers=settings.kafka_bootstrap_servers,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        width = len(positions.group_key)
        view = read(spark, stream.tables.view(positions.name)).collect()
        assert served(settings, serving_topic(topic, positions.name)) == {
            tuple(str(v) for v in r[:width]): tuple(str(v) for v in r[width:]) for r in view
        }
    else:
        assert FLOW.name == "telemetry", f"{FLOW.name}'s first view is meant to be served"

    # Evidence for kappa: stage stream's clean EOD-file reconciliation (window 1).
    change = promote(spark, settings, FLOW.name, "kappa", by="test")
    assert change.evidence is not None and change.evidence.kind == "eod_file"
    assert [d["business_date"] for d in change.evidence.dates] == [day]


def test_kappa_closes_at_the_cut_off_once_the_stream_passed_it(
    spark, kafka_settings, any_flow, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    FLOW = any_flow
    settings = isolated(kafka_settings, tmp_path / "home")
    topic = new_topic(FLOW.name)
    day = TODAY - dt.timedelta(days=2)
    files = get_generator(FLOW.name)(day, 20, tmp_path / "day", seed=3, progress=False)
    _forced_to(spark, settings, FLOW.name, "kappa")
    drain(spark, settings, topic, flow=FLOW)  # the stream job is up on its (empty) topic

    # Refused before the cut-off, saying when.
    tomorrow = CloseRequest(FLOW.name, TODAY + dt.timedelta(days=1))
    with pytest.raises(CloseRefused, match="plus grace, .* from now"):
        check(settings, tomorrow)

    # The day's events were sent before its cut-off; the stream has not read them yet.
    cut_off = FLOW.cut_off.at(day)
    rows = read_rows(files.eod, FLOW)
    before = int((cut_off - dt.timedelta(hours=6)).timestamp() * 1000)
    produce_rows(settings, FLOW, rows, topic=topic, progress=False, timestamp_ms=before)
    waiting = check_cut_off(settings, FLOW, day)
    assert waiting.due and sum(waiting.needed.values()) == len(rows)
    assert sum(waiting.behind.values()) == len(rows)
    refused = run_cli(
        settings.home,
        *("close", "--flow", FLOW.name, "--date", str(day)),
        timeout=120,
        kafka_bootstrap_servers=settings.kafka_bootstrap_servers,
    )
    assert refused.returncode == 2, refused.stderr
    assert "cannot close yet" in refused.stderr and "committed 0 of" in refused.stderr
    assert "Traceback" not in refused.stderr

    drain(spark, settings, topic, flow=FLOW)
    done = run_job(spark, CloseRequest(FLOW.name, day, by="ops"), settings).result
    assert done.how == "cut_off" and done.layers == ("stream",)
    [row] = day_closes(settings, FLOW.name, day)
    assert (row["layer"], row["how"], row["closed_by"]) == ("stream", "cut_off", "ops")

    # A change for the closed day arrives after the cut-off: applied and late.
    late_rows = read_rows(files.late, FLOW)
    produce_rows(settings, FLOW, late_rows, topic=topic, progress=False)
    assert drain(spark, settings, topic, flow=FLOW).totals.late == len(late_rows)
    recorded = view_rows(settings, FLOW, "stream", "late_events").as_dicts()
    assert {r["key"] for r in recorded} == {r[FLOW.key] for r in late_rows}

    # No EOD file in kappa: --correct is refused, pointing at replay; a forced close needs why.
    with pytest.raises(ReconcileError, match="replay"):
        check(settings, ReconcileRequest(FLOW.name, day, eod_file=files.eod, correct=True))
    with pytest.raises(CloseRefused, match="--reason"):
        check(settings, CloseRequest(FLOW.name, TODAY, force=True))
    forced = run_job(
        spark,
        CloseRequest(FLOW.name, TODAY, force=True, reason="desk closed early"),
        settings,
    ).result
    assert forced.how == "forced"
    assert [c["reason"] for c in day_closes(settings, FLOW.name, TODAY)] == ["desk closed early"]
