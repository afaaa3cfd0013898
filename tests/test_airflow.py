"""streamshift's DAGs in a real Airflow 3: integrity, a REST trigger as the UI does it, bad
params, a backfill, a rerun that changes nothing, and a killed load that Airflow's retry
repairs — their Spark tasks on the suite's warm engine, on real Delta tables. (``dag.test()``
runs the EOD DAG in test_airflow_stream, test_airflow_quality and test_cluster.)"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flows.trades import FLOW
from streamshift.engine.write.target import delta_log_version
from streamshift.local.airflow import LocalAirflow, metadata_db
from streamshift.spec import catalog
from streamshift.spec.catalog import LayerTables
from streamshift.spec.registry import flow_names
from streamshift.spec.settings import REPO_ROOT, load_settings
from streamshift.store.airflow_api import AirflowApiError
from streamshift.store.processes import group_alive, group_members
from streamshift.store.produce import read_rows
from streamshift.store.records import quality_results
from streamshift.store.tables import rows
from tests.airflow_support import (
    arm_kill_after_commits,
    busy_writer,
    edit_first_new_trade,
    expected_positions,
    land_day,
    land_external,
    positions,
)
from tests.cli_support import run_cli

# Dates well before the latest scheduled interval, so the run the scheduler creates when a DAG
# is unpaused (catchup off: the latest business day) never shares a date with these.
REST_DAY = dt.date(2026, 11, 3)
BACKFILL_DAYS = [dt.date(2026, 11, 4), dt.date(2026, 11, 5)]

INTEGRITY = """
import datetime as dt, json, sys, time
t0 = time.monotonic()
from airflow.dag_processing.dagbag import DagBag
from airflow.models.taskinstance import TaskInstance
bag = DagBag(dag_folder=sys.argv[1])
dags = {}


def waits(task):  # seconds Airflow waits before each retry of task (its jitter included)
    ti, ended = TaskInstance(task=task, run_id="r", dag_version_id=None), dt.datetime(2026, 1, 1)
    ti.end_date = ended
    out = []
    for ti.try_number in range(1, task.retries + 1):
        out.append((ti.next_retry_datetime() - ended).total_seconds())
    return out


for dag_id, dag in bag.dags.items():
    dags[dag_id] = {
        "owner": dag.owner, "tags": sorted(dag.tags), "doc": bool(dag.doc_md),
        "no_retries": sorted(t.task_id for t in dag.tasks if not t.retries),
        "undocumented": sorted(t.task_id for t in dag.tasks if not t.doc_md),
        "waits": {t.task_id: waits(t) for t in dag.tasks if t.retries},
    }
