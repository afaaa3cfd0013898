"""Running streamshift's DAGs in a real Airflow 3 from tests: ``dag.test()`` in a subprocess
with the local stack's environment, and comparisons with direct loads."""

from __future__ import annotations

import csv
import datetime as dt
import fcntl
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flows.trades import FLOW
from flows.trades.generate import generate_day
from streamshift.engine.write.target import read
from streamshift.local.airflow import LocalAirflow, metadata_db, migrated_stamp
from streamshift.spec import catalog
from streamshift.spec.catalog import LayerTables
from streamshift.spec.dayfiles import DayFiles
from streamshift.spec.settings import REPO_ROOT, Settings, load_settings

DAG_TEST = """
import json, sys, pendulum, importlib.util
spec = importlib.util.spec_from_file_location("streamshift_dags", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
dag = getattr(module, sys.argv[2])
run = dag.test(logical_date=pendulum.parse(sys.argv[3]), run_conf=json.loads(sys.argv[4]))
tasks = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
print("RESULT " + json.dumps({"state": str(run.state), "tasks": tasks}))
"""


def migrated_airflow(settings: Settings) -> LocalAirflow:
    """The local Airflow of ``settings`` with its metadata database in place: a copy of one the
    whole run migrates once (under the suite's template folder, made by the first worker to
    ask), so each Airflow home of the suite costs a file copy, not ``airflow db migrate``."""
    template_home = Path(os.environ["TESTS_TABLE_TEMPLATES"]) / "airflow"
    template = load_settings({}, home=template_home)
    template_home.mkdir(parents=True, exist_ok=True)
    with (template_home / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        LocalAirflow(template).migrate()  # once per run: later calls find it migrated
    db = metadata_db(settings)
    if not db.exists():
        db.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(metadata_db(template), db)
        shutil.copyfile(migrated_stamp(template), migrated_stamp(settings))
    airflow = LocalAirflow(settings)
    airflow.migrate()  # airflow.cfg for this home; the database is migrated already
    return airflow


def dag_test(
    settings: Settings, dag_id: str, logical_date: str, conf: dict[str, Any]
) -> dict[str, Any]:
    """``dag.test()`` of a DAG in a fresh interpreter with the local Airflow's environment."""
    env = LocalAirflow(settings).env()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            DAG_TEST,
            str(REPO_ROOT / "dags" / "streamshift_dags.py"),
            dag_id,
            logical_date,
            json.dumps(conf),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"dag.test printed no result (exit {done.returncode}):\n{done.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    result["output"] = done.stdout + done.stderr
    return result


def land_day(settings: Settings, day: dt.date, trades: int = 200) -> DayFiles:
    """Generate a day straight into the landing folder, under the landing convention's names."""
    folder = catalog.landing_dir(settings, "trades") / day.isoformat()
    files = generate_day(day, trades, folder, seed=day.toordinal(), progress=False)
    assert files.eod.name == f"trades_eod_{day}.csv"  # the DAG's default file
    return files


def edit_first_new_trade(path: Path, **values: str) -> str:
    """Set ``values`` on the file's first NEW trade; returns its trade id."""
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        fields, rows = reader.fieldnames or [], list(reader)
    row = next(r for r in rows if r["event_type"] == "NEW")
    row.update(values)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return row["trade_id"]


def kill_file(settings: Settings) -> Path:
    """Where the stack's processes look for an armed fault (``STREAMSHIFT_KILL_AFTER_COMMITS_FILE``,
    set for them by the ``airflow_stack`` fixture)."""
    return settings.home / "kill-after-commits"


def arm_kill_after_commits(settings: Settings, k: int) -> Path:
    """The next Airflow task of the stack to reach its ``k``-th Delta commit exits there (as a
    ``kill -9`` of the task would leave it); its retry finds the file gone and runs on."""
    path = kill_file(settings)
    path.write_text(f"{k}\n")
    return path


def land_external(settings: Settings, files: DayFiles, day: dt.date) -> Path:
    target = catalog.external_file(settings, "trades", day.isoformat())
    shutil.copy(files.external, target)
    return target


def positions(spark, warehouse: Path, day: dt.date) -> list[tuple[Any, ...]]:  # type: ignore[no-untyped-def]
    tables = LayerTables(warehouse, FLOW, "batch")
    df = read(spark, tables.view("positions")).where(f"business_date = DATE'{day}'")
    return sorted((tuple(r) for r in df.collect()), key=repr)


def expected_positions(spark, *files: Path) -> list[tuple[Any, ...]]:  # type: ignore[no-untyped-def]
    """The positions the files' rows must give, computed by the flow's pure transforms."""
    from streamshift.engine.write.target import load_reference
    from streamshift.store.produce import read_rows
    from tests.stream_support import oracle

    rows = [row for f in files for row in read_rows(f, FLOW)]
    return sorted(oracle(spark, rows, load_reference(spark, FLOW))["positions"], key=repr)


@contextmanager
def busy_writer(database: Path, every: float = 0.01) -> Iterator[list[int]]:
    """Another writer of the stack's SQLite database committing every ``every`` seconds (as a
    busy scheduler does, only more often); yields the list its commit count is kept in."""
    stop, commits = threading.Event(), [0]

    def write() -> None:
        connection = sqlite3.connect(database, timeout=60)
        connection.execute("CREATE TABLE IF NOT EXISTS streamshift_test_writes (at REAL)")
        connection.commit()
        while not stop.is_set():
            connection.execute("INSERT INTO streamshift_test_writes VALUES (?)", (time.time(),))
            connection.commit()
            commits[0] += 1
            time.sleep(every)
        connection.execute("DROP TABLE streamshift_test_writes")
        connection.commit()
        connection.close()

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        yield commits
    finally:
        stop.set()
        thread.join(timeout=120)


def asset_events(settings: Settings, asset: str) -> list[dict[str, Any]]:
    """The ``extra`` of every event of ``asset`` in the stack's metadata database, oldest first."""
    connection = sqlite3.connect(metadata_db(settings), timeout=60)
    try:
        rows = connection.execute(
            "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE a.name = ? ORDER BY e.id",
            (asset,),
        ).fetchall()
    finally:
        connection.close()
    return [json.loads(extra) for (extra,) in rows]
