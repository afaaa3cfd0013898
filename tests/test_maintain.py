"""Table upkeep on real Delta tables: compaction, VACUUM with the tables' retention and a log
checkpoint leave every row where it was, and the next reader starts from the checkpoint."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from flows.trades import FLOW
from flows.trades.generate import generate_day
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.jobs.maintain import flow_tables, run_maintain
from streamshift.engine.write.target import Target, read
from streamshift.spec.settings import load_settings
from tests.cli_support import run_cli

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DAY = dt.date(2026, 11, 18)


def _rows(spark, path: str) -> list[tuple]:  # type: ignore[no-untyped-def, type-arg]
    return sorted((tuple(r) for r in read(spark, path).collect()), key=repr)


def _version(path: str) -> int:
    return max(int(p.stem) for p in (Path(path) / "_delta_log").glob("*.json") if p.stem.isdigit())


def test_maintain_compacts_vacuums_and_checkpoints_and_changes_no_row(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = load_settings(
        {}, home=tmp_path / "home", spark_master="local[2]", spark_shuffle_partitions=2
    )
    # Before any table exists the command says so, without starting Spark.
    empty = run_cli(settings.home, "maintain", "--flow", "trades")
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout.startswith("nothing to maintain: trades has no tables under")
    assert "starting Spark" not in empty.stderr
    files = generate_day(DAY, 200, tmp_path / "files", seed=8, progress=False)
    batch = Target.open(spark, settings, FLOW, "batch")
    for path in (files.eod, files.corrections):  # two commits: more than one file
        run_eod(spark, batch, DAY, path)
    tables = flow_tables(settings, FLOW)
    assert batch.tables.current in tables and len(tables) >= 3
    before = {t: _rows(spark, t) for t in tables}

    result = run_maintain(spark, settings, FLOW, progress=False)
    upkeep = {str(settings.warehouse / t.table): t for t in result.tables}
    assert set(upkeep) == set(tables)
    current = upkeep[batch.tables.current]
    # One file per business_date partition (a correction moved a trade to the day before).
    partitions = read(spark, batch.tables.current).select("business_date").distinct().count()
    assert current.files_before > partitions and current.files_after == partitions
    for table in tables:
        assert _rows(spark, table) == before[table], table  # compaction moves no data
        log = Path(table) / "_delta_log"
        last = json.loads((log / "_last_checkpoint").read_text())
        assert last["version"] == upkeep[table].version == _version(table)
        assert list(log.glob(f"{last['version']:020d}.checkpoint*.parquet")), table
    assert "retaining interval 7 days" in current.describe()
