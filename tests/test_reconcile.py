"""Reconciliation on crafted inputs; the promotion gate on recorded reconciliations."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from decimal import Decimal

import pytest

from flows.trades import FLOW
from streamshift.airflow.migration import render
from streamshift.control.stages import PromotionRefused
from streamshift.control.summary import flow_summary
from streamshift.engine.compare import compare
from streamshift.engine.jobs.promote import promote
from streamshift.engine.recon import ReconResult, record
from streamshift.spec.formatting import cell
from streamshift.store.records import current_stage, stage_history

pytestmark = [pytest.mark.spark]

D = dt.date(2026, 11, 20)
SCHEMA = (
    "business_date DATE, book STRING, instrument STRING, net_quantity BIGINT, "
    "net_notional_usd DECIMAL(28,2), trade_count BIGINT"
)
KEY = ("business_date", "book", "instrument")
COLUMNS = ["net_quantity", "net_notional_usd", "trade_count"]
TOL = {"net_notional_usd": 0.01}


def _k(book: str) -> str:
    return json.dumps(
        {"business_date": str(D), "book": book, "instrument": "AAPL"}, separators=(",", ":")
    )


def test_each_break_kind_and_tolerances_on_both_sides_of_the_limit(spark) -> None:  # type: ignore[no-untyped-def]
    m = Decimal
    left = spark.createDataFrame(
        [
            (D, "SAME", "AAPL", 10, m("100.00"), 1),
            (D, "ONLY_LEFT", "AAPL", 5, m("50.00"), 1),
            (D, "QTY", "AAPL", 10, m("100.00"), 2),
            (D, "AT_LIMIT", "AAPL", 10, m("100.00"), 1),
            (D, "BELOW_LIMIT", "AAPL", 10, m("100.00"), 1),
            (D, "OVER_LIMIT", "AAPL", 10, m("100.00"), 1),
            (D, "NULLS", "AAPL", None, None, 1),
        ],
        SCHEMA,
    )
    right = spark.createDataFrame(
        [
            (D, "SAME", "AAPL", 10, m("100.00"), 1),
            (D, "ONLY_RIGHT", "AAPL", 7, m("70.00"), 1),
            (D, "QTY", "AAPL", 11, m("100.00"), 2),
            (D, "AT_LIMIT", "AAPL", 10, m("100.01"), 1),
            (D, "BELOW_LIMIT", "AAPL", 10, m("99.99"), 1),
            (D, "OVER_LIMIT", "AAPL", 10, m("99.98"), 1),
            (D, "NULLS", "AAPL", None, m("1.00"), 1),
        ],
        SCHEMA,
    )
    breaks = {
        (
            r["kind"],
            r["key"],
            r["column"],
            r["left_value"],
            r["right_value"],
            r["difference"],  # exact for decimals: no binary noise to round away
        )
        for r in compare(left, right, KEY, COLUMNS, TOL).collect()
    }
    assert breaks == {
        (
            "missing_right",
            _k("ONLY_LEFT"),
            None,
            '{"net_quantity":5,"net_notional_usd":50.00,"trade_count":1}',
            None,
            None,
        ),
        (
            "missing_left",
            _k("ONLY_RIGHT"),
            None,
            None,
            '{"net_quantity":7,"net_notional_usd":70.00,"trade_count":1}',
            None,
        ),
        ("value_mismatch", _k("QTY"), "net_quantity", "10", "11", 1.0),
        ("value_mismatch", _k("OVER_LIMIT"), "net_notional_usd", "100.00", "99.98", -0.02),
        ("value_mismatch", _k("NULLS"), "net_notional_usd", None, "1.00", None),
    }


def test_tables_show_values_without_binary_noise() -> None:
    """How the report and the Migration page show a break's cells."""
    values = (None, 1400.0, -1294.2, -0.020000000000010232, "EQ-US", 7, 1e300, float("nan"))
    assert [cell(v) for v in values] == [
        "",
        "1400",
        "-1294.2",
        "-0.02",  # a difference stored as two doubles' difference, before they were exact
        "EQ-US",
        "7",
        "1e+300",  # not 301 digits
        "nan",
    ]


def _record_parity(  # type: ignore[no-untyped-def]
    spark,
    settings,
    day: dt.date,
    breaks: int,
    compared: int = 10,
    recon: str = "parity",
    stage: str = "shadow",
) -> None:
    rows = [("missing_right", f"k{i}", None, "{}", None, None) for i in range(breaks)]
    frame = spark.createDataFrame(
        rows,
        "kind STRING, key STRING, column STRING, left_value STRING, right_value STRING, "
        "difference DOUBLE",
    )
    record(
        spark,
        settings,
        FLOW,
        frame,
        ReconResult(f"run-{day}", recon, day, "batch", "stream", compared, compared - breaks),
        stage,
    )


