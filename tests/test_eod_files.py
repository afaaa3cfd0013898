"""EOD loads: bad files fail cleanly and change nothing; replacement, replays, file order."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pytest

from flows.trades import FLOW
from flows.trades.generate import TradingDay, generate_day
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.write import apply as apply_module
from streamshift.engine.write.target import Target, read
from streamshift.spec.catalog import LayerTables
from streamshift.store.eodfile import BadFileError

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DAY = dt.date(2026, 11, 20)
HEADER = ",".join(f.name for f in FLOW.schema.fields)
GOOD = "T1,1,NEW,2026-11-20,2026-11-20T10:00:00Z,EQ-US-FLOW,AAPL,BUY,100,10.5,USD"


def _target(spark, root: Path) -> Target:  # type: ignore[no-untyped-def]
    from streamshift.engine.write.target import load_reference

    return Target(spark, FLOW, LayerTables(root, FLOW, "batch"), load_reference(spark, FLOW))


def _snapshot(spark, t: Target) -> dict[str, list[tuple]]:  # type: ignore[no-untyped-def]
    paths = {
        "current": t.tables.current,
        "history": t.tables.history,
        "positions": t.tables.view("positions"),
        "quarantine": t.tables.quarantine,
        "late_events": t.tables.late_events,
    }
    drop = {"_applied_at", "quarantined_at", "arrived_at", "batch_id"}
    out = {}
    for name, path in paths.items():
        df = read(spark, path)
        df = df.drop(*[c for c in df.columns if c in drop])
        out[name] = sorted((tuple(r) for r in df.collect()), key=repr)
    return out


@pytest.fixture(scope="module")
def day_files(tmp_path_factory):  # type: ignore[no-untyped-def]
    return generate_day(DAY, 300, tmp_path_factory.mktemp("day"), seed=5, progress=False)


BAD_FILES = {
    "empty": ("", None, "empty file"),
    "wrong_delimiter": (
        HEADER.replace(",", ";") + "\n" + GOOD.replace(",", ";") + "\n",
        1,
        "wrong delimiter",
    ),
    "missing_columns": (
        HEADER.replace(",price", "") + "\n" + GOOD + "\n",
        1,
        "missing columns price",
    ),
    "truncated": (HEADER + "\n" + GOOD + "\n" + GOOD[:30], 3, "truncated last line"),
}


def test_bad_files_fail_with_line_and_problem_and_change_nothing(
    spark, tmp_path, day_files, capsys
) -> None:  # type: ignore[no-untyped-def]
    target = _target(spark, tmp_path / "wh")
    run_eod(spark, target, DAY, day_files.eod)
    before = _snapshot(spark, target)
    for name, (content, line, problem) in BAD_FILES.items():
        path = tmp_path / f"{name}.csv"
        path.write_text(content)
        with pytest.raises(BadFileError) as error:
            run_eod(spark, target, DAY, path)
        assert error.value.line == line, name
        assert problem in str(error.value) and str(path) in str(error.value), str(error.value)
    header_only = tmp_path / "header_only.csv"
    header_only.write_text(HEADER + "\n")
    with pytest.raises(BadFileError, match="no data rows"):
        run_eod(spark, target, DAY, header_only, replace=True)
    # Another day's file as this day's whole-day replacement would cancel the whole day.
    other_day = tmp_path / "other_day.csv"
    other_day.write_text(HEADER + "\n" + GOOD.replace("2026-11-20", "2026-11-19") + "\n")
    with pytest.raises(BadFileError) as error:
        run_eod(spark, target, DAY, other_day, replace=True)
    assert "no row of the file is dated 2026-11-20 (its rows are dated 2026-11-19)" in str(
        error.value
    )
    assert _snapshot(spark, target) == before
    # As a delta file it loads (rows go to their own date, as back-dated ones do), with a
    # warning naming the dates.
    capsys.readouterr()
    loaded = run_eod(spark, target, DAY, other_day)
    assert loaded.apply.applied == 1
    assert "warning: no row of the file is dated 2026-11-20" in capsys.readouterr().err


def test_day_load_corrections_poison_replacement_and_replay(spark, tmp_path, day_files) -> None:  # type: ignore[no-untyped-def]
    target = _target(spark, tmp_path / "wh")
    load = run_eod(spark, target, DAY, day_files.eod)
    assert (load.apply.received, load.apply.rejected) == (300, 0)

    poison = run_eod(spark, target, DAY, day_files.poison)
    expected_rules = TradingDay(DAY, 5).expected_poison_rules()
    assert poison.apply.accepted == 0
    got = {
        (r.source_ref.rsplit(":", 1)[1], r.rule)
        for r in read(spark, target.tables.quarantine).collect()
    }
    assert got == {(str(n + 2), rule) for n, rule in enumerate(expected_rules)}

    fixes = run_eod(spark, target, DAY, day_files.corrections)
    assert fixes.apply.rejected == 0 and fixes.apply.applied == fixes.apply.accepted
    state = {r.trade_id: r for r in read(spark, target.tables.current).collect()}
    for line in day_files.corrections.read_text().splitlines()[1:]:
        trade_id, version, event = line.split(",")[:3]
        assert state[trade_id].version == int(version)
        assert state[trade_id].is_deleted == (event == "CANCEL")

    after_fixes = _snapshot(spark, target)
    run_eod(spark, target, DAY, day_files.corrections)  # re-run: a no-op
    assert _snapshot(spark, target) == after_fixes

    replaced = run_eod(spark, target, DAY, day_files.replacement, replace=True)
    file_ids = {line.split(",")[0] for line in day_files.replacement.read_text().splitlines()[1:]}
    live_today = {
        r.trade_id
        for r in read(spark, target.tables.current).collect()
        if not r.is_deleted and r.business_date == DAY
    }
    assert live_today == file_ids
    assert replaced.cancelled > 0
    cancels = read(spark, target.tables.history).where("_source = 'replacement'").count()
    assert cancels == replaced.cancelled
    _assert_positions_match_full_recompute(spark, target)


def test_files_out_of_order_end_in_the_same_state(spark, tmp_path, day_files) -> None:  # type: ignore[no-untyped-def]
    in_order = _target(spark, tmp_path / "a")
    for f in (day_files.eod, day_files.corrections):
        run_eod(spark, in_order, DAY, f)
    reversed_order = _target(spark, tmp_path / "b")
    for f in (day_files.corrections, day_files.eod):
        run_eod(spark, reversed_order, DAY, f)
    a, b = _snapshot(spark, in_order), _snapshot(spark, reversed_order)
    for table in ("current", "positions"):
        assert a[table] == b[table], table
    assert a["history"] == b["history"]


def test_back_dated_rows_for_a_closed_date_are_recorded_late(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = _target(spark, tmp_path / "wh")
    d19 = tmp_path / "d19.csv"
    d19.write_text(
        HEADER + "\n" + GOOD.replace("2026-11-20", "2026-11-19").replace("T1", "T0") + "\n"
    )
    run_eod(spark, target, dt.date(2026, 11, 19), d19)
    d20 = tmp_path / "d20.csv"
    late_row = GOOD.replace("2026-11-20", "2026-11-19").replace("T1,", "T9,")
    d20.write_text(HEADER + "\n" + GOOD + "\n" + late_row + "\n")
    result = run_eod(spark, target, DAY, d20)
    assert result.apply.late == 1
    late = [
        (str(r.business_date), r.key, r.version, r.source)
        for r in read(spark, target.tables.late_events).collect()
    ]
    assert late == [("2026-11-19", "T9", 1, "eod")]
    again = run_eod(spark, target, DAY, d20)  # a replay records nothing twice
    assert again.apply.late == 1 and read(spark, target.tables.late_events).count() == 1
    positions = {
        (str(r.business_date), r.trade_count)
        for r in read(spark, target.tables.view("positions")).collect()
    }
    assert positions == {("2026-11-19", 2), ("2026-11-20", 1)}


def _assert_positions_match_full_recompute(spark, target: Target) -> None:  # type: ignore[no-untyped-def]
    from tests.dataframes import assert_same_rows

    live = read(spark, target.tables.current).where("NOT is_deleted")
    assert_same_rows(
        read(spark, target.tables.view("positions")), FLOW.view("positions").compute(live)
    )


def test_positions_equal_full_recompute_after_random_load_sequences(  # type: ignore[no-untyped-def]
    spark, tmp_path, monkeypatch
) -> None:
    """Property: whatever files arrive in whatever order, incremental views == from scratch.

    The first trial takes the path of small batches (keys on the driver, history appended);
    the second the path of large ones (keys stay in Spark, history MERGEd), as a real day's
    file does. Either way the first file of a date goes in by an insert-only MERGE (the date
    held nothing)."""
    rng = random.Random(11)
    files = []
    for n, day in enumerate((dt.date(2026, 11, 19), DAY)):
        f = generate_day(day, 120, tmp_path / f"d{n}", seed=n + 2, progress=False)
        files += [
            (day, f.eod, False),
            (day, f.corrections, False),
            (day, f.late, False),
            (day, f.replacement, True),
        ]
    for trial in range(2):
        monkeypatch.setattr(apply_module, "PRUNE_KEYS_BELOW", 2_000 if trial == 0 else 0)
        target = _target(spark, tmp_path / f"wh{trial}")
        sequence = rng.sample(files, k=5)
        for day, path, replace in sequence:
            run_eod(spark, target, day, path, replace=replace)
        _assert_positions_match_full_recompute(spark, target)
        # History holds each version once: a large batch's reads of it, limited to the batch's
        # key range, still found every version it already held.
        history = spark.read.format("delta").load(target.tables.history)
        versions = history.select(FLOW.key, FLOW.version)
        assert versions.count() == versions.distinct().count() > 0
        merges = (
            spark.sql(f"DESCRIBE HISTORY delta.`{target.tables.current}`")
            .where("operation = 'MERGE'")
            .select("operationParameters.matchedPredicates")
            .collect()
        )
        insert_only = sum(r[0] == "[]" for r in merges)
        assert insert_only > 0, merges  # a first load of a fresh date


def test_rows_with_another_field_count_are_flagged_whole_quotes_respected(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A comma inside double quotes is no separator; a row with too many or too few fields is
    flagged ``field_count`` (quarantined whole), whether or not it has quotes."""
    from streamshift.engine.eodread import FIELD_COUNT_RULE, read_eod_file
    from streamshift.spec.contract import MALFORMED, SOURCE_REF
    from streamshift.store.eodfile import check_file

    quoted = GOOD.replace("T1,", "T2,").replace("AAPL", '"AAPL, Inc."')
    lines = {
        2: GOOD,
        3: GOOD.replace("T1,", "T3,") + ",extra",
        4: quoted,
        5: quoted + ",extra",
        6: ",".join(GOOD.replace("T1,", "T6,").split(",")[:-1]),
    }
    path = tmp_path / "mixed.csv"
    path.write_text(HEADER + "\n" + "\n".join(lines[n] for n in sorted(lines)) + "\n")
    rows = read_eod_file(spark, path, FLOW, check_file(path, FLOW, whole_day=False)).collect()
    flagged = {int(r[SOURCE_REF].rsplit(":", 1)[1]): r[MALFORMED] for r in rows}
    assert flagged == {
        2: None,
        3: FIELD_COUNT_RULE,
        4: None,
        5: FIELD_COUNT_RULE,
        6: FIELD_COUNT_RULE,
    }
    instrument = {r["trade_id"]: r["instrument"] for r in rows if r[MALFORMED] is None}
    assert instrument == {"T1": "AAPL", "T2": "AAPL, Inc."}


