"""The one write path on real Delta tables: every case asserts the exact resulting state."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from flows.trades import FLOW
from streamshift.engine.write import target as target_module
from streamshift.engine.write.apply import apply_changes
from streamshift.engine.write.target import Target, is_table, read, when_small
from streamshift.spec.catalog import LayerTables
from tests.cli_support import suite_engine
from tests.trades_data import D1, D2, frame, trade, two_writers_round

pytestmark = [pytest.mark.spark, pytest.mark.slow]

FLOWB, DELTA1 = "EQ-US-FLOW", "EQ-US-DELTA1"


@pytest.fixture
def target(spark, tmp_path):  # type: ignore[no-untyped-def]
    from streamshift.engine.write.target import load_reference

    return Target(spark, FLOW, LayerTables(tmp_path, FLOW, "batch"), load_reference(spark, FLOW))


def current(spark, t):  # type: ignore[no-untyped-def]
    return {
        r.trade_id: (r.version, str(r.business_date), r.book, r.quantity, r.is_deleted)
        for r in read(spark, t.tables.current).collect()
    }


def changes_after(spark, path: str, version: int) -> list:  # type: ignore[no-untyped-def]
    """The change feed of the Delta table at ``path`` after ``version``."""
    return (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", version + 1)
        .load(path)
        .collect()
    )


def history(spark, t):  # type: ignore[no-untyped-def]
    return sorted((r.trade_id, r.version) for r in read(spark, t.tables.history).collect())


def positions(spark, t):  # type: ignore[no-untyped-def]
    return {
        (str(r.business_date), r.book, r.instrument): (r.net_quantity, r.trade_count)
        for r in read(spark, t.tables.view("positions")).collect()
    }


def redeliveries(spark, t):  # type: ignore[no-untyped-def]
    """(key, version, source_ref) of each delivery of a version after its first."""
    if not is_table(spark, t.tables.redeliveries):
        return []
    rows = read(spark, t.tables.redeliveries).collect()
    return sorted((r.trade_id, r.version, r._source_ref) for r in rows)


def quarantine(spark, t):  # type: ignore[no-untyped-def]
    return sorted((r.source_ref, r.rule) for r in read(spark, t.tables.quarantine).collect())


def test_new_amend_cancel_out_of_order_duplicates_replays_and_moves(
    spark, generated_code, target, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # With generated code, as a large load runs: the suite's small days otherwise run interpreted.
    monkeypatch.setattr(target_module, "INTERPRET_BELOW_BYTES", 0)
    apply = lambda rows: apply_changes(FLOW, frame(spark, rows), "test", target)

    # 1. new trades, a v3 before its v2, duplicates and several versions of one key, a poison row
    first = apply(
        [
            trade("a", 1, quantity=100),
            trade("b", 1, side="SELL", quantity=30),
            trade("c", 3, event="AMEND", quantity=7),
            trade("d", 1, quantity=10),
            trade("d", 1, quantity=10, ref="test:d:1:again"),
            trade("d", 2, event="AMEND", quantity=50),
            trade("x", 1, book="NOPE"),
        ]
    )
    assert (first.received, first.accepted, first.rejected, first.applied) == (7, 6, 1, 4)
    assert first.rejected_by_rule == {"known_book": 1}
    assert current(spark, target) == {
        "a": (1, D2, FLOWB, 100, False),
        "b": (1, D2, FLOWB, 30, False),
        "c": (3, D2, FLOWB, 7, False),
        "d": (2, D2, FLOWB, 50, False),
    }
    assert history(spark, target) == [("a", 1), ("b", 1), ("c", 3), ("d", 1), ("d", 2)]
    assert positions(spark, target) == {(D2, FLOWB, "AAPL"): (100 - 30 + 7 + 50, 4)}
    assert quarantine(spark, target) == [("test:x:1", "known_book")]
    # d's v1 delivered twice: history holds the first delivery, redeliveries the second
    assert redeliveries(spark, target) == [("d", 1, "test:d:1:again")]

    # 2. the late v2 of c loses to v3; a moves to another book AND another date; b is cancelled
    second = [
        trade("c", 2, event="AMEND", quantity=999),
        trade("a", 2, event="AMEND", date=D1, book=DELTA1, quantity=100),
        trade("b", 2, event="CANCEL"),
    ]
    result = apply(second)
    assert result.applied == 2
    # current state (deletion vectors and all) read for the views through deltalake
    assert (result.views_from, result.views_read) == ("table", "deltalake")
    assert current(spark, target) == {
        "a": (2, D1, DELTA1, 100, False),
        "b": (2, D2, None, None, True),
        "c": (3, D2, FLOWB, 7, False),
        "d": (2, D2, FLOWB, 50, False),
    }
    assert history(spark, target) == [
        ("a", 1),
        ("a", 2),
        ("b", 1),
        ("b", 2),
        ("c", 2),
        ("c", 3),
        ("d", 1),
        ("d", 2),
    ]
    # both the old group (D2, FLOW) and the new one (D1, DELTA1) were recomputed
    assert positions(spark, target) == {
        (D2, FLOWB, "AAPL"): (57, 2),
        (D1, DELTA1, "AAPL"): (100, 1),
    }

    # 3. a replay of the same batch changes nothing, in any table
    view_path = target.tables.view("positions")
    from delta.tables import DeltaTable

    view_version = DeltaTable.forPath(spark, view_path).history(1).first().version
    replay = apply(second)
    assert replay.applied == 0
    assert redeliveries(spark, target) == [("d", 1, "test:d:1:again")]  # the same deliveries
    assert current(spark, target)["a"] == (2, D1, DELTA1, 100, False)
    assert len(history(spark, target)) == 8
    assert positions(spark, target) == {
        (D2, FLOWB, "AAPL"): (57, 2),
        (D1, DELTA1, "AAPL"): (100, 1),
    }
    # no commit at all, so the change feed has nothing new for readers
    assert DeltaTable.forPath(spark, view_path).history(1).first().version == view_version

    # 4. cancelling the last trades of a group deletes the group; the change feed says so
    apply([trade("c", 4, event="CANCEL"), trade("d", 3, event="CANCEL")])
    assert positions(spark, target) == {(D1, DELTA1, "AAPL"): (100, 1)}
    feed = changes_after(spark, view_path, view_version)
    assert [(r._change_type, r.book, r.net_quantity) for r in feed] == [("delete", FLOWB, 57)]


@pytest.mark.parametrize("read_by", ["deltalake", "spark: many groups", "spark: unreadable"])
def test_views_recomputed_from_current_state_read_either_way_agree(  # type: ignore[no-untyped-def]
    spark, target, monkeypatch, capfd, read_by
) -> None:
    """A correction's view groups come from current state as the apply's own MERGE left it:
    read through deltalake in the apply's process, or through Spark where that cannot be (too
    many groups, or a table deltalake fails on: said, then Spark for that table until a wait
    is over, then deltalake again)."""
    from streamshift.engine.write import local_reads, views

    if read_by == "spark: many groups":
        monkeypatch.setattr(views, "READ_HERE_GROUPS", 0)
    if read_by == "spark: unreadable":

        def unreadable(path: str, column: str, dates: list) -> None:  # type: ignore[type-arg]
            raise OSError("no such reader feature\nsecond line")

        readable = views.delta_rows.latest_rows
        monkeypatch.setattr(views.delta_rows, "latest_rows", unreadable)
        monkeypatch.setattr(local_reads, "_NOT_READ_HERE", {})
    apply = lambda rows: apply_changes(FLOW, frame(spark, rows), "test", target)
    apply([trade(k, 1, quantity=q) for k, q in (("a", 10), ("b", 20), ("c", 30))])
    apply([trade("e", 1, date=D1, book=DELTA1, quantity=5)])
    for n, batch in enumerate(
        [
            [trade("a", 2, event="AMEND", quantity=11)],
            [trade("b", 2, event="AMEND", date=D1, book=DELTA1, quantity=20)],
            [trade("c", 2, event="CANCEL"), trade("d", 1, quantity=40)],
        ]
    ):
        result = apply(batch)
        assert (result.views_from, result.views_read) == ("table", read_by.split(":")[0])
    assert positions(spark, target) == {
        (D2, FLOWB, "AAPL"): (11 + 40, 2),
        (D1, DELTA1, "AAPL"): (5 + 20, 2),
    }
    said = capfd.readouterr().err.count("min (OSError: no such reader feature)")
    assert said == (1 if read_by == "spark: unreadable" else 0)
    if read_by == "spark: unreadable":
        # Once the wait is over, the table is read through deltalake again.
        monkeypatch.setattr(views.delta_rows, "latest_rows", readable)
        monkeypatch.setattr(local_reads, "READ_HERE_AGAIN_AFTER", 0.0)
        result = apply([trade("d", 2, event="AMEND", quantity=41)])
        assert result.views_read == "deltalake" and not local_reads._NOT_READ_HERE
        assert positions(spark, target)[(D2, FLOWB, "AAPL")] == (11 + 41, 2)


def test_a_small_batchs_history_lookup_reads_the_same_rows_through_deltalake_or_spark(  # type: ignore[no-untyped-def]
    spark, target, monkeypatch, capfd
) -> None:
    """A small batch looks its keys' history up through deltalake in its process while
    history's files are few bytes, else through Spark (a larger history; a table deltalake
    fails on, said once). Both give the same rows: each stored version with its content hash
    (Spark's, computed on the rows read), delivery and groups, a second copy a writer left
    behind included, a copy the repair deleted not; no row at all for keys never stored."""
    from pyspark.sql import functions as F

    from streamshift.engine.write import batches, local_reads
    from streamshift.engine.write.commits import append

    apply = lambda rows: apply_changes(FLOW, frame(spark, rows), "test", target)
    apply([trade("a", 1, quantity=10), trade("b", 1, quantity=20), trade("it's", 1, quantity=3)])
    apply([trade("a", 2, event="AMEND", date=D1, book=DELTA1, quantity=11)])
    tables = target.tables
    copy = read(spark, tables.history).where("trade_id = 'b'")  # as a killed writer leaves it
    later = copy.withColumn("_applied_at", copy._applied_at + F.expr("INTERVAL 1 SECOND"))
    append(later.withColumn("_source_ref", F.lit("left:behind")), tables.history)

    reads: list[str] = []
    real_read_here = batches._history_read_here

    def read_here(*args):  # type: ignore[no-untyped-def]
        got = real_read_here(*args)
        reads.append("spark" if got is None else "deltalake")
        return got

    monkeypatch.setattr(batches, "_history_read_here", read_here)

    def lookup(keys):  # type: ignore[no-untyped-def]
        found = batches._history_of(spark, FLOW, tables, keys, FLOW.group_columns)
        return sorted((tuple(r) for r in found), key=lambda r: (r[0], r[1], r[4]))

    keys = ["a", "b", "it's", "nobody"]
    small = batches.HISTORY_READ_HERE_BYTES
    here = lookup(keys)
    monkeypatch.setattr(batches, "HISTORY_READ_HERE_BYTES", 0)  # history "large"
    monkeypatch.setattr(batches, "_HISTORY_TOO_LARGE", {})
    assert lookup(keys) == here
    assert reads == ["deltalake", "spark"] and tables.history in batches._HISTORY_TOO_LARGE
    assert [r[:2] for r in here] == [("a", 1), ("a", 2), ("b", 1), ("b", 1), ("it's", 1)]
    assert {r[4] for r in here if r[0] == "b"} == {"test:b:1", "left:behind"}
    assert lookup(["nobody"]) == []

    # The next batch of b removes the copy (a delete: a deletion vector), and deltalake's read
    # no longer sees it.
    monkeypatch.setattr(batches, "HISTORY_READ_HERE_BYTES", small)
    assert lookup(keys) == here and reads[-1] == "spark"  # its size is looked at again later
    monkeypatch.setattr(batches, "HISTORY_SIZE_AGAIN_AFTER", 0.0)
    apply([trade("b", 2, event="AMEND", quantity=21)])
    assert history(spark, target) == [("a", 1), ("a", 2), ("b", 1), ("b", 2), ("it's", 1)]
    after = lookup(keys)
    assert reads[-1] == "deltalake" and [r[:2] for r in after if r[0] == "b"] == [
        ("b", 1),
        ("b", 2),
    ]
    assert positions(spark, target) == {
        (D2, FLOWB, "AAPL"): (21 + 3, 2),
        (D1, DELTA1, "AAPL"): (11, 1),
    }

    def unreadable(path: str, at_most_bytes: int) -> None:
        raise OSError("no such reader feature")

    monkeypatch.setattr(batches.delta_rows, "all_rows", unreadable)
    monkeypatch.setattr(local_reads, "_NOT_READ_HERE", {})
    assert lookup(keys) == after == lookup(keys)
    assert reads[-2:] == ["spark", "spark"]
    assert capfd.readouterr().err.count("min (OSError: no such reader feature)") == 1


def test_correction_is_a_retraction_plus_new_value_in_the_change_feed(spark, target) -> None:  # type: ignore[no-untyped-def]
    apply_changes(FLOW, frame(spark, [trade("a", 1, quantity=10, price="2.5")]), "test", target)
    view_path = target.tables.view("positions")
    from delta.tables import DeltaTable

    version = DeltaTable.forPath(spark, view_path).history(1).first().version
    apply_changes(
        FLOW, frame(spark, [trade("a", 2, event="AMEND", quantity=12, price="2.5")]), "test", target
    )
    feed = changes_after(spark, view_path, version)
    assert sorted((r._change_type, r.net_quantity, r.net_notional_usd) for r in feed) == [
        ("update_postimage", 12, Decimal("30.00")),
        ("update_preimage", 10, Decimal("25.00")),
    ]

    # A correction of a field no view measures (the trade's time) changes current state but
    # no position: the view's MERGE compares in its conditions, and its feed holds no change.
    version = DeltaTable.forPath(spark, view_path).history(1).first().version
    moved = trade("a", 3, event="AMEND", quantity=12, price="2.5", ts=f"{D2}T11:30:00Z")
    assert apply_changes(FLOW, frame(spark, [moved]), "test", target).applied == 1
    assert current(spark, target)["a"][0] == 3
    feed = changes_after(spark, view_path, version)
    assert feed == []
    assert positions(spark, target) == {(D2, FLOWB, "AAPL"): (12, 1)}


def test_small_dates_run_interpreted_and_the_session_gets_its_setting_back(  # type: ignore[no-untyped-def]
    spark, generated_code, target, monkeypatch
) -> None:
    """``when_small`` turns generated code off while any user (any thread) is inside; the
    session's own setting comes back when the last one leaves; a date holding more current
    state than the threshold keeps generated code."""
    from concurrent.futures import ThreadPoolExecutor

    from pyspark.errors.utils import is_debugging_enabled

    # The session records no Python call site per column function (bench/plan_build.py).
    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    assert is_debugging_enabled() is False
    mode = lambda: spark.conf.get("spark.sql.codegen.factoryMode")
    before = mode()
    assert before != "NO_CODEGEN"
    apply_changes(FLOW, frame(spark, [trade("a", 1)]), "test", target)
    assert mode() == before  # the apply switched it off and back on

    def nested() -> str:
        with when_small([target], [D2]):
            return mode()

    with when_small([target], [D2]):
        assert mode() == "NO_CODEGEN"
        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(nested).result() == "NO_CODEGEN"  # it left first
        assert mode() == "NO_CODEGEN"
        assert spark.conf.get("spark.sql.codegen.wholeStage") == "false"
        assert {r.trade_id for r in read(spark, target.tables.current).collect()} == {"a"}
    assert mode() == before

    monkeypatch.setattr(target_module, "INTERPRET_BELOW_BYTES", 1)  # D2 now holds "much"
    with when_small([target], [D2]):
        assert mode() == before


def test_two_writers_carrying_the_same_versions_at_once_store_each_version_once(  # type: ignore[no-untyped-def]
    spark, target
) -> None:
    """In stage ``stream`` the EOD correction and the streaming job write one layer, and a
    version the source system sent both ways can reach both at the same moment. Whichever
    commits first, history holds each version once and current state the highest."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    apply_changes(FLOW, frame(spark, [trade("a", 1), trade("b", 1)]), "test", target)
    for v in (2, 3, 4):
        rows = two_writers_round(v)
        start = threading.Barrier(2)

        def writer(source: str, rows=rows, start=start):  # type: ignore[no-untyped-def]
            start.wait()
            return apply_changes(FLOW, frame(spark, rows), source, target)

        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(writer, ["eod-correction", "stream"]))
        # A writer refused by the other's commit applies again and finds the versions there.
        assert all(r.accepted == 3 for r in results)
        assert_two_writers_current(spark, target, v)
    assert_two_writers_stored(spark, target, 4)
    assert current(spark, target)["a"] == (4, D2, FLOWB, 4, False)


