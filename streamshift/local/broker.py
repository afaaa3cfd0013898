"""The embedded single-node Kafka broker of the local stack.

The broker is Apache Kafka in KRaft mode (broker + controller in one JVM) run from the jars
that ``scripts/setup`` fetched, listening on 127.0.0.1 only, its data under
``STREAMSHIFT_HOME/kafka``. Topic administration lives in :mod:`streamshift.store.kafka`.
"""

from __future__ import annotations

import base64
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.settings import KIT_JARS, Settings
from streamshift.store.kafka import QUIET
from streamshift.store.processes import pid_alive, port_open, tail, terminate


class BrokerError(StreamshiftError):
    """The local broker could not be started, reached or stopped."""


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    pid: int | None
    bootstrap: str
    data_dir: Path

    def describe(self) -> str:
        if self.running:
            return f"running (pid {self.pid}) on {self.bootstrap}, data in {self.data_dir}"
        return f"stopped (data in {self.data_dir})"


class LocalBroker:
    """A single-node KRaft broker on 127.0.0.1, data in ``data_dir``."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        controller_port: int,
        jars: list[Path],
        log4j_config: Path,
        heap: str = "768m",
    ) -> None:
        self.data_dir = Path(data_dir)
        self.port = port
        self.controller_port = controller_port
        self.jars = jars
        self.log4j_config = log4j_config
        self.heap = heap

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalBroker:
        first = settings.kafka_bootstrap_servers.split(",")[0]
        host, _, port_text = first.rpartition(":")
        if host not in {"127.0.0.1", "localhost"}:
            raise BrokerError(
                f"STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS={settings.kafka_bootstrap_servers} points "
                "at a remote cluster; the local broker only runs on 127.0.0.1"
            )
        port = int(port_text)
        return cls(
            data_dir=settings.kafka_data,
            port=port,
            controller_port=settings.kafka_controller_port or port + 1,
            jars=settings.kafka_jars,
            log4j_config=KIT_JARS / "log4j2-kafka.properties",
        )

    # ---- files -------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "broker.log"

    @property
    def config_file(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def log_dirs(self) -> Path:
        return self.data_dir / "logs"

    def _config(self) -> str:
        return "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.bootstrap.servers=127.0.0.1:{self.controller_port}",
                (
                    f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
                    f"CONTROLLER://127.0.0.1:{self.controller_port}"
                ),
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={self.log_dirs}",
                "num.partitions=3",
                "auto.create.topics.enable=false",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=3",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "transaction.state.log.num.partitions=3",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "log.retention.check.interval.ms=30000",
                "",
            ]
        )

    def _java(self, main: str, *args: str) -> list[str]:
        if not self.jars:
            raise BrokerError(
                "the Kafka broker jars are missing (STREAMSHIFT_JARS_DIR/kafka/lib): run `streamshift "
                "setup` (in the kit's repository: scripts/setup) first"
            )
        classpath = ":".join(str(j) for j in self.jars)
        return [
            "java",
            f"-Xmx{self.heap}",
            "-Xms256m",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile=file:{self.log4j_config}",
            "-cp",
            classpath,
            main,
            *args,
        ]

    # ---- lifecycle ---------------------------------------------------------------------
    def _read_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def status(self) -> BrokerStatus:
        pid = self._read_pid()
        running = pid is not None and pid_alive(pid)
        return BrokerStatus(running, pid if running else None, self.bootstrap, self.data_dir)

    def _format_storage(self) -> None:
        """Format the KRaft metadata log once (first start only)."""
        if (self.log_dirs / "meta.properties").exists():
            return
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        result = subprocess.run(
            self._java(
                "kafka.tools.StorageTool",
                "format",
                "--standalone",
                # Attached with '=': a URL-safe base64 id may start with '-' (1 in 64), which
                # the tool's argument parser would take for an option.
                f"--cluster-id={cluster_id}",
                "-c",
                str(self.config_file),
            ),
            capture_output=True,
            text=True,
            check=False,  # the return code is reported below, with the tool's output
        )
        if result.returncode != 0:
            raise BrokerError(f"formatting broker storage failed:\n{result.stdout}{result.stderr}")

    def start(self, timeout: float = 90.0) -> bool:
        """Start the broker and wait until it serves requests. False if it already ran."""
        if self.status().running:
            return False
        if port_open(self.port) or port_open(self.controller_port):
            raise BrokerError(
                f"port {self.port} or {self.controller_port} on 127.0.0.1 is taken by another "
                "process; stop it or set STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS to another port"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(self._config())
        self._format_storage()
        with open(self.log_file, "ab") as log:
            process = subprocess.Popen(
                self._java("kafka.Kafka", str(self.config_file)),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid_file.write_text(str(process.pid))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise BrokerError(
                    f"the broker exited with code {process.returncode}; see {self.log_file}:\n"
                    + tail(self.log_file)
                )
            if port_open(self.port) and self._answers():
                return True
            time.sleep(0.5)
        self.stop()
        raise BrokerError(f"the broker did not come up within {timeout:.0f}s; see {self.log_file}")

    def _answers(self) -> bool:
        from confluent_kafka.admin import AdminClient

        try:
            admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
            metadata = admin.list_topics(timeout=2)
            return bool(metadata.brokers)
        except Exception:  # noqa: BLE001 - any failure means "not ready yet"
            return False

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop the broker (SIGTERM, then SIGKILL after ``timeout``). False if not running."""
        pid = self._read_pid()
        if pid is None or not pid_alive(pid):
            self.pid_file.unlink(missing_ok=True)
            return False
        terminate(pid, timeout)
        self.pid_file.unlink(missing_ok=True)
        return True
