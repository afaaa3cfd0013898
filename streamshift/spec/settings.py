"""One settings object, read from the project file's ``[settings]`` and ``STREAMSHIFT_*``
environment variables (which win).

Every knob the kit has lives here, with its default and its parser, so a typo in a variable
name or a malformed value fails at start-up with a message naming the variable (or the project
file), instead of surfacing later as a wrong table path or a Kafka time-out.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.project import SECRET_WORDS, Project, find_project

PREFIX = "STREAMSHIFT_"
REPO_ROOT = Path(__file__).resolve().parents[2]  # the kit's repository, when run from one
JARS_LOCK = Path(__file__).resolve().parents[1] / "jars.lock"
# What the package carries for the JVMs: log4j2 configurations, the stream's decoder jar (a
# wheel's, or the one `streamshift setup` builds in the kit's repository).
KIT_JARS = Path(__file__).resolve().parents[1] / "jars"


def jars_cache() -> Path:
    """The per-user folder ``streamshift setup`` fetches the locked jars into (one per lock)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    lock = JARS_LOCK.read_bytes() if JARS_LOCK.is_file() else b""
    return (base / "streamshift" / "jars" / hashlib.sha256(lock).hexdigest()[:16]).resolve()


# Variables that are not settings, known so never reported as unknown: STREAMSHIFT_PYTHON is
# read by scripts/setup (the shell); STREAMSHIFT_ERROR_FILE is where a job run by Airflow
# leaves its one-line error (streamshift.cli); the two STREAMSHIFT_KILL_AFTER_COMMITS* arm the
# write path's fault injection (streamshift.engine.write.commits).
NOT_SETTINGS = {
    "STREAMSHIFT_PYTHON",
    "STREAMSHIFT_ERROR_FILE",
    "STREAMSHIFT_KILL_AFTER_COMMITS",
    "STREAMSHIFT_KILL_AFTER_COMMITS_FILE",
}


class SettingsError(StreamshiftError, ValueError):
    """A ``STREAMSHIFT_*`` variable is unknown or its value cannot be parsed."""

    final = True


def _int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("expected a whole number") from None


def _positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise ValueError("must be 1 or more")
    return value


def _niceness(text: str) -> int:
    value = _int(text)
    if not 0 <= value <= 19:
        raise ValueError("must be a niceness from 0 to 19")
    return value


def _non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError("must be one of true/false, yes/no, on/off, 1/0")


def _bootstrap(text: str) -> str:
    servers = [s.strip() for s in text.split(",") if s.strip()]
    if not servers:
        raise ValueError("must list at least one host:port")
    for server in servers:
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"{server!r} is not host:port")
    return ",".join(servers)


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text

    return parse


def _engine_url(text: str) -> str:
    text = text.strip()
    if text and not text.startswith("sc://"):
        raise ValueError("must be a Spark Connect URL, sc://host:port, or empty")
    return text


def _path(text: str) -> Path:
    return Path(text).expanduser().resolve()


def _setting(default: Any, parse: Callable[[str], Any], doc: str) -> Any:
    return field(default=default, metadata={"parse": parse, "doc": doc})


