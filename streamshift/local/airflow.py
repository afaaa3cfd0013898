"""The embedded Airflow 3 of the local stack: API server, scheduler, DAG processor, triggerer.

``streamshift airflow up`` runs them the way ``airflow standalone`` does — SQLite and the
LocalExecutor, the SimpleAuthManager with token auth — but as detached processes under
``STREAMSHIFT_HOME/airflow``, so the CLI returns and ``down`` stops them later:

* the project's ``dags/``, the kit's plugin by its entry point, examples off;
* the users ``admin``, ``operator`` (triggers and promotes, may not force), ``approver`` (the
  second pair of eyes on a promotion) and ``viewer`` (read-only), whose passwords are generated
  once and kept in ``passwords.json`` under the Airflow home (printed by ``up``, never in the
  repo), a JWT secret shared by the components kept beside it;
* ``spark_default`` pointing at ``STREAMSHIFT_SPARK_MASTER`` (``local[*]`` by default) and
  ``fs_default`` at ``/`` for the file sensor, given as ``AIRFLOW_CONN_*`` variables;
* the LocalExecutor as :class:`~streamshift.airflow.executor.PreloadingLocalExecutor`: its
  workers fork with the Spark Connect client and Great Expectations imported, so a Spark task
  does not import them itself;
* ``.venv/bin`` first on PATH for what Airflow spawns (``spark-submit`` finds its Spark home
  through it), and ``SPARK_LOCAL_IP=127.0.0.1``.

SQLite with the LocalExecutor is what Airflow 3's own ``standalone`` runs; a production
deployment uses Postgres (see ``docker-compose.yml``).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from streamshift.spec.catalog import SPARK_POOL
from streamshift.spec.settings import Settings, as_env, env_name
from streamshift.store.airflow_api import AirflowClient, AirflowError
from streamshift.store.endpoints import LOOPBACK, engine_address, engine_answers
from streamshift.store.processes import group_alive, pid_alive, port_open

# Each component's command. The scheduler and triggerer would also serve task logs on all
# interfaces (port 8793/8794); the API server reads the local log files itself, so they don't.
COMMANDS = {
    "api-server": ["api-server"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
}
COMPONENTS = tuple(COMMANDS)
# Restarted when they exit after running a while, as a service manager would: the scheduler
# exits on errors it does not handle (Airflow 3.3's scheduler loop died on a DagRun row that
# vanished under it while `backfill create` retried a locked SQLite write), and a stack without
# a scheduler leaves every run queued forever. One that exits within RESTART_AFTER seconds of
# starting is not restarted: a broken configuration fails `streamshift airflow up` at once.
RESTARTED = ("scheduler", "dag-processor", "triggerer")
RESTART_AFTER = 30
_SUPERVISE = (
    'while :; do started=$(date +%s); "$@"; code=$?; '
    f"if [ $(( $(date +%s) - started )) -lt {RESTART_AFTER} ]; then exit $code; fi; "
    'echo "[streamshift] airflow $0 exited with code $code; restarting it" >&2; sleep 2; done'
)
USER = "admin"
VIEWER = "viewer"  # read-only: sees the DAGs and the Migration page, cannot trigger or promote
OPERATOR = "operator"  # triggers DAGs and promotes through the gate, may not force past it
APPROVER = "approver"  # the second pair of eyes: approves promotions to stream and kappa
USERS = {USER: "admin", VIEWER: "viewer", OPERATOR: "op", APPROVER: "user"}  # user -> role
# Imported by name in every component (``airflow_db``: the busy timeout, and the write lock
# taken before a SAVEPOINT); named, not imported, so this module's users load no SQLAlchemy.
_CONNECT_ARGS = "streamshift.local.airflow_db.CONNECT_ARGS"


def _command(component: str) -> list[str]:
    """How a component is started: under a restart loop for those in ``RESTARTED``. Its
    process group is the stack's handle on it: ``down`` signals the loop and the component."""
    argv = [str(_venv_bin() / "airflow"), *COMMANDS[component]]
    if component not in RESTARTED:
        return argv
    return ["/bin/sh", "-c", _SUPERVISE, component, *argv]


def _venv_bin() -> Path:
    return Path(sys.executable).parent


