"""Keys are opaque strings: backslashes, quotes, commas, unicode and SQL-looking text go through
EOD files, the stream's write path, late events and the JVM-free reader unchanged, one
current-state row per key. Every expected value is computed in plain Python from the input."""

from __future__ import annotations

import csv
import datetime as dt
from collections import defaultdict
from pathlib import Path

import pytest

from flows.trades import FLOW
from streamshift.control.trace import trace
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.write.apply import apply_changes
from streamshift.engine.write.target import Target, read
from streamshift.engine.write.transforms import raw_schema
from streamshift.spec.catalog import LayerTables
from streamshift.store.tables import rows as delta_rows
from tests.trades_data import frame, trade

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DAY = dt.date(2026, 11, 20)
HEADER = [f.name for f in FLOW.schema.fields]
HOSTILE = [
    "BK\\7",  # a backslash read as an escape made this BK7 (and two current rows)
    "BK\\",  # a trailing backslash made the statement unparsable
    'Q"uote-2',  # written by csv as "Q""uote-2"
    "O'Brien",
    "x' OR '1'='1",
    "a,b",
    "ünï-κλειδί-鍵",
    "DROP TABLE trades; --",
    "%_*?",
    "\\'\\\\",
]


def _row(key: str, version: int, event: str, side: str, quantity: int) -> list[str]:
    if event == "CANCEL":
        return [key, str(version), event, str(DAY)] + [""] * 7
    ts = f"{DAY}T10:00:00Z"
    return [key, str(version), event, str(DAY), ts, "EQ-US-FLOW", "AAPL", side, str(quantity)] + [
        "10.00",
        "USD",
    ]


def _write(path: Path, rows: list[list[str]]) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)  # RFC 4180: quotes doubled, CRLF line ends
        writer.writerow(HEADER)
        writer.writerows(rows)
    return path


def _oracle(*files: list[list[str]]) -> tuple[dict[str, tuple[int, bool]], dict[tuple, tuple]]:
    """Highest version per key, and positions over the live ones, from the rows alone."""
    latest: dict[str, list[str]] = {}
    for rows in files:
        for r in rows:
            key = r[0].strip()
            if key not in latest or int(r[1]) > int(latest[key][1]):
                latest[key] = r
    state = {k: (int(r[1]), r[2] == "CANCEL") for k, r in latest.items()}
    groups: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for r in latest.values():
        if r[2] != "CANCEL":
            g = groups[(DAY, r[5], r[6])]
            g[0] += int(r[8]) * (-1 if r[7] == "SELL" else 1)
            g[1] += 1
    return state, {k: tuple(v) for k, v in groups.items()}


def _target(spark, root: Path, layer: str = "batch") -> Target:  # type: ignore[no-untyped-def]
    from streamshift.engine.write.target import load_reference

    return Target(spark, FLOW, LayerTables(root, FLOW, layer), load_reference(spark, FLOW))


def _state(spark, t: Target) -> tuple[dict[str, tuple[int, bool]], dict[tuple, tuple]]:  # type: ignore[no-untyped-def]
    current = read(spark, t.tables.current).collect()
    keys = [r.trade_id for r in current]
    assert len(keys) == len(set(keys)), f"more than one current row for a key: {sorted(keys)}"
    positions = {
        (r.business_date, r.book, r.instrument): (r.net_quantity, r.trade_count)
        for r in read(spark, t.tables.view("positions")).collect()
    }
    return {r.trade_id: (r.version, r.is_deleted) for r in current}, positions


