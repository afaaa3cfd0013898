"""A flow that changes, as a team changes it: the flow's file in the team's project edited
between commands run on the suite's engine (real Spark, real Delta tables), each change
planned, applied in place or refused until evolved, against an oracle computed from the
files' rows."""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from streamshift.spec.scaffold import init_project
from streamshift.store.tables import rows
from streamshift.store.versions import expired_roots
from tests.cli_support import cli_env, run_cli, suite_engine
from tests.trades_data import trade

DAY1, DAY2 = dt.date(2026, 11, 20), dt.date(2026, 11, 21)
OLD_HEADER = ["payment_id", "version", "status", "business_date", "paid_at", "merchant", "amount"]


def _file(path: Path, header: list[str], lines: list[dict[str, str]]) -> Path:
    with open(path, "w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(header)
        out.writerows([[line.get(c, "") for c in header] for line in lines])
    return path


def _payment(pid: str, version: int, day: dt.date, merchant: str, amount: str, **more: str):  # type: ignore[no-untyped-def]
    return {
        "payment_id": pid,
        "version": str(version),
        "status": "BOOKED",
        "business_date": str(day),
        "paid_at": f"{day}T10:00:00Z",
        "merchant": merchant,
        "amount": amount,
        **more,
    }


def _amounts_by_group(loaded: list[dict[str, str]]) -> dict[tuple[str, str], list[Decimal]]:
    """Each payment's highest version among the rows loaded: its amount per (date, merchant)."""
    latest: dict[str, dict[str, str]] = {}
    for row in loaded:
        held = latest.get(row["payment_id"])
        if held is None or int(row["version"]) > int(held["version"]):
            latest[row["payment_id"]] = row
    groups: dict[tuple[str, str], list[Decimal]] = {}
    for row in latest.values():
        groups.setdefault((row["business_date"], row["merchant"]), []).append(
            Decimal(row["amount"])
        )
    return groups


def _oracle(loaded: list[dict[str, str]], known: set[str]) -> dict[tuple[str, str], tuple]:
    """by_merchant with the new measure, from the rows loaded: each payment's highest version,
    known merchants only: (payments, amount, largest) per (date, merchant)."""
    groups = _amounts_by_group([row for row in loaded if row["merchant"] in known])
    return {g: (len(a), sum(a), max(a)) for g, a in groups.items()}


PROBE = (
    "import json; from streamshift.control.summary import code_summary; "
    "from streamshift.spec.settings import load_settings; "
    "print(json.dumps(code_summary(load_settings(), 'payments'), default=str))"
)


# What the maintain job does first (its Delta upkeep of the live tables is tested elsewhere).
UPKEEP = (
    "import json; from streamshift.spec.registry import get_flow; "
    "from streamshift.spec.settings import load_settings; "
    "from streamshift.store.versions import remove_expired; "
    "print(json.dumps(remove_expired(load_settings().warehouse, get_flow('payments'), 0)))"
)


def _code_summary(env: dict[str, str], project: Path) -> dict:
    """The Migration page's flow versions and pending plan, read as the page reads them."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
        ],
        env=env,
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(probe.stdout)


@pytest.mark.skipif(
    not suite_engine(), reason="the suite runs without its engine (TESTS_ENGINE=off)"
)
@pytest.mark.slow
def test_a_flow_changed_column_view_and_breaking_rename(tmp_path: Path) -> None:
    project = tmp_path / "team"
    init_project(project)
    (project / "flows" / "payments" / "reference" / "merchants.csv").write_text(
        "merchant,category\nACME,hardware\nZED,toys\n"
    )
    flow_file = project / "flows" / "payments" / "__init__.py"
    env = cli_env(tmp_path)
    env.pop("STREAMSHIFT_HOME")  # the project's var/
    env["STREAMSHIFT_PROJECT"] = str(project)
    warehouse = project / "var" / "warehouse"

    def cli(*args: str, **extra: str):  # type: ignore[no-untyped-def]
        return run_cli(tmp_path, *args, env={**env, **extra}, cwd=project)

    def eod(path: Path, day: dt.date):  # type: ignore[no-untyped-def]
        return cli("eod", "--flow", "payments", "--date", str(day), "--file", str(path))

    def current() -> dict[str, dict]:
        found = rows(str(warehouse / "batch" / "payments"))
        return {r["payment_id"]: r for r in found}

    def versions() -> list[tuple[str, int, str]]:
        found = rows(
            str(warehouse / "control" / "flow_versions"), where=[("flow", "=", "payments")]
        )
        return sorted(
            {(r["layer"], r["version"], r["how"]) for r in found}, key=lambda v: (v[1], v[0])
        )

    first = [_payment("P1", 1, DAY1, "ACME", "10.00"), _payment("P2", 1, DAY1, "ZED", "4.00")]
    done = eod(_file(tmp_path / "a.csv", OLD_HEADER, first), DAY1)
    assert done.returncode == 0, done.stderr
    assert versions() == [("batch", 1, "first use"), ("stream", 1, "first use")]

    # 1. An optional column: planned as in place, applied by the next load itself. Files from
    # before the change still load; an old payment is amended with the new column.
    text = flow_file.read_text()
    flow_file.write_text(
        text.replace(
            '        StructField("amount", DecimalType(18, 2)),\n',
            '        StructField("amount", DecimalType(18, 2)),\n'
            '        StructField("channel", StringType()),\n',
        ).replace(
            "    retraction_values=", '    optional={"channel": None},\n    retraction_values='
        )
    )
    planned = cli("plan", "--flow", "payments")
    assert planned.returncode == 0, planned.stderr
    assert "column channel: added (string, optional, default null) → in place" in planned.stdout
    new_header = [*OLD_HEADER, "channel"]
    amended = [
        _payment("P1", 2, DAY1, "ACME", "12.00", channel="web"),
        _payment("P3", 1, DAY1, "ZED", "3.00", channel="pos"),
    ]
    done = eod(_file(tmp_path / "b.csv", new_header, amended), DAY1)
    assert done.returncode == 0, done.stderr
    assert "applied in place" in done.stderr
    old_shape = [_payment("P4", 1, DAY2, "ACME", "5.00", terminal="T-9")]
    done = eod(_file(tmp_path / "c.csv", [*OLD_HEADER, "terminal"], old_shape), DAY2)
    assert done.returncode == 0, done.stderr
    assert "1 rows held fields the flow does not declare (terminal): ignored" in done.stdout
    state = current()
    assert {k: (r["version"], r["channel"]) for k, r in state.items()} == {
        "P1": (2, "web"),
        "P2": (1, None),
        "P3": (1, "pos"),
        "P4": (1, None),
    }
    assert versions()[-2:] == [("batch", 2, "in place"), ("stream", 2, "in place")]

    # 2. A view's logic: planned, refused until evolved (nothing written), then every date's
    # groups recomputed; a kill part way through evolve is repaired by running it again.
    flow_file.write_text(
        flow_file.read_text().replace(
            'F.sum("amount").alias("amount")',
            'F.sum("amount").alias("amount"), F.max("amount").alias("largest")',
        )
    )
    code = _code_summary(env, project)  # what the Migration page shows
    assert code["pending"] and "streamshift plan --flow payments" in code["pending"]
    assert {layer: v["version"] for layer, v in code["layers"].items()} == {"batch": 2, "stream": 2}
    planned = cli("plan", "--flow", "payments")
    assert planned.returncode == 0, planned.stderr
    assert "view by_merchant: logic changed → the view is recomputed" in planned.stdout
    later = [_payment("P5", 1, DAY2, "ZED", "8.00", channel="web")]
    refused = eod(_file(tmp_path / "d.csv", new_header, later), DAY2)
    assert refused.returncode != 0
    assert "streamshift evolve --flow payments" in refused.stderr
    assert "Traceback" not in refused.stderr and "at org.apache" not in refused.stderr
    assert "P5" not in current()
    killed = cli("evolve", "--flow", "payments", STREAMSHIFT_KILL_AFTER_COMMITS="1")
    assert killed.returncode != 0
    assert versions()[-1][1] == 2  # not recorded: the run died before
    evolved = cli("evolve", "--flow", "payments")
    assert evolved.returncode == 0, evolved.stderr
    assert "evolved to version 3" in evolved.stdout
    loaded = [*first, *amended, *old_shape]
    view = str(warehouse / "batch" / "by_merchant")

    def by_merchant() -> dict[tuple[str, str], tuple]:
        return {
            (str(r["business_date"]), r["merchant"]): (r["payments"], r["amount"], r["largest"])
            for r in rows(view)
        }

    assert by_merchant() == _oracle(loaded, {"ACME", "ZED"})
    assert _code_summary(env, project)["pending"] is None
    done = eod(tmp_path / "d.csv", DAY2)
    assert done.returncode == 0, done.stderr
    assert by_merchant() == _oracle([*loaded, *later], {"ACME", "ZED"})

    # 3. A rule added and re-applied to history: P1's version 2 (12.00) now fails, moves to
    # quarantine under the rule, and P1 falls back to its version 1.
    flow_file.write_text(
        flow_file.read_text().replace(
            '        Rule("known_merchant",',
            '        Rule("below_11", lambda: reversed_() | (F.col("amount") < 11)),\n'
            '        Rule("known_merchant",',
        )
    )
    evolved = cli("evolve", "--flow", "payments", "--reapply")
    assert evolved.returncode == 0, evolved.stderr
    assert "1 versions now fail a rule (moved to quarantine), 1 keys fell back" in evolved.stdout
    assert {k: r["version"] for k, r in current().items()} == {
        "P1": 1, "P2": 1, "P3": 1, "P4": 1, "P5": 1
    }  # fmt: skip
    valid = [r for r in [*loaded, *later] if Decimal(r["amount"]) < 11]
    assert by_merchant() == _oracle(valid, {"ACME", "ZED"})
    quarantined = rows(str(warehouse / "batch" / "quarantine"), where=[("rule", "=", "below_11")])
    assert [(q["batch_id"], q["business_date"]) for q in quarantined] == [("reapply:v4", DAY1)]

    # 4. A renamed column: breaking, refused by plan (exit 1), by the loads and by evolve,
    # with nothing changed.
    before = (versions(), current(), by_merchant())
    flow_file.write_text(flow_file.read_text().replace('"paid_at"', '"paid_time"'))
    planned = cli("plan", "--flow", "payments")
    assert planned.returncode == 1, planned.stdout + planned.stderr
    assert "column paid_at: dropped or renamed → breaking: refused" in planned.stdout
    refused = eod(tmp_path / "d.csv", DAY2)
    assert refused.returncode != 0 and "paid_at" in refused.stderr
    refused = cli("evolve", "--flow", "payments")
    assert refused.returncode != 0 and "breaking" in refused.stderr
    assert (versions(), current(), by_merchant()) == before


def _trade_row(trade_id: str, version: int, **more: str) -> dict[str, str]:
    values = trade(trade_id, version, date=str(DAY1))[:11]
    from flows.trades import FLOW

    return {**dict(zip(FLOW.columns, values, strict=True)), **more}


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.slow
def test_the_stream_across_an_added_column_loses_and_doubles_nothing(
    spark, kafka_settings, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The stream runs the trades flow as it was; an EOD load under the flow with an added
    optional column applies the change in place to both layers. The running stream stops
    before its next batch, uncommitted; started again on the new code it takes every event,
    old shape and new, once, and counts the field the flow does not declare."""
    from flows.trades import FLOW
    from streamshift.engine.jobs.eod import run_eod
    from streamshift.engine.versions import FlowChangedError
    from streamshift.engine.write.target import Target, read
    from streamshift.store.heartbeat import query_name
    from streamshift.store.kafka import ensure_topic
    from streamshift.store.produce import produce_rows
    from tests.stream_support import drain, isolated, new_topic, stream_running

    settings = isolated(kafka_settings, tmp_path / "home")
    topic = new_topic("trades")
    ensure_topic(settings, topic, partitions=2)
    wider = dataclasses.replace(
        FLOW,
        schema=StructType([*FLOW.schema.fields, StructField("venue", StringType())]),
        optional={"venue": None},
    )
    before = [_trade_row(f"S{i}", 1) for i in range(4)]
    produce_rows(settings, FLOW, before, topic=topic, progress=False)
    eod = tmp_path / "eod.csv"
    with open(eod, "w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(wider.columns)
        out.writerow([*_trade_row("E1", 1).values(), "XLON"])
    with (
        pytest.raises(FlowChangedError, match="recorded version changed"),
        stream_running(spark, settings, topic, flow=FLOW),
    ):
        run_eod(spark, Target.open(spark, settings, wider, "batch"), DAY1, eod)
        produce_rows(settings, FLOW, [_trade_row("S4", 1)], topic=topic, progress=False)
        deadline = time.monotonic() + 120  # the stream's next batch finds the new version
        while time.monotonic() < deadline and any(
            q.name == query_name(FLOW.name, "stream") for q in spark.streams.active
        ):
            time.sleep(0.5)
    stream = Target.open(spark, settings, wider, "stream")
    assert read(spark, stream.tables.current).columns[-1] == "venue"  # altered in place
    amended = [_trade_row("S0", 2, venue="XNYS"), _trade_row("S5", 1, venue="BATS")]
    produce_rows(settings, wider, amended, topic=topic, progress=False)
    ensure_topic(settings, topic)
    from confluent_kafka import Producer

    from streamshift.store.events import encode_event
    from streamshift.store.kafka import producer_config

    producer = Producer(producer_config(settings))
    key, value = encode_event(wider, _trade_row("S6", 1, venue="XLON"))
    producer.produce(topic, key=key, value=value[:-1] + b',"desk_note":"hi"}')
    assert producer.flush(60) == 0
    run = drain(spark, settings, topic, flow=wider)
    assert run.totals.unknown_rows == 1 and run.totals.unknown_fields == {"desk_note"}
    history = read(spark, stream.tables.history).select("trade_id", "version").collect()
    produced = [
        ("S0", 1),
        ("S1", 1),
        ("S2", 1),
        ("S3", 1),
        ("S4", 1),
        ("S0", 2),
        ("S5", 1),
        ("S6", 1),
    ]
    assert sorted(map(tuple, history)) == sorted(produced)  # each once: none lost, none doubled
    venues = {r["trade_id"]: r["venue"] for r in read(spark, stream.tables.current).collect()}
    assert venues == {"S0": "XNYS", "S1": None, "S2": None, "S3": None, "S4": None,
                      "S5": "BATS", "S6": "XLON"}  # fmt: skip


@pytest.mark.spark
def test_serve_rebuilds_its_state_when_the_view_changed(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`serve` keeps a view in a checkpoint's state store: under the view's same logic the
    checkpoint is kept; under a changed view (a measure added) it is moved aside, so the
    query builds its state again from the topic (as any new checkpoint does)."""
    from pyspark.sql.types import LongType

    from flows.trades import FLOW, POSITION_KEY, POSITION_MEASURES
    from streamshift.engine.jobs.serve import VIEW_MARKER, rebuild_if_changed
    from streamshift.spec.flow import Measure, View

    checkpoint = tmp_path / "trades-serve-positions"
    rebuild_if_changed(spark, FLOW, FLOW.views[0], str(checkpoint))
    (checkpoint / "offsets").mkdir()  # what the query left
    rebuild_if_changed(spark, FLOW, FLOW.views[0], str(checkpoint))
    assert (checkpoint / "offsets").is_dir()  # the same logic: kept
    measures = (*POSITION_MEASURES, Measure("quantity", LongType(), "quantity"))
    changed = dataclasses.replace(FLOW, views=(View.additive("positions", POSITION_KEY, measures),))
    rebuild_if_changed(spark, changed, changed.views[0], str(checkpoint))
    assert not (checkpoint / "offsets").exists() and (checkpoint / VIEW_MARKER).is_file()
    [aside] = [p for p in tmp_path.iterdir() if p.name.startswith("trades-serve-positions.before-")]
    assert (aside / "offsets").is_dir()


@pytest.mark.spark
def test_a_flow_whose_code_does_not_build_says_so_in_one_line(spark) -> None:  # type: ignore[no-untyped-def]
    from flows.trades import FLOW
    from streamshift.engine.versions import FlowChangedError, components

    broken = dataclasses.replace(FLOW, prepare=lambda df, reference: df.select("no_such_column"))
    with pytest.raises(FlowChangedError, match="its code does not build on empty frames") as got:
        components(spark, broken)
    assert "\n" not in str(got.value) and "no_such_column" in str(got.value)


def _by_merchant_oracle(loaded: list[dict[str, str]], floor: Decimal | None) -> dict:
    """by_merchant's amount per (date, merchant) from the rows loaded: each payment's highest
    version; with ``floor``, the new logic: only payments of at least ``floor`` are summed
    (None where none is)."""
    groups = _amounts_by_group(loaded)
    if floor is None:
        return {g: sum(a) for g, a in groups.items()}
    return {g: sum(x for x in a if x >= floor) if any(x >= floor for x in a) else None
            for g, a in groups.items()}  # fmt: skip


@pytest.mark.kafka
@pytest.mark.skipif(
    not suite_engine(), reason="the suite runs without its engine (TESTS_ENGINE=off)"
)
@pytest.mark.slow
def test_a_changed_view_shadowed_switched_to_and_back(kafka_settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two deployments share one warehouse, as a team's old and new code do: the live one
    (version 1's code) keeps loading EOD files and streaming events while the new one builds
    version 2 beside it in both layers; the recorded differences = an oracle; the switch
    stops the stream (SIGTERM: it finishes its batch), catches version 2 up and serves it; the
    stream started again on the new code takes the events sent while it was stopped, each
    once; the switch back catches version 1 up and serves it again."""
    import shutil
    import signal

    from streamshift.store.heartbeat import read_heartbeat
    from streamshift.store.kafka import ensure_topic
    from tests.cli_support import CLI, LOCAL_SPARK
    from tests.stream_support import isolated, new_topic, wait_caught_up

    home = tmp_path / "home"
    settings = isolated(kafka_settings, home)
    topic = new_topic("payments")
    ensure_topic(settings, topic, partitions=2)
    live, new = tmp_path / "live", tmp_path / "new"
    init_project(live)
    (live / "flows" / "payments" / "reference" / "merchants.csv").write_text(
        "merchant,category\nACME,hardware\nZED,toys\n"
    )
    env = cli_env(home, kafka_bootstrap_servers=settings.kafka_bootstrap_servers, **LOCAL_SPARK)
    warehouse = home / "warehouse"

    def cli(project: Path, *args: str, **extra: str):  # type: ignore[no-untyped-def]
        return run_cli(
            home, *args, env={**env, "STREAMSHIFT_PROJECT": str(project), **extra}, cwd=project
        )

    def eod(project: Path, name: str, day: dt.date, lines: list[dict[str, str]]):  # type: ignore[no-untyped-def]
        path = _file(tmp_path / name, OLD_HEADER, lines)
        return cli(project, "eod", "--flow", "payments", "--date", str(day), "--file", str(path))

    def served(layer: str = "batch") -> dict[tuple[str, str], Decimal | None]:
        shown = cli(live, "show", "--flow", "payments", "--view", "by_merchant", "--layer", layer,
                    "--format", "csv")  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        return {
            (r["business_date"], r["merchant"]): Decimal(r["amount"]) if r["amount"] else None
            for r in csv.DictReader(shown.stdout.splitlines())
        }

    sent: list[dict[str, str]] = []  # the events produced, in order

    def produce(name: str, lines: list[dict[str, str]]) -> None:
        path = _file(tmp_path / name, OLD_HEADER, lines)
        done = cli(live, "produce", "--flow", "payments", "--file", str(path), "--topic", topic)
        assert done.returncode == 0, done.stderr
        sent.extend(lines)

    def caught_up(job: subprocess.Popen[bytes]) -> None:
        wait_caught_up(home, "payments", job, log, timeout=240, poll=0.5)

    # Version 1 live: a day's EOD file in the batch layer, events in the stream layer.
    day1 = [
        _payment("P1", 1, DAY1, "ACME", "10.00"),
        _payment("P2", 1, DAY1, "ZED", "4.00"),
        _payment("P3", 1, DAY1, "ACME", "6.00"),
    ]
    done = eod(live, "a.csv", DAY1, day1)
    assert done.returncode == 0, done.stderr
    produce("s1.csv", [_payment(f"P{i}", 1, DAY1, "ZED" if i % 2 else "ACME", f"{i + 2}.00")
                       for i in range(1, 5)])  # fmt: skip
    log = tmp_path / "stream.log"
    with open(log, "ab") as out:
        job = subprocess.Popen(
            [*CLI, "stream", "--flow", "payments", "--topic", topic, "--trigger", "1 second"],
            env={**env, "STREAMSHIFT_PROJECT": str(live)},
            cwd=live,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        caught_up(job)

        # The new code: by_merchant sums only payments of 5.00 or more.
        shutil.copytree(live / "flows", new / "flows")
        shutil.copy(live / "streamshift.toml", new / "streamshift.toml")
        flow_file = new / "flows" / "payments" / "__init__.py"
        flow_file.write_text(
            flow_file.read_text().replace(
                'F.sum("amount").alias("amount")',
                'F.sum(F.when(F.col("amount") >= 5, F.col("amount"))).alias("amount")',
            )
        )
        killed = cli(
            new, "evolve", "--flow", "payments", "--shadow", STREAMSHIFT_KILL_AFTER_COMMITS="2"
        )
        assert killed.returncode != 0
        built = cli(new, "evolve", "--flow", "payments", "--shadow")  # starts over
        assert built.returncode == 0, built.stderr
        assert "version 2 built beside the live version 1" in built.stdout
        # The oracle: the groups whose value the new logic changes, per layer.
        differ = {}
        for layer, loaded in (("batch", day1), ("stream", sent)):
            old, changed = (
                _by_merchant_oracle(loaded, None),
                _by_merchant_oracle(loaded, Decimal(5)),
            )
            differ[layer] = sorted(g for g in old if old[g] != changed[g])
            n = len(differ[layer])
            assert f"by_merchant ({layer}): {n} groups differ over 1 dates" in built.stdout
        assert differ["batch"] == [(str(DAY1), "ZED")]
        assert (
            '{"business_date":"2026-11-20","merchant":"ZED"}  amount: 4.00 → null' in built.stdout
        )
        again = cli(new, "evolve", "--flow", "payments", "--shadow")
        assert again.returncode != 0 and "version 2 is this code" in again.stderr
        breaks = rows(
            str(warehouse / "control" / "recon_breaks"),
            where=[("recon", "=", "shadow:v2:by_merchant")],
        )
        assert sorted((json.loads(b["key"])["business_date"], json.loads(b["key"])["merchant"])
                      for b in breaks) == sorted([*differ["batch"], *differ["stream"]])  # fmt: skip
        assert served() == _by_merchant_oracle(day1, None)  # nothing served changed
        assert served("stream") == _by_merchant_oracle(sent, None)
        page = _code_summary({**env, "STREAMSHIFT_PROJECT": str(new)}, new)  # the Migration page's
        assert page["shadow"]["version"] == 2
        assert {(d["table"], d["live"], d["dates"], d["differ"]) for d in page["shadow"]["differences"]} == {
            ("by_merchant", "batch v1", 1, 1), ("current", "batch v1", 1, 0),
            ("by_merchant", "stream v1", 1, 1), ("current", "stream v1", 1, 0),
        }  # fmt: skip
        examples = [(e["layer"], e["key"], e["column"], e["live"], e["new"])
                    for e in page["shadow"]["examples"]]  # fmt: skip
        assert examples[0] == (
            "batch",
            '{"business_date":"2026-11-20","merchant":"ZED"}',
            "amount",
            "4.00",
            None,
        )
        assert [e[0] for e in examples] == ["batch", *["stream"] * len(differ["stream"])]
        reported = cli(live, "report", "--flow", "payments", "--date", str(DAY1))  # day's report
        assert reported.returncode == 0, reported.stderr
        summary = json.loads(
            (home / "reports" / "payments" / str(DAY1) / "report.json").read_text()
        )
        shown = [(e["layer"], e["key"], e["live"], e["new"])
                 for e in summary["versions"]["shadow"]["examples"]]  # fmt: skip
        assert shown[0] == (
            "batch",
            '{"business_date":"2026-11-20","merchant":"ZED"}',
            "4.00",
            None,
        )
        assert not any(r["recon"].startswith("shadow:") for r in summary["reconciliation_runs"])

        # The live deployment goes on loading and streaming; the new code may not write the
        # live tables.
        produce("s2.csv", [_payment("P5", 1, DAY2, "ZED", "9.00"),
                           _payment("P1", 2, DAY1, "ZED", "1.00")])  # fmt: skip
        day2 = [_payment("P4", 1, DAY2, "ZED", "3.00"), _payment("P5", 1, DAY2, "ACME", "7.00")]
        done = eod(live, "b.csv", DAY2, day2)
        assert done.returncode == 0, done.stderr
        refused = eod(new, "b.csv", DAY2, day2)
        assert refused.returncode != 0
        assert "streamshift promote --flow payments --version 2" in refused.stderr
        caught_up(job)

        switched = cli(new, "promote", "--flow", "payments", "--version", "2", "--force",
                       "--reason", "reviewed")  # fmt: skip
        assert switched.returncode == 0, switched.stderr
        assert "switched from version 1 to version 2" in switched.stdout
        assert "batch layer: 2 versions applied" in switched.stdout
        assert "stream layer: 2 versions applied" in switched.stdout
        assert "stream jobs stopped for the switch (stream)" in switched.stdout
        assert job.wait(30) is not None  # stopped by the switch
        assert read_heartbeat(home, "payments", "stream")["state"] == "switched"
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert served() == _by_merchant_oracle([*day1, *day2], Decimal(5))
    assert _code_summary({**env, "STREAMSHIFT_PROJECT": str(new)}, new)["shadow"] is None
    produce("s3.csv", [_payment("P6", 1, DAY2, "ACME", "4.00")])  # while the stream was stopped
    drained = cli(new, "stream", "--flow", "payments", "--topic", topic, "--available-now")
    assert drained.returncode == 0, drained.stderr
    v2 = warehouse / "stream" / "v2" / "payments"
    history = sorted((r["payment_id"], r["version"]) for r in rows(str(v2 / "payments_history")))
    assert history == sorted((r["payment_id"], int(r["version"])) for r in sent)  # each once
    assert served("stream") == _by_merchant_oracle(sent, Decimal(5))

    more = [_payment("P6", 1, DAY2, "ZED", "9.00")]
    # The new deployment's reference feed gains a merchant: its run records another digest.
    (new / "flows" / "payments" / "reference" / "merchants.csv").write_text(
        "merchant,category\nACME,hardware\nZED,toys\nNEW,books\n"
    )
    done = eod(new, "c.csv", DAY2, more)
    assert done.returncode == 0, done.stderr
    feeds = [
        r["reference"]
        for r in sorted(rows(str(warehouse / "control" / "eod_runs")), key=lambda r: r["run_at"])
    ]
    assert len(feeds) == 3 and feeds[0] == feeds[1] != feeds[2] and all(feeds), feeds

    back = cli(live, "promote", "--flow", "payments", "--version", "1", "--force",
               "--reason", "roll back")  # fmt: skip
    assert back.returncode == 0, back.stderr
    assert "switched from version 2 to version 1" in back.stdout
    assert served() == _by_merchant_oracle([*day1, *day2, *more], None)
    assert served("stream") == _by_merchant_oracle(sent, None)  # caught up with P6

    # Upkeep removes version 2's tables once readers left it longer than the retention ago
    # (here 0 days): version 1's stay, and a switch to version 2 now says they are gone.
    removed = json.loads(
        subprocess.run(
            [sys.executable, "-c", UPKEEP],
            env={**env, "STREAMSHIFT_PROJECT": str(live)},
            cwd=live,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert removed and all(r.startswith("version 2: ") for r in removed)
    assert not (warehouse / "batch" / "v2" / "payments").exists()
    assert not (warehouse / "stream" / "v2" / "payments").exists()
    assert served() == _by_merchant_oracle([*day1, *day2, *more], None)
    gone = cli(new, "promote", "--flow", "payments", "--version", "2", "--force", "--reason", "x")
    assert gone.returncode != 0 and "tables are gone" in gone.stderr, gone.stderr


def test_upkeep_keeps_the_live_version_the_pending_one_and_those_left_recently() -> None:
    """Which version folders upkeep may remove, from the records alone."""
    t0 = dt.datetime(2026, 11, 1)

    def at(days: int, version: int, how: str, root: str) -> dict:
        return {
            "version": version,
            "how": how,
            "root": root,
            "deployed_at": t0 + dt.timedelta(days=days),
        }

    found = [
        at(0, 1, "first use", ""),
        at(1, 2, "shadow", "v2/f"),
        at(2, 2, "switched", "v2/f"),
        at(3, 3, "shadow", "v3/f"),  # never served, superseded by 4
        at(5, 4, "shadow", "v4/f"),
        at(6, 4, "switched", "v4/f"),
        at(8, 5, "shadow", "v5/f"),  # pending
    ]
    week = dt.timedelta(days=7)
    assert expired_roots(found, week, t0 + dt.timedelta(days=9)) == [("", 1)]
    assert expired_roots(found, week, t0 + dt.timedelta(days=10)) == [("", 1), ("v3/f", 3)]
    assert expired_roots(found, week, t0 + dt.timedelta(days=13)) == [
        ("", 1), ("v2/f", 2), ("v3/f", 3)
    ]  # fmt: skip
    # Switched back to 1 on day 12: its folder is live again, 4 was left that day, and 5 is no
    # longer pending (it was built beside 4).
    back = [*found, at(12, 1, "switched", "")]
    assert expired_roots(back, week, t0 + dt.timedelta(days=18)) == [
        ("v2/f", 2), ("v3/f", 3), ("v5/f", 5)
    ]  # fmt: skip
    assert ("v4/f", 4) in expired_roots(back, week, t0 + dt.timedelta(days=19))


def test_a_plan_says_what_it_compares_the_code_with() -> None:
    """Before any write there is no recorded version to compare with: the plan says so, and
    what records one, instead of 'no change since nothing recorded'."""
    from streamshift.control.plan import Plan

    assert Plan("payments", "batch", None, ()).describe() == (
        "payments, batch layer: no version recorded yet (its first write records the code on "
        "disk as version 1)"
    )
    assert Plan("payments", "batch", 2, ()).describe() == (
        "payments, batch layer: no change since version 2"
    )
