"""How a job that derives its changes from the tables resumes after dying half-way.

An EOD replacement turns "live in current state, absent from the file" into cancels, and the
stage-stream EOD correction applies "in the file, missing or older in the stream layer". Both
read current state to decide what to write; if they read it *live*, a re-run after the
current-state MERGE committed finds nothing left to do and never repairs history and views.

So such a job pins its input before its first write: it records a ``started`` row in the run
journal with the current-state version it computes against, and computes against that version
(Delta time travel). A re-run of the same run (same job, layer, date and file content) finds
the ``started`` row without a ``done`` one, and computes the same changes from the same
version; every step of the write path is idempotent, so it repairs what the first attempt left
undone. After ``done`` a re-run is a fresh run against the live tables, which is a no-op.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from streamshift.engine.write.commits import append
from streamshift.engine.write.target import Target, delta_log_version, ensure_table, read
from streamshift.spec.catalog import RUN_JOURNAL_SCHEMA, ControlTables
from streamshift.store.tables import rows

STARTED, DONE = "started", "done"


def file_digest(path: Path) -> str:
    """``sha256:<hex>`` of the file's bytes: its identity, whatever its name."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def run_key(*parts: object) -> str:
    """One run's identity from what makes it the same run (job inputs, file digests)."""
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class PinnedRun:
    """A run whose input is fixed: ``version`` is the current-state version it reads."""

    job: str
    key: str
    version: int
    started_at: dt.datetime
    resumed: bool

    def current(self, target: Target) -> DataFrame:
        """Current state as the run's first attempt saw it."""
        return read(target.spark, target.tables.current, self.version)


def begin(spark: SparkSession, target: Target, job: str, key: str) -> PinnedRun:
    """Resume the unfinished run ``key`` of ``job``, or start one pinned at current state's
    latest version (one commit to the journal, before anything else is written)."""
    target.create_tables()
    path = ControlTables(target.tables.warehouse).run_journal
    ensure_table(spark, path, RUN_JOURNAL_SCHEMA)
    tables = target.tables
    found = rows(
        path,
        where=[
            ("flow", "=", tables.flow.name),
            ("layer", "=", tables.layer),
            ("job", "=", job),
            ("run_key", "=", key),
        ],
        order_by=["at"],
    )
    if found and found[-1]["state"] == STARTED:
        last = found[-1]
        return PinnedRun(job, key, int(last["pinned_version"]), last["at"], resumed=True)
    version = delta_log_version(spark, tables.current)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    _record(spark, path, target, job, key, version, STARTED, now)
    return PinnedRun(job, key, version, now, resumed=False)


def finish(spark: SparkSession, target: Target, run: PinnedRun) -> None:
    """The run is complete: a re-run of it starts afresh."""
    path = ControlTables(target.tables.warehouse).run_journal
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    _record(spark, path, target, run.job, run.key, run.version, DONE, now)


def _record(
    spark: SparkSession,
    path: str,
    target: Target,
    job: str,
    key: str,
    version: int,
    state: str,
    at: dt.datetime,
) -> None:
    row = [(target.flow.name, target.tables.layer, job, key, version, state, at)]
    append(spark.createDataFrame(row, RUN_JOURNAL_SCHEMA), path)