def test_promotion_gate_refuses_names_dates_and_records_every_change(
    spark, settings, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    s = replace(settings, home=tmp_path, promotion_window=3)
    assert current_stage(s, FLOW.name) == "batch"
    with pytest.raises(PromotionRefused, match="one stage at a time"):
        promote(spark, s, FLOW.name, "stream")
    promote(spark, s, FLOW.name, "shadow", by="alice")

    days = [D + dt.timedelta(days=i) for i in range(5)]
    _record_parity(spark, s, days[0], 0)
    _record_parity(spark, s, days[1], 2)
    # A date neither layer holds (nothing loaded) reconciles "clean" and is no evidence.
    _record_parity(spark, s, days[4], 0, compared=0)
    with pytest.raises(PromotionRefused) as refused:
        promote(spark, s, FLOW.name, "stream")
    message = str(refused.value)
    assert f"{days[1]} had 2 breaks" in message and "only 2 of the 3" in message
    assert f"({days[4]} compared no rows in either layer" in message

    _record_parity(spark, s, days[2], 0)
    _record_parity(spark, s, days[3], 0)
    with pytest.raises(PromotionRefused, match=f"{days[1]} had 2 breaks"):
        promote(spark, s, FLOW.name, "stream")  # day 1 is still among the last three
    _record_parity(spark, s, days[1], 0)  # re-reconciled after a repair: the latest run counts
    change = promote(spark, s, FLOW.name, "stream", by="bob")
    # The last three dates that held data, the empty day 4 passed over.
    assert [d["business_date"] for d in change.evidence.dates] == [days[3], days[2], days[1]]

    with pytest.raises(PromotionRefused, match="needs --reason"):
        promote(spark, s, FLOW.name, "kappa", force=True)
    promote(spark, s, FLOW.name, "shadow", by="carol")  # demotion: always allowed
    _record_parity(spark, s, days[3], 5)
    # The Migration page shows the empty date greyed, not counted in the clean run: the newest
    # date with data (day 3, 5 breaks) ends it.
    summary = flow_summary(s, FLOW.name)
    assert [(d["business_date"], d["rows"]) for d in summary["parity_streak"]][-2:] == [
        (days[3], 15),
        (days[4], 0),
    ]
    assert summary["clean_days_in_a_row"] == 0
    page = render([summary], "tester")
    assert f"<li class='day empty' data-date='{days[4]}'" in page
    assert f"<li class='day breaks' data-date='{days[3]}'" in page
    promote(
        spark,
        s,
        FLOW.name,
        "stream",
        force=True,
        reason="incident 42: batch source down",
        by="dave",
    )
    history = [
        (c["from_stage"], c["to_stage"], c["changed_by"], c["forced"], c["reason"])
        for c in stage_history(s, FLOW.name)
    ]
    assert history == [
        ("batch", "shadow", "alice", False, None),
        ("shadow", "stream", "bob", False, None),
        ("stream", "shadow", "carol", False, None),
        ("shadow", "stream", "dave", True, "incident 42: batch source down"),
    ]
    assert current_stage(s, FLOW.name) == "stream"

    # Into kappa, the evidence is stage stream's reconciliations of the EOD file: clean parity
    # (made in shadow) is not it, nor an EOD-file reconciliation made in another stage.
    _record_parity(spark, s, days[3], 0)
    _record_parity(spark, s, days[4], 0, recon="eod_file", stage="shadow")
    with pytest.raises(PromotionRefused) as refused:
        promote(spark, s, FLOW.name, "kappa")
    message = str(refused.value)
    assert "the EOD file vs the stream layer, reconciled in stage stream" in message
    assert "only 0 of the 3" in message
    for day in days[:3]:
        _record_parity(spark, s, day, 0, recon="eod_file", stage="stream")
    change = promote(spark, s, FLOW.name, "kappa", by="erin")
    assert change.evidence is not None and change.evidence.kind == "eod_file"
    assert [d["business_date"] for d in change.evidence.dates] == [days[2], days[1], days[0]]
    assert flow_summary(s, FLOW.name)["next_stage"] is None
    promote(spark, s, FLOW.name, "stream", by="frank")  # demotion kappa -> stream
    assert current_stage(s, FLOW.name) == "stream"
