"""Shared fixtures: one local SparkSession with Delta, one real Kafka broker per session."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# pytest-xdist runs its workers under execnet, whose __main__ module has neither __spec__ nor
# __file__: PySpark's Connect package (which Great Expectations imports) then takes the process
# for a doctest run and calls sys.exit(0) — inside a foreachBatch callback that leaves the JVM
# waiting for an answer forever. A worker's __main__ gets a descriptive __file__.
_main = sys.modules["__main__"]
if getattr(_main, "__spec__", None) is None and not hasattr(_main, "__file__"):
    _main.__file__ = "<pytest-xdist worker>"

# Importing Airflow (the tests of DAG tasks do) sets the root logger to INFO, with a handler on
# the worker's stdout, which pytest closes at the end: py4j's INFO line from a connection's
# __del__ at interpreter exit would print "--- Logging error --- ... I/O operation on closed
# file" after the run's last dot. py4j's own INFO lines say nothing a test needs.
logging.getLogger("py4j").setLevel(logging.WARNING)

# Tests never read the developer's STREAMSHIFT_* environment: each builds its own settings.
for _name in [n for n in os.environ if n.startswith("STREAMSHIFT_") and n != "STREAMSHIFT_PYTHON"]:
    del os.environ[_name]

# One folder of empty Delta tables for the whole run, shared by every worker, command and
# Airflow task the suite starts: a test's fresh warehouse copies its tables from there instead
# of creating each with a commit of its own (STREAMSHIFT_TABLE_TEMPLATES). The controlling
# process makes it; its workers inherit the name.
if "TESTS_TABLE_TEMPLATES" not in os.environ:
    import tempfile as _tempfile

    os.environ["TESTS_TABLE_TEMPLATES"] = _tempfile.mkdtemp(prefix="streamshift-test-tables-")
os.environ["STREAMSHIFT_TABLE_TEMPLATES"] = os.environ["TESTS_TABLE_TEMPLATES"]

from streamshift.engine.spark import SHORT_JOB_JVM_OPTS

# The JVMs the tests start and drop (a command's, a stream job's, a spark-submit's) live for
# a minute or two: C1-compiled code only, in a code cache big enough for it, halves the JIT's
# CPU on 2 cores (git log -p BENCHMARKS.md: "JIT", "Code cache"). SPARK_SUBMIT_OPTS reaches
# every Spark driver they start; the warm engine drops it (streamshift.local.engine).
os.environ["SPARK_SUBMIT_OPTS"] = " ".join(
    filter(None, [os.environ.get("SPARK_SUBMIT_OPTS"), SHORT_JOB_JVM_OPTS])
)

# A worker's own SparkSession (the ``spark`` fixture) lives through the whole run: tiered
# compilation, with the same code cache and collector. Its queries are many and each runs
# little, so with C2's default thresholds its compiler thread is the session's largest user of
# CPU; C2 here compiles only what is four times as hot (C1's thresholds unchanged; git log -p
# BENCHMARKS.md: "C2's thresholds").
C2_ONLY_WHEN_HOTTER = (
    "-XX:Tier4InvocationThreshold=20000 -XX:Tier4MinInvocationThreshold=2400 "
    "-XX:Tier4CompileThreshold=60000 -XX:Tier4BackEdgeThreshold=160000"
)
LONG_LIVED_JVM_OPTS = f"-XX:ReservedCodeCacheSize=256m -XX:+UseSerialGC {C2_ONLY_WHEN_HOTTER}"

from streamshift.spec.registry import flow_names
from streamshift.spec.settings import KIT_JARS, Settings, load_settings


def pytest_configure(config: pytest.Config) -> None:
    """The suite's warm engine: one Spark Connect server that every request-style command the
    tests run (eod, reconcile, close, replay, promote, quality) uses, started once by the
    controlling process before any worker (workers inherit its address) and stopped at the
    end. ``TESTS_ENGINE=off`` runs the suite without it (each command then starts a JVM)."""
    from tests.cli_support import ENGINE_URL_VAR

    if hasattr(config, "workerinput") or os.environ.get("TESTS_ENGINE") == "off":
        return
    import tempfile

    from streamshift.local.engine import LocalEngine
    from streamshift.store.processes import free_port

    home = Path(tempfile.mkdtemp(prefix="streamshift-test-engine-"))
    engine = LocalEngine(load_settings({}, home=home, engine=f"sc://127.0.0.1:{free_port()}"))
    print(f"[tests] starting the warm engine at {engine.url} ...", file=sys.stderr, flush=True)
    engine.start()
    os.environ[ENGINE_URL_VAR] = engine.url
    config.stash[_ENGINE] = engine


def pytest_unconfigure(config: pytest.Config) -> None:
    engine = config.stash.get(_ENGINE, None)
    if engine is not None:
        engine.stop()  # type: ignore[attr-defined]
    if not hasattr(config, "workerinput"):  # the controlling process made the templates
        import shutil

        shutil.rmtree(os.environ["TESTS_TABLE_TEMPLATES"], ignore_errors=True)


_ENGINE = pytest.StashKey[object]()


def _uses_stack(item: pytest.Item | None) -> bool:
    return item is not None and "airflow_stack" in getattr(item, "fixturenames", ())


def _known_seconds() -> dict[str, float]:
    """Measured durations of the slowest tests (tests/durations.json, from a CI run)."""
    path = Path(__file__).with_name("durations.json")
    return json.loads(path.read_text())["seconds"] if path.is_file() else {}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the items
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of the shared Airflow stack run one after another, first, in one worker
    under pytest-xdist (``--dist loadgroup``): the stack starts once and is stopped after
    the last of them (``pytest_runtest_teardown``) instead of idling through the suite.

    The other tests follow longest first (durations.json; unknown ones after, in file order),
    so the two workers end together instead of one running a long test alone at the end."""
    users = [item for item in items if _uses_stack(item)]
    for item in users:
        item.add_marker(pytest.mark.xdist_group("airflow_stack"))
    seconds = _known_seconds()
    others = sorted(
        (item for item in items if not _uses_stack(item)),
        key=lambda item: -seconds.get(item.nodeid, 0.0),
    )
    items[:] = users + others


