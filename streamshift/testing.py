"""Helpers for a project's tests: a local Spark session, and rows through the real write path.

In a project's ``tests/conftest.py``::

    pytest_plugins = ["streamshift.testing"]

gives every test the ``spark`` fixture (one local Spark session with Delta per test run), and

    loaded = load_rows(spark, "payments", rows, business_date, tmp_path)
    loaded.view("by_merchant")     # the view's rows, as dicts, in key order
    loaded.quarantined()           # {key: rule} of the rows the flow's rules rejected
    loaded = loaded.then(more)     # a delta file of corrections on top

loads the rows as an EOD file through the same code the EOD DAG and the stream run (rules,
``prepare``, versions, views), into Delta tables under the test's folder.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from streamshift.spec.catalog import QUARANTINE_SCHEMA
from streamshift.spec.dayfiles import write_csv
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamshift.engine.write.target import Target


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S") + ("" if value.tzinfo else "Z")
    return str(value)


def local_settings(home: Path) -> Settings:
    """Settings of a test's own warehouse under ``home``: a local session, never an engine."""
    return load_settings(home=home, engine="", spark_master="local[2]", spark_shuffle_partitions=2)


@dataclass(frozen=True)
class Loaded:
    """What a test loaded: the layer's tables, readable as plain Python values."""

    spark: SparkSession
    target: Target
    business_date: dt.date
    folder: Path
    files: int = 1

    def then(self, rows: Sequence[Mapping[str, Any]], *, replace: bool = False) -> Loaded:
        """Another file for the same date on top: a delta of corrections (or, with
        ``replace``, the whole day again)."""
        loaded = Loaded(self.spark, self.target, self.business_date, self.folder, self.files + 1)
        loaded._load(rows, replace=replace)
        return loaded

    def _load(self, rows: Sequence[Mapping[str, Any]], *, replace: bool) -> None:
        from streamshift.engine.jobs.eod import run_eod

        flow = self.target.flow
        path = self.folder / f"{flow.name}_{self.business_date}_{self.files}.csv"
        columns = [f.name for f in flow.schema.fields]
        write_csv(path, ([_text(row.get(c)) for c in columns] for row in rows), columns)
        run_eod(self.spark, self.target, self.business_date, path, replace=replace)

    def _rows(self, path: str, order: Sequence[str]) -> list[dict[str, Any]]:
        from streamshift.engine.write.target import read

        frame = read(self.spark, path)
        return (
            [r.asDict() for r in frame.orderBy(*order).collect()]
            if order
            else [r.asDict() for r in frame.collect()]
        )

    def view(self, name: str) -> list[dict[str, Any]]:
        """The view's rows, in the order of its group key."""
        view = next((v for v in self.target.flow.views if v.name == name), None)
        if view is None:
            known = ", ".join(v.name for v in self.target.flow.views)
            raise KeyError(f"flow {self.target.flow.name!r} has no view {name!r} ({known})")
        return self._rows(self.target.tables.view(name), list(view.group_key))

    def current(self) -> list[dict[str, Any]]:
        """The current state: each live key's winning version, in key order."""
        return self._rows(self.target.tables.current, [self.target.flow.key])

    def quarantined(self) -> dict[str, str]:
        """``{key: rule}`` of the rows the flow's rules rejected."""
        from streamshift.engine.write.target import read_or_empty

        flow = self.target.flow
        frame = read_or_empty(self.spark, self.target.tables.quarantine, QUARANTINE_SCHEMA)
        rows = frame.where(frame["flow"] == flow.name).select("raw_payload", "rule").collect()
        at = [f.name for f in flow.schema.fields].index(flow.key)
        return {_key(r.raw_payload, flow.key, at): r.rule for r in rows}


def _key(payload: str, key: str, at: int) -> str:
    """The key of a quarantined row: its payload is a file's line or an event's JSON."""
    try:
        return str(json.loads(payload)[key])
    except (ValueError, TypeError, KeyError):
        fields = next(csv.reader([payload]), [])
        return fields[at] if at < len(fields) else payload


def load_rows(
    spark: SparkSession,
    flow: str,
    rows: Sequence[Mapping[str, Any]],
    business_date: dt.date,
    folder: Path,
    *,
    layer: str = "batch",
) -> Loaded:
    """Load ``rows`` (dicts by column name; dates, datetimes, Decimals or text) as the flow's
    EOD file for ``business_date``, into a warehouse under ``folder``."""
    from streamshift.engine.write.target import Target

    folder.mkdir(parents=True, exist_ok=True)
    settings = local_settings(folder / "home")
    target = Target.open(spark, settings, get_flow(flow), layer)
    loaded = Loaded(spark, target, business_date, folder)
    loaded._load(rows, replace=False)
    return loaded


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """One local Spark session with Delta and the kit's jars, for the whole test run."""
    from streamshift.engine.spark import get_spark

    session = get_spark(local_settings(tmp_path_factory.mktemp("spark")), app_name="tests")
    yield session
    session.stop()


__all__ = ["Loaded", "load_rows", "local_settings", "spark"]
