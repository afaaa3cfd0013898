"""Every Delta commit of the write path goes through here: one MERGE helper, one append, and
the fault-injection point the re-run tests use.

Conditions are :class:`~streamshift.spec.sqltext.Sql` expressions: values in them are typed
literals from the one encoder (a key such as ``BK\\7`` or ``O'Brien`` is hex bytes to the
parser, never characters of the statement). Column names come from the flow's spec.

Fault injection (tests, and anyone checking a deployment's recovery): with
``STREAMSHIFT_KILL_AFTER_COMMITS=k`` in the environment, the process exits with status 137
(as ``kill -9`` leaves it) right after its k-th commit through this module. With
``STREAMSHIFT_KILL_AFTER_COMMITS_FILE=path`` instead, it does so only while ``path`` holds k,
and removes the file as it exits: armed in a running Airflow stack, one task dies after its
k-th commit and Airflow's retry of it runs to its end. In-process,
:func:`kill_after` does the same without ending the process: the k-th commit raises
:class:`SimulatedKill` once it has committed, and every later commit of the process raises it
before committing, as if the process had died there.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from typing import Literal

from pyspark.sql import DataFrame

from streamshift.spec.sqltext import Sql, delta_path, identifier

KILL_ENV = "STREAMSHIFT_KILL_AFTER_COMMITS"
KILL_FILE_ENV = "STREAMSHIFT_KILL_AFTER_COMMITS_FILE"

Assignments = Literal["*"] | Mapping[str, Sql]


class SimulatedKill(BaseException):
    """The process 'died' at a fault-injection point (not an Exception: nothing catches it
    on the way out, as nothing would catch a SIGKILL)."""


class _Faults:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.committed = 0
        self.limit: int | None = None
        self.in_process = False
        env = os.environ.get(KILL_ENV)
        if env:
            self.limit = int(env)
        self.armed_by = os.environ.get(KILL_FILE_ENV) or None

    def _armed(self) -> bool:
        """The process is to exit now: its count is at the armed file's k (one process
        wins the file's removal; a retry finds no file and runs on)."""
        try:
            with open(self.armed_by) as handle:  # type: ignore[arg-type]
                if int(handle.read().strip() or 0) != self.committed:
                    return False
            os.unlink(self.armed_by)  # type: ignore[arg-type]
        except (OSError, ValueError):
            return False
        return True

    def before(self) -> None:
        with self.lock:
            if self.limit is not None and self.in_process and self.committed >= self.limit:
                raise SimulatedKill(f"killed after commit {self.limit}")

    def after(self, what: str) -> None:
        with self.lock:
            self.committed += 1
            at_limit = self.limit is not None and self.committed == self.limit
            if self.in_process:
                if at_limit:
                    raise SimulatedKill(f"killed after commit {self.limit} ({what})")
                return
            if at_limit or (self.armed_by is not None and self._armed()):
                print(f"[fault] exiting after commit {self.committed} ({what})", file=sys.stderr)
                sys.stderr.flush()
                os._exit(137)


_faults = _Faults()
# Every table this process committed to (the job runner warms their state afterwards).
_written: set[str] = set()


def reset_faults() -> None:
    """Read the fault-injection settings from the environment again (a process forked to run
    a job takes on the environment of the command it runs for)."""
    global _faults
    _faults = _Faults()


def tables_written() -> list[str]:
    """The Delta tables this process committed to through this module."""
    return sorted(_written)


def kill_after(commits: int | None) -> None:
    """In-process fault injection: the ``commits``-th commit from now is the last one
    (``None`` turns it off)."""
    with _faults.lock:
        _faults.committed = 0
        _faults.limit = commits
        _faults.in_process = commits is not None


def commits_so_far() -> int:
    """Commits through this module since the process started or :func:`kill_after` reset it."""
    return _faults.committed


def merge_into(
    path: str,
    source: DataFrame,
    on: Sql,
    *,
    update: Assignments | None = None,
    update_when: Sql | None = None,
    delete_when: Sql | None = None,
    insert: Assignments | None = None,
    insert_when: Sql | None = None,
) -> dict[str, int]:
    """MERGE ``source`` (alias ``s``) into the Delta table at ``path`` (alias ``t``) on ``on``.

    ``delete_when``: a matched row meeting it is deleted (checked first); ``update``: matched
    rows are updated, all columns (``"*"``) or the given ones, where ``update_when`` holds;
    ``insert``: unmatched source rows are inserted where ``insert_when`` holds. Returns the
    MERGE's row counts (``num_inserted_rows``, ``num_updated_rows``, ...).

    Delta's SQL ``MERGE INTO``, so the same call runs in a local session and through Spark
    Connect; conditions are :class:`~streamshift.spec.sqltext.Sql`, whose values are typed
    literals from the one encoder (Delta resolves a MERGE before parameter markers bind)."""

    def when(condition: Sql | None) -> str:
        return f" AND {condition.text}" if condition is not None else ""

    clauses = []
    if delete_when is not None:
        clauses.append(f"WHEN MATCHED{when(delete_when)} THEN DELETE")
    if update == "*":
        clauses.append(f"WHEN MATCHED{when(update_when)} THEN UPDATE SET *")
    elif update is not None:
        sets = ", ".join(f"t.{identifier(c)} = {v.text}" for c, v in update.items())
        clauses.append(f"WHEN MATCHED{when(update_when)} THEN UPDATE SET {sets}")
    if insert == "*":
        clauses.append(f"WHEN NOT MATCHED{when(insert_when)} THEN INSERT *")
    elif insert is not None:
        names = ", ".join(identifier(c) for c in insert)
        values = ", ".join(v.text for v in insert.values())
        clauses.append(
            f"WHEN NOT MATCHED{when(insert_when)} THEN INSERT ({names}) VALUES ({values})"
        )
    statement = f"MERGE INTO {delta_path(path)} t USING {{source}} s ON {on.text} " + " ".join(
        clauses
    )
    _faults.before()
    # The statement's own braces are doubled: the source is the one placeholder.
    template = statement.replace("{", "{{").replace("}", "}}").replace("{{source}}", "{source}")
    # In the source's own session: a stream's micro-batch frame lives in a session of its
    # own, where the statement's view of it is registered.
    row = source.sparkSession.sql(template, source=source).first()
    _written.add(path)
    _faults.after(f"MERGE into {path}")
    return {k: int(v or 0) for k, v in row.asDict().items()} if row is not None else {}


def append(frame: DataFrame, path: str, merge_schema: bool = False) -> None:
    """Append ``frame`` to the Delta table at ``path`` (one commit); ``merge_schema``: the
    table gains the frame's columns it lacks."""
    _faults.before()
    writer = frame.write.format("delta").mode("append")
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    writer.save(path)
    _written.add(path)
    _faults.after(f"append to {path}")


def overwrite(frame: DataFrame, path: str, partition_by: tuple[str, ...] = ()) -> None:
    """Replace the Delta table at ``path`` with ``frame``, its schema too (one commit)."""
    _faults.before()
    writer = frame.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
    writer.partitionBy(*partition_by).save(path)
    _written.add(path)
    _faults.after(f"overwrite of {path}")
