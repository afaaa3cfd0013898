"""The engine's job runner (streamshift.local.runner): a command hands its checked request to a
process the runner made ready, which runs the job with the command's environment, folder and
output; the command exits with the job's status, its signals reach the job, and a killed
command takes its job down. On the suite's engine, real Delta tables."""

from __future__ import annotations

import csv
import datetime as dt
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.trades import FLOW
from streamshift.local.runner import socket_path
from streamshift.spec.catalog import LayerTables
from streamshift.spec.requests import EodRequest
from streamshift.store.endpoints import engine_address
from streamshift.store.processes import free_port, pid_alive
from streamshift.store.tables import rows
from tests.cli_support import CLI, cli_env, run_cli, suite_engine
from tests.trades_data import trade

pytestmark = pytest.mark.skipif(
    not suite_engine(), reason="the suite runs without its engine (TESTS_ENGINE=off)"
)

DAY = dt.date(2026, 11, 20)
JOB_PROCESS = re.compile(r"running in process (\d+), made ready by the engine's job runner")


def _file(path: Path, trades: list[tuple[str, int, int]]) -> Path:
    """A trades EOD file of (trade id, version, quantity) rows, all BUY of one instrument."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([f.name for f in FLOW.schema.fields])
        for trade_id, version, quantity in trades:
            writer.writerow(trade(trade_id, version, quantity=quantity)[:11])
    return path


def _job_process(stderr: str) -> int:
    found = JOB_PROCESS.search(stderr)
    assert found, f"the job did not run in the runner's process:\n{stderr}"
    return int(found.group(1))


def _positions(home: Path) -> int:
    table = LayerTables(home / "warehouse", FLOW, "batch").view("positions")
    return sum(r["net_quantity"] for r in rows(table, where=[("business_date", "=", DAY)]))


def _started(env: dict[str, str], file: Path, cwd: Path) -> tuple[subprocess.Popen[str], int]:
    """A correction's command, once its job is applying: the command and the job's process."""
    args = ["eod", "--flow", "trades", "--date", str(DAY), "--file", file.name]
    process = subprocess.Popen(
        [*CLI, *args], env=env, cwd=cwd, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    said = ""
    for line in process.stderr:
        said += line
        if "applying changes" in line:
            return process, _job_process(said)
    raise AssertionError(f"the job never applied:\n{said}")


def _gone(pid: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_a_handed_over_job_has_the_commands_folder_output_status_and_signals(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    env = cli_env(home, file_stable_seconds="0")
    _file(tmp_path / "day.csv", [(f"T-{i}", 1, 100 + i) for i in range(5)])

    # The file by a path relative to the command's folder; the job's output is the command's.
    load = run_cli(home, "eod", "--flow", "trades", "--date", str(DAY), "--file", "day.csv",
                   env=env, cwd=tmp_path)  # fmt: skip
    assert load.returncode == 0, load.stderr
    job = _job_process(load.stderr)
    assert job != os.getpid()
    assert "5 rows: 5 accepted" in load.stdout
    assert _positions(home) == sum(100 + i for i in range(5))

    # An error the job raises (a replacement none of whose rows is of the day) exits 2 with
    # the job's one-line error.
    with open(tmp_path / "other_day.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([f.name for f in FLOW.schema.fields])
        writer.writerow(trade("T-9", 1, date="2026-11-19")[:11])
    bad = run_cli(home, "eod", "--flow", "trades", "--date", str(DAY), "--file", "other_day.csv",
                  "--mode", "replace", env=env, cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 2, bad.stderr
    _job_process(bad.stderr)
    assert f"no row of the file is dated {DAY}" in bad.stderr and "Traceback" not in bad.stderr
    assert _positions(home) == sum(100 + i for i in range(5))

    # Ctrl-C reaches the job: interrupted, status 130, and nothing half-applied that the same
    # command run again does not repair.
    fix = _file(tmp_path / "fix.csv", [("T-0", 2, 1000)])
    process, pid = _started(env, fix, tmp_path)
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "streamshift: interrupted" in err
    assert _gone(pid, within=5.0)
    again = run_cli(home, "eod", "--flow", "trades", "--date", str(DAY), "--file", "fix.csv",
                    env=env, cwd=tmp_path)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert _positions(home) == 1000 + sum(100 + i for i in range(1, 5))

    # The fault-injection exit ends the job's process as it ends a command: status 137.
    env_kill = {**env, "STREAMSHIFT_KILL_AFTER_COMMITS": "1"}
    killed = run_cli(home, "eod", "--flow", "trades", "--date", str(DAY), "--file",
                     str(_file(tmp_path / "fix3.csv", [("T-1", 2, 7)])), env=env_kill)  # fmt: skip
    assert killed.returncode == 137, killed.stderr
    assert "[fault] exiting after commit 1" in killed.stderr
    assert not pid_alive(_job_process(killed.stderr))


def test_a_killed_command_takes_its_job_down(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = cli_env(home, file_stable_seconds="0")
    day = _file(tmp_path / "day.csv", [(f"T-{i}", 1, 10) for i in range(3)])
    assert run_cli(home, "eod", "--flow", "trades", "--date", str(DAY), "--file", str(day),
                   env=env).returncode == 0  # fmt: skip
    # A correction with a few thousand new trades: its apply outlasts the moment it is killed.
    fix = [("T-0", 2, 50), *((f"N-{i}", 1, 1) for i in range(3000))]
    process, pid = _started(env, _file(tmp_path / "fix.csv", fix), tmp_path)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert _gone(pid, within=1.5), f"the job's process {pid} outlived its killed command"
    # The same correction again: applied once, whatever the killed job committed.
    again = run_cli(home, "eod", "--flow", "trades", "--date", str(DAY), "--file",
                    str(tmp_path / "fix.csv"), env=env)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert _positions(home) == 50 + 10 + 10 + 3000


def test_commands_at_once_each_get_a_process_of_their_own(tmp_path: Path) -> None:
    """The runner keeps one process ready; a second command arriving while the first runs gets
    one made for it. Each job writes its own home, as its file says."""
    commands = []
    for n in range(2):
        home = tmp_path / f"home-{n}"
        file = _file(tmp_path / f"day-{n}.csv", [(f"T-{i}", 1, 10 * (n + 1)) for i in range(4)])
        args = ["eod", "--flow", "trades", "--date", str(DAY), "--file", str(file)]
        env = cli_env(home, file_stable_seconds="0")
        commands.append(
            (home, subprocess.Popen([*CLI, *args], env=env, stderr=subprocess.PIPE, text=True))
        )
    processes = set()
    for home, command in commands:
        _out, err = command.communicate(timeout=300)
        assert command.returncode == 0, err
        processes.add(_job_process(err))
    assert len(processes) == 2
    assert [_positions(home) for home, _ in commands] == [40, 80]


def test_no_runner_listening_leaves_the_job_to_the_command(tmp_path: Path) -> None:
    from streamshift.local.runner import hand_over

    request = EodRequest("trades", DAY, tmp_path / "day.csv")
    assert hand_over(request, f"sc://127.0.0.1:{free_port()}") is None
    assert hand_over(request, "sc://engine.example:15002") is None


def test_a_command_hands_over_only_to_a_socket_in_a_folder_of_its_own(tmp_path: Path) -> None:
    import socket

    from streamshift.local.runner import _ours

    folder = tmp_path / "runner"
    folder.mkdir(mode=0o700)
    os.chmod(folder, 0o700)
    path = folder / "runner-1.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    try:
        assert _ours(path)
        os.chmod(folder, 0o755)  # another user could have put it there
        assert not _ours(path)
        assert not _ours(folder / "runner-2.sock")
    finally:
        listener.close()


def test_a_job_taken_tells_only_the_processes_still_warming_to_leave_the_rest(
    tmp_path: Path,
) -> None:
    """A process that has answered its job computes the state of the tables it wrote until
    the next job starts; the runner tells it so then, and tells no process whose job is still
    running."""
    import socket

    from streamshift.local.runner import YIELD, Runner, _Child, _readable

    runner = Runner(f"sc://127.0.0.1:{free_port()}", tmp_path / "runner.sock")
    ends = {}
    for pid, name in enumerate(("warming", "running", "new"), start=1):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        runner.children[pid] = _Child(pid, ours, answered=name == "warming")
        ends[name] = theirs
    command, _ = socket.socketpair()
    socket.send_fds(ends["new"], [b"taken"], [command.fileno()])
    runner._from_child(runner.children[3])
    assert runner.children[3].client is not None  # the new job's command, relayed
    assert ends["warming"].recv(16) == YIELD
    assert not _readable(ends["running"]) and not _readable(ends["new"])


def test_a_runner_whose_engine_is_gone_stops() -> None:
    url = f"sc://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "streamshift.local.runner", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"the engine at {url} is gone; stopping" in done.stdout
    assert not socket_path(engine_address(url)[1]).exists()


def test_a_job_from_another_project_runs_that_projects_flows(tmp_path: Path) -> None:
    """The suite's engine started in the kit's example project; a command run in a team's
    project hands it a job of a flow only that project declares, and of a flow name the
    example project does not have: the runner's process loads the team's flow, not its own."""
    from streamshift.spec.scaffold import init_project

    project = tmp_path / "team"
    init_project(project)
    (project / "flows" / "payments" / "reference" / "merchants.csv").write_text(
        "merchant,category\nACME,hardware\nZED,toys\n"
    )
    eod = tmp_path / "payments.csv"
    eod.write_text(
        "payment_id,version,status,business_date,paid_at,merchant,amount\n"
        "P1,1,BOOKED,2026-11-20,2026-11-20T09:00:00Z,ACME,10.00\n"
        "P2,1,BOOKED,2026-11-20,2026-11-20T10:00:00Z,ZED,4.00\n"
        "P3,1,BOOKED,2026-11-20,2026-11-20T11:00:00Z,BOLT,7.00\n"  # not in this project's data
    )
    env = cli_env(tmp_path)
    env.pop("STREAMSHIFT_HOME")  # the project's var/
    env.pop("STREAMSHIFT_PROJECT")  # found from the folder the command runs in
    loaded = run_cli(tmp_path, "eod", "--flow", "payments", "--date", str(DAY), "--file",
                     str(eod), env=env, cwd=project)  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr
    _job_process(loaded.stderr)
    shown = run_cli(tmp_path, "show", "--flow", "payments", "--view", "by_merchant", "--format",
                    "csv", env=env, cwd=project)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    got = sorted(tuple(r[1:3]) for r in csv.reader(shown.stdout.splitlines()[1:]))
    assert got == [("ACME", "1"), ("ZED", "1")]
    assert (project / "var" / "warehouse").is_dir()

    # The team adds a rule: its next job runs the code on disk (the runner's process started
    # in the kit's project; tests/test_installed_kit.py changes a flow under its own engine).
    flow_file = project / "flows" / "payments" / "__init__.py"
    flow_file.write_text(flow_file.read_text().replace(
        '        Rule("known_merchant",',
        '        Rule("below_100", lambda: reversed_() | (F.col("amount") < 100)),\n'
        '        Rule("known_merchant",',
    ))  # fmt: skip
    more = tmp_path / "more.csv"
    more.write_text(
        "payment_id,version,status,business_date,paid_at,merchant,amount\n"
        "P4,1,BOOKED,2026-11-20,2026-11-20T12:00:00Z,ACME,500.00\n"
        "P5,1,BOOKED,2026-11-20,2026-11-20T13:00:00Z,ACME,2.00\n"
    )
    load = ["eod", "--flow", "payments", "--date", str(DAY), "--file", str(more)]
    refused = run_cli(tmp_path, *load, env=env, cwd=project)
    assert refused.returncode != 0 and "rule below_100 (added)" in refused.stderr, refused.stderr
    evolved = run_cli(tmp_path, "evolve", "--flow", "payments", env=env, cwd=project)
    assert evolved.returncode == 0, evolved.stderr
    again = run_cli(tmp_path, *load, env=env, cwd=project)
    assert again.returncode == 0, again.stderr
    _job_process(again.stderr)
    quarantine = run_cli(tmp_path, "show", "--flow", "payments", "--view", "quarantine",
                         "--format", "csv", env=env, cwd=project)  # fmt: skip
    rules = {row["rule"] for row in csv.DictReader(quarantine.stdout.splitlines())}
    assert rules == {"known_merchant", "below_100"}, quarantine.stdout
    # the rule beside the row's reference, the wide raw record last
    header = quarantine.stdout.splitlines()[0].split(",")
    assert header[header.index("source_ref") + 1] == "rule" and header[-1] == "raw_payload", header