def test_hostile_keys_through_eod_files_stream_late_events_and_the_reader(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = _target(spark, tmp_path / "wh")
    first = [_row(k, 1, "NEW", "SELL" if i % 2 else "BUY", 100 + i) for i, k in enumerate(HOSTILE)]
    first.append(
        ["  spaced key  ", "1", "NEW", str(DAY), f"{DAY}T10:00:00Z", "EQ-US-FLOW"]
        + [
            "AAPL",
            "BUY",
            "7",
            "10.00",
            "USD",
        ]
    )
    second = [_row(k, 2, "AMEND", "SELL", 300 + i) for i, k in enumerate(HOSTILE[:-1])]
    second.append(_row(HOSTILE[-1], 2, "CANCEL", "", 0))
    loaded = run_eod(spark, target, DAY, _write(tmp_path / "day.csv", first))
    assert (loaded.apply.accepted, loaded.apply.rejected) == (len(first), 0)
    run_eod(spark, target, DAY, _write(tmp_path / "amend.csv", second))
    expected = _oracle(first, second)
    assert _state(spark, target) == expected
    assert "spaced key" in expected[0]  # surrounding spaces trimmed, the inside kept

    history = sorted((r.trade_id, r.version) for r in read(spark, target.tables.history).collect())
    assert history == sorted(
        [(k, 1) for k in HOSTILE] + [("spaced key", 1)] + [(k, 2) for k in HOSTILE]
    )

    # The stream's write path: v3 from Kafka for a date the EOD load closed — applied and
    # recorded late, key for key.
    events = [
        trade(k, 3, event="AMEND", date=str(DAY), side="BUY", quantity=5, ref=f"trades:0:{i}")
        for i, k in enumerate(HOSTILE[:-1])
    ]
    streamed = apply_changes(FLOW, frame(spark, events), "kafka", target)
    assert (streamed.accepted, streamed.applied, streamed.late) == (
        len(events),
        len(events),
        len(events),
    )
    third = [_row(k, 3, "AMEND", "BUY", 5) for k in HOSTILE[:-1]]
    assert _state(spark, target) == _oracle(first, second, third)
    late = sorted((r.key, r.version) for r in read(spark, target.tables.late_events).collect())
    assert late == sorted((k, 3) for k in HOSTILE[:-1])

    # The JVM-free reader's literal encoder: each key finds exactly its own row.
    for key in [*HOSTILE, "spaced key"]:
        found = delta_rows(target.tables.current, ["trade_id"], [("trade_id", "=", key)])
        assert found == [{"trade_id": key}], key
    found = delta_rows(target.tables.current, ["trade_id"], [("trade_id", "IN", tuple(HOSTILE))])
    assert sorted(r["trade_id"] for r in found) == sorted(HOSTILE)

    # Where each key's changes went (`streamshift trace`, JVM-free): the oracle is the files'
    # lines and the events' offsets.
    first_key = HOSTILE[0]
    burst = [  # one apply brings v4 and v5: v4 never becomes current; a poison row is refused
        trade(first_key, 4, event="AMEND", date=str(DAY), quantity=6, ref="trades:0:100"),
        trade(first_key, 5, event="AMEND", date=str(DAY), quantity=7, ref="trades:0:101"),
        trade(first_key, 6, event="AMEND", date=str(DAY), side="SIDEWAYS", ref="trades:0:102"),
    ]
    apply_changes(FLOW, frame(spark, burst), "kafka", target)
    for i, key in enumerate(HOSTILE):
        expected_events = [
            (1, "NEW", "eod", f"day.csv:{i + 2}", "applied", False),
            (2, second[i][2], "eod", f"amend.csv:{i + 2}", "applied", False),
        ]
        if key != HOSTILE[-1]:
            expected_events.append((3, "AMEND", "kafka", f"trades:0:{i}", "applied", True))
        if key == first_key:
            expected_events += [
                (4, "AMEND", "kafka", "trades:0:100", "superseded", True),
                (5, "AMEND", "kafka", "trades:0:101", "applied", True),
                (None, None, "kafka", "trades:0:102", "quarantined", False),
            ]
        found = trace(FLOW, target.tables, key)
        got = [
            (e["version"], e["event_type"], e["source"], e["source_ref"].rsplit("/", 1)[-1],
             e["outcome"], e["late"])
            for e in found.events
        ]  # fmt: skip
        assert got == expected_events, key
        assert [e["current"] for e in found.events].count(True) == 1
        assert found.current is not None
        assert found.current["version"] == max(v for v, *_ in expected_events if v)
        assert found.current["deleted"] == (key == HOSTILE[-1])
    [refused] = [e for e in trace(FLOW, target.tables, first_key).events if e["rule"]]
    assert refused["rule"] == "known_side"
    assert trace(FLOW, target.tables, "BK").events == []  # a prefix of keys is no key


def test_a_spreadsheet_shaped_file_reads_as_the_csv_modules(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """BOM, CRLF and every field quoted (as spreadsheets write) give the same rows as Python's
    csv module; a quoted field holding a line break is flagged on each of its physical lines,
    and the lines after it keep their own numbers."""
    from streamshift.engine.eodread import QUOTED_LINE_BREAK_RULE, read_eod_file
    from streamshift.spec.contract import MALFORMED, SOURCE_REF
    from streamshift.store.eodfile import check_file

    rows = [_row(k, 1, "NEW", "BUY", 10) for k in HOSTILE]
    plain = _write(tmp_path / "plain.csv", rows)

    def quoted(values: list[str]) -> str:
        return ",".join('"' + v.replace('"', '""') + '"' for v in values)

    sheet = tmp_path / "sheet.csv"
    sheet.write_bytes(
        b"\xef\xbb\xbf" + "".join(quoted(r) + "\r\n" for r in [HEADER, *rows]).encode()
    )

    def read_rows(path: Path) -> list[tuple]:
        frame = read_eod_file(spark, path, FLOW, check_file(path, FLOW, whole_day=False))
        return sorted(
            (int(r[SOURCE_REF].rsplit(":", 1)[1]), r[MALFORMED], *(r[c] for c in FLOW.columns))
            for r in frame.collect()
        )

    from_sheet = read_rows(sheet)
    assert [r[2:] for r in from_sheet] == [r[2:] for r in read_rows(plain)]
    assert sorted(r[2] for r in from_sheet) == sorted(HOSTILE)

    broken = tmp_path / "broken.csv"
    good = ",".join(_row("after", 1, "NEW", "BUY", 1))
    broken.write_text(
        ",".join(HEADER) + "\n" + ",".join(_row("before", 1, "NEW", "BUY", 1)) + "\n"
        '"multi\nline",1,NEW,'
        + f"{DAY},{DAY}T10:00:00Z,EQ-US-FLOW,AAPL,BUY,1,10.00,USD\n"
        + good
        + "\n"
    )
    flagged = {(line, rule, key) for line, rule, key, *_ in read_rows(broken)}
    assert flagged == {
        (2, None, "before"),
        (3, QUOTED_LINE_BREAK_RULE, None),
        (4, QUOTED_LINE_BREAK_RULE, None),
        (5, None, "after"),
    }


def test_random_new_amend_cancel_sequences_of_hostile_keys_match_the_oracle(
    spark, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """Property-style: random NEW/AMEND/CANCEL histories of hostile keys, delivered out of
    order and with duplicates, as EOD files (batch layer) and as stream batches (stream
    layer); each layer ends as the plain-Python oracle of the same events."""
    import random
    import time

    seed = time.time_ns() % 1_000_000
    rnd = random.Random(seed)
    events: list[list[str]] = []
    for key in [*HOSTILE, *(f"{k}-{i}" for i, k in enumerate(rnd.sample(HOSTILE, 4)))]:
        for version in range(1, rnd.randint(1, 4) + 1):
            kind = "NEW" if version == 1 else rnd.choice(["AMEND", "AMEND", "CANCEL"])
            side = rnd.choice(["BUY", "SELL"])
            events.append(_row(key, version, kind, side, rnd.randint(1, 900)))
            if kind == "CANCEL":
                break
    deliveries = events + rnd.sample(events, len(events) // 4)  # duplicates, same content
    rnd.shuffle(deliveries)
    chunks = [deliveries[i::2] for i in range(2)]
    expected = _oracle(events)

    batch = _target(spark, tmp_path / "wh")
    for i, chunk in enumerate(chunks):
        run_eod(spark, batch, DAY, _write(tmp_path / f"part{i}.csv", chunk))
    assert _state(spark, batch) == expected, f"batch layer, seed {seed}"

    stream = _target(spark, tmp_path / "wh", "stream")
    offset = 0
    for chunk in chunks:
        raw = []
        for r in chunk:
            raw.append((*[v or None for v in r], f"trades:0:{offset}", ",".join(r)))
            offset += 1
        apply_changes(FLOW, spark.createDataFrame(raw, raw_schema(FLOW)), "kafka", stream)
    assert _state(spark, stream) == expected, f"stream layer, seed {seed}"
