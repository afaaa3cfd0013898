"""The local stack's executor: Airflow's ``LocalExecutor``, whose workers start with the
Python modules every Spark task imports already loaded.

A LocalExecutor worker forks each task's process from itself, and forks itself from the
scheduler when the executor starts. A Spark task's process imports the Spark Connect client
and Great Expectations (the job validates the day it wrote): seconds of pure Python in every
task, each time. Imported once in the scheduler before its workers fork, they are in every
task's process from its first instruction, in memory the processes share.

Set by ``streamshift airflow up`` (``[core] executor``); on another deployment the plain
``LocalExecutor`` (or any other executor) runs the same DAGs, each task paying its imports.
"""

from __future__ import annotations

import importlib
import logging

from airflow.executors.local_executor import LocalExecutor

# What a Spark task's process imports before its job's first statement: the Connect client
# (the operator's session) and the data-quality library (the job's validation).
PRELOADED = ("pyspark.sql.connect.session", "great_expectations")

log = logging.getLogger(__name__)


def preload(modules: tuple[str, ...] = PRELOADED) -> None:
    """Import ``modules``; one that cannot be is logged and left to the tasks (which import it
    themselves, and say why if they need it)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a preload never stops the scheduler
            log.warning("could not preload %s for the tasks (%s)", name, exc)


class PreloadingLocalExecutor(LocalExecutor):
    """``LocalExecutor`` whose workers fork with :data:`PRELOADED` imported."""

    def start(self) -> None:
        preload()
        super().start()
