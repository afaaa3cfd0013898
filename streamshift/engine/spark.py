"""One builder for every SparkSession streamshift starts, with two named profiles.

* ``local`` (the CLI, tests, demo): master from settings (``local[*]``), the fetched jars,
  loopback binding, small-machine tuning;
* ``submitted`` (under ``spark-submit``, and so Airflow's ``SparkSubmitOperator``): master,
  deploy mode, jars and resources come from spark-submit and its connection; the code adds
  only what every deployment needs (Delta's extensions, UTC).

The profile is chosen by data, not by branches in job code: ``PROFILES[name](settings)``.
Under spark-submit the Python driver is started by the JVM, which hands it the gateway in
``PYSPARK_GATEWAY_PORT``; that is how :func:`active_profile` knows.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.project import ENV as PROJECT_ENV
from streamshift.spec.project import find_project
from streamshift.spec.settings import KIT_JARS, Settings, load_settings
from streamshift.store.endpoints import active_profile, engine_answers

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class MissingJarsError(StreamshiftError):
    """The connector/Delta jars have not been fetched (scripts/setup does it)."""

    final = True


def jars(settings: Settings) -> list[str]:
    """Spark's Kafka connector and Delta jars (``streamshift setup``), and the decoder."""
    found = settings.spark_jars
    if not any(j.parent == settings.jars_dir / "spark" / "lib" for j in found):
        raise MissingJarsError(
            f"no jars in {settings.jars_dir / 'spark' / 'lib'}: run `streamshift setup` to fetch "
            "Spark's Kafka connector and Delta Lake from Maven Central"
        )
    return [str(j) for j in found]


# JVM options for short-lived drivers (the test suite's, a small day's job): C1 only, since
# C2's compiling costs more CPU than it saves in a job of minutes, and a code cache as large as
# tiered compilation's default: with C1 alone the JVM reserves a code cache that Spark, Delta
# and Janino's generated classes fill, and its sweeper then runs nearly non-stop while C1
# recompiles what it flushed. The serial collector: on 2 cores G1's concurrent threads and
# barriers cost more than its short pauses save for a driver of small data
# (bench/submit_tuning.py).
SHORT_JOB_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m -XX:+UseSerialGC"


# JVM options that map the archive; the warning of a JVM that cannot use it is turned off.
USE_OPTIONS = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


def archive_path() -> Path:
    """The driver's class archive (``streamshift setup``), inside this virtualenv: it names this
    Python's packages, so it serves no other, and goes when the virtualenv goes."""
    return Path(sys.prefix) / "share" / "streamshift" / "classes.jsa"


def driver_options() -> str:
    """The driver JVM options that use the archive; empty when scripts/setup made none."""
    path = archive_path()
    return f"-XX:SharedArchiveFile={path} {USE_OPTIONS}" if path.is_file() else ""


def deployment_conf(settings: Settings) -> dict[str, str]:
    """What every deployment needs, local or on a cluster."""
    return {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    }


_PICKS_A_COLLECTOR = re.compile(r"-XX:\+Use\w+GC\b")


