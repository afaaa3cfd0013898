"""How the local Airflow stack's processes talk to its SQLite metadata database.

Airflow imports this module by name (``AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS``) in every
process of the stack — scheduler, API server, DAG processor, triggerer, ``airflow`` commands —
before it creates its engine, so it stays small: the standard library and SQLAlchemy only.

SQLite lets one writer in at a time. Waiting for the lock is what its busy timeout is for (a
minute here, against sqlite's default 5 s, which under load failed a backfill). But in WAL
mode, which Airflow sets, a transaction that began by reading and then writes after another
process has committed cannot wait: its snapshot is stale, and the write fails at once with
"database is locked" (SQLITE_BUSY_SNAPSHOT).

Python's sqlite3 driver only begins a transaction at the first INSERT, UPDATE or DELETE, so
reads before it are not in the transaction, except after a SAVEPOINT, which begins one.
Airflow opens one (``session.begin_nested()``) for each backfill run it creates and for
each asset event it registers, then reads, then writes: ``backfill create`` failed that way
whenever the scheduler committed in between. So when a SAVEPOINT would begin the transaction,
this module begins it first with ``BEGIN IMMEDIATE``: the write lock is taken up front, waiting
its turn through the busy timeout, and nobody commits between the reads and the writes. Other
transactions are left as Airflow makes them.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

# The value AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS(_ASYNC) names: sqlite3's (and
# aiosqlite's) busy timeout, in seconds.
CONNECT_ARGS = {"timeout": 60}


@event.listens_for(Engine, "savepoint")
def _write_lock_before_a_savepoint(connection: Any, name: str | None) -> None:
    dbapi_connection = connection.connection.dbapi_connection
    if isinstance(dbapi_connection, sqlite3.Connection) and not dbapi_connection.in_transaction:
        dbapi_connection.execute("BEGIN IMMEDIATE")
