"""``streamshift explain`` on real Spark and Delta tables, read back without a JVM: a group
that trades entered, left (to another book, and by a cancel), changed out of order (v3 before
v2) and were re-sent stale into; checked against an oracle computed from the files' rows."""

from __future__ import annotations

import csv
import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pytest

from streamshift.control.explain import CHANGED, ENTERED, LEFT, explain
from streamshift.control.trace import trace
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.write.target import Target
from streamshift.spec.catalog import LayerTables
from streamshift.spec.registry import get_flow
from tests.cli_support import run_cli

pytestmark = [pytest.mark.spark]

DAY = dt.date(2026, 11, 20)
TRADES = get_flow("trades")
HEADER = ["trade_id", "version", "event_type", "business_date", "trade_ts", "book",
          "instrument", "side", "quantity", "price", "currency"]  # fmt: skip
B1, B2, X = "EQ-US-FLOW", "EQ-US-DELTA1", "AAPL"


def _t(key: str, version: int, event: str, book: str, side: str, qty: int) -> list[str]:
    return [key, str(version), event, str(DAY), f"{DAY}T10:00:00Z", book, X, side, str(qty),
            "10.5", "USD"]  # fmt: skip


FILES = [
    [_t("t1", 1, "NEW", B1, "BUY", 100), _t("t2", 1, "NEW", B1, "SELL", 30),
     _t("t3", 1, "NEW", B2, "BUY", 5)],
    # t1 moves to B2; t2's v3 comes before its v2; t4 is new in B1, with a v1 and v2 in one file
    [_t("t1", 2, "AMEND", B2, "BUY", 100), _t("t2", 3, "AMEND", B1, "SELL", 40),
     _t("t4", 1, "NEW", B1, "BUY", 7), _t("t4", 2, "AMEND", B1, "BUY", 8)],
    # stale: t2's v2 after its v3, t1's v2 re-sent; t3 cancelled
    [_t("t2", 2, "AMEND", B1, "SELL", 35), _t("t1", 2, "AMEND", B2, "BUY", 100),
     _t("t3", 2, "CANCEL", B2, "BUY", 5)],
]  # fmt: skip


def _oracle(book: str) -> tuple[dict[str, tuple[int, int]], list[tuple[str, int, str, int, str]]]:
    """From the rows alone: the group's live members {key: (version, signed qty)} and its
    changes newest first (key, version, moved, net_quantity delta, file:line)."""
    current: dict[str, list[str]] = {}
    changes = []
    for n, rows in enumerate(FILES):
        best: dict[str, tuple[int, list[str]]] = {}
        for line, r in enumerate(rows, start=2):
            if r[0] not in best or int(r[1]) > int(best[r[0]][1][1]):
                best[r[0]] = (line, r)
        for key, (line, r) in sorted(best.items(), key=lambda kv: kv[1][0]):
            before = current.get(key)
            if before is not None and int(r[1]) <= int(before[1]):
                continue  # stale
            current[key] = r

            def qty(row: list[str] | None) -> int | None:
                if row is None or row[2] == "CANCEL" or row[5] != book:
                    return None
                return int(row[8]) * (-1 if row[7] == "SELL" else 1)

            was, now = qty(before), qty(r)
            if was is not None or now is not None:
                moved = (
                    CHANGED
                    if was is not None and now is not None
                    else (ENTERED if now is not None else LEFT)
                )
                delta, ref = (now or 0) - (was or 0), f"file{n}.csv:{line}"
                changes.append(((n, line), (key, int(r[1]), moved, delta, ref)))
    members = {
        k: (int(r[1]), int(r[8]) * (-1 if r[7] == "SELL" else 1))
        for k, r in current.items()
        if r[2] != "CANCEL" and r[5] == book
    }
    return members, [c for _, c in sorted(changes, reverse=True)]