_STACK = pytest.StashKey[object]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    """Stop the Airflow stack once no further test of this process needs it (its four
    processes otherwise take a share of the two cores for the rest of the run) — after the
    test's own finalizers, which may still talk to it."""
    yield
    if _uses_stack(item) and not _uses_stack(nextitem):
        stack = item.config.stash.get(_STACK, None)
        if stack is not None:
            del item.config.stash[_STACK]
            stack.down(timeout=20)  # type: ignore[attr-defined]  # then SIGKILL what is left


@pytest.fixture(params=flow_names())
def any_flow(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """Each declared flow in turn: tests that prove the kit generic run once per flow."""
    from streamshift.spec.registry import get_flow

    return get_flow(request.param)


@pytest.fixture(scope="session")
def session_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("streamshift-home")


@pytest.fixture(scope="session")
def settings(session_home: Path) -> Settings:
    from tests.cli_support import suite_engine

    return load_settings(
        {},
        home=session_home,
        spark_master="local[2]",
        spark_shuffle_partitions=2,
        engine=suite_engine(),  # the suite's engine, never a developer's
    )


@pytest.fixture(scope="session")
def spark(settings: Settings):  # type: ignore[no-untyped-def]
    """This process's session. It lives through every test the worker runs, so its JVM
    compiles with C2 as well: within minutes C2's faster code saves more CPU than compiling it
    costs (the JVMs a test starts and drops stay C1-only, SPARK_SUBMIT_OPTS above)."""
    from streamshift.engine.spark import INTERPRETED_CONF, get_spark

    short_lived = os.environ["SPARK_SUBMIT_OPTS"]
    # TESTS_WORKER_JVM_OPTS replaces them for a measurement (bench/jvm_threads.py).
    os.environ["SPARK_SUBMIT_OPTS"] = os.environ.get("TESTS_WORKER_JVM_OPTS", LONG_LIVED_JVM_OPTS)
    try:
        session = get_spark(settings, app_name="streamshift-tests")
    finally:
        os.environ["SPARK_SUBMIT_OPTS"] = short_lived
    # Its queries are many and small, as a small date's are in the write path: generating and
    # compiling their code costs more than it saves (BENCHMARKS.md, "generated code"). A test
    # that needs the generated-code path asks for the ``generated_code`` fixture.
    # TESTS_GENERATED_CODE=1 keeps Spark's default for a measurement (bench/jvm_threads.py).
    if not os.environ.get("TESTS_GENERATED_CODE"):
        for name, value in INTERPRETED_CONF.items():
            session.conf.set(name, value)
    yield session
    session.stop()


@pytest.fixture
def generated_code(spark):  # type: ignore[no-untyped-def]
    """The worker's session with Spark's own code generation for one test (a large load's
    path), given back interpreted after it."""
    from streamshift.engine.spark import INTERPRETED_CONF

    for name in INTERPRETED_CONF:
        spark.conf.unset(name)
    try:
        yield spark
    finally:
        for name, value in INTERPRETED_CONF.items():
            spark.conf.set(name, value)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory, settings: Settings) -> Iterator[str]:
    """A real single-node KRaft broker on a free 127.0.0.1 port; yields its bootstrap."""
    from streamshift.local.broker import LocalBroker
    from streamshift.store.processes import free_port

    broker = LocalBroker(
        data_dir=tmp_path_factory.mktemp("kafka"),
        port=free_port(),
        controller_port=free_port(),
        jars=settings.kafka_jars,
        log4j_config=KIT_JARS / "log4j2-kafka.properties",
    )
    broker.start()
    yield broker.bootstrap
    broker.stop()