def driver_java_options(settings: Settings, environ: Mapping[str, str] | None = None) -> str:
    """``STREAMSHIFT_SPARK_DRIVER_JAVA_OPTIONS`` for a driver, without the collector
    it picks when the environment's JVM options pick one already (the JVM refuses to start
    with two: the tests run every JVM with the serial collector)."""
    environ = os.environ if environ is None else environ
    options = settings.spark_driver_java_options.split()
    chosen = " ".join(environ.get(n, "") for n in ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS"))
    if _PICKS_A_COLLECTOR.search(chosen):
        options = [o for o in options if not _PICKS_A_COLLECTOR.fullmatch(o)]
    return " ".join(options)


def submit_conf(settings: Settings) -> dict[str, str]:
    """``--conf`` values a submission carries besides master and jars (JVM in UTC, quiet logs,
    the driver with ``STREAMSHIFT_SPARK_DRIVER_JAVA_OPTIONS``)."""
    log4j = KIT_JARS / "log4j2-spark.properties"
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Duser.timezone=UTC"
    # The driver maps the classes scripts/setup archived (streamshift.engine.cds); an
    # executor's JVM has another classpath, so it could not use them.
    driver = [java_opts, driver_options(), driver_java_options(settings)]
    return {
        **deployment_conf(settings),
        "spark.driver.extraJavaOptions": " ".join(o for o in driver if o),
        "spark.executor.extraJavaOptions": java_opts,
    }


def tuning_conf(settings: Settings) -> dict[str, str]:
    """Parallelism sized by settings: few partitions for the small tables of one machine.

    Raise ``STREAMSHIFT_SPARK_SHUFFLE_PARTITIONS`` on a cluster; Delta's log replay follows it.
    """
    partitions = str(settings.spark_shuffle_partitions)
    return {
        "spark.sql.shuffle.partitions": partitions,
        "spark.default.parallelism": partitions,
        "spark.databricks.delta.snapshotPartitions": partitions,
        # File listings (Delta's VACUUM among them) otherwise run up to 10,000 tasks.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": partitions,
        "spark.databricks.delta.merge.repartitionBeforeWrite.enabled": "true",
        "spark.sql.adaptive.enabled": "true",
        # The write path caches each batch once, in Spark's columnar cache; compressing it
        # costs a large batch 30 % of what caching adds to its validate step, against a cache
        # 1.6x the size (230 MB for a million-row batch): bench/decode_cost.py --front.
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        "spark.ui.enabled": str(settings.spark_ui).lower(),
        "spark.python.sql.dataFrameDebugging.enabled": str(
            settings.spark_dataframe_debugging
        ).lower(),
        "spark.ui.showConsoleProgress": "false",
    }


def local_conf(settings: Settings, app_name: str = "streamshift") -> dict[str, str]:
    """The ``local`` profile: the whole configuration of a one-machine Spark."""
    return {
        "spark.app.name": app_name,
        "spark.master": settings.spark_master,
        "spark.jars": ",".join(jars(settings)),
        **submit_conf(settings),
        **tuning_conf(settings),
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.warehouse.dir": str(settings.warehouse / "_spark"),
    }


def submitted_conf(settings: Settings, app_name: str = "streamshift") -> dict[str, str]:
    """The ``submitted`` profile: nothing spark-submit decides (master, jars, resources, the
    driver's JVM options: its JVM is running already)."""
    return deployment_conf(settings)


PROFILES: dict[str, Callable[..., dict[str, str]]] = {
    "local": local_conf,
    "submitted": submitted_conf,
}


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (a client of the engine)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def connect_session(url: str, *, whole_process: bool = True) -> SparkSession:
    """A Spark Connect session to the engine at ``url``.

    ``whole_process``: PySpark's builder marks the process as a Connect client (an environment
    variable, which ``pyspark.sql.functions`` reads to build Connect columns and which child
    processes inherit); no local session can start in it afterwards. A job's process wants
    that. A process that only checks the engine (``whole_process=False``) gets a session of
    the Connect client's own builder, good for DataFrame methods, not for ``functions``."""
    if whole_process:
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(url).getOrCreate()
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    return ConnectSession.builder.remote(url).getOrCreate()  # type: ignore[return-value]


def get_spark(
    settings: Settings | None = None,
    app_name: str = "streamshift",
    profile: str | None = None,
    *,
    engine: bool = False,
) -> SparkSession:
    """Get or create the SparkSession of ``profile`` (default: :func:`active_profile`).

    ``engine``: a request-style job, which runs on the warm engine (a Spark Connect session)
    when the settings name one that answers, and in a session of its own otherwise. The
    long-running applications (stream, serve) and spark-submit drivers never pass it."""
    from pyspark.sql import SparkSession

    settings = settings or load_settings()
    profile = profile or active_profile()
    if engine and profile == "local" and engine_answers(settings):
        spark = connect_session(settings.engine)
        spark.conf.set("spark.sql.shuffle.partitions", str(settings.spark_shuffle_partitions))
        return spark
    if profile == "local":
        # Bind everything to loopback; without it Spark picks the first non-loopback interface.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Spark's Python workers (``createDataFrame`` of local rows starts them) run this
        # interpreter; Spark's default is whatever ``python3`` is first on PATH, which fails
        # every such job with PYTHON_VERSION_MISMATCH when it is another minor version.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    for key, value in PROFILES[profile](settings, app_name).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def submit_env(home: Path) -> dict[str, str]:
    """The environment of a spark-submit this venv launches for ``STREAMSHIFT_HOME=home``: no
    other streamshift settings but the project, this venv first on PATH, loopback, this Python
    for workers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMSHIFT_")}
    project = find_project()
    if project is not None:  # the driver loads the same project's flows
        env[PROJECT_ENV] = str(project.root)
    bin_dir = Path(sys.executable).parent
    env.update(
        STREAMSHIFT_HOME=str(home),
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
    )
    return env


# Spark's own switches for running a query without generated code (Spark tests both paths:
# the results are the same). Whole-stage code generation off, expressions interpreted.
INTERPRETED_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
# Delta's MERGE writes its output in the tasks it has instead of one per partition value: the
# kit's tuning repartitions by date (one file per date and batch, Delta's default), which puts
# a large batch's rows of one date on one task, one core (bench/stream_throughput.py).
IN_TASKS_CONF = {"spark.databricks.delta.merge.repartitionBeforeWrite.enabled": "false"}
# Per (session, block's settings): how many blocks hold it, and what the session had before.
_held: dict[tuple[object, str], tuple[int, dict[str, str | None]]] = {}
_held_lock = threading.Lock()


def _session_key(session: SparkSession) -> object:
    """One key per Spark session, whichever Python wrapper holds it: a Connect session's id,
    or a local session's JVM object (wrappers of one local session may differ)."""
    if is_connect(session):
        return session.session_id  # type: ignore[attr-defined]  # a Connect session's
    return session._jsparkSession.hashCode()


def _block(conf: dict[str, str]) -> str:
    """The key of a block of settings in ``_held``: its names."""
    return ",".join(sorted(conf))


@contextmanager
def _session_conf(conf: dict[str, str], *sessions: SparkSession) -> Iterator[None]:
    """Run the block with ``conf`` set in ``sessions``. The settings are the session's, so
    a block is counted per session: threads of one process may enter at once, and the last to
    leave restores what the session had."""
    block = _block(conf)
    unique = {_session_key(session): session for session in sessions}
    for key, session in unique.items():  # keyed by the JVM session: wrappers may differ
        with _held_lock:
            count, saved = _held.get((key, block), (0, {}))
            if count == 0:
                saved = {k: session.conf.get(k, None) for k in conf}
                for k, v in conf.items():
                    session.conf.set(k, v)
            _held[(key, block)] = (count + 1, saved)
    try:
        yield
    finally:
        for key, session in unique.items():
            with _held_lock:
                count, saved = _held.pop((key, block))
                if count > 1:
                    _held[(key, block)] = (count - 1, saved)
                    continue
                for name, value in saved.items():
                    if value is None:
                        session.conf.unset(name)
                    else:
                        session.conf.set(name, value)


def interpreted(*sessions: SparkSession) -> AbstractContextManager[None]:
    """Run the block's queries in ``sessions`` without generated code.

    On a few thousand rows, generating each query's Java, stripping it and compiling it with
    Janino costs more driver time than the compiled code saves (bench/small_apply.py).
    """
    return _session_conf(INTERPRETED_CONF, *sessions)


def is_interpreted(session: SparkSession) -> bool:
    """Whether a block of :func:`interpreted` holds ``session`` now."""
    with _held_lock:
        return (_session_key(session), _block(INTERPRETED_CONF)) in _held


def written_in_tasks(*sessions: SparkSession) -> AbstractContextManager[None]:
    """Run the block's Delta MERGEs in ``sessions`` writing each task's rows where the task
    is (:data:`IN_TASKS_CONF`): for a batch large enough that its files stay large."""
    return _session_conf(IN_TASKS_CONF, *sessions)


def describe_session(spark: SparkSession, profile: str | None = None) -> str:
    """'Spark local[1] (submitted profile)' or 'the engine at sc://...': what a job runs on,
    for its log."""
    master = spark.conf.get("spark.master")
    if is_connect(spark):
        return f"Spark {master} (the warm engine, through Spark Connect)"
    return f"Spark {master} ({profile or active_profile()} profile)"


def submit_args(settings: Settings) -> list[str]:
    """spark-submit arguments of the local deployment: master, jars and the local tuning."""
    conf = local_conf(settings)
    args = ["--master", conf.pop("spark.master"), "--jars", conf.pop("spark.jars")]
    conf.pop("spark.app.name")
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return args
