"""A real Spark standalone cluster on 127.0.0.1 — a master and workers started with
``spark-class`` from PySpark's own distribution, as a cluster's nodes would start them."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from streamshift.engine.spark import submit_env
from streamshift.store.processes import free_port, pid_alive, port_open

SPARK_CLASS = str(Path(sys.executable).parent / "spark-class")


class SparkCluster:
    """``spark://127.0.0.1:PORT`` with ``workers`` workers of ``cores`` cores each."""

    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "2g"):
        self.root, self.workers, self.cores, self.memory = root, workers, cores, memory
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.processes: list[subprocess.Popen[bytes]] = []

    def _env(self) -> dict[str, str]:
        env = submit_env(self.root)  # the executors' Python: this venv's
        del env["STREAMSHIFT_HOME"]  # the daemons belong to no streamshift home
        env["SPARK_LOG_DIR"] = str(self.root / "logs")
        return env

    def _start(self, name: str, *args: str) -> None:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        log = open(self.root / "logs" / f"{name}.out", "wb")  # noqa: SIM115 - the child keeps it
        self.processes.append(
            subprocess.Popen(
                [SPARK_CLASS, *args],
                env=self._env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        log.close()

    def start(self, timeout: float = 120) -> SparkCluster:
        self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port),
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not (self._bound_ports() and port_open(self.port)):
            self._check_alive(deadline)
        for i in range(self.workers):
            work = self.root / f"worker-{i + 1}"
            work.mkdir(parents=True, exist_ok=True)
            self._start(
                f"worker-{i + 1}",
                "org.apache.spark.deploy.worker.Worker", self.url,
                "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                "--webui-port", str(free_port()), "--work-dir", str(work),
            )  # fmt: skip
        while sum(w["state"] == "ALIVE" for w in self.state().get("workers", [])) < self.workers:
            self._check_alive(deadline)
        return self

    def _check_alive(self, deadline: float) -> None:
        dead = [p.args for p in self.processes if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            logs = "\n".join(p.read_text()[-1500:] for p in (self.root / "logs").glob("*.out"))
            raise AssertionError(f"the Spark cluster did not come up ({dead}):\n{logs}")
        time.sleep(0.5)

    def _bound_ports(self) -> bool:
        """Whether the master has said where it listens; takes the ports it bound, which are
        not the ones asked for when another process took one of those in between (Spark then
        moves to the next port)."""
        log = self.root / "logs" / "master.out"
        text = log.read_text(errors="replace") if log.exists() else ""
        master = re.search(r"Starting Spark master at spark://[^:]+:(\d+)", text)
        ui = re.search(
            r"MasterWebUI: Bound MasterWebUI to .*, and started at https?://[^:]+:(\d+)", text
        )
        if not (master and ui):
            return False
        self.port, self.ui_port = int(master.group(1)), int(ui.group(1))
        self.url = f"spark://127.0.0.1:{self.port}"
        return True

    def state(self) -> dict[str, Any]:
        """The master's own view (its web UI's JSON): workers, running and completed apps;
        empty while it does not answer with that JSON yet (a page still starting answers with
        HTML)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
                state: dict[str, Any] = json.loads(r.read())
                return state
        except (OSError, ValueError):
            return {}

    def stop(self) -> None:
        for process in reversed(self.processes):
            if pid_alive(process.pid):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