def assert_two_writers_current(spark, t, v: int) -> None:  # type: ignore[no-untyped-def]
    """Current state's versions after rounds 2..``v`` of ``two_writers_round``."""
    assert {k: c[0] for k, c in current(spark, t).items()} == {
        "a": v,
        "b": v,
        **{f"n{n}": 1 for n in range(2, v + 1)},
    }


def assert_two_writers_stored(spark, t, last: int) -> None:  # type: ignore[no-untyped-def]
    """Current state, history (each version once) and positions after rounds 2..``last`` of
    ``two_writers_round``."""
    assert_two_writers_current(spark, t, last)
    stored = history(spark, t)
    assert stored == sorted(set(stored))  # no version twice
    assert stored == sorted(
        [("a", v) for v in range(1, last + 1)]
        + [("b", v) for v in range(1, last + 1)]
        + [(f"n{n}", 1) for n in range(2, last + 1)]
    )
    new_keys = last - 1  # n2..n<last>, 100 each; a's quantity is its version
    assert positions(spark, t) == {(D2, FLOWB, "AAPL"): (last + 100 + new_keys * 100, 2 + new_keys)}


def test_a_layer_whose_batches_repeat_many_keys_ranks_the_next_in_the_pass_and_back(  # type: ignore[no-untyped-def]
    spark, target, monkeypatch
) -> None:
    """A batch with more repeated keys than the apply ranks apart makes the layer's next batch
    rank as one window in the pass that fills the cache; a batch with few makes the one after
    it count its keys again. Every path stores the same versions and latest rows."""
    from streamshift.engine.write import apply as apply_module

    monkeypatch.setattr(apply_module, "RANK_APART_AT_MOST", 1)
    ways = apply_module._RANK_WHOLE
    twice = [trade("a", 1), trade("a", 2, event="AMEND", quantity=5), trade("b", 1)]
    twice.append(trade("b", 2, event="AMEND", quantity=7))
    apply_changes(FLOW, frame(spark, twice), "test", target)  # 2 repeated keys, more than 1
    assert ways[target.tables.current] is True
    apply_changes(FLOW, frame(spark, [trade("c", 1), trade("a", 3, quantity=9)]), "test", target)
    assert ways[target.tables.current] is False  # ranked in the pass: nothing repeated
    apply_changes(FLOW, frame(spark, [trade("d", 1), trade("d", 2, quantity=4)]), "test", target)
    assert ways[target.tables.current] is False  # one key repeated: ranked apart
    assert {k: c[0::3] for k, c in current(spark, target).items()} == {
        "a": (3, 9),
        "b": (2, 7),
        "c": (1, 100),
        "d": (2, 4),
    }
    assert history(spark, target) == [
        ("a", 1),
        ("a", 2),
        ("a", 3),
        ("b", 1),
        ("b", 2),
        ("c", 1),
        ("d", 1),
        ("d", 2),
    ]
    assert positions(spark, target) == {(D2, FLOWB, "AAPL"): (9 + 7 + 100 + 4, 4)}