def connections(settings: Settings) -> dict[str, str]:
    """``AIRFLOW_CONN_*`` values: the warm engine (``spark_connect``) from the settings' engine,
    spark-submit's master (``spark_default``, upkeep) from their master, the local filesystem."""
    spark = {
        "conn_type": "spark",
        "host": settings.spark_master,
        "extra": {"spark-binary": "spark-submit"},
    }
    fs = {"conn_type": "fs", "extra": {"path": "/"}}
    found = {
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark),
        "AIRFLOW_CONN_FS_DEFAULT": json.dumps(fs),
    }
    if settings.engine:  # the warm engine every Spark task but upkeep runs on
        host, port = engine_address(settings.engine)
        engine = {"conn_type": "spark_connect", "host": f"sc://{host}", "port": port}
        found["AIRFLOW_CONN_SPARK_CONNECT"] = json.dumps(engine)
    return found


def metadata_db(settings: Settings) -> Path:
    """The local stack's SQLite metadata database (created by ``streamshift airflow up``)."""
    return settings.airflow_home / "airflow.db"


def migrated_stamp(settings: Settings) -> Path:
    """Beside the metadata database: the Airflow version that last migrated it."""
    return metadata_db(settings).with_name("airflow.db.migrated")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def migrated(settings: Settings) -> bool:
    """Whether the metadata database exists with Airflow's schema (read-only: an ``airflow``
    command run before ``up`` leaves an empty file behind)."""
    try:
        with closing(sqlite3.connect(f"{metadata_db(settings).as_uri()}?mode=ro", uri=True)) as db:
            return db.execute("SELECT count(*) FROM alembic_version").fetchone()[0] > 0
    except sqlite3.Error:
        return False


def dags_folder(settings: Settings) -> Path:
    """The project's ``dags/`` (one project per Airflow)."""
    if settings.project is None:
        raise AirflowError(
            "no streamshift project here: run `streamshift airflow up` from your project "
            "(or set STREAMSHIFT_PROJECT); `streamshift init DIR` makes one"
        )
    return settings.project / "dags"


def airflow_env(
    settings: Settings, port: int, base: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment every Airflow component (and every task it runs) gets."""
    home = settings.airflow_home
    env = dict(os.environ if base is None else base)
    env.update(connections(settings))
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder(settings)),
            # Empty: the kit's plugin comes through its airflow.plugins entry point.
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
            # LocalExecutor, its workers forked with the Spark tasks' imports done
            "AIRFLOW__CORE__EXECUTOR": "streamshift.airflow.executor.PreloadingLocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(
                f"{user}:{role}" for user, role in USERS.items()
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{metadata_db(settings)}",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": _CONNECT_ARGS,
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": _CONNECT_ARGS,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__API_AUTH__JWT_SECRET": _secret(home / "jwt_secret"),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "20",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            # An idle scheduler looks for work 4 times a second, not once: a task starts sooner
            # after the one before it ends.
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.25",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            "PATH": f"{_venv_bin()}{os.pathsep}{env.get('PATH', '')}",
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
        }
    )
    # The same streamshift settings in every component and task as in whoever started it.
    env.update(as_env(settings))
    env[env_name("home")] = str(settings.home)
    return env


# Settings whose values are secrets: airflow.cfg names the command that reads their file.
_SECRET_OPTIONS = {("api_auth", "jwt_secret"): "jwt_secret"}


def write_airflow_cfg(settings: Settings, port: int) -> Path:
    """``AIRFLOW_HOME/airflow.cfg`` with the stack's Airflow settings, so ``airflow ...`` run
    by hand with ``AIRFLOW_HOME`` pointing there sees the stack as it runs (its DAGs, its
    plugins, no examples, its database). Secrets stay in their 0600 files: the file names the
    command that reads them (``<option>_cmd``). The processes also get the same settings in
    their environment, with the connections and the streamshift settings, which have no place
    in airflow.cfg."""
    import configparser

    sections: dict[str, dict[str, str]] = {}
    for name, value in airflow_env(settings, port, base={}).items():
        if not name.startswith("AIRFLOW__"):
            continue
        section, _, option = name.removeprefix("AIRFLOW__").lower().partition("__")
        if (section, option) in _SECRET_OPTIONS:
            secret = settings.airflow_home / _SECRET_OPTIONS[section, option]
            sections.setdefault(section, {})[f"{option}_cmd"] = f"cat {secret}"
            continue
        sections.setdefault(section, {})[option] = value.replace("%", "%%")
    config = configparser.ConfigParser(interpolation=None)
    for section, options in sorted(sections.items()):
        config[section] = dict(sorted(options.items()))
    path = settings.airflow_home / "airflow.cfg"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        f.write("# Written by streamshift (the local stack's settings); secrets are read by the\n")
        f.write("# *_cmd commands from their own files. Regenerated by `streamshift airflow up`.\n")
        config.write(f)
    return path


def _secret(path: Path) -> str:
    """A secret generated once and kept in ``path`` (mode 600)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(32))
        path.chmod(0o600)
    return path.read_text().strip()


