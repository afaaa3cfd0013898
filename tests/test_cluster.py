"""The same code on a Spark standalone cluster (a master and a two-core worker on 127.0.0.1,
started from PySpark's own distribution; each application's executor is its own JVM): an
``--available-now`` stream through the CLI, and one ``eod_trades`` DAG run through Airflow on an
engine whose master is the cluster, each ending in the tables its input file gives (the oracle:
the flow's pure transforms over the file's rows, in-process). (spark-submit's own path,
``spark_jobs/`` with the master it is given, is test_spark_submit's; its ``--jars`` are the
ones the stream's session ships here.)"""

from __future__ import annotations

import datetime as dt
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from flows.trades import FLOW
from streamshift.engine.write.target import Target
from streamshift.local.engine import LocalEngine
from streamshift.store.processes import free_port
from streamshift.store.produce import produce_rows, read_rows
from tests.airflow_support import dag_test, land_day, migrated_airflow
from tests.cli_support import CLI, cli_env
from tests.cluster_support import SparkCluster
from tests.stream_support import new_topic, oracle, state

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.airflow, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
D1, D2 = dt.date(2026, 11, 12), dt.date(2026, 11, 13)


@pytest.fixture
def cluster(tmp_path: Path):  # type: ignore[no-untyped-def]
    spark_cluster = SparkCluster(tmp_path / "spark-cluster", workers=1, cores=2).start()
    try:
        yield spark_cluster
    finally:
        spark_cluster.stop()


def test_a_stream_and_an_eod_dag_on_a_standalone_cluster_match_local_mode(  # type: ignore[no-untyped-def]
    spark, kafka_settings, cluster, tmp_path: Path
) -> None:
    # On the cluster every job runs on the cluster's master: no warm engine.
    on_cluster = replace(
        kafka_settings, home=tmp_path / "cluster-home", spark_master=cluster.url, engine=""
    )
    files = {d: land_day(on_cluster, d, trades=300) for d in (D1, D2)}

    # 1. An --available-now stream of D1's events, through the CLI, its settings on the master.
    topic = new_topic()
    produce_rows(kafka_settings, FLOW, read_rows(files[D1].eod, FLOW), topic=topic, progress=False)
    streamed = subprocess.run(
        [*CLI, "stream", "--flow", "trades", "--topic", topic, "--available-now"],
        env=cli_env(
            on_cluster.home,
            spark_master=cluster.url,
            engine="",
            kafka_bootstrap_servers=kafka_settings.kafka_bootstrap_servers,
        ),
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert streamed.returncode == 0, (streamed.stdout + streamed.stderr)[-3000:]
    assert cluster.url in streamed.stderr + streamed.stdout

    # 2. One eod_trades run through Airflow, its Spark tasks on an engine (a Spark Connect
    # server) whose master is the cluster: the README's deployment on a cluster.
    engine = LocalEngine(replace(on_cluster, engine=f"sc://127.0.0.1:{free_port()}"))
    engine.start()
    try:
        through = replace(on_cluster, engine=engine.url)
        migrated_airflow(through)
        run = dag_test(through, "eod_trades", f"{D2}T22:00:00+00:00", {})
    finally:
        engine.stop()
    assert run["state"] == "success", run["output"][-4000:]
    assert run["tasks"]["load_eod_file"] == "success"
    assert run["tasks"]["data_quality"] == "success"
    assert f"Spark {cluster.url} (the warm engine" in run["output"]

    # The master ran every one of those applications on its workers' executors.
    apps = cluster.state()["completedapps"]
    names = [a["name"] for a in apps]
    assert len(apps) >= 2, names  # the stream, the engine (load_eod_file and its validation)
    assert all(a["cores"] >= 1 for a in apps), apps
    assert {w["state"] for w in cluster.state()["workers"]} == {"ALIVE"}

    # Each layer holds what its day's file says, computed from the file by the pure transforms.
    reference = Target.open(spark, on_cluster, FLOW, "batch").reference
    for layer, day in (("stream", D1), ("batch", D2)):
        expected = oracle(spark, read_rows(files[day].eod, FLOW), reference)
        assert expected["current"] and expected["positions"]
        got = state(spark, Target.open(spark, on_cluster, FLOW, layer), expected["state_columns"])
        assert got == {k: expected[k] for k in ("current", "history", "positions")}, layer
