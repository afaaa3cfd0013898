"""What the DAGs' Python tasks decide, tested as plain functions (no Airflow, no Spark)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path

import pytest

from streamshift.airflow import tasks as T
from streamshift.airflow.supervise import health
from streamshift.spec import catalog
from streamshift.spec.requests import (
    CloseRequest,
    EodRequest,
    JobRequest,
    MaintainRequest,
    PromoteRequest,
    QualityRequest,
    ReconcileRequest,
    RedriveRequest,
    ReplayRequest,
)
from streamshift.spec.settings import load_settings
from streamshift.store.quality import QualityError

DAY = dt.date(2026, 11, 20)


@pytest.fixture
def settings(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = load_settings({}, home=tmp_path / "home")
    day = catalog.landing_dir(s, "trades") / DAY.isoformat()
    day.mkdir(parents=True)
    (day / f"trades_eod_{DAY}.csv").write_text("trade_id\n")
    return s


def test_files_outside_the_landing_folder_are_rejected(settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    landing = catalog.landing_dir(settings, "trades")
    ok = T.resolve_in_landing(landing, f"{DAY}/trades_eod_{DAY}.csv")
    assert ok == (landing / str(DAY) / f"trades_eod_{DAY}.csv").resolve()
    outside = tmp_path / "elsewhere.csv"
    outside.write_text("x\n")
    (landing / "link.csv").symlink_to(outside)
    for bad, said in (
        ("/etc/passwd", "relative"),
        ("../x.csv", "'..'"),
        (f"{DAY}/../../x.csv", "'..'"),
        ("link.csv", "outside the landing folder"),
    ):
        with pytest.raises(T.InputError, match=said):
            T.resolve_in_landing(landing, bad)


def test_the_file_pattern_rejects_what_resolve_rejects() -> None:
    import re

    pattern = re.compile(T.FILE_PATTERN)
    assert pattern.match("2026-11-20/trades_eod_2026-11-20.csv")
    assert pattern.match("a..b.csv")  # dots inside a name are fine
    for bad in ("/etc/passwd", "../x.csv", "2026-11-20/../../x.csv", "..", "a b.csv"):
        assert not pattern.match(bad), bad


def test_inputs_follow_the_stage(settings) -> None:  # type: ignore[no-untyped-def]
    batch = T.resolve_inputs(settings, "trades", {}, DAY, "batch")
    assert batch["business_date"] == "2026-11-20" and batch["mode"] == "delta"
    assert batch["path"] == "load_eod_file" and batch["reconcile"] is False
    run_id = batch["quality_run"]
    load = JobRequest.from_json(batch["load_request"])
    assert load == EodRequest(
        "trades", DAY, Path(batch["file"]), "batch", replace=False, quality_run=run_id
    )
    assert batch["reconcile_request"] is None

    shadow = T.resolve_inputs(settings, "trades", {"mode": "replace"}, DAY, "shadow")
    assert shadow["path"] == "load_eod_file" and shadow["reconcile"] is True
    parity = JobRequest.from_json(shadow["reconcile_request"])
    assert isinstance(parity, ReconcileRequest) and parity.parity and not parity.correct
    loaded = JobRequest.from_json(shadow["load_request"])
    assert isinstance(loaded, EodRequest) and loaded.replace and loaded.layer == "batch"
    assert shadow["quality_run"] != run_id  # one quality run per DAG run

    external = catalog.external_file(settings, "trades", "2026-11-20")
    external.write_text("business_date,book,instrument\n")
    stream = T.resolve_inputs(settings, "trades", {"business_date": "2026-11-20"}, DAY, "stream")
    assert stream["path"] == "correct_stream_layer"
    assert JobRequest.from_json(stream["correct_request"]) == ReconcileRequest(
        "trades",
        DAY,
        against=external,
        eod_file=Path(stream["file"]),
        parity=False,
        correct=True,
        replace=False,
        quality_run=stream["quality_run"],
    )

    with pytest.raises(T.InputError, match="not a date"):
        T.resolve_inputs(settings, "trades", {"business_date": "2026-13-45"}, DAY, "batch")
    with pytest.raises(T.InputError, match="mode 'append'"):
        T.resolve_inputs(settings, "trades", {"mode": "append"}, DAY, "batch")
    # A misspelt param would leave business_date at the run's own date: refused, against
    # the params the DAG declares (its first task's check).
    from streamshift.airflow.dags import eod_dag

    dag = eod_dag("trades")
    with pytest.raises(T.InputError) as misspelt:
        T.refuse_unknown_params(dag.dag_id, {"busines_date": "2026-11-19"}, dag.params.keys())
    assert str(misspelt.value) == (
        "unknown param 'busines_date': eod_trades takes business_date, mode, file"
    )


def test_summary_reads_the_days_report(settings) -> None:  # type: ignore[no-untyped-def]
    inputs = T.resolve_inputs(settings, "trades", {}, DAY, "shadow")
    report = settings.reports / "trades" / "2026-11-20"
    report.mkdir(parents=True)
    (report / "report.json").write_text(
        json.dumps(
            {
                "stage": "shadow",
                "reconciliations": [{"recon": "parity"}],
                "breaks_by_kind": {"missing_left": 1, "missing_right": 0, "value_mismatch": 2},
            }
        )
    )
    result, line = T.summary(settings, inputs)
    assert result["breaks"] == 3 and result["verdict"] == "3 breaks"
    assert line.startswith("trades 2026-11-20 (stage shadow, delta file trades_eod_2026-11-20.csv)")
    assert result["cause"] == "eod"
    # Published again after late events: no file, no mode.
    late, line = T.summary(settings, {"flow": "trades", "business_date": "2026-11-20"})
    assert late["cause"] == "late data" and late["file"] is None and late["mode"] is None
    assert late["breaks"] == 3 and late["business_date"] == "2026-11-20"
    assert line.startswith("trades 2026-11-20 (stage shadow, late data): 3 breaks")


def test_stream_health_from_the_heartbeat() -> None:
    now = dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC)
    fresh = (now - dt.timedelta(seconds=10)).isoformat()
    old = (now - dt.timedelta(seconds=900)).isoformat()
    me = os.getpid()
    assert health({}, 300, now)[0] == "never_started"
    assert health({"pid": me, "state": "running", "last_seen": fresh}, 300, now)[0] == "healthy"
    assert health({"pid": me, "state": "running", "last_seen": old}, 300, now)[0] == "stalled"
    assert health({"pid": me, "state": "failed", "last_seen": fresh}, 300, now)[0] == "dead"
    gone = 2**22 + 12345  # above pid_max: no such process
    assert health({"pid": gone, "state": "running", "last_seen": fresh}, 300, now)[0] == "dead"


def test_status_shows_the_batch_a_running_job_is_working_on() -> None:
    from streamshift.store.heartbeat import StreamStatus

    seen = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=42)).isoformat()
    beat = {
        "pid": os.getpid(),
        "state": "running",
        "last_seen": seen,
        "last_batch_id": 6,
        "last_batch_at": seen,
        "working_on": {"batch_id": 7, "step_done": "validate"},
    }
    text = StreamStatus("trades", "stream", True, beat).describe()
    assert "working on batch 7 (validate done, 42s ago)" in text, text
    # Between batches (the listener cleared it), or stopped: nothing about a batch in flight.
    assert (
        "working on"
        not in StreamStatus("trades", "stream", True, beat | {"working_on": None}).describe()
    )
    assert "working on" not in StreamStatus("trades", "stream", False, beat).describe()


def test_a_failing_job_leaves_its_one_line_error_for_the_orchestrator(tmp_path: Path) -> None:
    from tests.cli_support import run_cli

    error_file = tmp_path / "error.txt"
    done = run_cli(
        tmp_path,
        "eod",
        "--flow",
        "trades",
        "--date",
        "2026-11-20",
        "--file",
        str(tmp_path / "missing.csv"),
        error_file=str(error_file),
    )
    assert done.returncode == 2
    said, mark = error_file.read_text().strip().split("\n")
    assert said.startswith("EOD file ") and said.endswith("pass the path of an existing CSV file")
    assert said in done.stderr
    assert mark == "final"  # a retry cannot fix a missing file


def test_every_job_request_survives_its_json_with_its_types() -> None:
    start = dt.datetime(2026, 11, 20, 8, 30, tzinfo=dt.UTC)
    requests = [
        EodRequest("trades", DAY, Path("/landing/f.csv"), "batch", True, quality_run="q1"),
        ReconcileRequest("trades", DAY, against=Path("/x.csv"), parity=False, correct=True),
        CloseRequest("trades", DAY, force=True, reason="desk closed"),
        PromoteRequest("trades", "shadow", by="ops"),
        RedriveRequest("trades", rule="book_known", business_date=DAY),
        ReplayRequest("trades", start, start + dt.timedelta(hours=2), "stream", "t1"),
        QualityRequest("trades", DAY, "stream", Path("/f.csv"), ("current", "raw")),
        MaintainRequest("trades"),
    ]
    for request in requests:
        back = JobRequest.from_json(request.to_json())
        assert back == request and type(back) is type(request)
    replayed = JobRequest.from_json(requests[5].to_json())
    assert isinstance(replayed, ReplayRequest) and replayed.start.tzinfo is not None
    assert [r.needs_jvm for r in requests] == [False] * 7 + [True]  # upkeep: its own JVM


def test_a_request_on_the_command_line_is_checked_like_its_command(tmp_path: Path) -> None:
    from tests.cli_support import run_cli

    bad = run_cli(tmp_path, "request", '{"kind": "vacuum", "flow": "trades"}')
    assert bad.returncode == 2 and "not a job request" in bad.stderr
    assert "streamshift request --help" in bad.stderr
    # A misspelt field is refused, never ignored (the load would run with its default).
    load = json.loads(EodRequest("trades", DAY, tmp_path / "f.csv").to_json())
    misspelt = run_cli(tmp_path, "request", json.dumps({**load, "replce": True}))
    assert misspelt.returncode == 2, misspelt.stderr
    assert "the eod request has no field replce (its fields: flow, business_date" in misspelt.stderr
    for broken, said in (
        ({k: v for k, v in load.items() if k != "file"}, "the eod request needs file"),
        ({**load, "business_date": "2026-11-31"}, "business_date '2026-11-31' is not in ISO form"),
        ([load], "a JSON object is needed, not list"),
    ):
        with pytest.raises((TypeError, ValueError), match=re.escape(said)):
            JobRequest.from_json(json.dumps(broken))
    nothing = QualityRequest("trades", DAY, "batch")  # an empty warehouse: refused at once
    refused = run_cli(tmp_path, "request", nothing.to_json())
    assert refused.returncode == 2, refused.stderr
    assert "holds no" in refused.stderr or "load the day first" in refused.stderr
    assert "starting Spark" not in refused.stderr and "Traceback" not in refused.stderr


def test_an_engine_task_fails_at_once_when_its_job_says_a_retry_cannot_help(
    tmp_path: Path,
) -> None:
    """The DAGs' Spark operator, running a real job on the suite's engine that refuses its
    input: the task fails with the job's one line and no retry (AirflowFailException). With
    the engine down it fails at once too, saying what to start — it never starts a local
    Spark in the worker instead. Each runs in a fresh process with no JVM, as a task does."""
    import subprocess
    import sys

    from streamshift.local.airflow import connections
    from streamshift.store.processes import free_port
    from tests.cli_support import cli_env, suite_engine

    if not suite_engine():
        pytest.skip("the suite runs without its engine (TESTS_ENGINE=off)")
    missing = tmp_path / "missing.csv"
    request = EodRequest("trades", dt.date(2026, 11, 20), missing).to_json()
    script = (
        "import sys\n"
        "from airflow.sdk.exceptions import AirflowFailException\n"
        "from streamshift.airflow.dags import engine_task\n"
        "try:\n"
        "    engine_task('load_eod_file', sys.argv[1], 'a refused load').execute({'params': {}})\n"
        "except AirflowFailException as exc:\n"
        "    print('FAILED', exc)\n"
    )

    def task_with(engine: str) -> str:
        env = cli_env(tmp_path, engine=engine)
        env.update(connections(load_settings({}, home=tmp_path, engine=engine)))
        done = subprocess.run(
            [sys.executable, "-c", script, request],
            env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        said = [line for line in done.stdout.splitlines() if line.startswith("FAILED ")]
        assert said, (done.stdout + done.stderr)[-3000:]
        return said[0].removeprefix("FAILED ")

    assert task_with(suite_engine()).startswith(
        f"load_eod_file failed: EOD file {missing} not found"
    )
    down = task_with(f"sc://127.0.0.1:{free_port()}")
    assert "does not answer: start it" in down and "streamshift engine up" in down


def test_the_quality_verdict_needs_the_jobs_recorded_checks(settings) -> None:  # type: ignore[no-untyped-def]
    """The data_quality task judges what the day's Spark job recorded under the run's id; a
    job that never validated (it failed first) is an error that says where to look."""
    inputs = T.resolve_inputs(settings, "trades", {}, DAY, "batch")
    with pytest.raises(
        QualityError, match=f"no data-quality results under run {inputs['quality_run']}"
    ):
        T.quality_verdict(settings, inputs)


def test_the_supervisor_starts_the_stream_at_the_configured_niceness(tmp_path: Path) -> None:
    """STREAMSHIFT_STREAM_NICE reaches the process the supervisor starts (spark-submit's JVM
    runs first, so niceness must be set before it): the started process runs at 3."""
    import signal
    import time

    from streamshift.airflow.supervise import start_stream

    settings = load_settings({}, home=tmp_path, stream_nice=3)
    pid = start_stream(settings, "trades", "no-such-topic")
    try:
        deadline = time.monotonic() + 10
        while os.getpriority(os.PRIO_PROCESS, pid) != 3:  # `nice` sets it, then execs
            assert time.monotonic() < deadline, os.getpriority(os.PRIO_PROCESS, pid)
            time.sleep(0.05)
    finally:
        os.killpg(pid, signal.SIGKILL)  # its own session: spark-submit and its children


def test_the_supervisor_knows_a_process_by_pid_and_start_honours_a_stop_and_backs_off(
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    from streamshift.airflow.supervise import (
        backoff_until,
        read_restarts,
        restarts_path,
        supervise,
    )
    from streamshift.store.heartbeat import heartbeat_path, read_status, write_heartbeat
    from streamshift.store.processes import process_start

    now = dt.datetime.now(dt.UTC)
    fresh = (now - dt.timedelta(seconds=10)).isoformat()
    me, started = os.getpid(), process_start(os.getpid())
    assert started is not None
    beat = {"pid": me, "pid_start": started, "state": "running", "last_seen": fresh}
    assert health(beat, 300, now)[0] == "healthy"
    # the same pid with another start time is another process: the job is gone
    assert health({**beat, "pid_start": started - 1}, 300, now)[0] == "dead"
    # an operator's stop is not a death
    assert health({**beat, "state": "stopped"}, 300, now)[0] == "stopped"

    minutes = lambda m: (now - dt.timedelta(minutes=m)).isoformat()
    assert backoff_until([minutes(20), minutes(10)], now) is None
    until = backoff_until([minutes(20), minutes(10), minutes(1)], now)
    assert until is not None and until > now
    assert backoff_until([minutes(50), minutes(40), minutes(35)], now) is None  # long ago

    # A crash-looping stream is not restarted again now: it shows as failing instead.
    settings = load_settings({}, home=tmp_path)
    streams = {"trades": "stream", "telemetry": "batch"}

    def job(state: str) -> None:
        dead = {"pid": 2**22 + 1, "last_seen": fresh, "started_at": fresh}
        write_heartbeat(
            heartbeat_path(tmp_path, "trades", "stream"),
            {"flow": "trades", "layer": "stream", "state": state, **dead},
        )

    job("failed")
    path = restarts_path(settings, "trades")
    path.parent.mkdir(parents=True, exist_ok=True)
    looping = [minutes(9), minutes(5), minutes(1)]
    path.write_text(json.dumps({"restarts": 3, "restarted_at": looping}))
    actions = {a["flow"]: a for a in supervise(settings, streams)}
    assert actions["trades"]["action"] == "backing_off" and actions["trades"]["state"] == "failing"
    assert read_restarts(settings, "trades")["restarts"] == 3  # nothing was started
    (status,) = read_status(tmp_path)
    assert status.failing and "crash-looping" in status.describe()
    # An operator's stop is left alone, however often the job crashed before.
    job("stopped")
    actions = {a["flow"]: a for a in supervise(settings, streams)}
    assert actions["trades"]["action"] == "none" and actions["trades"]["state"] == "stopped"


def test_airflow_run_by_hand_with_the_stacks_home_sees_the_stack(tmp_path: Path) -> None:
    """``airflow`` run by a user with only AIRFLOW_HOME set reads the stack's settings from
    its airflow.cfg (no example DAGs, the project's DAGs, an empty plugins folder, the stack's
    database), and
    the file holds no secret: the JWT secret is read from its 0600 file by a command."""
    import subprocess
    import sys

    from streamshift.local.airflow import write_airflow_cfg
    from streamshift.spec.settings import REPO_ROOT

    settings = load_settings({}, home=tmp_path)
    path = write_airflow_cfg(settings, 8080)
    secret = (settings.airflow_home / "jwt_secret").read_text().strip()
    assert secret and secret not in path.read_text()
    env = {"AIRFLOW_HOME": str(settings.airflow_home), "PATH": os.environ["PATH"]}
    wanted = [
        ("core", "load_examples"),
        ("core", "plugins_folder"),
        ("core", "dags_folder"),
        ("database", "sql_alchemy_conn"),
        ("api_auth", "jwt_secret"),
    ]
    read = (  # Airflow's own configuration reader, in a process that only has AIRFLOW_HOME
        "import json, sys; from airflow.configuration import conf; "
        "print(json.dumps([conf.get(s, o) for s, o in json.loads(sys.argv[1])]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", read, json.dumps(wanted)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    values = dict(zip(wanted, json.loads(done.stdout.strip().splitlines()[-1]), strict=True))
    assert values["core", "load_examples"] == "False"
    # the kit's plugin by its entry point: the plugins folder is the stack's own, empty
    assert values["core", "plugins_folder"] == str(settings.airflow_home / "plugins")
    assert values["core", "dags_folder"] == str(REPO_ROOT / "dags")
    assert values["database", "sql_alchemy_conn"].endswith(
        str(settings.airflow_home / "airflow.db")
    )
    assert values["api_auth", "jwt_secret"] == secret
