"""The README says what the code does: its settings and commands tables are generated from
the code and current, and its "Writing a new flow" example runs through the write path as
pasted."""

from __future__ import annotations

import datetime as dt
import re
import types
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from streamshift.cli.readme import README, SETTINGS_REFERENCE, main, settings_table
from streamshift.engine.write.target import Target, read
from streamshift.spec.settings import load_settings


def test_the_generated_tables_are_current() -> None:
    assert main(["--check"]) == 0, "run: .venv/bin/python -m streamshift.cli.readme"
    text = SETTINGS_REFERENCE.read_text()
    # Every setting is in the table, and nothing that is not a setting.
    from streamshift.spec.settings import describe

    listed = set(re.findall(r"^\| `(STREAMSHIFT_\w+)` \|", text, re.MULTILINE))
    assert listed == {name for name, _, _ in describe()}
    assert settings_table() in text


def test_a_stale_table_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streamshift.cli import readme

    stale = tmp_path / "settings.md"
    stale.write_text(
        SETTINGS_REFERENCE.read_text().replace("`STREAMSHIFT_HOME`", "`STREAMSHIFT_HOMES`")
    )
    monkeypatch.setattr(readme, "SETTINGS_REFERENCE", stale)
    assert readme.main(["--check"]) == 1
    readme_copy = tmp_path / "README.md"
    readme_copy.write_text(README.read_text().replace("| `kappa` |", "| `kapa` |"))
    monkeypatch.setattr(readme, "SETTINGS_REFERENCE", SETTINGS_REFERENCE)
    monkeypatch.setattr(readme, "README", readme_copy)
    assert readme.main(["--check"]) == 1


@pytest.mark.spark
def test_the_new_flow_example_loads_a_file_as_pasted(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from streamshift.engine.jobs.eod import run_eod

    section = README.read_text().split("## Writing a new flow", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code, "the section has no python block"
    module = types.ModuleType("flows.payments")
    exec(compile(code.group(1), "README.md", "exec"), module.__dict__)  # noqa: S102
    flow = module.FLOW

    day = dt.date(2026, 11, 20)
    eod = tmp_path / "payments.csv"
    eod.write_text(
        "payment_id,version,status,business_date,paid_at,merchant,amount\n"
        "P1,1,BOOKED,2026-11-20,2026-11-20T09:00:00Z,ACME,10.00\n"
        "P2,1,BOOKED,2026-11-20,2026-11-20T10:00:00Z,ACME,5.50\n"
        "P3,1,BOOKED,2026-11-20,2026-11-20T11:00:00Z,BOLT,7.00\n"
        "P3,2,REVERSED,2026-11-20,,,\n"
        "P4,1,BOOKED,2026-11-20,2026-11-20T12:00:00Z,BOLT,-1.00\n"
    )
    settings = load_settings({}, home=tmp_path / "home", spark_master="local[2]")
    target = Target.open(spark, settings, flow, "batch")
    result = run_eod(spark, target, day, eod)
    assert (result.apply.accepted, result.apply.rejected) == (4, 1)
    view = read(spark, target.tables.view("by_merchant")).orderBy("merchant")
    assert [(r.merchant, r.payments, float(r.amount)) for r in view.collect()] == [
        ("ACME", 2, 15.5)
    ]
    [rejected] = read(spark, target.tables.quarantine).where(F.col("flow") == "payments").collect()
    assert rejected.rule == "amount_positive"


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    """A newcomer's README: at most 250 lines, the demo and test commands in its first 20."""
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, len(lines)
    head = "\n".join(lines[:20])
    assert "bin/demo" in head and "bin/test" in head
