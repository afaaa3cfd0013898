"""The warm engine of the local stack: Spark's own Spark Connect server, started from the
PySpark package with Delta's SQL extension and the kit's jars, on 127.0.0.1 only.

Request-style jobs (EOD loads, corrections, reconciliations, closes, replays, quality) run on
it as Spark Connect clients, so none of them starts a JVM or warms a JIT of its own
(bench/engine_latency.py). Its pid and log live under ``STREAMSHIFT_HOME/engine``; its
address is the ``STREAMSHIFT_ENGINE`` setting. On a cluster the engine is a Connect server
whose master is the cluster (README, "On a cluster"): this module only runs the local one.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.settings import Settings
from streamshift.store.processes import (
    port_open,
    process_start,
    same_process,
    tail,
    terminate,
)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# Local engines only: a URL naming another host is a remote engine, started by its owner.
LOOPBACK = {"127.0.0.1", "localhost"}


class EngineError(StreamshiftError):
    """The local engine could not be started, reached or stopped."""


@dataclass(frozen=True)
class EngineStatus:
    running: bool
    pid: int | None
    url: str
    log: Path

    def describe(self) -> str:
        if self.running:
            return f"running (pid {self.pid}) at {self.url}, log {self.log}"
        return f"stopped ({self.url}); start it with `streamshift engine up`"


class LocalEngine:
    """A Spark Connect server on 127.0.0.1 for the settings' ``engine`` URL."""

    def __init__(self, settings: Settings) -> None:
        from streamshift.engine.spark import engine_address

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
        try:
            pid_text, _, start_text = self.pid_file.read_text().strip().partition(" ")
            return int(pid_text), int(start_text) if start_text else None
        except (OSError, ValueError):
            return None

    def status(self) -> EngineStatus:
        record = self._record()
        running = record is not None and same_process(*record) and port_open(self.port)
        pid = record[0] if running and record else None
        return EngineStatus(running, pid, self.url, self.log_file)

    def start(self, timeout: float = 180.0, progress=None) -> bool:  # type: ignore[no-untyped-def]
        """Start the engine and wait until it answers a query. False if it already ran."""
        from streamshift.engine.spark import submit_env

        if self.status().running:
            return False
        if port_open(self.port):
            raise EngineError(
                f"port {self.port} on 127.0.0.1 is taken by another process; stop it or set "
                "STREAMSHIFT_ENGINE to sc://127.0.0.1:<a free port>"
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        env = submit_env(self.settings.home)
        env.pop("SPARK_SUBMIT_OPTS", None)
        with open(self.log_file, "ab") as log:
            process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        self.pid_file.write_text(f"{process.pid} {process_start(process.pid) or ''}".strip())
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

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop the engine (SIGTERM, then SIGKILL after ``timeout``). False if not running."""
        record = self._record()
        if record is None or not same_process(*record):
            self.pid_file.unlink(missing_ok=True)
            return False
        terminate(record[0], timeout)
        self.pid_file.unlink(missing_ok=True)
        return True