@dataclass(frozen=True)
class Settings:
    """Configuration of one streamshift process; build it with :func:`load_settings`."""

    project: Path | None = _setting(  # noqa: RUF009
        None,
        _path,
        "the team's project folder (its streamshift.toml, or pyproject.toml with "
        "[tool.streamshift]); default: found by walking up from the working folder",
    )
    home: Path = _setting(  # noqa: RUF009 - frozen defaults, read once per process
        Path("var").resolve(),
        _path,
        "root of warehouse, checkpoints, broker data, reports (default: the project's var/)",
    )
    spark_master: str = _setting("local[*]", str, "Spark master URL")
    spark_shuffle_partitions: int = _setting(
        max(2, (os.cpu_count() or 2) * 2), _positive_int, "spark.sql.shuffle.partitions"
    )
    spark_driver_memory: str = _setting("2g", str, "spark.driver.memory")
    engine: str = _setting(
        "sc://127.0.0.1:15002",
        _engine_url,
        "Spark Connect URL of the warm engine (`streamshift engine up`); request-style jobs "
        "(eod, reconcile, close, replay, promote, quality) run on it when it answers and in a "
        "local Spark session when it does not; empty: always local",
    )
    engine_memory: str = _setting("3g", str, "driver memory of the local engine")
    spark_ui: bool = _setting(False, _bool, "start the Spark web UI")
    # PySpark records the Python line of every column function for Spark's error messages
    # (spark.python.sql.dataFrameDebugging.enabled): about 16 JVM round trips per call where
    # the call itself is one, so a micro-batch's plan takes 1.7 times as long to build
    # (bench/plan_build.py). Off unless asked for.
    spark_dataframe_debugging: bool = _setting(
        False,
        _bool,
        "PySpark's DataFrame debugging: Spark's runtime errors name the Python line that built "
        "the failing expression, at about 16 JVM round trips per column function instead of one",
    )
    # Every driver this kit starts works through up to a million rows at a time: on two cores
    # the throughput collector loads an EOD day and catches a stream up faster than G1, with
    # no latency lost (bench/eod_load.py, bench/stream_catchup.py).
    spark_driver_java_options: str = _setting(
        "-XX:+UseParallelGC",
        str,
        "driver JVM options of every Spark job (EOD loads, corrections, the stream, serve, "
        "reconciliation, quality, upkeep); a collector SPARK_SUBMIT_OPTS or JAVA_TOOL_OPTIONS "
        "already picks wins",
    )
    jars_dir: Path = _setting(  # noqa: RUF009
        jars_cache(),
        _path,
        "folder holding spark/lib and kafka/lib: the per-user cache `streamshift setup` fills "
        "from streamshift/jars.lock",
    )
    kafka_bootstrap_servers: str = _setting(
        "127.0.0.1:9092", _bootstrap, "Kafka bootstrap servers (host:port,...)"
    )
    kafka_security_protocol: str = _setting(
        "PLAINTEXT", _one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"), "security.protocol"
    )
    kafka_sasl_mechanism: str = _setting("", str, "sasl.mechanism (PLAIN, SCRAM-SHA-512, ...)")
    kafka_sasl_username: str = _setting("", str, "sasl.username")
    kafka_sasl_password: str = _setting("", str, "sasl.password")
    kafka_ssl_ca_location: str = _setting("", str, "ssl.ca.location (PEM file)")
    file_stable_seconds: int = _setting(
        3,
        _non_negative_int,
        "a file of a flow with neither a done-marker nor a trailer is complete once its size "
        "and modification time stayed the same this long",
    )
    unknown_fields: str = _setting(
        "ignore",
        _one_of("ignore", "refuse"),
        "a file column or event field the flow does not declare: counted and ignored "
        "(ignore), or the file refused and the event quarantined (refuse)",
    )
    kafka_topic_partitions: int = _setting(3, _positive_int, "partitions of created topics")
    kafka_replication_factor: int = _setting(1, _positive_int, "replication of created topics")
    kafka_retention_ms: int = _setting(
        7 * 24 * 3600 * 1000, _positive_int, "retention.ms of created topics"
    )
    kafka_controller_port: int = _setting(
        0, _non_negative_int, "local broker's KRaft controller port (0: broker port + 1)"
    )
    # The cap only binds while a job works off a backlog; there, each micro-batch pays the
    # write path's reads of the day once, so fewer, larger batches catch up faster
    # (bench/stream_catchup.py). A million events is what an EOD load applies at once.
    max_offsets_per_trigger: int = _setting(
        1_000_000,
        _positive_int,
        "maxOffsetsPerTrigger of streaming jobs (the most events per micro-batch)",
    )
    # A Kafka partition's share of a backlog batch is read by one task, so a million events
    # from three partitions leave one of two cores idle in the batch's last wave; split into
    # tasks of this many, the cores share the batch evenly. A batch under it per partition
    # (every live micro-batch) reads as before (bench/stream_throughput.py).
    kafka_max_records_per_partition: int = _setting(
        100_000,
        _positive_int,
        "maxRecordsPerPartition of streaming jobs (the most events one task reads from one "
        "Kafka partition in a micro-batch)",
    )
    promotion_window: int = _setting(
        5, _positive_int, "clean reconciled business dates needed to promote to stream"
    )
    promotion_quality_suites: str = _setting(
        "",
        str,
        "comma-separated data-quality suites (e.g. <flow>.current) whose `fail` results on a "
        "date make it unclean for promotion; empty: parity alone decides",
    )
    approvers: str = _setting(
        "approver,admin",
        str,
        "comma-separated Airflow users who may approve a promotion to stream or kappa in the "
        "streamshift_promote DAG; the user who asked is never one of them (four eyes)",
    )
    approval_timeout_minutes: int = _setting(
        1440,
        _positive_int,
        "minutes a promotion waits for its approval; unanswered, it is recorded as rejected",
    )
    version_retention_days: int = _setting(
        30,
        _non_negative_int,
        "days upkeep keeps a flow version's tables after readers switched away from it (or "
        "after it was built, for a version never served): a roll back within them is one "
        "`streamshift promote --version`",
    )
    stream_quality_every: int = _setting(
        0,
        _non_negative_int,
        "validate every Nth stream micro-batch against the flow's current-state suite (0: off)",
    )
    airflow_port: int = _setting(
        8080, _positive_int, "port of the local Airflow's API server and UI"
    )
    airflow_spark_slots: int = _setting(
        1, _positive_int, "Spark jobs the local Airflow runs at once (pool streamshift_spark)"
    )
    stream_nice: int = _setting(
        0,
        _niceness,
        "CPU niceness of the stream job (0-19); beside `streamshift serve` on the same cores, "
        "10 leaves serve the CPU it needs and the Delta writer the rest",
    )
    stream_warm_state: bool = _setting(
        True,
        _bool,
        "after each small micro-batch (a quiet stream's; after a large one the next batch "
        "follows at once), compute the state of the Delta tables it wrote on a side thread, so "
        "the next batch's reads and MERGEs start from it",
    )
    stream_stall_seconds: int = _setting(
        300, _positive_int, "stream_supervisor restarts a stream whose heartbeat is older than this"
    )
    reference_dir: str = _setting(
        "",
        str,
        "a folder of reference data that overrides the files a flow ships: "
        "`<dir>/<flow>/<table>.csv` where present (a feed refreshed outside the repo; "
        "`streamshift redrive` re-applies what the old data quarantined)",
    )
    table_templates: str = _setting(
        "",
        str,
        "folder of empty Delta tables, one per table definition, copied for each new table "
        "instead of creating it (for a suite or a demo that makes many warehouses); empty: "
        "each table is created",
    )
    correction_wait_seconds: int = _setting(
        900,
        _positive_int,
        "stage stream: how long `reconcile --correct` waits for the stream job to apply the EOD "
        "corrections it produced to the topic",
    )

    # ---- derived locations ------------------------------------------------------------
    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse"

    @property
    def checkpoints(self) -> Path:
        return self.home / "checkpoints"

    @property
    def reports(self) -> Path:
        return self.home / "reports"

    @property
    def kafka_data(self) -> Path:
        return self.home / "kafka"

    @property
    def airflow_home(self) -> Path:
        return self.home / "airflow"

    @property
    def spark_jars(self) -> list[Path]:
        """The locked jars of Spark's folder, and this kit's decoder (``streamshift setup``)."""
        decoder = KIT_JARS / "streamshift-udf.jar"
        locked = sorted((self.jars_dir / "spark" / "lib").glob("*.jar"))
        return [*locked, decoder] if decoder.is_file() else locked

    @property
    def kafka_jars(self) -> list[Path]:
        return sorted((self.jars_dir / "kafka" / "lib").glob("*.jar"))

    def kafka_client_config(self) -> dict[str, str]:
        """librdkafka (confluent-kafka) client settings: bootstrap plus any security options."""
        config = {
            "bootstrap.servers": self.kafka_bootstrap_servers,
            "security.protocol": self.kafka_security_protocol,
        }
        optional = {
            "sasl.mechanism": self.kafka_sasl_mechanism,
            "sasl.username": self.kafka_sasl_username,
            "sasl.password": self.kafka_sasl_password,
            "ssl.ca.location": self.kafka_ssl_ca_location,
        }
        config.update({k: v for k, v in optional.items() if v})
        return config

    def spark_kafka_options(self) -> dict[str, str]:
        """The same settings in the ``kafka.``-prefixed form Spark's Kafka source takes."""
        options = {
            "kafka.bootstrap.servers": self.kafka_bootstrap_servers,
            "kafka.security.protocol": self.kafka_security_protocol,
        }
        if self.kafka_sasl_mechanism:
            options["kafka.sasl.mechanism"] = self.kafka_sasl_mechanism
        if self.kafka_sasl_username:
            module = (
                "org.apache.kafka.common.security.scram.ScramLoginModule"
                if self.kafka_sasl_mechanism.startswith("SCRAM")
                else "org.apache.kafka.common.security.plain.PlainLoginModule"
            )
            options["kafka.sasl.jaas.config"] = (
                f'{module} required username="{self.kafka_sasl_username}" '
                f'password="{self.kafka_sasl_password}";'
            )
        if self.kafka_ssl_ca_location:
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = self.kafka_ssl_ca_location
        return options