@pytest.fixture(scope="session")
def kafka_settings(settings: Settings, kafka_broker: str) -> Settings:
    """Settings pointing at the test broker."""
    from dataclasses import replace

    return replace(settings, kafka_bootstrap_servers=kafka_broker)


@pytest.fixture
def table_root(tmp_path: Path) -> Path:
    return tmp_path / "tables"


@pytest.fixture(scope="session")
def airflow_stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One real local Airflow 3 per test session (API server, scheduler, DAG processor,
    triggerer) on a free 127.0.0.1 port; yields (settings, REST client)."""
    from streamshift.store.processes import free_port

    if hasattr(request.config, "workerinput") and request.config.getvalue("loadgroup"):
        # Under xdist's loadgroup every user of the stack runs in this one worker; were the
        # group lost (hook order), each worker would start a stack of its own.
        users = [i.nodeid for i in request.session.items if _uses_stack(i)]
        assert all(n.endswith("@airflow_stack") for n in users), (
            f"the Airflow tests are not grouped ({users}): pytest_collection_modifyitems "
            "must run before xdist's"
        )
    from tests.cli_support import suite_engine

    home = tmp_path_factory.mktemp("airflow-stack")
    # Two Spark jobs at once: backfill runs overlap on the two cores (and their commits to the
    # same tables exercise the write path's conflict retries).
    stack_settings = load_settings(
        {},
        home=home,
        spark_master="local[2]",
        spark_shuffle_partitions=2,
        airflow_port=free_port(),
        airflow_spark_slots=2,
        promotion_window=3,
        engine=suite_engine(),  # the suite's engine: the stack starts none of its own
    )
    from streamshift.engine.write.commits import KILL_FILE_ENV
    from tests.airflow_support import kill_file, migrated_airflow

    stack = migrated_airflow(stack_settings)
    # Every process of the stack can be armed to die after a commit (arm_kill_after_commits);
    # nothing is armed until a test writes the file.
    os.environ[KILL_FILE_ENV] = str(kill_file(stack_settings))
    try:
        stack.up(progress=False)
    finally:
        del os.environ[KILL_FILE_ENV]
    request.config.stash[_STACK] = stack
    try:
        yield stack_settings, stack.client()
    finally:
        stack.down()  # idempotent: usually stopped already, after its last test


@pytest.fixture(scope="session")
def chromium():  # type: ignore[no-untyped-def]
    """One headless Debian chromium per worker, driven by Selenium through chromium-driver
    (``scripts/setup --browser`` installs both); each test gets it clean (``browser``)."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium, driver_binary = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver_binary, (
        "chromium and chromium-driver are missing: run scripts/setup --browser "
        "(or apt-get install chromium chromium-driver)"
    )
    options = Options()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1400,1100")
    options.add_argument("--lang=en-US")  # date inputs take their fields in this locale's order
    driver = webdriver.Chrome(service=Service(driver_binary), options=options)
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(chromium):  # type: ignore[no-untyped-def]
    """The worker's chromium as a new user would find it: no cookies (no one signed in), no
    storage, a blank page; screenshots go under the test's temp dir."""

    def clean() -> None:
        chromium.get("about:blank")
        chromium.execute_cdp_cmd("Network.clearBrowserCookies", {})
        chromium.execute_cdp_cmd(
            "Storage.clearDataForOrigin", {"origin": "*", "storageTypes": "all"}
        )

    clean()
    try:
        yield chromium
    finally:
        clean()
