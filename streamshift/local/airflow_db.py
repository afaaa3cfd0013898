"""How the local Airflow stack's processes talk to its SQLite metadata database.

Airflow imports this module by name (``AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS``) in every
process of the stack — scheduler, API server, DAG processor, triggerer, ``airflow`` commands —
before it creates its engine, so it stays small: the standard library and SQLAlchemy only
(the API server's audit-log wrapper below imports what that module imports anyway).

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

One wait must not happen on the API server's event loop: a request's audit-log entry (Airflow's
``action_logging``, on every write of the REST API: a trigger, a pause, a clear) is an async
dependency that commits through the synchronous session. While it waits for the lock the loop
runs nothing else, and the lock is often held by another request whose route wrote in a worker
thread and commits when its session closes — a step the loop runs. Two triggers at once held
every request of the API server (the Execution API's heartbeats among them) for the whole busy
timeout, then failed. So when the API server imports Airflow's audit-log module, its commit is
moved to a worker thread (:func:`_audit_commits_off_the_loop`); the entry is still written,
before the route runs, as Airflow writes it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sqlite3
import sys
from types import ModuleType
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


# Airflow's audit-log dependency (``action_logging``), which every REST write declares.
AUDIT_LOG_MODULE = "airflow.api_fastapi.logging.decorators"


class _CommitLater:
    """The request's session as the audit-log dependency uses it (``add``, then ``commit``),
    with the commit left for the caller to run off the event loop."""

    def __init__(self, session: Any) -> None:
        self._session, self.committed = session, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def commit(self) -> None:
        self.committed = True


def _audit_commits_off_the_loop(module: ModuleType) -> None:
    """Wrap ``module.action_logging`` (imported by the route modules after this runs): the
    dependency it makes runs Airflow's own, then commits its entry in a worker thread."""
    import inspect
    import typing

    import anyio

    make = module.action_logging

    def action_logging(event: str | None = None) -> Any:
        log_action = make(event)

        async def log_action_off_the_loop(**kwargs: Any) -> None:
            session = kwargs["session"]
            deferred = _CommitLater(session)
            await log_action(**{**kwargs, "session": deferred})
            if deferred.committed:
                await anyio.to_thread.run_sync(session.commit)

        # FastAPI injects by the signature: Airflow's, its annotations resolved where it lives.
        hints = typing.get_type_hints(log_action, include_extras=True)
        signature = inspect.signature(log_action)
        log_action_off_the_loop.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[
                p.replace(annotation=hints.get(p.name, p.annotation))
                for p in signature.parameters.values()
            ],
            return_annotation=inspect.Signature.empty,
        )
        return log_action_off_the_loop

    module.action_logging = action_logging  # type: ignore[attr-defined]


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds ``name`` through the other finders once, and runs ``then`` on the module right
    after it is executed, before anything can import a name from it."""

    def __init__(self, name: str, then: Any) -> None:
        self.name, self.then = name, then

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        execute, then = spec.loader.exec_module, self.then

        def exec_module(module: ModuleType) -> None:
            execute(module)
            then(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if AUDIT_LOG_MODULE not in sys.modules:
    sys.meta_path.insert(0, _WrapOnImport(AUDIT_LOG_MODULE, _audit_commits_off_the_loop))