def env_name(field_name: str) -> str:
    return PREFIX + field_name.upper()


def _project_value(name: str, text: str, project: Project) -> str:
    """A project file's path settings are the project's: relative to its root."""
    if name in PATH_SETTINGS and text and not Path(text).expanduser().is_absolute():
        return str(project.root / text)
    return text


PATH_SETTINGS = {"home", "jars_dir", "reference_dir", "table_templates"}


def resolve_settings(
    environ: Mapping[str, str] | None = None, **overrides: Any
) -> tuple[Settings, dict[str, str]]:
    """The settings and where each came from ("environment", the project file, "default")."""
    environ = os.environ if environ is None else environ
    known = {env_name(f.name): f for f in fields(Settings)}
    unknown = sorted(
        k for k in environ if k.startswith(PREFIX) and k not in known.keys() | NOT_SETTINGS
    )
    if unknown:
        raise SettingsError(
            f"unknown setting {', '.join(unknown)}; known settings are: {', '.join(sorted(known))}"
        )
    project = find_project(environ)
    if project is not None:  # any setting but the project itself
        strange = sorted(set(project.settings) - {f.name for f in fields(Settings)} - {"project"})
        if strange:
            raise SettingsError(
                f"{project.file}: unknown setting {', '.join(strange)}; "
                "`streamshift settings` lists the known ones"
            )
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, f in known.items():
        if name in environ:
            raw, source = environ[name], "environment"
        elif project is not None and f.name in project.settings:
            raw = _project_value(f.name, project.settings[f.name], project)
            source = str(project.file)
        else:
            continue
        try:
            values[f.name] = f.metadata["parse"](raw)
        except ValueError as exc:
            where = name if source == "environment" else f"{f.name} in {source}"
            raise SettingsError(
                f"{where}={raw!r} is not valid: {exc} ({f.metadata['doc']})"
            ) from None
        sources[f.name] = source
    for name, value in overrides.items():  # text overrides parse like the environment's
        parse = known[env_name(name)].metadata["parse"]
        values[name] = parse(value) if isinstance(value, str) else value
        sources[name] = "given"
    if project is not None:
        values.setdefault("project", project.root)
        sources.setdefault("project", "the working folder")
        values.setdefault("home", project.root / "var")
        sources.setdefault("home", "the project's var/")
    else:  # the working folder's var/, as it is now (not when this module was imported)
        values.setdefault("home", Path("var").resolve())
    return Settings(**values), sources


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build settings from the project file and the environment; raise :class:`SettingsError`
    naming the variable."""
    return resolve_settings(environ, **overrides)[0]


def as_env(settings: Settings) -> dict[str, str]:
    """``STREAMSHIFT_*`` variables that rebuild ``settings`` in another process (those that
    differ from the defaults), e.g. for the Airflow components and the tasks they run."""
    env = {}
    for f in fields(Settings):
        value = getattr(settings, f.name)
        if value is not None and value != f.default:
            env[env_name(f.name)] = str(value).lower() if isinstance(value, bool) else str(value)
    return env


def shown(field_name: str, value: object) -> str:
    """A setting's value as commands print it: secrets masked (set or not is still said)."""
    if any(w in field_name for w in SECRET_WORDS):
        return "******** (set)" if value else "(not set)"
    return str(value)


def describe() -> list[tuple[str, str, str]]:
    """(variable, default, meaning) for every setting, for ``streamshift settings``."""
    return [(env_name(f.name), str(f.default), f.metadata["doc"]) for f in fields(Settings)]