def test_a_spreadsheets_csv_with_a_byte_order_mark_and_crlf_reads_like_a_plain_one(  # type: ignore[no-untyped-def]
    spark, tmp_path
) -> None:
    """Excel's "CSV UTF-8" starts with a byte-order mark and ends lines with CRLF. The mark
    used to make the header's first column "\\ufefftrade_id" (refused: "missing columns
    trade_id", with the mark invisible in the message); the rows must come out as from the
    plain file, with no carriage return in the last column."""
    from streamshift.engine.eodread import read_eod_file
    from streamshift.spec.contract import SOURCE_REF
    from streamshift.store.eodfile import check_file

    body = [HEADER, GOOD, GOOD.replace("T1,", "T2,").replace(",USD", ",EUR")]
    plain, excel = tmp_path / "plain.csv", tmp_path / "excel.csv"
    plain.write_text("\n".join(body) + "\n")
    excel.write_bytes(b"\xef\xbb\xbf" + ("\r\n".join(body) + "\r\n").encode())

    def rows(path: Path) -> list[tuple[object, ...]]:
        read = read_eod_file(spark, path, FLOW, check_file(path, FLOW, whole_day=False))
        return sorted(
            (r[SOURCE_REF].rsplit(":", 1)[1], *(r[c] for c in FLOW.columns)) for r in read.collect()
        )

    assert check_file(excel, FLOW, whole_day=False).header == FLOW.columns
    assert rows(excel) == rows(plain)
    assert [r[-1] for r in rows(excel)] == ["USD", "EUR"]