print(json.dumps({
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "seconds": {s.file: s.duration.total_seconds() for s in bag.dagbag_stats},
    "dags": dags,
    "heavy": sorted({n.split(".")[0] for n in sys.modules} & {"pyspark", "delta", "great_expectations"}),
}))
"""


def test_down_stops_a_component_group_that_outlives_its_leader(tmp_path: Path) -> None:
    """A scheduler killed -9 (then restarted) leaves its LocalExecutor workers in the
    component's process group, where they shrug off SIGTERM: ``down`` still stops them."""
    stack = LocalAirflow(load_settings({}, home=tmp_path / "home"))
    stack.home.mkdir(parents=True)
    leader = subprocess.Popen(
        ["/bin/sh", "-c", "(trap '' TERM; exec sleep 300) & exec sleep 300"],
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while len(group_members(leader.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(group_members(leader.pid)) == 2  # the leader and the worker that ignores SIGTERM
    stack.pid_file.write_text(json.dumps({"scheduler": leader.pid}))
    assert stack.down(timeout=2)
    leader.wait(timeout=5)
    assert group_members(leader.pid) == [] and not group_alive(leader.pid)
    assert not stack.pid_file.exists()


def test_airflow_cli_before_up_says_to_run_up(tmp_path: Path) -> None:
    """`streamshift airflow cli` on a home whose stack was never set up: refused before Airflow
    starts, naming the command that sets it up (Airflow's own error says `airflow db migrate`),
    and an empty database file left by an earlier airflow command changes nothing."""
    home = tmp_path / "home"
    for _ in range(2):
        done = run_cli(home, "airflow", "cli", "backfill", "create", "--dag-id", "eod_trades")
        assert done.returncode == 2, done.stderr[-2000:]
        assert "no metadata database yet" in done.stderr
        assert "run `streamshift airflow up` first" in done.stderr
        (home / "airflow").mkdir(parents=True, exist_ok=True)
        (home / "airflow" / "airflow.db").touch()


# A transaction as ``airflow backfill create`` makes one per run (``begin_nested``, whose
# SAVEPOINT begins SQLite's transaction): it reads, another process (the scheduler) commits,
# then it writes. Airflow's engine set-up for SQLite (WAL) is reproduced; argv[2] says whether
# the process imports the stack's connect arguments as Airflow's components do.
READ_THEN_WRITE = """
import importlib, sqlite3, sys, threading, time
from sqlalchemy import create_engine, event

path, stacks = sys.argv[1], sys.argv[2] == "stack"
args = importlib.import_module("streamshift.local.airflow_db").CONNECT_ARGS if stacks else {}
engine = create_engine(f"sqlite:///{path}", connect_args={**args, "timeout": 60})
event.listen(engine, "connect", lambda c, r: c.execute("PRAGMA journal_mode=WAL"))
with engine.begin() as c:
    c.exec_driver_sql("CREATE TABLE t (who TEXT)")

go, order = threading.Event(), []
def scheduler():
    go.wait()
    other = sqlite3.connect(path, timeout=60)
    other.execute("INSERT INTO t VALUES ('scheduler')")
    other.commit()
    order.append("scheduler")
thread = threading.Thread(target=scheduler)
thread.start()
try:
    with engine.begin() as c:
        c.exec_driver_sql("SELECT count(*) FROM t").scalar()  # outside SQLite's transaction
        with c.begin_nested():
            c.exec_driver_sql("SELECT count(*) FROM t").scalar()
            go.set()
            time.sleep(1)  # the scheduler commits now, unless it must wait for this transaction
            c.exec_driver_sql("INSERT INTO t VALUES ('cli')")
            order.append("cli")
    outcome = "committed"
except Exception as error:
    outcome = f"failed: {error}"
thread.join()
with engine.connect() as c:
    rows = [r[0] for r in c.exec_driver_sql("SELECT who FROM t ORDER BY rowid")]
print(outcome, order, rows)
"""


@pytest.mark.airflow
@pytest.mark.parametrize("connect", ["airflow", "stack"])
def test_a_transaction_from_a_savepoint_waits_for_the_lock_instead_of_failing(
    tmp_path: Path, connect: str
) -> None:
    """A transaction begun by a SAVEPOINT that reads, meets a commit, then writes: on
    Airflow's own SQLite set-up it fails at once with "database is locked" (what failed the
    backfill under load); with the local stack's connect arguments it holds the write lock from
    the SAVEPOINT on, so the other writer waits for it and both commit."""
    done = subprocess.run(
        [sys.executable, "-c", READ_THEN_WRITE, str(tmp_path / "airflow.db"), connect],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    if connect == "stack":
        assert done.stdout.split() == ["committed", *["['cli',", "'scheduler']"] * 2]
    else:
        assert done.stdout.startswith("failed: (sqlite3.OperationalError) database is locked")
        assert done.stdout.rstrip().endswith("['scheduler'] ['scheduler']")  # nothing of the cli


@pytest.mark.airflow
def test_dag_integrity(tmp_path: Path) -> None:
    settings = load_settings({}, home=tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", INTEGRITY, str(REPO_ROOT / "dags")],
        env=LocalAirflow(settings).env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["errors"] == {}
    assert report["heavy"] == []
    assert all(seconds < 2 for seconds in report["seconds"].values()), report["seconds"]
    flows = flow_names()
    assert {"trades", "telemetry"} <= set(flows)
    # One EOD, one late-data and one maintenance DAG per flow, from the same factories.
    assert set(report["dags"]) == {
        *(f"eod_{f}" for f in flows),
        *(f"late_data_{f}" for f in flows),
        *(f"maintenance_{f}" for f in flows),
        "stream_supervisor",
        "streamshift_promote",
        "streamshift_redrive",
        "streamshift_evolve",
        "streamshift_switch",
    }
    # Retried: every task but those whose failure a retry cannot change (a failed data-quality
    # expectation, a promotion refused by the gate; a promotion is one deliberate act).
    no_retries = {
        **{f"eod_{f}": ["data_quality"] for f in flows},
        "streamshift_promote": ["approve", "check_gate", "record_promotion"],
        "streamshift_evolve": ["approve", "evolve", "plan", "which_flow"],
        "streamshift_switch": ["approve", "switch", "which_version"],
    }
    for dag_id, dag in report["dags"].items():
        assert dag["owner"] == "streamshift", dag_id
        assert "streamshift" in dag["tags"], dag_id
        assert dag["doc"] and dag["undocumented"] == [], dag_id
        assert dag["no_retries"] == no_retries.get(dag_id, []), dag_id
        # Retries back off: long enough for a restarted engine to answer, each longer than
        # the one before.
        for task, waits in dag["waits"].items():
            assert waits[0] >= 10 and waits == sorted(set(waits)), (dag_id, task, waits)


@pytest.mark.airflow
@pytest.mark.slow
def test_triggers_at_once_each_get_their_run_and_audit_entry(airflow_stack) -> None:  # type: ignore[no-untyped-def]
    """Twelve REST triggers at once, as a script and the UI's users may send them: each gets its
    run and its audit-log entry. (The audit log's commit used to wait for SQLite's write lock
    on the API server's event loop, while the lock's holder needed that loop to commit: every
    request of the server, the tasks' heartbeats too, hung for the busy timeout and the
    triggers failed.)"""
    settings, client = airflow_stack
    dag_id = "maintenance_telemetry"  # paused throughout: its runs never start
    client.wait_for_dag(dag_id)
    run_ids = [f"at-once-{i:02d}" for i in range(12)]
    answers: dict[str, object] = {}

    def trigger(run_id: str) -> None:
        try:
            answers[run_id] = client.trigger(dag_id, {}, run_id=run_id)["dag_run_id"]
        except Exception as exc:  # noqa: BLE001 - recorded and asserted below
            answers[run_id] = exc

    threads = [threading.Thread(target=trigger, args=(r,)) for r in run_ids]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert answers == {r: r for r in run_ids}
        with sqlite3.connect(f"file:{metadata_db(settings)}?mode=ro", uri=True) as db:
            audited = db.execute(
                "SELECT run_id FROM log WHERE event = 'trigger_dag_run' AND dag_id = ?", (dag_id,)
            ).fetchall()
        assert sorted(r for (r,) in audited) == run_ids
    finally:
        for run_id in run_ids:
            if answers.get(run_id) == run_id:
                client.delete_run(dag_id, run_id)


@pytest.mark.slow
def test_rest_trigger_bad_params_and_a_backfill_side_by_side(spark, airflow_stack, request) -> None:  # type: ignore[no-untyped-def]
    """A run triggered over the REST API as the UI does, and a two-date backfill created
    with ``streamshift airflow cli`` while it runs: their Spark jobs share the pool. The
    day's file run again changes no table. Then a replacement whose load dies after its k-th
    commit, and the scheduler killed -9 before the retry: the scheduler restarts, Airflow
    retries the load, and the day is what the replacement says."""
    settings, client = airflow_stack
    files = land_day(settings, REST_DAY)
    # An implausible price: expectation price_plausible (policy warn) lets the run succeed
    # with the warning in its summary.
    edit_first_new_trade(files.eod, price="2500000.00")
    land_external(settings, files, REST_DAY)
    landed = {day: land_day(settings, day) for day in BACKFILL_DAYS}
    client.wait_for_dag("eod_trades")
    client.unpause("eod_trades")
    # Paused again afterwards: the stack's later tests run eod_trades with dag.test(), and an
    # unpaused DAG's runs are also the scheduler's, which re-queues a task dag.test() is running.
    request.addfinalizer(lambda: client.pause("eod_trades"))

    # Refused by the params' JSON schema: no run is created.
    for conf, named in (
        ({"business_date": "2026-13-45"}, "business_date"),
        ({"mode": "append"}, "mode"),
        ({"file": "../../etc/passwd"}, "file"),
        ({"file": "/etc/passwd"}, "file"),
    ):
        with pytest.raises(AirflowApiError) as refused:
            client.trigger("eod_trades", conf)
        assert refused.value.status == 400
        assert f"Invalid input for param {named}" in refused.value.detail

    # A symlink out of the landing folder passes the schema; the first task refuses it, at once.
    link = catalog.landing_dir(settings, "trades") / "outside.csv"
    link.symlink_to(settings.home / "elsewhere.csv")
    client.trigger(
        "eod_trades", {"business_date": str(REST_DAY), "file": "outside.csv"}, run_id="symlink-out"
    )
    run = client.wait_for_run("eod_trades", "symlink-out", timeout=300, progress=False)
    states = client.task_states("eod_trades", "symlink-out")
    assert run["state"] == "failed" and states["resolve_inputs"] == "failed"
    assert states["load_eod_file"] == "upstream_failed"  # no Spark job started
    refused = "/api/v2/assets/events?source_dag_id=eod_trades&source_run_id=symlink-out"
    assert client.get(refused)["asset_events"] == []  # nothing published
    # A misspelt param passes Airflow (it keeps conf keys that name no param); left alone, the
    # run would load its own logical date's file. The first task refuses it, naming the params.
    client.trigger("eod_trades", {"busines_date": str(REST_DAY)}, run_id="misspelt")
    run = client.wait_for_run("eod_trades", "misspelt", timeout=300, progress=False)
    states = client.task_states("eod_trades", "misspelt")
    assert run["state"] == "failed" and states["resolve_inputs"] == "failed"
    assert states["load_eod_file"] == "upstream_failed"
    logged = client.task_log("eod_trades", "misspelt", "resolve_inputs")
    assert "unknown param 'busines_date': eod_trades takes business_date, mode, file" in logged

    client.trigger("eod_trades", {"business_date": str(REST_DAY)}, run_id="rest-day")
    # As a user backfills: `streamshift airflow cli backfill create ...` on the running stack,
    # once, while another writer commits every 10 ms. The local stack's SQLite lets one writer
    # in at a time; Airflow's own transaction for each backfill run reads, then writes, and
    # failed at once with "database is locked" whenever a commit came between (the scheduler's,
    # under load). It now takes the write lock first and waits its turn (``airflow_db``).
    with busy_writer(metadata_db(settings)) as commits:
        done = run_cli(
            settings.home,
            "airflow",
            "cli",
            "backfill",
            "create",
            "--dag-id",
            "eod_trades",
            "--from-date",
            str(BACKFILL_DAYS[0]),
            "--to-date",
            f"{BACKFILL_DAYS[-1]}T23:59:59+00:00",
            timeout=300,
            airflow_port=str(settings.airflow_port),
            spark_master=settings.spark_master,
            spark_shuffle_partitions=str(settings.spark_shuffle_partitions),
        )
    assert commits[0] > 50  # the other writer committed all along
    assert done.returncode == 0, done.stderr[-3000:]

    run = client.wait_for_run("eod_trades", "rest-day", timeout=1200)
    states = client.task_states("eod_trades", "rest-day")
    assert run["state"] == "success", states
    assert states["reconcile"] == "success"  # against the external (clearing) file
    summary = client.returned("eod_trades", "rest-day", "publish_summary")
    assert summary["business_date"] == str(REST_DAY) and summary["reconciliations"] == 1
    assert summary["breaks"] > 0  # the generated clearing file carries deliberate breaks
    # The day is published as an event of the flow's asset, carrying the summary, for the
    # DAGs downstream that run on it.
    events = client.get("/api/v2/assets/events?source_dag_id=eod_trades&source_run_id=rest-day")[
        "asset_events"
    ]
    assert [(e["name"], e["uri"], e["source_task_id"]) for e in events] == [
        ("trades_eod_published", "x-streamshift://trades/eod-published", "publish_summary")
    ]
    assert events[0]["extra"] == summary
    assert states["data_quality"] == "success"
    warned = r"trades.raw price_plausible: observed 1 of \d+ unexpected \(2500000"
    assert [w for w in summary["quality_warnings"] if re.match(warned, w)], summary
    logged = client.task_log("eod_trades", "rest-day", "publish_summary")
    assert re.search(rf"SUMMARY trades {REST_DAY} .*; WARNING {warned}", logged), logged[-2000:]
    checks = {
        (r["suite"], r["expectation"]): r for r in quality_results(settings, "trades", REST_DAY)
    }
    assert not checks[("trades.raw", "price_plausible")]["success"]
    assert checks[("trades.raw", "price_plausible")]["policy"] == "warn"
    assert all(r["success"] for r in checks.values() if r["policy"] == "fail")
    assert states["correct_stream_layer"] == "skipped"  # stage batch: no stream layer to correct
    report = json.loads((settings.reports / "trades" / str(REST_DAY) / "report.json").read_text())
    assert report["stage"] == "batch" and report["business_date"] == str(REST_DAY)
    loaded = positions(spark, settings.warehouse, REST_DAY)
    assert loaded and loaded == expected_positions(spark, files.eod)

    deadline = time.monotonic() + 1500
    while time.monotonic() < deadline:
        runs = client.runs("eod_trades", "backfill")
        if len(runs) == len(BACKFILL_DAYS) and all(
            r["state"] in ("success", "failed") for r in runs
        ):
            break
        time.sleep(2)
    assert sorted(r["logical_date"][:10] for r in runs) == [str(d) for d in BACKFILL_DAYS]
    assert [r["state"] for r in runs] == ["success"] * len(BACKFILL_DAYS), runs
    for day, day_files in landed.items():
        loaded = positions(spark, settings.warehouse, day)
        assert loaded and loaded == expected_positions(spark, day_files.eod)

    # The same day's file run again changes no table of the layer.
    tables = LayerTables(settings.warehouse, FLOW, "batch")
    before = [delta_log_version(spark, t) for t in (tables.view("positions"), tables.current)]
    client.trigger("eod_trades", {"business_date": str(REST_DAY)}, run_id="rest-day-again")
    run = client.wait_for_run("eod_trades", "rest-day-again", timeout=1200)
    assert run["state"] == "success", client.task_states("eod_trades", "rest-day-again")
    after = [delta_log_version(spark, t) for t in (tables.view("positions"), tables.current)]
    assert after == before

    # A task of a path the stage does not take, cleared by hand, stays skipped, as a branch's
    # would: resolve_inputs recorded what it skipped. (Run, it would correct a stream layer
    # that stage batch does not have.)
    client.clear("eod_trades", "rest-day-again", "correct_stream_layer")
    run = client.wait_for_run("eod_trades", "rest-day-again", timeout=300, progress=False)
    states = client.task_states("eod_trades", "rest-day-again")
    assert run["state"] == "success" and states["correct_stream_layer"] == "skipped", states
    assert [delta_log_version(spark, t) for t in (tables.view("positions"), tables.current)] == (
        before
    )

    # A replacement of REST_DAY (a quarter of its trades gone: their cancels come from the
    # tables, so the job pins its input) whose load dies right after its k-th Delta commit;
    # while it waits for its retry the scheduler is killed -9 (as Airflow's own unhandled
    # errors end it). The stack restarts the scheduler, which retries the load, and the day
    # ends as one clean replacement leaves it.
    eod_rows = read_rows(files.eod, FLOW)
    kept = [r for i, r in enumerate(eod_rows) if i % 4 != 1]
    replacement = files.eod.with_name("replacement.csv")
    with open(replacement, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FLOW.columns)
        writer.writeheader()
        writer.writerows(kept)
    k = random.choice([1, 2, 3])
    armed = arm_kill_after_commits(settings, k)
    conf = {"business_date": str(REST_DAY), "file": f"{REST_DAY}/replacement.csv"}
    client.trigger("eod_trades", {**conf, "mode": "replace"}, run_id="restarted")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        states = client.task_states("eod_trades", "restarted")
        if states.get("load_eod_file") == "up_for_retry" or client.run("eod_trades", "restarted")[
            "state"
        ] in ("success", "failed"):
            break
        time.sleep(1)
    assert states.get("load_eod_file") == "up_for_retry", (k, states)
    assert not armed.exists()  # the fault fired, once
    stack = LocalAirflow(settings)
    loop = stack.status().running["scheduler"]
    assert loop is not None
    killed = _scheduler_process(loop)
    os.kill(killed, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _scheduler_process(loop) in (None, killed):
        time.sleep(1)
    assert _scheduler_process(loop) not in (None, killed)
    log = (settings.airflow_home / "logs" / "scheduler.log").read_text(errors="replace")
    assert "[streamshift] airflow scheduler exited with code 137; restarting it" in log
    run = client.wait_for_run("eod_trades", "restarted", timeout=1200)
    states = client.task_states("eod_trades", "restarted")
    assert run["state"] == "success", states
    load = client.get("/api/v2/dags/eod_trades/dagRuns/restarted/taskInstances/load_eod_file")
    assert load["try_number"] >= 2, load  # the killed attempt, then Airflow's retry
    loaded = positions(spark, settings.warehouse, REST_DAY)
    assert loaded == expected_positions(spark, replacement), f"killed after commit {k}"
    current = rows(LayerTables(settings.warehouse, FLOW, "batch").current)
    live = {r["trade_id"] for r in current if str(r["business_date"]) == str(REST_DAY)}
    live -= {r["trade_id"] for r in current if r["is_deleted"]}
    assert live == {r["trade_id"] for r in kept}, f"killed after commit {k}"


def _scheduler_process(loop: int) -> int | None:
    """The scheduler process the stack's restart loop (``loop``) runs now."""
    try:
        children = Path(f"/proc/{loop}/task/{loop}/children").read_text().split()
        for child in children:
            if b"scheduler" in Path(f"/proc/{child}/cmdline").read_bytes():
                return int(child)
    except OSError:
        pass
    return None  # restarting (the loop's sleep), or gone


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_evolve_run_with_nothing_to_change_passes_its_approval(airflow_stack) -> None:  # type: ignore[no-untyped-def]
    """``streamshift_evolve`` on the shared stack, the flow as its tables were written: the
    plan (on the engine) finds no change, the approval waits for nobody, evolve has nothing to
    do; a real run, task by task (the plan and evolve jobs
    themselves are tests/test_flow_changes.py's)."""
    _, client = airflow_stack
    dag_id = "streamshift_evolve"
    client.wait_for_dag(dag_id)
    run_id = "evolve-nothing"
    client.trigger(dag_id, {"flow": "telemetry"}, run_id=run_id)
    run = client.wait_for_run(dag_id, run_id, timeout=300, progress=False)
    assert run["state"] == "success", run
    states = {t["task_id"]: t["state"] for t in client.task_instances(dag_id, run_id)}
    assert states == dict.fromkeys(["which_flow", "plan", "approve", "evolve"], "success")