@pytest.mark.skipif(
    not suite_engine(), reason="the suite runs without its engine (TESTS_ENGINE=off)"
)
def test_two_jobs_on_the_engine_committing_at_once_both_apply(spark, target) -> None:  # type: ignore[no-untyped-def]
    """The same two writers as jobs on the warm engine, each in a Spark Connect session of
    its own: Delta's conflict reaches the refused job as PySpark's UnknownException (the
    Connect client does not know Delta's classes), and the job applies again all the same."""
    import json
    import subprocess
    import sys

    rounds = 3
    root = Path(__file__).resolve().parent.parent
    run = subprocess.run(
        [sys.executable, "-m", "tests.engine_writers", suite_engine(), str(target.tables.warehouse)]
        + [str(rounds)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert [json.loads(line)["accepted"] for line in run.stdout.splitlines()] == [[3, 3]] * 3
    # Both writers started each round together: at least one commit was refused and retried.
    assert "[write] concurrent commit to the batch layer of trades (DELTA_" in run.stderr
    assert_two_writers_stored(spark, target, rounds + 1)


@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
def test_a_new_days_views_come_from_the_batch_unless_another_writer_commits_meanwhile(  # type: ignore[no-untyped-def]
    spark, target, monkeypatch, large
) -> None:
    """A batch into a date current state never held recomputes its views from the rows the
    apply holds, not from the files it just wrote. Should another writer commit to current
    state before those views are in (its own views may land first), the groups are recomputed
    from the table, so the view ends as a full recompute of current state says. Both paths: a
    large day's file, and a small one (a few thousand rows), which looks its keys up first."""
    from streamshift.engine.write import apply as apply_module
    from streamshift.engine.write import batches as batches_module
    from streamshift.engine.write import views as views_module

    if large:
        monkeypatch.setattr(apply_module, "PRUNE_KEYS_BELOW", 0)  # the path of a large file
    merges: list[str] = []
    real_merge_view = views_module._merge_view

    def merge_view(spark_, view, live, *args):  # type: ignore[no-untyped-def]
        merges.append(view.name)
        return real_merge_view(spark_, view, live, *args)

    monkeypatch.setattr(views_module, "_merge_view", merge_view)
    day1 = [trade(f"t{i}", 1, date=D1, quantity=10 + i) for i in range(4)]
    assert apply_changes(FLOW, frame(spark, day1), "eod", target).views_from == "batch"
    assert len(merges) == 1  # the batch's own rows: one recompute
    assert positions(spark, target) == {(D1, FLOWB, "AAPL"): (10 + 11 + 12 + 13, 4)}

    # Day 2: while its views are being computed from the batch, the stream amends one of its
    # trades and cancels another, views and all.
    import threading

    day2 = [trade(f"u{i}", 1, quantity=100 + i) for i in range(4)]
    interfered: list[bool] = []
    history_in = threading.Event()  # the stream's history write must not race day 2's
    history_step = "_merge_history" if large else "_append_history"
    real_history = getattr(batches_module, history_step)

    def history_written(*args):  # type: ignore[no-untyped-def]
        real_history(*args)
        history_in.set()

    def interfering_merge_view(spark_, view, live, *args):  # type: ignore[no-untyped-def]
        if not interfered:
            interfered.append(True)
            assert history_in.wait(120)
            stream = [trade("u0", 2, event="AMEND", quantity=7), trade("u1", 2, event="CANCEL")]
            apply_changes(FLOW, frame(spark, stream), "stream", target)
        return merge_view(spark_, view, live, *args)

    merges.clear()
    monkeypatch.setattr(batches_module, history_step, history_written)
    monkeypatch.setattr(views_module, "_merge_view", interfering_merge_view)
    second = apply_changes(FLOW, frame(spark, day2), "eod", target)
    assert second.views_from == "batch, then table"
    version, _, _, quantity, _ = current(spark, target)["u0"]
    assert (version, quantity) == (2, 7)
    assert positions(spark, target) == {
        (D1, FLOWB, "AAPL"): (46, 4),
        (D2, FLOWB, "AAPL"): (7 + 102 + 103, 3),
    }
    # ours from the batch, the stream's, ours again from the table
    assert len(merges) == 3

    # Day 3: the stream adds a trade of its own to the new date after this apply has seen
    # the date empty and before its current-state MERGE, which still inserts every key of the
    # batch. The log's version says another commit came between: views from the table.
    D3 = "2026-11-21"
    looks_up = "_touched_groups" if large else "_history_of"  # after the date is seen empty
    real_touched = getattr(batches_module, looks_up)
    stream_added: list[bool] = []

    def interfering_touched(*args):  # type: ignore[no-untyped-def]
        if not stream_added:  # once (the stream's own apply comes through here too)
            stream_added.append(True)
            stream = [trade("s0", 1, date=D3, quantity=1000)]
            apply_changes(FLOW, frame(spark, stream), "stream", target)
        return real_touched(*args)

    monkeypatch.setattr(views_module, "_merge_view", real_merge_view)
    monkeypatch.setattr(batches_module, looks_up, interfering_touched)
    day3 = [trade(f"w{i}", 1, date=D3, quantity=1 + i) for i in range(4)]
    third = apply_changes(FLOW, frame(spark, day3), "eod", target)
    assert (third.applied, third.views_from) == (4, "table")
    assert positions(spark, target)[(D3, FLOWB, "AAPL")] == (1000 + 1 + 2 + 3 + 4, 5)


@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
def test_an_apply_run_again_after_a_conflict_counts_the_rows_its_first_attempt_committed(  # type: ignore[no-untyped-def]
    spark, target, monkeypatch, large
) -> None:
    """The history step fails with Delta's conflict after current state has committed (it
    runs beside the current-state MERGE): the apply runs again, stores each version once and
    still reports the rows its first attempt put into current state."""
    import threading

    from delta.exceptions import ConcurrentAppendException

    from streamshift.engine.write import apply as apply_module
    from streamshift.engine.write import batches as batches_module

    if large:
        monkeypatch.setattr(apply_module, "PRUNE_KEYS_BELOW", 0)
    history_step = "_merge_history" if large else "_append_history"
    real_history, real_current = getattr(batches_module, history_step), apply_module._merge_current
    current_in = threading.Event()
    calls: list[str] = []

    def merge_current(*args):  # type: ignore[no-untyped-def]
        inserted_only = real_current(*args)
        current_in.set()
        return inserted_only

    def history_conflicting_once(*args):  # type: ignore[no-untyped-def]
        calls.append("history")
        if len(calls) == 1:
            assert current_in.wait(120)
            raise ConcurrentAppendException(message="another writer added files to history")
        return real_history(*args)

    monkeypatch.setattr(apply_module, "_merge_current", merge_current)
    monkeypatch.setattr(batches_module, history_step, history_conflicting_once)
    day = [trade("a", 1, quantity=5), trade("b", 1, quantity=7), trade("b", 2, quantity=9)]
    result = apply_changes(FLOW, frame(spark, day), "eod", target)
    assert calls == ["history", "history"]  # the conflict, then the apply run again
    assert (result.accepted, result.applied) == (3, 2)
    assert history(spark, target) == [("a", 1), ("b", 1), ("b", 2)]
    assert {k: v[::3] for k, v in current(spark, target).items()} == {"a": (1, 5), "b": (2, 9)}
    assert positions(spark, target) == {(D2, FLOWB, "AAPL"): (5 + 9, 2)}


def test_a_large_batch_counts_what_a_small_one_counts_and_writes_the_same(  # type: ignore[no-untyped-def]
    spark, tmp_path, monkeypatch
) -> None:
    """A large batch takes its dates, key range and counts from the counting pass over the
    apply's frame rather than from the collected keys; both paths give the same result and
    the same tables, late keys counted once per closed date they have versions in."""
    import datetime as dt

    from streamshift.engine.write import apply as apply_module
    from streamshift.engine.write.target import load_reference

    monkeypatch.setattr(Target, "closed_dates", lambda self: {dt.date.fromisoformat(D1)})
    rows = [
        trade("a", 1, date=D1),
        trade("a", 2, event="AMEND", date=D2, quantity=5),  # a key with versions on two dates
        trade("b", 1, date=D1, book=DELTA1),
        trade("b", 1, date=D1, book=DELTA1, ref="again:b:1"),  # delivered twice
        trade("c", 1, quantity=7),
        trade("d", 1, quantity=-5),  # quantity_positive
        trade("e", 1, date=D1, quantity=-1),  # quantity_positive, another date
        trade("f", 1, side="HOLD"),  # known_side
    ]
    outcomes = {}
    for path, below in (("small", 2_000), ("large", 0)):
        monkeypatch.setattr(apply_module, "PRUNE_KEYS_BELOW", below)
        target = Target(
            spark, FLOW, LayerTables(tmp_path / path, FLOW, "batch"), load_reference(spark, FLOW)
        )
        result = apply_changes(FLOW, frame(spark, rows), "test", target)
        outcomes[path] = (
            result.received,
            result.accepted,
            result.rejected,
            result.rejected_by_rule,
            result.late,
            result.applied,
            result.touched_groups,
            current(spark, target),
            history(spark, target),
            positions(spark, target),
            redeliveries(spark, target),
        )
    assert outcomes["small"] == outcomes["large"]
    assert outcomes["large"][-1] == [("b", 1, "test:b:1")]  # "again:b" is received first
    assert outcomes["large"][:7] == (
        8,
        5,
        3,
        {"quantity_positive": 2, "known_side": 1},
        2,  # a and b on the closed date
        3,
        {"positions": 3},
    )


def test_a_large_batch_writes_a_date_in_its_tasks_and_the_session_gets_its_setting_back(  # type: ignore[no-untyped-def]
    spark, tmp_path, monkeypatch
) -> None:
    """A batch of ``WRITE_IN_TASKS_FROM`` accepted rows or more per date writes each MERGE's
    rows in the tasks that hold them (several files for its one date); a smaller one, or as
    many rows over two dates, a file per date. Each holds the rows the input says, and the
    session's setting is back after each."""
    from streamshift.engine.write import apply as apply_module
    from streamshift.engine.write.target import load_reference

    monkeypatch.setattr(apply_module, "PRUNE_KEYS_BELOW", 0)  # the large batch's path
    monkeypatch.setattr(apply_module, "WRITE_IN_TASKS_FROM", 40)
    name = "spark.databricks.delta.merge.repartitionBeforeWrite.enabled"
    assert spark.conf.get(name) == "true"  # the kit's tuning: one file per date and batch
    books = (FLOWB, DELTA1)
    files = {}
    for path, n, dates in (("in tasks", 40, (D2,)), ("one task", 39, (D2,)), ("two", 40, (D1, D2))):
        rows = [
            trade(f"k{i:02d}", 1, date=dates[i % len(dates)], book=books[i % 2], quantity=i + 1)
            for i in range(n)
        ]
        target = Target(
            spark, FLOW, LayerTables(tmp_path / path, FLOW, "batch"), load_reference(spark, FLOW)
        )
        # four tasks of rows, as a batch read from several Kafka partitions or file splits
        apply_changes(FLOW, frame(spark, rows).repartition(4, "trade_id"), "test", target)
        assert spark.conf.get(name) == "true"
        assert current(spark, target) == {r[0]: (1, r[3], r[5], int(r[8]), False) for r in rows}
        assert history(spark, target) == sorted((r[0], 1) for r in rows)
        sums: dict[tuple[str, str, str], tuple[int, int]] = {}
        for r in rows:
            q, c = sums.get((r[3], r[5], "AAPL"), (0, 0))
            sums[(r[3], r[5], "AAPL")] = (q + int(r[8]), c + 1)
        assert positions(spark, target) == sums
        files[path] = [
            len(spark.read.format("delta").load(table).inputFiles())
            for table in (target.tables.current, target.tables.history)
        ]
    assert files["one task"] == [1, 1]
    assert files["two"] == [2, 2]  # one file for each date
    assert min(files["in tasks"]) >= 2, files


@pytest.mark.parametrize("second_batch", [False, True], ids=["new day", "later batch"])
def test_no_view_update_is_lost_when_a_writer_applies_between_anothers_read_and_merge(  # type: ignore[no-untyped-def]
    spark, target, monkeypatch, second_batch
) -> None:
    """Forced interleaving: writer B's whole apply runs after writer A computed its view
    groups and before A's view MERGE. The view must still equal a recompute of current state
    (A's groups computed before B committed are computed again)."""
    from streamshift.engine.write import views as views_module

    if second_batch:  # the group already holds a trade, so A's views come from the table
        apply_changes(FLOW, frame(spark, [trade("z", 1, quantity=1)]), "test", target)
    original, interleaved = views_module._merge_view, []

    def b_between_read_and_merge(*args):  # type: ignore[no-untyped-def]
        if not interleaved:
            interleaved.append(True)
            apply_changes(FLOW, frame(spark, [trade("b", 1, quantity=30)]), "writer-b", target)
        return original(*args)

    monkeypatch.setattr(views_module, "_merge_view", b_between_read_and_merge)
    apply_changes(FLOW, frame(spark, [trade("a", 1, quantity=100)]), "writer-a", target)
    assert interleaved
    live = [r for r in read(spark, target.tables.current).collect() if not r.is_deleted]
    recomputed = {(D2, FLOWB, "AAPL"): (sum(r.quantity for r in live), len(live))}
    assert recomputed == {(D2, FLOWB, "AAPL"): (131 if second_batch else 130, len(live))}
    assert positions(spark, target) == recomputed


def test_a_conflicting_version_is_quarantined_and_the_first_received_stays(spark, target) -> None:  # type: ignore[no-untyped-def]
    """The same key and version with other content: the first delivery (lowest line of a file,
    lowest offset of a partition, as numbers: line 9 before line 10) stays; the others go to
    quarantine under version_conflict. An identical re-delivery is no conflict."""
    rows = [trade(f"f{i}", 1, ref=f"day.csv:{i + 2}") for i in range(7)]  # lines 2-8
    rows += [
        trade("k", 1, quantity=100, ref="day.csv:9"),
        trade("k", 1, quantity=999, ref="day.csv:10"),
        trade("k", 1, quantity=100, ref="day.csv:11"),  # the same as the first: a duplicate
        trade("s", 1, quantity=5, ref="trades:0:10"),
        trade("s", 1, quantity=6, ref="trades:0:9"),
    ]
    result = apply_changes(FLOW, frame(spark, rows), "test", target)
    assert result.rejected_by_rule == {"version_conflict": 2}
    assert quarantine(spark, target) == [
        ("day.csv:10", "version_conflict"),
        ("trades:0:10", "version_conflict"),
    ]
    state = current(spark, target)
    assert (state["k"][3], state["s"][3]) == (100, 6)
    assert positions(spark, target) == {(D2, FLOWB, "AAPL"): (7 * 100 + 100 + 6, 9)}


def test_a_real_version_outranks_a_replacements_synthetic_cancel_of_the_same_number(  # type: ignore[no-untyped-def]
    spark, target, tmp_path
) -> None:
    import csv
    import datetime as dt

    from streamshift.engine.jobs.eod import run_eod

    def day_file(name: str, rows: list[tuple]) -> Path:  # type: ignore[type-arg]
        path = tmp_path / name
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(FLOW.columns)
            writer.writerows(r[: len(FLOW.columns)] for r in rows)
        return path

    day = dt.date.fromisoformat(D2)
    run_eod(spark, target, day, day_file("day.csv", [trade("x", 1), trade("y", 1)]))
    # the replacement lacks x: x is cancelled as its version 2, a synthetic cancel
    replaced = run_eod(spark, target, day, day_file("whole.csv", [trade("y", 1)]), replace=True)
    assert replaced.cancelled == 1 and current(spark, target)["x"][0] == 2
    assert current(spark, target)["x"][4] is True
    # then the desk's own version 2 of x arrives: a real event wins over the synthetic one
    amend = trade("x", 2, event="AMEND", quantity=40, ref="trades:0:7")
    result = apply_changes(FLOW, frame(spark, [amend]), "kafka", target)
    assert (result.applied, result.rejected) == (1, 0)
    assert current(spark, target)["x"] == (2, D2, FLOWB, 40, False)
    sources = sorted(
        (r.trade_id, r.version, r._source) for r in read(spark, target.tables.history).collect()
    )
    assert sources == [("x", 1, "eod"), ("x", 2, "kafka"), ("x", 2, "replacement"), ("y", 1, "eod")]
    assert positions(spark, target) == {(D2, FLOWB, "AAPL"): (140, 2)}


@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
def test_a_version_history_holds_with_other_content_is_quarantined_not_dropped(  # type: ignore[no-untyped-def]
    spark, target, monkeypatch, large
) -> None:
    """A later batch re-sends a stored (key, version) with other content: the stored version
    stays, the new delivery shows in quarantine under version_conflict (a file re-sent with a
    changed row and no new version); an identical re-send and a new key apply as usual."""
    from streamshift.engine.write import apply as apply_module

    if large:
        monkeypatch.setattr(apply_module, "PRUNE_KEYS_BELOW", 0)
    apply_changes(
        FLOW, frame(spark, [trade("a", 1, quantity=100), trade("b", 1, quantity=5)]), "t", target
    )
    again = [
        trade("a", 1, quantity=999, ref="later.csv:2"),
        trade("b", 1, quantity=5, ref="later.csv:3"),
        trade("c", 1, quantity=20, ref="later.csv:4"),
    ]
    result = apply_changes(FLOW, frame(spark, again), "t", target)
    assert result.rejected_by_rule == {"version_conflict": 1}
    assert (result.accepted, result.rejected) == (2, 1)
    assert quarantine(spark, target) == [("later.csv:2", "version_conflict")]
    assert current(spark, target)["a"][3] == 100
    assert history(spark, target) == [("a", 1), ("b", 1), ("c", 1)]
    assert positions(spark, target) == {(D2, FLOWB, "AAPL"): (125, 3)}
    # b's identical copy is a later delivery of its v1; a's conflicting one is in quarantine
    assert redeliveries(spark, target) == [("b", 1, "later.csv:3")]


@pytest.mark.parametrize("other", ["small", "large"])
def test_a_version_appended_beside_another_writers_copy_stays_once_in_history(  # type: ignore[no-untyped-def]
    spark, target, monkeypatch, other
) -> None:
    """A small batch appends the versions its read of history did not find. Another writer
    (an EOD load of the same layer, small or large) stores one of them between that read and
    the append: the append's check finds the log moved, and history keeps one copy of each
    version, the earlier applied, the other as a redelivery; a second copy left by a writer that died before its check is
    removed by the next batch that reads the key. Current state and the view count it once."""
    from pyspark.sql import functions as F

    from streamshift.engine.write import apply as apply_module
    from streamshift.engine.write import batches as batches_module
    from streamshift.engine.write.commits import append

    real_history_of = batches_module._history_of
    interfered: list[bool] = []

    def history_then_another_writer(*args):  # type: ignore[no-untyped-def]
        known = real_history_of(*args)
        if not interfered:  # once: the other writer's own apply comes through here too
            interfered.append(True)
            if other == "large":
                monkeypatch.setattr(apply_module, "PRUNE_KEYS_BELOW", 0)
            eod = [trade("x", 1, quantity=5, ref="day.csv:2")]
            apply_changes(FLOW, frame(spark, eod), "eod", target)
            monkeypatch.setattr(apply_module, "PRUNE_KEYS_BELOW", 2_000)
        return known

    monkeypatch.setattr(batches_module, "_history_of", history_then_another_writer)
    stream = [trade("x", 1, quantity=5, ref="trades:0:7"), trade("y", 1, quantity=3)]
    apply_changes(FLOW, frame(spark, stream), "stream", target)
    assert history(spark, target) == [("x", 1), ("y", 1)]
    kept = read(spark, target.tables.history).where("trade_id = 'x'").collect()
    # the earlier applied stays (the stream stamped its batch before the load began); the
    # other is a later delivery of the version
    assert [r._source_ref for r in kept] == ["trades:0:7"]
    assert ("x", 1, "day.csv:2") in redeliveries(spark, target)
    assert positions(spark, target) == {(D2, FLOWB, "AAPL"): (5 + 3, 2)}

    # A copy left behind (a writer killed between its append and its check): the next
    # batch that reads the key removes the later one before it decides what is new.
    monkeypatch.setattr(batches_module, "_history_of", real_history_of)
    copy = read(spark, target.tables.history).where("trade_id = 'y'")
    later = copy.withColumn("_applied_at", copy._applied_at + F.expr("INTERVAL 1 SECOND"))
    append(later.withColumn("_source_ref", F.lit("left:behind")), target.tables.history)
    assert history(spark, target) == [("x", 1), ("y", 1), ("y", 1)]
    again = [trade("y", 2, event="AMEND", quantity=4)]
    apply_changes(FLOW, frame(spark, again), "stream", target)
    assert history(spark, target) == [("x", 1), ("y", 1), ("y", 2)]
    assert "left:behind" not in {
        r._source_ref for r in read(spark, target.tables.history).collect()
    }
    assert ("y", 1, "left:behind") in redeliveries(spark, target)
    assert positions(spark, target) == {(D2, FLOWB, "AAPL"): (5 + 4, 2)}