def test_explain_names_the_members_and_every_change_that_moved_a_group(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    tables = LayerTables(home / "warehouse", TRADES, "batch")
    target = Target(spark, TRADES, tables)
    for n, rows in enumerate(FILES):
        path = tmp_path / f"file{n}.csv"
        with open(path, "w", newline="") as handle:
            csv.writer(handle).writerows([HEADER, *rows])
        run_eod(spark, target, DAY, path)

    for book in (B1, B2):
        members, changes = _oracle(book)
        found = explain(TRADES, tables, "positions", DAY, {"book": book, "instrument": X},
                        changes=0)  # fmt: skip
        got = {m["key"]: (m["version"], m["contribution"]["net_quantity"]) for m in found.members}
        assert got == members, book
        assert [
            (c["key"], c["version"], c["moved"], c["delta"]["net_quantity"],
             Path(c["source_ref"]).name)
            for c in found.changes
        ] == changes, book  # fmt: skip
        measures = {m["measure"]: m for m in found.measures}
        assert found.row is not None
        assert found.row["net_quantity"] == sum(q for _, q in members.values())
        assert found.row["trade_count"] == len(members) == measures["trade_count"]["members_total"]
        # The members' notionals add up to the stored value before its rounding.
        notional = measures["net_notional_usd"]
        assert notional["adds_up"] and isinstance(notional["members_total"], Decimal)
        # The sum of the changes' deltas is the group's value now.
        assert sum(c["delta"]["net_quantity"] for c in found.changes) == found.row["net_quantity"]

    # Each key's trace: its versions in the order received, with the outcome the rows alone
    # give — stale at or below a version received before it (t2's v2 after its v3), superseded
    # by a higher version in the same file (t4's v1), else applied. t1's v2 sent again is
    # listed at each delivery, the second stale.
    for key in sorted({r[0] for rows in FILES for r in rows}):
        expected, highest = [], 0
        for n, rows in enumerate(FILES):
            mine = [(line, int(r[1])) for line, r in enumerate(rows, start=2) if r[0] == key]
            for line, version in mine:
                outcome = (
                    "stale"
                    if version <= highest
                    else ("superseded" if any(v > version for _, v in mine) else "applied")
                )
                highest = max(highest, version)
                expected.append((version, f"file{n}.csv:{line}", outcome))
        got = [(e["version"], Path(e["source_ref"]).name, e["outcome"])
               for e in trace(TRADES, tables, key).events]  # fmt: skip
        assert got == expected, key
    assert ("t2", [2]) == ("t2", [e["version"] for e in trace(TRADES, tables, "t2").events
                                  if e["outcome"] == "stale"])  # fmt: skip
    assert [(e["version"], e["outcome"], e["current"]) for e in trace(TRADES, tables, "t1").events
            ] == [(1, "applied", False), (2, "applied", True), (2, "stale", False)]  # fmt: skip

    # The CLI: paged changes, JSON, and a group nothing ever touched.
    group = f"book={B1},instrument={X}"
    args = ("explain", "--flow", "trades", "--date", str(DAY), "--layer", "batch")
    shown = run_cli(home, *args, "--group", group, "--changes", "2")
    assert shown.returncode == 0, shown.stderr
    assert "net_quantity = " in shown.stdout and "(sum of the members: " in shown.stdout
    assert f"1-2 of {len(_oracle(B1)[1])}" in shown.stdout
    as_json = json.loads(run_cli(home, *args, "--group", group, "--format", "json").stdout)
    assert set(as_json) >= {"group", "row", "members", "changes"}
    assert [m["key"] for m in as_json["members"]] == sorted(_oracle(B1)[0])
    nowhere = run_cli(home, *args, "--group", f"book={B1},instrument=MSFT")
    assert nowhere.returncode == 1 and "no change ever touched it" in nowhere.stdout
    wrong = run_cli(home, *args, "--group", f"book={B1}")
    assert wrong.returncode == 2 and "missing: instrument" in wrong.stderr

    # The Migration page's explanation (what a break links to): the same members, each linking
    # to its trace.
    from streamshift.airflow.migration import render_explain
    from streamshift.control.summary import break_link
    from streamshift.spec.settings import load_settings

    link = break_link("trades", DAY, json.dumps({"business_date": str(DAY), "book": B1,
                                                  "instrument": X}))  # fmt: skip
    assert link == (f"explain?flow=trades&view=positions&date={DAY}"
                    f"&group=book%3D{B1}%2Cinstrument%3D{X}")  # fmt: skip
    assert break_link("trades", DAY, '{"trade_id": "t1"}') == "trace?flow=trades&key=t1"
    page = render_explain(load_settings({}, home=home), "trades", "positions", str(DAY),
                          f"book={B1},instrument={X}", "batch")  # fmt: skip
    for key in _oracle(B1)[0]:
        assert f"<a href='trace?flow=trades&amp;key={key}&amp;layer=batch'>{key}</a>" in page


def test_explain_names_the_member_setting_a_minimum_and_a_means_parts(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    flow = get_flow("telemetry")
    tables = LayerTables(tmp_path / "warehouse", flow, "batch")
    header = [f.name for f in flow.schema.fields]
    values = {"r1": "20.5", "r2": "18.25", "r3": "22.0", "r4": "18.25"}
    rows = [
        {"reading_id": k, "device_id": "DEV-001", "seq": "1", "status": "OK",
         "business_date": str(DAY), "reading_ts": f"{DAY}T13:{i:02}:00Z", "value": v}
        for i, (k, v) in enumerate(values.items())
    ]  # fmt: skip
    path = tmp_path / "readings.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    run_eod(spark, Target(spark, flow, tables), DAY, path)
    found = explain(
        flow, tables, "hourly", DAY, {"device_id": "DEV-001", "hour": f"{DAY} 13:00:00"}
    )
    m = {x["measure"]: x for x in found.measures}
    numbers = [Decimal(v) for v in values.values()]
    assert m["min_value"]["set_by"] == ["r2", "r4"] and m["min_value"]["value"] == min(numbers)
    assert m["max_value"]["set_by"] == ["r3"]
    assert (m["mean_value"]["sum"], m["mean_value"]["count"]) == (sum(numbers), 4)
    assert m["mean_value"]["adds_up"] and m["readings"]["members_total"] == 4
    assert [c["moved"] for c in found.changes] == [ENTERED] * 4


def test_a_replacements_cancel_ranks_below_a_real_event_of_its_version_in_a_trace() -> None:
    """Outcomes by the write path's order of precedence, on history rows as stored: a
    replacement's synthetic cancel of v2 loses to the desk's own v2 received after it, and
    a real v2 received before it leaves the cancel stale."""
    from streamshift.control.trace import outcomes

    def row(version: int, source: str, at: int, ref: str) -> dict[str, object]:
        return {"version": version, "_source": source, "_applied_at": at, "_source_ref": ref}

    cancel_first = [row(1, "eod", 1, "a.csv:2"), row(2, "replacement", 2, "r.csv:0"),
                    row(2, "kafka", 3, "t:0:5")]  # fmt: skip
    assert outcomes(TRADES, cancel_first) == ["applied", "applied", "applied"]
    real_first = [row(1, "eod", 1, "a.csv:2"), row(2, "kafka", 2, "t:0:5"),
                  row(2, "replacement", 3, "r.csv:0"), row(1, "kafka", 4, "t:0:6")]  # fmt: skip
    assert outcomes(TRADES, real_first) == ["applied", "applied", "stale", "stale"]


def test_a_group_names_every_column_of_the_views_group() -> None:
    """``--group`` names each group column but the date; the refusal names what is missing
    and what the view does not have, both at once."""
    from streamshift.control.explain import ExplainError, parse_group
    from streamshift.spec.registry import get_flow

    flow = get_flow("trades")
    view = flow.view("positions")
    given = parse_group(view, flow.business_date, "book=EQ-US-FLOW, instrument=AAPL")
    assert given == {"book": "EQ-US-FLOW", "instrument": "AAPL"}
    with pytest.raises(ExplainError) as refused:
        parse_group(view, flow.business_date, "bok=EQ-US-FLOW,instrument=AAPL")
    assert str(refused.value) == (
        "--group must name book, instrument of view positions (missing: book; unknown: bok)"
    )
