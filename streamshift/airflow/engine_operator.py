"""The operator of every Spark task but upkeep: the Spark provider's ``PySparkOperator`` on a
``spark_connect`` connection, so the task's process is a Spark Connect client of the warm
engine and starts no JVM.

The provider's operator falls back, silently, to a local Spark in the worker for a
connection of any other type; this one refuses instead, and fails at once, saying what to
start, when the engine does not answer. A job's own error comes back as the exception it
raised: a final one (bad input, a refused request) fails the task without retries.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
from airflow.providers.apache.spark.operators.spark_pyspark import PySparkOperator
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowFailException

from streamshift.spec.errors import StreamshiftError
from streamshift.store.endpoints import engine_address
from streamshift.store.processes import port_open


def engine_url(conn_id: str) -> str:
    """The engine's Spark Connect URL from connection ``conn_id``, checked: it must be a
    ``spark_connect`` connection to an engine that answers."""

    conn = BaseHook.get_connection(conn_id)
    if conn.conn_type != SparkConnectHook.conn_type:
        raise AirflowFailException(
            f"connection {conn_id} is of type {conn.conn_type!r}; Spark tasks run on the warm "
            "engine through a 'spark_connect' connection (sc://host:port)"
        )
    url = SparkConnectHook(conn_id).get_connection_url()
    host, port = engine_address(url)
    if not port_open(port, host):
        raise AirflowFailException(
            f"the Spark engine at {url} does not answer: start it (`streamshift engine up`; "
            "the local stack's `streamshift airflow up` starts it too) and clear this task"
        )
    return url


class EngineOperator(PySparkOperator):
    """``PySparkOperator`` that runs only on the warm engine (see the module's note)."""

    def execute_callable(self) -> Any:
        engine_url(self.conn_id or "")
        try:
            return super().execute_callable()
        except StreamshiftError as exc:
            if exc.final:
                raise AirflowFailException(f"{self.task_id} failed: {exc}") from exc
            raise RuntimeError(f"{self.task_id} failed: {exc}") from exc
