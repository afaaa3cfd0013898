"""The warm engine of the local stack: Spark's own Spark Connect server, started from the
PySpark package with Delta's SQL extension and the kit's jars, on 127.0.0.1 only.

Request-style jobs (EOD loads, corrections, reconciliations, closes, replays, quality) run on
it as Spark Connect clients, so none of them starts a JVM or warms a JIT of its own
(bench/engine_latency.py). Its pid and log live under ``STREAMSHIFT_HOME/engine``; its
address is the ``STREAMSHIFT_ENGINE`` setting. On a cluster the engine is a Connect server
whose master is the cluster (README, "On a cluster"): this module only runs the local one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.project import ENV as PROJECT_ENV
from streamshift.spec.settings import Settings
from streamshift.store.endpoints import LOOPBACK, engine_address
from streamshift.store.processes import (
    port_open,
    process_start,
    same_process,
    tail,
    terminate,
)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# Local engines only: a URL naming another host is a remote engine, started by its owner.


class EngineError(StreamshiftError):
    """The local engine could not be started, reached or stopped."""


@dataclass(frozen=True)
class EngineStatus:
    running: bool
    pid: int | None
    url: str
    log: Path
    runner: bool = False  # its job runner runs and listens

    def describe(self) -> str:
        if self.running:
            runner = (
                "its job runner ready"
                if self.runner
                else "no job runner (commands start their own client; `streamshift engine up` "
                "starts one)"
            )
            return f"running (pid {self.pid}) at {self.url}, {runner}, log {self.log}"
        return f"stopped ({self.url}); start it with `streamshift engine up`"


class LocalEngine:
    """A Spark Connect server on 127.0.0.1 for the settings' ``engine`` URL."""

    def __init__(self, settings: Settings) -> None:

        if not settings.engine:
            raise EngineError(
                "STREAMSHIFT_ENGINE is empty (jobs run in local sessions); set it to "
                "sc://127.0.0.1:<port> to run a local engine"
            )
        self.settings = settings
        self.host, self.port = engine_address(settings.engine)
        if self.host not in LOOPBACK:
            raise EngineError(
                f"STREAMSHIFT_ENGINE={settings.engine} names another host; the local engine "
                "only runs on 127.0.0.1 (a remote engine is started where it runs)"
            )
        self.folder = settings.home / "engine"

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.folder / "engine.pid"

    @property
    def log_file(self) -> Path:
        return self.folder / "engine.log"

    def command(self) -> list[str]:
        from streamshift.engine.spark import submit_args

        args = submit_args(self.settings)
        at = args.index("spark.driver.memory=" + self.settings.spark_driver_memory)
        args[at] = f"spark.driver.memory={self.settings.engine_memory}"
        return [
            str(Path(sys.executable).parent / "spark-submit"),
            "--class",
            SERVER_CLASS,
            "--name",
            "streamshift-engine",
            *args,
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            f"spark.connect.grpc.binding.port={self.port}",
            # Jobs of several clients at once share the engine's cores fairly.
            "--conf",
            "spark.scheduler.mode=FAIR",
            "spark-internal",
        ]

    def _record(self) -> tuple[int, int | None] | None:
        return _read_record(self.pid_file)

    def status(self) -> EngineStatus:
        record = self._record()
        running = record is not None and same_process(*record) and port_open(self.port)
        pid = record[0] if running and record else None
        return EngineStatus(
            running, pid, self.url, self.log_file, running and self.runner_running()
        )

    def start(self, timeout: float = 180.0, progress=None) -> bool:  # type: ignore[no-untyped-def]
        """Start the engine and wait until it answers a query. False if it already ran."""
        from streamshift.engine.spark import submit_env

        if self.status().running:
            if not self.runner_running():
                self._start_runner()
            return False
        if port_open(self.port):
            raise EngineError(
                f"port {self.port} on 127.0.0.1 is taken by another process; stop it or set "
                "STREAMSHIFT_ENGINE to sc://127.0.0.1:<a free port>"
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        env = submit_env(self.settings.home)
        env.pop("SPARK_SUBMIT_OPTS", None)
        process = _spawn(self.command(), env, self.log_file, self.pid_file)
        deadline, said = time.monotonic() + timeout, False
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise EngineError(
                    f"the engine exited with code {process.returncode}; see {self.log_file}:\n"
                    + tail(self.log_file)
                )
            if port_open(self.port):
                self._warm()
                try:
                    self._start_runner()
                except EngineError:  # a failed `engine up` leaves nothing running
                    self.stop()
                    raise
                return True
            if progress and not said:
                progress("waiting for the engine to listen (a JVM start, once) ...")
                said = True
            time.sleep(0.5)
        self.stop()
        raise EngineError(f"the engine did not come up within {timeout:.0f}s; see {self.log_file}")

    def _warm(self) -> None:
        """One Delta round trip, so the first job does not pay the engine's class loading."""
        import tempfile

        from streamshift.engine.spark import connect_session

        spark = connect_session(self.url, whole_process=False)
        try:
            with tempfile.TemporaryDirectory(prefix="streamshift-engine-") as tmp:
                path = f"{tmp}/warm"
                spark.range(3).write.format("delta").save(path)
                spark.read.format("delta").load(path).count()
        finally:
            spark.stop()

    @property
    def runner_pid_file(self) -> Path:
        return self.folder / "runner.pid"

    def runner_running(self) -> bool:
        """Whether the engine's job runner runs and listens."""
        from streamshift.local.runner import socket_path

        record = _read_record(self.runner_pid_file)
        return record is not None and same_process(*record) and socket_path(self.port).exists()

    def _start_runner(self, timeout: float = 60.0) -> None:
        """The job runner beside the engine (streamshift.local.runner): commands hand it their
        jobs. It is ready once its socket exists."""
        from streamshift.local.runner import socket_path

        self._stop_runner()
        path = socket_path(self.port)
        path.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMSHIFT_")}
        if self.settings.project is not None:  # it loads that project's flows ahead of jobs
            env[PROJECT_ENV] = str(self.settings.project)
        command = [sys.executable, "-m", "streamshift.local.runner", self.url]
        process = _spawn(command, env, self.folder / "runner.log", self.runner_pid_file)
        deadline = time.monotonic() + timeout
        while not path.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                self._stop_runner()
                raise EngineError(
                    "the engine's job runner did not start; see "
                    f"{self.folder / 'runner.log'}:\n" + tail(self.folder / "runner.log")
                )
            time.sleep(0.1)

    def _stop_runner(self) -> None:
        record = _read_record(self.runner_pid_file)
        if record is not None and same_process(*record):
            terminate(record[0], 10.0)
        self.runner_pid_file.unlink(missing_ok=True)

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop the engine (SIGTERM, then SIGKILL after ``timeout``). False if not running."""
        self._stop_runner()
        record = self._record()
        if record is None or not same_process(*record):
            self.pid_file.unlink(missing_ok=True)
            return False
        terminate(record[0], timeout)
        self.pid_file.unlink(missing_ok=True)
        return True


def _spawn(command: list[str], env: dict[str, str], log: Path, pid_file: Path) -> subprocess.Popen:
    """``command`` in a session of its own, its output appended to ``log``; its pid and start
    recorded in ``pid_file``."""
    with open(log, "ab") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    pid_file.write_text(f"{process.pid} {process_start(process.pid) or ''}".strip())
    return process


def _read_record(pid_file: Path) -> tuple[int, int | None] | None:
    """(pid, start) from a file :func:`_spawn` wrote; None without one."""
    try:
        pid_text, _, start_text = pid_file.read_text().strip().partition(" ")
        return int(pid_text), int(start_text) if start_text else None
    except (OSError, ValueError):
        return None
