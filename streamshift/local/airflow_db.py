"""How the local Airflow stack's processes talk to its SQLite metadata database.

Airflow imports this module by name (``AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS``) in every
process of the stack before it creates its engine, so it stays small: the standard library and
SQLAlchemy only.

SQLite lets one writer in at a time. Waiting for the lock is what its busy timeout is for
(a minute here, against sqlite's default 5 s, which under load failed a backfill). But in WAL
mode, which Airflow sets, a transaction that began by reading and then writes after another
process has committed cannot wait: its snapshot is stale, and the write fails at once with
"database is locked" (SQLITE_BUSY_SNAPSHOT). ``airflow backfill create`` is such a transaction
(it reads the DAG and the runs, then inserts), and the scheduler commits every few seconds.

So a process started with ``STREAMSHIFT_AIRFLOW_DB_WRITER=1`` — the one-off commands
``streamshift airflow cli`` runs for a user — begins every transaction with
``BEGIN IMMEDIATE``: it takes the write lock first, waiting its turn through the busy timeout,
and then reads and writes with nobody committing in between. The stack's long-running
components keep Airflow's own transactions (and its retries of them).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

# The value AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS(_ASYNC) names: sqlite3's (and
# aiosqlite's) busy timeout, in seconds.
CONNECT_ARGS = {"timeout": 60}

WRITER_ENV = "STREAMSHIFT_AIRFLOW_DB_WRITER"
_IMMEDIATE = "streamshift_begin_immediate"


def _install() -> None:
    """SQLAlchemy's recipe for pysqlite's transactions, with BEGIN IMMEDIATE: the driver's own
    implicit BEGIN is turned off, and the engine's ``begin`` event emits ours."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _no_implicit_begin(dbapi_connection: Any, record: Any) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):  # not the async driver's
            dbapi_connection.isolation_level = None
            record.info[_IMMEDIATE] = True

    @event.listens_for(Engine, "begin")
    def _begin_immediate(connection: Any) -> None:
        if connection.connection.info.get(_IMMEDIATE):
            connection.exec_driver_sql("BEGIN IMMEDIATE")


if os.environ.get(WRITER_ENV) == "1":
    _install()
