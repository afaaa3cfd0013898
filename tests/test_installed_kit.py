"""The kit as a team uses it: a wheel built offline from the kit's tracked files, installed into
a fresh virtualenv with the lock's packages (the checkout not importable there), made ready by
`streamshift setup`, and a project written by `streamshift init` in a folder of its own. The
project's generated tests pass, a flow added to it is found, an EOD file and a correction
loaded from the project's folder give the view an oracle computes from the files, a day
streamed through Kafka reaches the stream layer, and Airflow started from the project lists
its DAGs and the kit's plugin."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

from streamshift.local.airflow import LocalAirflow
from streamshift.spec.settings import REPO_ROOT, load_settings
from streamshift.store.processes import free_port
from tests.airflow_support import migrated_airflow

pytestmark = [pytest.mark.slow, pytest.mark.kafka]

UV = Path(sys.executable).with_name("uv")
DAY = "2026-11-20"
SECOND_FLOW = """
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, IntegerType, StringType, StructField, StructType

from streamshift.spec.flow import Flow, View

FLOW = Flow(
    name="refunds",
    schema=StructType([StructField(n, t) for n, t in [
        ("refund_id", StringType()), ("version", IntegerType()),
        ("business_date", DateType()), ("merchant", StringType())]]),
    key="refund_id", version="version", deleted=lambda: F.lit(False),
    event_time="business_date", business_date="business_date",
    rules=(), prepare=lambda df, reference: df,
    views=(View("per_merchant", ("business_date", "merchant"),
                lambda live: live.groupBy("business_date", "merchant").count()),),
)
"""


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> str:
    started = time.monotonic()
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    print(f"[{time.monotonic() - started:5.1f}s] {' '.join(args[:4])}", file=sys.stderr)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def _oracle(*files: Path, below: Decimal | None = None) -> dict[str, tuple[int, Decimal]]:
    """by_merchant from the files alone: each payment's highest version, live if BOOKED with a
    positive amount (``below`` a limit, once the test added that rule) at a known merchant."""
    merchants = {"ACME", "BOLT", "CORA", "DUNE"}
    best: dict[str, dict[str, str]] = {}
    for path in files:
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                held = best.get(row["payment_id"])
                if held is None or int(row["version"]) > int(held["version"]):
                    best[row["payment_id"]] = row
    out: dict[str, list] = defaultdict(lambda: [0, Decimal(0)])
    for row in best.values():
        amount = Decimal(row["amount"] or 0)
        fits = amount > 0 and (below is None or amount < below)
        if row["status"] == "BOOKED" and fits and row["merchant"] in merchants:
            out[row["merchant"]][0] += 1
            out[row["merchant"]][1] += Decimal(row["amount"])
    return {m: (c, a) for m, (c, a) in out.items()}


def _shown(text: str) -> dict[str, tuple[int, Decimal]]:
    rows = list(csv.DictReader(text.splitlines()))
    return {r["merchant"]: (int(r["payments"]), Decimal(r["amount"])) for r in rows}


def test_a_team_installs_the_kit_and_runs_its_own_project(
    tmp_path: Path, kafka_broker: str
) -> None:
    # The kit's tracked files, as a clone has them, built into a wheel with no network.
    kit = tmp_path / "kit"
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, tracked):
        if (REPO_ROOT / name).is_file():
            (kit / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, kit / name)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSHIFT_", "VIRTUAL"))}
    base.pop("PYTHONPATH", None)
    npm = shutil.which("npm")
    if npm:  # Data Docs' front-end files, as scripts/setup installs them (npm's cache: offline)
        _run([npm, "ci", "--prefer-offline", "--ignore-scripts", "--no-audit", "--no-fund"],
             kit / "expectations" / "assets", base)  # fmt: skip
    _run([str(UV), "build", "--wheel", "--no-build-isolation", "--offline", "--python",
          sys.executable, "-o", str(tmp_path / "dist"), str(kit)], kit, base)  # fmt: skip
    [wheel] = (tmp_path / "dist").glob("streamshift-*.whl")

    venv = tmp_path / "venv"
    _run([str(UV), "venv", "-q", "--python", sys.executable, str(venv)], tmp_path, base)
    python = venv / "bin" / "python"
    _run([str(UV), "pip", "sync", "-q", "--python", str(python), str(kit / "requirements.lock")],
         tmp_path, base)  # fmt: skip
    _run([str(UV), "pip", "install", "-q", "--no-deps", "--python", str(python), str(wheel)],
         tmp_path, base)  # fmt: skip
    env = {**base, "PATH": f"{venv / 'bin'}{os.pathsep}{base['PATH']}", "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": str(python), "STREAMSHIFT_ENGINE": f"sc://127.0.0.1:{free_port()}",
           "STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS": kafka_broker}  # fmt: skip
    where = _run(
        [str(python), "-c", "import streamshift; print(streamshift.__file__)"], tmp_path, env
    )
    assert where.strip().startswith(str(venv)), where
    no_flows = subprocess.run([str(python), "-c", "import flows"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, check=False)  # fmt: skip
    assert no_flows.returncode != 0 and "No module named 'flows'" in no_flows.stderr
    if npm:  # the wheel carries every file Data Docs' pages load
        probe = "from streamshift.store import data_docs as d; print(d.ASSETS, d.installed())"
        assets = _run([str(python), "-c", probe], tmp_path, env)
        assert assets.startswith(str(venv)) and assets.strip().endswith("[]"), assets

    cli = str(venv / "bin" / "streamshift")
    ready = _run([cli, "setup", "--no-archive"], tmp_path, env)
    assert "ready" in ready

    project = tmp_path / "payments-team"
    _run([cli, "init", str(project)], tmp_path, env)
    assert (project / "streamshift.toml").is_file() and (project / "dags").is_dir()
    # Its image builds from its own lock: the kit's lock (carried by the wheel) and the kit.
    lock = (project / "requirements.lock").read_text().splitlines()
    assert "streamshift==0.1.0" in lock and "pyspark==4.2.0" in lock, lock[:5]
    assert (project / "Dockerfile").is_file() and (project / "docker-compose.yml").is_file()
    refused = subprocess.run([cli, "init", str(project)], cwd=tmp_path, env=env,
                             capture_output=True, text=True, check=False)  # fmt: skip
    assert refused.returncode == 2 and "not an empty folder" in refused.stderr

    (project / "flows" / "refunds.py").write_text(SECOND_FLOW)
    tested = _run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                  project, env)  # fmt: skip
    assert "1 passed" in tested, tested

    # The warm engine from the project's folder; an EOD file and its corrections run on it.
    try:
        _run([cli, "engine", "up"], project, env)
        _load_stream_and_list(cli, project, env, str(venv))
    finally:
        subprocess.run([cli, "engine", "down"], cwd=project, env=env, timeout=120, check=False)


def _load_stream_and_list(cli: str, project: Path, env: dict[str, str], venv: str) -> None:
    files = project / "files"
    _run([cli, "generate", "--flow", "payments", "--date", DAY, "--rows", "300", "--out",
          str(files)], project, env)  # fmt: skip
    eod, corrections = files / f"payments_eod_{DAY}.csv", files / f"payments_corrections_{DAY}.csv"
    for path in (eod, corrections):
        loaded = subprocess.run([cli, "eod", "--flow", "payments", "--date", DAY, "--file",
                                 str(path)], cwd=project, env=env, capture_output=True, text=True,
                                timeout=600, check=False)  # fmt: skip
        assert loaded.returncode == 0, loaded.stderr[-3000:]
        assert "(the warm engine, through Spark Connect)" in loaded.stderr, loaded.stderr[-2000:]
    shown = _run([cli, "show", "--flow", "payments", "--view", "by_merchant", "--format", "csv",
                  "--limit", "0"], project, env)  # fmt: skip
    assert _shown(shown) == _oracle(eod, corrections)
    assert (project / "var" / "warehouse").is_dir()  # STREAMSHIFT_HOME: the project's var/
    _check_starter_suites(cli, project, env, files, eod)

    # A rule added while the engine runs: the next job runs the code on disk, not the code
    # the engine's runner imported when it started.
    flow_file = project / "flows" / "payments" / "__init__.py"
    flow_file.write_text(flow_file.read_text().replace(
        '        Rule("known_merchant",',
        '        Rule("below_400", lambda: reversed_() | (F.col("amount") < 400)),\n'
        '        Rule("known_merchant",',
    ))  # fmt: skip
    late = files / "big.csv"
    late.write_text("payment_id,version,status,business_date,paid_at,merchant,amount\n"
                    f"BIG-1,1,BOOKED,{DAY},{DAY}T12:00:00Z,ACME,450.00\n")  # fmt: skip
    load_late = [cli, "eod", "--flow", "payments", "--date", DAY, "--file", str(late)]
    refused = subprocess.run(load_late, cwd=project, env=env, capture_output=True, text=True,
                             timeout=600, check=False)  # fmt: skip
    assert "the flows changed since the engine started: loaded again" in refused.stderr
    # A changed rule is a new version of the flow: refused until it is evolved.
    assert refused.returncode != 0 and "rule below_400 (added)" in refused.stderr, refused.stderr
    planned = _run([cli, "plan", "--flow", "payments"], project, env)
    assert "rule below_400: added → applies to new changes" in planned, planned
    _run([cli, "evolve", "--flow", "payments"], project, env)
    _run(load_late, project, env)
    quarantined = _run([cli, "show", "--flow", "payments", "--view", "quarantine", "--format",
                        "csv", "--limit", "0"], project, env)  # fmt: skip
    rules = [
        r["rule"] for r in csv.DictReader(quarantined.splitlines()) if "BIG-1" in r["raw_payload"]
    ]
    assert rules == ["below_400"], quarantined

    # The next day through Kafka into the stream layer.
    _run([cli, "promote", "--flow", "payments", "--to", "shadow", "--by", "test"], project, env)
    _run([cli, "topics", "--flow", "payments"], project, env)
    day2 = "2026-11-23"
    _run([cli, "generate", "--flow", "payments", "--date", day2, "--rows", "200", "--out",
          str(files)], project, env)  # fmt: skip
    events = files / f"payments_eod_{day2}.csv"
    _run([cli, "produce", "--flow", "payments", "--file", str(events)], project, env)
    _run([cli, "stream", "--flow", "payments", "--available-now"], project, env)
    streamed = _run([cli, "show", "--flow", "payments", "--view", "by_merchant", "--layer",
                     "stream", "--date", day2, "--format", "csv", "--limit", "0"], project, env)  # fmt: skip
    assert _shown(streamed) == _oracle(events, below=Decimal(400))

    # Airflow started from the project's folder: its DAGs, the kit's plugin by its entry point.
    port = free_port()
    settings = load_settings(
        {"STREAMSHIFT_PROJECT": str(project)}, home=project / "var", airflow_port=port
    )
    migrated_airflow(settings)  # the suite's migrated database, copied: `up` migrates nothing
    with_port = {**env, "STREAMSHIFT_AIRFLOW_PORT": str(port)}
    try:
        _run([cli, "airflow", "up"], project, with_port)
        client = LocalAirflow(settings).client()
        for dag_id in ("eod_payments", "eod_refunds", "stream_supervisor"):
            client.wait_for_dag(dag_id)
        dag_ids = {d["dag_id"] for d in client.get("/api/v2/dags?limit=100")["dags"]}
        plugins = client.get("/api/v2/plugins")["plugins"]
    finally:
        subprocess.run([cli, "airflow", "down"], cwd=project, env=with_port, timeout=120,
                       capture_output=True, check=False)  # fmt: skip
    assert {"eod_payments", "eod_refunds", "stream_supervisor"} <= dag_ids, dag_ids
    assert not any("trades" in d for d in dag_ids), dag_ids
    [plugin] = [p for p in plugins if p["name"] == "streamshift"]
    assert plugin["source"].startswith("streamshift==0.1.0: EntryPoint("), plugin  # not a file
    assert "migration" in json.dumps(plugin["external_views"]).lower()


def _check_starter_suites(
    cli: str, project: Path, env: dict[str, str], files: Path, eod: Path
) -> None:
    """The starter suites `init` wrote (suites only: Great Expectations' other files follow at
    run time) validate the day on the engine, and fail a file of unknown merchants."""
    suites = project / "expectations" / "gx" / "expectations" / "payments"
    expectations = sum(
        len(json.loads(p.read_text())["expectations"]) for p in suites.glob("*.json")
    )
    assert sorted(p.stem for p in suites.glob("*.json")) == [
        "by_merchant", "current", "quarantine", "raw"]  # fmt: skip
    assert not list((project / "expectations" / "gx" / "checkpoints").glob("*.json"))
    passed = _run([cli, "quality", "--flow", "payments", "--date", DAY, "--file", str(eod)],
                  project, env)  # fmt: skip
    assert f"{expectations} pass, 0 warn, 0 fail" in passed, passed
    poison = files / f"payments_poison_{DAY}.csv"
    known = {r["merchant"] for r in csv.DictReader(
        (project / "flows" / "payments" / "reference" / "merchants.csv").open())}  # fmt: skip
    rows = list(csv.DictReader(poison.open()))
    unknown = [r["merchant"] for r in rows if r["merchant"] not in known]
    assert unknown and len(unknown) / len(rows) > 0.01, rows  # more than the 1 % allowed
    failed = subprocess.run([cli, "quality", "--flow", "payments", "--date", DAY, "--file",
                             str(poison), "--dataset", "raw"], cwd=project, env=env,
                            capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert failed.returncode == 1, failed.stderr[-2000:]
    assert (
        f"payments.raw merchant_known: observed {len(unknown)} of {len(rows)} unexpected"
        in failed.stdout + failed.stderr
    ), failed.stdout[-2000:]