def password(settings: Settings, user: str = USER) -> str:
    """A local user's password, generated on first use and kept under the Airflow home."""
    path = settings.airflow_home / "passwords.json"
    known: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    if any(u not in known for u in USERS):
        path.parent.mkdir(parents=True, exist_ok=True)
        known = {u: known.get(u) or secrets.token_urlsafe(12) for u in USERS} | known
        path.write_text(json.dumps(known))
        path.chmod(0o600)
    return known[user]


@dataclass
class AirflowStatus:
    url: str
    running: dict[str, int | None]  # component -> pid, None when not running
    healthy: bool

    @property
    def up(self) -> bool:
        return self.healthy and all(self.running.values())

    def describe(self) -> str:
        parts = [f"{c} {'pid ' + str(p) if p else 'NOT running'}" for c, p in self.running.items()]
        state = "up" if self.up else "down" if not any(self.running.values()) else "partly up"
        return f"Airflow {state} at {self.url} ({'; '.join(parts)}; API {'answers' if self.healthy else 'does not answer'})"


class LocalAirflow:
    """Start, stop and talk to the local Airflow of one ``STREAMSHIFT_HOME``."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.home = settings.airflow_home
        self.port = settings.airflow_port
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.home / "pids.json"

    def env(self) -> dict[str, str]:
        return airflow_env(self.settings, self.port)

    def _pids(self) -> dict[str, int]:
        try:
            pids: dict[str, int] = json.loads(self.pid_file.read_text())
        except (OSError, json.JSONDecodeError):
            return {}
        return pids

    def status(self) -> AirflowStatus:
        pids = self._pids()
        running = {c: (pids[c] if c in pids and pid_alive(pids[c]) else None) for c in COMPONENTS}
        return AirflowStatus(self.url, running, self._healthy())

    def _healthy(self) -> bool:
        if not port_open(self.port):
            return False
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=5) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _airflow(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(_venv_bin() / "airflow"), *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def run_cli(self, args: list[str]) -> int:
        """Run ``airflow ARGS`` with the local stack's environment; its exit code. Refused
        before Airflow starts when the stack has no metadata database yet (``airflow db ...``
        aside), with what to run instead of Airflow's own "run `airflow db migrate`"."""
        if args[:1] != ["db"] and not migrated(self.settings):
            raise AirflowError(
                f"the local Airflow has no metadata database yet ({metadata_db(self.settings)}):"
                " run `streamshift airflow up` first, which creates it and starts Airflow"
            )
        return subprocess.call([str(_venv_bin() / "airflow"), *args], env=self.env())

    def migrate(self) -> None:
        """Write airflow.cfg, create or upgrade the metadata database (idempotent). A database
        this Airflow version migrated already (its stamp says so) is left as it is: ``airflow db
        migrate`` would only find nothing to do, after seconds of importing Airflow."""
        self.home.mkdir(parents=True, exist_ok=True)
        write_airflow_cfg(self.settings, self.port)
        stamp, version = migrated_stamp(self.settings), importlib.metadata.version("apache-airflow")
        if migrated(self.settings) and _read(stamp) == version:
            return
        migrated_now = self._airflow("db", "migrate")
        if migrated_now.returncode != 0:
            raise AirflowError(f"airflow db migrate failed: {migrated_now.stderr.strip()[-1500:]}")
        stamp.write_text(version)

    def _engine_up(self, say) -> None:  # type: ignore[no-untyped-def]
        """Start the local warm engine the Spark tasks run on, unless it answers already (or
        the settings name a remote one, or none)."""
        from streamshift.local.engine import LocalEngine

        if not self.settings.engine or engine_answers(self.settings):
            return
        if engine_address(self.settings.engine)[0] not in LOOPBACK:
            say(f"the engine at {self.settings.engine} does not answer: Spark tasks will fail")
            return
        say(f"starting the warm engine at {self.settings.engine} (streamshift engine up)")
        LocalEngine(self.settings).start()

    def up(self, timeout: float = 300, progress: bool = True) -> AirflowStatus:
        """Start whatever is not running, wait until the API answers; idempotent."""
        from concurrent.futures import ThreadPoolExecutor

        def say(message: str) -> None:
            if progress:
                print(f"[airflow] {message}", file=sys.stderr, flush=True)

        # The engine's JVM starts while Airflow's database is prepared and its components start.
        with ThreadPoolExecutor(max_workers=1) as engine:
            started = engine.submit(self._engine_up, say)
            status = self._start_airflow(say, timeout)
            started.result()
        return status

    def _start_airflow(self, say, timeout: float) -> AirflowStatus:  # type: ignore[no-untyped-def]
        """Airflow's part of :meth:`up`: its database, its pool, its components."""
        status = self.status()
        if status.up:
            return status
        (self.home / "plugins").mkdir(parents=True, exist_ok=True)
        password(self.settings)
        if not any(status.running.values()) and port_open(self.port):
            raise AirflowError(
                f"port {self.port} is taken by another program; set "
                "STREAMSHIFT_AIRFLOW_PORT to a free port"
            )
        say(f"preparing the database under {self.home} (airflow db migrate)")
        self.migrate()

        pool = self._airflow(
            "pools",
            "set",
            SPARK_POOL,
            str(self.settings.airflow_spark_slots),
            "Spark jobs submitted by streamshift's DAGs",
        )
        if pool.returncode != 0:
            raise AirflowError(
                f"could not create the pool {SPARK_POOL}: {pool.stderr.strip()[-800:]}"
            )
        pids = {c: p for c, p in status.running.items() if p}
        logs = self.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for component in COMPONENTS:
            if component in pids:
                continue
            say(f"starting {component} (log: {logs / (component + '.log')})")
            with open(logs / f"{component}.log", "ab") as out:
                proc = subprocess.Popen(
                    _command(component),
                    env=self.env(),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            pids[component] = proc.pid
        self.pid_file.write_text(json.dumps(pids))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if status.up:
                say(f"API server answers at {self.url}")
                return status
            dead = [c for c, p in status.running.items() if p is None]
            if dead:
                log = logs / f"{dead[0]}.log"
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                raise AirflowError(
                    f"Airflow {dead[0]} exited while starting; its log {log} ends:\n{tail}"
                )
            time.sleep(2)
        raise AirflowError(
            f"Airflow's API server did not answer at {self.url} within {timeout:.0f}s; "
            f"see the logs under {logs}"
        )

    def down(self, timeout: float = 60) -> bool:
        """Stop every component (SIGTERM to its process group, SIGKILL after ``timeout`` to
        whatever is left in it) and the engine ``up`` started. A group can outlive its leader:
        the LocalExecutor's workers of a scheduler killed -9 (and restarted) ignore SIGTERM and
        would idle on forever."""
        groups = [p for p in self._pids().values() if group_alive(p)]
        for pgid in groups:
            try:
                os.killpg(pgid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        _wait_until_gone(groups, timeout, poll=0.5)
        killed = [g for g in groups if group_alive(g)]
        for pgid in killed:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # A killed process is gone only once the kernel has torn it down: return after that,
        # so that what follows `down` (a new `up`, a check) finds no process of the old stack.
        _wait_until_gone(killed, 10, poll=0.05)
        self.pid_file.unlink(missing_ok=True)
        return self._engine_down() or bool(groups)

    def _engine_down(self) -> bool:
        """Stop the local engine ``up`` started for this home (an engine of another home, or
        a remote one, is left alone)."""
        from streamshift.local.engine import LocalEngine

        if not self.settings.engine or engine_address(self.settings.engine)[0] not in LOOPBACK:
            return False
        return LocalEngine(self.settings).stop()

    # ---- the REST API (token auth) ---------------------------------------------------------
    def client(self, user: str = USER) -> AirflowClient:
        return AirflowClient(
            self.url, user, password(self.settings, user), self.home / "logs" / "scheduler.log"
        )


def _wait_until_gone(groups: list[int], timeout: float, poll: float) -> None:
    """Wait up to ``timeout`` seconds until no process of the process ``groups`` is alive."""
    deadline = time.monotonic() + timeout
    while any(group_alive(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(poll)
