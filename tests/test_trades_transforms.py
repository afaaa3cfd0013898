"""The trades flow's pure transforms on inline DataFrames, with exact expected rows."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import json
import random
from decimal import Decimal

import pytest

from flows.trades import FLOW, positions
from streamshift.engine.write.target import load_reference
from streamshift.engine.write.transforms import (
    FIRST_VERSION,
    LATEST_VERSION,
    checked_changes,
    distinct_versions,
    latest_per_key,
    ranked_versions,
)
from streamshift.spec.contract import FAILED, IS_DELETED
from streamshift.spec.flow import Flow
from tests.trades_data import frame, trade

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def reference(spark):  # type: ignore[no-untyped-def]
    return load_reference(spark, FLOW)


def _failed(spark, reference, rows):  # type: ignore[no-untyped-def]
    checked = checked_changes(FLOW, frame(spark, rows), reference)
    return {r.trade_id or "<blank>": list(r[FAILED]) for r in checked.collect()}


def test_each_rule_names_its_failure(spark, reference) -> None:  # type: ignore[no-untyped-def]
    rows = [
        trade("ok", 1),
        trade("", 1),
        trade("v0", 0),
        trade("vx", "x"),
        trade("evt", 1, event="MODIFY"),
        trade("side", 1, side="HOLD"),
        trade("qty0", 1, quantity=0),
        trade("qtyfrac", 1, quantity="1.5"),
        trade("px", 1, price="-1"),
        trade("book", 1, book="NOPE"),
        trade("inst", 1, instrument="NOPE"),
        trade("ccy", 1, currency="XXX"),
        trade("date", 1, date="2026-02-30", ts="2026-11-20T10:00:00Z"),
        trade("ts", 1, ts="not-a-time"),
        trade("cancel", 3, event="CANCEL"),
    ]
    assert _failed(spark, reference, rows) == {
        "ok": [],
        "<blank>": ["trade_id_present"],
        "v0": ["version_at_least_1"],
        "vx": ["parseable_version", "version_at_least_1"],
        "evt": ["known_event_type"],
        "side": ["known_side"],
        "qty0": ["quantity_positive"],
        "qtyfrac": ["parseable_quantity", "quantity_positive"],
        "px": ["price_positive"],
        "book": ["known_book"],
        "inst": ["known_instrument"],
        "ccy": ["fx_rate_exists"],
        "date": ["parseable_business_date", "business_date_present", "fx_rate_exists"],
        "ts": ["parseable_trade_ts", "trade_ts_present"],
        "cancel": [],  # a CANCEL needs only trade_id, version, business_date
    }


def test_prepare_joins_reference_and_uses_latest_earlier_fx_rate(spark, reference) -> None:  # type: ignore[no-untyped-def]
    # 2026-11-21 is a Saturday: no rate that day, Friday's applies.
    rows = [
        trade(
            "eur",
            1,
            date="2026-11-21",
            book="EQ-EU-FLOW",
            instrument="SAP",
            side="SELL",
            quantity=10,
            price="200.50",
            currency="EUR",
        )
    ]
    got = checked_changes(FLOW, frame(spark, rows), reference).collect()[0]
    fx = {(r.business_date, r.currency): r.rate_to_usd for r in reference["fx_rates"].collect()}
    friday_rate = fx[(dt.date(2026, 11, 20), "EUR")]
    assert got.desk == "EQUITY" and got.legal_entity == "LE-DE" and got.asset_class == "EQUITY"
    assert got.rate_to_usd == friday_rate
    assert got.signed_quantity == -10
    expected = (Decimal(10) * Decimal("200.50") * friday_rate).quantize(Decimal("0.000001"))
    assert got.notional_usd == expected
    assert got.signed_notional_usd == -expected
    assert got[IS_DELETED] is False


def test_positions_over_live_trades(spark, reference) -> None:  # type: ignore[no-untyped-def]
    rows = [
        trade("a", 1, quantity=100, price="10"),
        trade("b", 1, side="SELL", quantity=30, price="20"),
        trade("c", 1, book="EQ-US-DELTA1", quantity=5, price="1.005"),
        trade("c2", 1, book="EQ-US-DELTA1", quantity=5, price="1.005"),
    ]
    prepared = checked_changes(FLOW, frame(spark, rows), reference)
    got = {(r.book, r.instrument): tuple(r)[3:] for r in positions(prepared).collect()}
    assert got == {
        ("EQ-US-FLOW", "AAPL"): (70, Decimal("400.00"), Decimal("1600.00"), 2),
        # 2 x 5.025 = 10.05 exactly: sums are rounded once, after adding decimals
        ("EQ-US-DELTA1", "AAPL"): (10, Decimal("10.05"), Decimal("10.05"), 2),
    }


def test_latest_per_key_takes_highest_version(spark, reference) -> None:  # type: ignore[no-untyped-def]
    rows = [trade("a", 1), trade("a", 3, quantity=3), trade("a", 2, quantity=2), trade("b", 1)]
    checked = checked_changes(FLOW, frame(spark, rows), reference)
    got = {(r.trade_id, r.version, r.quantity) for r in latest_per_key(FLOW, checked).collect()}
    assert got == {("a", 3, 3), ("b", 1, 100)}


def test_ranked_versions_flags_what_distinct_versions_and_latest_per_key_keep(
    spark,
    reference,  # type: ignore[no-untyped-def]
) -> None:
    """The write path's one sort agrees with the two transforms it replaces, row for row:
    redelivered versions (the lowest source reference wins), several versions of a key,
    rejected rows (flagged neither, even a key's highest version)."""
    rows = [
        trade("a", 1, ref="f:3"),
        trade("a", 2, quantity=2, ref="f:9"),
        trade("a", 2, quantity=7, ref="f:4"),  # the same version again: f:4 < f:9 wins
        trade("a", 3, quantity="x", ref="f:5"),  # rejected: a's latest stays version 2
        trade("b", 1, ref="f:8"),
        trade("b", 1, ref="f:1"),
        trade("c", 4, ref="f:2"),
        trade("c", 1, ref="f:6"),
        trade("", 1, ref="f:7"),  # rejected: no key
    ]
    checked = checked_changes(FLOW, frame(spark, rows), reference)
    ranked = ranked_versions(FLOW, checked).collect()

    def picked(rows_):  # type: ignore[no-untyped-def]
        return {(r.trade_id, r.version, r.quantity, r._source_ref) for r in rows_}

    flagged = {f: picked(r for r in ranked if r[f]) for f in (FIRST_VERSION, LATEST_VERSION)}
    accepted = checked.where(f"size({FAILED}) = 0")

    assert (
        flagged[FIRST_VERSION]
        == picked(distinct_versions(FLOW, accepted).collect())
        == {
            ("a", 1, 100, "f:3"),
            ("a", 2, 7, "f:4"),
            ("b", 1, 100, "f:1"),
            ("c", 4, 100, "f:2"),
            ("c", 1, 100, "f:6"),
        }
    )
    assert (
        flagged[LATEST_VERSION]
        == picked(latest_per_key(FLOW, accepted).collect())
        == {
            ("a", 2, 7, "f:4"),
            ("b", 1, 100, "f:1"),
            ("c", 4, 100, "f:2"),
        }
    )
    assert len(ranked) == len(rows)


@pytest.mark.parametrize(
    ("apart_at_most", "once_only", "in_the_pass"),
    [(100, True, False), (100, False, False), (1, False, False), (100, False, True)],
    ids=["every-key-once", "repeated-keys-apart", "whole-batch", "ranked-in-the-pass"],
)
def test_the_apply_ranks_only_the_keys_it_received_more_than_once(  # type: ignore[no-untyped-def]
    spark, reference, monkeypatch, apart_at_most, once_only, in_the_pass
) -> None:
    """The apply's ranking (``ranked_batch``) flags the versions a window over the whole batch
    would, whether no key came twice, a few did (ranked apart from the rest), or more than it
    ranks apart (the whole batch as one window), and so does the window in the pass that
    fills the cache (a layer whose last batch repeated many keys): first deliveries, each
    key's latest, a version delivered again with other content rejected as a conflict."""
    from streamshift.engine.write import apply

    monkeypatch.setattr(apply, "RANK_APART_AT_MOST", apart_at_most)
    single = [
        trade("d", 5, ref="f:10"),
        trade("e", 1, quantity="x", ref="f:11"),  # rejected: flagged neither
        trade("", 1, ref="f:12"),  # rejected: no key
        trade("f", 2, quantity=3, ref="f:13"),
    ]
    repeated = [
        trade("a", 1, ref="f:3"),
        trade("a", 2, quantity=2, ref="f:9"),  # version 2 again, other content: a conflict
        trade("a", 2, quantity=7, ref="f:4"),
        trade("a", 3, quantity="x", ref="f:5"),  # rejected: a's latest stays version 2
        trade("b", 1, ref="f:8"),  # the same content again: a redelivery, no conflict
        trade("b", 1, ref="f:1"),
        trade("f", 1, quantity="x", ref="f:6"),  # rejected: f stays accepted once
    ]
    rows = single if once_only else single + repeated
    persisted = apply.checked_batch(FLOW, frame(spark, rows), reference, ranked=in_the_pass)
    ranked = apply.Ranked(persisted) if in_the_pass else apply.ranked_batch(FLOW, persisted)
    assert ranked.whole == (apart_at_most == 1)
    try:
        got = ranked.frame.collect()
    finally:
        ranked.unpersist()
        persisted.unpersist()

    def picked(flag):  # type: ignore[no-untyped-def]
        return {(r.trade_id, r.version, r._source_ref) for r in got if r[flag]}

    firsts = {("d", 5, "f:10"), ("f", 2, "f:13")}
    latest = set(firsts)
    conflicts = set()
    if not once_only:
        firsts |= {("a", 1, "f:3"), ("a", 2, "f:4"), ("b", 1, "f:1")}
        latest |= {("a", 2, "f:4"), ("b", 1, "f:1")}
        conflicts = {"f:9"}
    assert picked(FIRST_VERSION) == firsts
    assert picked(LATEST_VERSION) == latest
    assert {r._source_ref for r in got if "version_conflict" in r[FAILED]} == conflicts
    assert sorted(r._source_ref for r in got) == sorted(
        r._source_ref for r in frame(spark, rows).collect()
    )


def test_decode_gives_values_as_text_and_names_what_is_undecodable(spark) -> None:  # type: ignore[no-untyped-def]
    from streamshift.engine.decode import decode

    def doc(**changes: object) -> bytes:
        """A trade message; the price is written as the number 101.50; ... drops a field."""
        fields = {c: f"<{c}>" for c in FLOW.columns} | {"version": 2, "quantity": 10}
        fields |= {"price": "@"} | changes
        body = ", ".join(f'"{k}": {json.dumps(v)}' for k, v in fields.items() if v is not ...)
        return ("{" + body + "}").replace('"@"', "101.50").encode()

    messages = {
        "plain": doc(),
        "spaced": b" \n" + doc(),
        "integral decimal": doc(quantity=1000.0),
        "long decimal": doc().replace(b"101.50", b"12345678901234.123456"),
        "null book": doc(book=None),
        "duplicate key": doc()[:-1] + b', "book": "other"}',
        "array": b"[1, 2]",
        "wrong type": doc(quantity="ten"),
        "missing": doc(price=...),
    }
    kafka = spark.createDataFrame(
        [
            (name.encode(), v, "t", 0, i, dt.datetime(2026, 11, 20))
            for i, (name, v) in enumerate(messages.items())
        ],
        "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP",
    )
    got = {r["_kafka_key"].decode(): r for r in kafka.transform(decode(FLOW)).collect()}
    plain = got["plain"]
    assert (plain["_malformed"], plain["book"], plain["version"]) == (None, "<book>", "2")
    assert (plain["quantity"], plain["price"]) == ("10", "101.5")
    # A decimal stays exact (never through a double).
    assert got["long decimal"]["price"] == "12345678901234.123456"
    assert got["spaced"]["trade_id"] == "<trade_id>" and got["spaced"]["_malformed"] is None
    assert got["integral decimal"]["quantity"] == "1000"  # an integer the cast accepts
    assert got["null book"]["_malformed"] is None and got["null book"]["book"] is None
    expected = {
        "duplicate key": ("json_invalid", "value is not valid JSON"),
        "array": ("json_not_object", "value is a JSON ARRAY"),
        "wrong type": ("json_wrong_type", "wrong JSON types: quantity is STRING"),
        "missing": ("json_missing_field", "missing fields: price"),
    }
    for name, (rule, detail) in expected.items():
        row = got[name]
        assert (row["_malformed"], row["_decode_error"]) == (rule, detail), name
        assert all(row[c] is None for c in FLOW.columns), name
        assert row["_raw"] == messages[name].decode(), name


def _json_value(rng: random.Random) -> str:
    """One JSON value as text, of every shape a producer might send."""
    choices = [
        lambda: json.dumps(rng.choice(["", "x", "ä€𝄞", 'a"b\\c', "\u0000", " 12 ", "1e3", "null"])),
        lambda: str(rng.randint(-(10**20), 10**20)),
        lambda: str(rng.randint(-100, 100)),
        lambda: rng.choice(["9223372036854775807", "9223372036854775808", "-0", "00", "1" * 45]),
        lambda: f"{rng.randint(-9999, 9999)}.{rng.randint(0, 10 ** rng.randint(1, 30))}",
        lambda: rng.choice(["1000.0", "-0.0", "0.0000001", "123.4560", "1e3", "1E+2", "1.5e-7"]),
        lambda: rng.choice(["1e400", "-1e400", "1.0e0", "0e0", "3.14159265358979323846264338327"]),
        lambda: repr(rng.uniform(-1e6, 1e6)),
        lambda: rng.choice(["true", "false", "null", "[]", '[1, "a"]', "{}", '{"a": {"b": 1}}']),
    ]
    return rng.choice(choices)()


def _messages(flow: Flow, rng: random.Random, count: int) -> list[bytes | None]:
    """Documents of the flow's fields with values of the types they take (numbers in every
    form for numeric fields), half of them with one or two fields changed: a value of any
    shape, dropped, duplicated or renamed; and some that are not documents."""
    from streamshift.engine.decode import _accepted_json_types

    out: list[bytes | None] = []
    for _ in range(count):
        pairs = []
        for f in flow.schema.fields:
            if "STRING" in _accepted_json_types(f.dataType):
                value = json.dumps(rng.choice([f"v-{rng.randint(0, 9)}", "", "ä€𝄞", " 7 "]))
            else:
                value = rng.choice([str(rng.randint(-999, 999)), _json_value(rng)])
            pairs.append((f.name, value))
        for _ in range(rng.choice([0, 0, 1, 2])):
            i = rng.randrange(len(pairs))
            name, value = pairs[i]
            change = rng.choice(["value", "value", "drop", "duplicate", "rename"])
            if change == "value":
                pairs[i] = (name, _json_value(rng))
            elif change == "drop":
                del pairs[i]
            elif change == "duplicate":
                pairs.append((name, _json_value(rng)))
            else:
                pairs[i] = (name.upper(), value)
        rng.shuffle(pairs)
        sep = rng.choice([", ", ",", " ,\n "])
        text = "{" + sep.join(f"{json.dumps(k)}: {v}" for k, v in pairs) + "}"
        roll = rng.random()
        if roll < 0.03:
            text = _json_value(rng)  # a document that is not an object
        elif roll < 0.05:
            text = text[: rng.randint(0, len(text))]  # cut short
        elif roll < 0.07:
            text = " \t\n" + text + "\n"
        data: bytes | None = text.encode()
        if rng.random() < 0.01:
            data = b"\xff\xfe" + data  # not UTF-8
        elif rng.random() < 0.01:
            data = None
        out.append(data)
    return out


@pytest.mark.parametrize("flow_name", ["trades", "telemetry", "trades-optional"])
def test_jvm_decoder_gives_what_sparks_expressions_give(spark, flow_name: str) -> None:  # type: ignore[no-untyped-def]
    """The JVM decoder (jvm/udf) against the same checks written as Spark expressions, on
    3,000 random messages per flow: every column of every row equal. ``trades-optional``: two
    of its columns optional (one with a default) and fields the flow does not declare
    refused."""
    from streamshift.engine.decode import decode
    from streamshift.spec.registry import get_flow

    name, _, variant = flow_name.partition("-")
    flow = get_flow(name)
    refuse = bool(variant)
    if variant:
        flow = dataclasses.replace(flow, optional={"currency": None, "book": "NO-BOOK"})
    messages = _messages(flow, random.Random(flow_name), 3000)
    kafka = spark.createDataFrame(
        [(None, v, "t", 0, i, dt.datetime(2026, 11, 20)) for i, v in enumerate(messages)],
        "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP",
    )
    jvm = kafka.transform(decode(flow, refuse_unknown=refuse)).collect()
    reference = kafka.transform(decode(flow, reference=True, refuse_unknown=refuse)).collect()
    assert len(jvm) == len(reference) == len(messages)
    rules = collections.Counter(r["_malformed"] for r in reference)
    assert len(rules) == 5 + refuse, rules  # decodable and each of the rules occur
    if variant:
        # A message without the optional book is decodable and takes its default; one
        # without the optional currency has none.
        books = {r["book"] for r in reference if r["_malformed"] is None}
        assert "NO-BOOK" in books
        lacking = [
            r for r in reference if r["_malformed"] is None and '"currency"' not in r["_raw"]
        ]
        assert lacking and all(r["currency"] is None for r in lacking)
    for got, want in zip(jvm, reference, strict=True):
        assert got.asDict() == want.asDict(), want["_raw"]
