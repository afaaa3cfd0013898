"""Running the `streamshift` command as a user does: a subprocess with its own settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from streamshift.engine.spark import submit_env

CLI = [sys.executable, "-m", "streamshift.cli"]
# Small local Spark for commands that start one.
LOCAL_SPARK = {"spark_master": "local[2]", "spark_shuffle_partitions": "2"}
# The suite's warm engine (conftest.py starts it), which request-style commands run on; empty
# when the suite runs without one (TESTS_ENGINE=off): then each command starts its own JVM.
ENGINE_URL_VAR = "TESTS_ENGINE_URL"


def suite_engine() -> str:
    return os.environ.get(ENGINE_URL_VAR, "")


def cli_env(home: Path, **settings: str) -> dict[str, str]:
    """The environment minus the developer's STREAMSHIFT_*, plus ``home`` and ``settings``
    (given by field name: ``spark_master="local[2]"`` → STREAMSHIFT_SPARK_MASTER)."""
    env = submit_env(home)  # this venv first on PATH, loopback, this Python for workers
    env["STREAMSHIFT_ENGINE"] = suite_engine()  # never a developer's engine
    env["STREAMSHIFT_TABLE_TEMPLATES"] = os.environ.get("STREAMSHIFT_TABLE_TEMPLATES", "")
    env.update({f"STREAMSHIFT_{name.upper()}": value for name, value in settings.items()})
    return env


def run_cli(
    home: Path,
    *args: str,
    timeout: float = 600,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    **settings: str,
) -> subprocess.CompletedProcess[str]:
    """``streamshift ARGS`` in a subprocess (in folder ``cwd``), in ``cli_env(home, **settings)``
    unless ``env`` (built from it) is given."""
    assert env is None or not settings, "pass the settings to cli_env() when giving env"
    return subprocess.run(
        [*CLI, *args],
        env=cli_env(home, **settings) if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )
