"""The local stack and the deployment: settings, the spark-submit arguments, the Kafka broker,
the warm engine, topics, Airflow and the demo.

Handlers import what they use beyond ``spec/`` inside themselves: ``streamshift --help``
builds every group's parsers, so a group's import stays as light as ``spec/``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from streamshift.cli.common import UserError, known_flow
from streamshift.control.outcome import say_progress
from streamshift.spec.dayfiles import DEMO_ROWS
from streamshift.spec.settings import describe, load_settings, resolve_settings, shown


def _cmd_settings(args: argparse.Namespace) -> int:
    settings, sources = resolve_settings()
    for name, default, doc in describe():
        field_name = name.removeprefix("STREAMSHIFT_").lower()
        value = shown(field_name, getattr(settings, field_name))
        source = sources.get(field_name, "default")
        print(f"{name:42} = {value:28}  # from {source}; {doc} (default {default})")
    return 0


def _cmd_setup(args: argparse.Namespace) -> int:
    from streamshift.local.kit_setup import setup

    setup(load_settings(), say_progress, archive=not args.no_archive, prune=args.prune)
    print("ready")
    return 0


def _cmd_init(args: argparse.Namespace) -> int:
    from streamshift.spec.scaffold import init_project

    written = init_project(args.folder, args.name)
    print(f"wrote a streamshift project in {args.folder} ({len(written)} files). Next:")
    here = Path(args.folder).resolve() == Path.cwd().resolve()
    cd = "" if here else f"cd {shlex.quote(str(args.folder))} && "
    print(f"  {cd}pytest tests    # the example flow through the write path")
    print("  streamshift demo --flow payments    # the example end to end on the local stack")
    return 0


def _cmd_submit_args(args: argparse.Namespace) -> int:

    from streamshift.engine.spark import submit_args

    # Quoted for the shell: the drivers' JVM options hold spaces (use it through eval).
    print(shlex.join(submit_args(load_settings())))
    return 0


def _cmd_kafka(args: argparse.Namespace) -> int:
    from streamshift.local.broker import LocalBroker

    broker = LocalBroker.from_settings(load_settings())
    if args.action == "start":
        print(f"starting Kafka broker on {broker.bootstrap} ...", file=sys.stderr, flush=True)
        if broker.start():
            print(f"Kafka broker {broker.status().describe()}")
        else:
            print(f"Kafka broker already running: {broker.status().describe()}")
    elif args.action == "stop":
        if broker.stop():
            print("Kafka broker stopped")
        else:
            print("Kafka broker was not running; nothing to stop")
    else:
        status = broker.status()
        print(f"Kafka broker {status.describe()}")
        return 0 if status.running else 3
    return 0


def _cmd_engine(args: argparse.Namespace) -> int:
    from streamshift.local.engine import LocalEngine

    engine = LocalEngine(load_settings())
    if args.action == "up":
        print(f"starting the engine at {engine.url} ...", file=sys.stderr, flush=True)
        started = engine.start(progress=say_progress)
        print(f"engine {'' if started else 'already '}{engine.status().describe()}")
    elif args.action == "down":
        print("engine stopped" if engine.stop() else "the engine was not running; nothing to stop")
    else:
        status = engine.status()
        print(f"engine {status.describe()}")
        return 0 if status.running else 3
    return 0


def _cmd_topics(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from streamshift.spec.registry import flow_names
    from streamshift.store.events import dlq_topic
    from streamshift.store.kafka import ensure_topic, unreachable

    settings = load_settings()
    for flow in args.flow or flow_names():
        known_flow(flow)
        for topic in (flow, dlq_topic(flow)):
            try:
                created = ensure_topic(settings, topic)
            except KafkaException as exc:
                raise UserError(unreachable(settings, exc)) from None
            print(f"{topic}: {'created' if created else 'exists'}")
    return 0


def _cmd_airflow(args: argparse.Namespace) -> int:
    from streamshift.local.airflow import USER, LocalAirflow, password

    settings = load_settings()
    airflow = LocalAirflow(settings)
    if args.action == "up":
        status = airflow.up()
        print(status.describe())
        print(
            f"UI: {airflow.url}  login: {USER} / {password(settings)}  "
            f"(kept in {settings.airflow_home / 'passwords.json'})"
        )
        print("trigger the EOD run of a day: open DAG eod_<flow>, Trigger, set business_date")
        return 0
    if args.action == "down":
        print("Airflow stopped" if airflow.down() else "Airflow was not running; nothing to stop")
        return 0
    if args.action == "cli":
        if not args.airflow_args:
            raise UserError(
                "give the airflow command to run, e.g. `streamshift airflow cli dags list`"
            )
        return airflow.run_cli(args.airflow_args)
    status = airflow.status()
    print(status.describe())
    return 0 if status.up else 3


def _cmd_demo(args: argparse.Namespace) -> int:
    from streamshift.local.demo import run_demo

    if args.rows < 1:
        raise UserError("--rows must be 1 or more")
    return run_demo(load_settings(), known_flow(args.flow), rows=args.rows)


def add_commands(sub: Any) -> None:
    """The group's subcommands, in the order ``--help`` lists them."""
    p = sub.add_parser(
        "init",
        help="write a new project (project file, example flow, DAG file, expectations, tests) "
        "into an empty folder",
        description="Scaffold a team's project: streamshift.toml, flows/payments (an example "
        "flow with reference data and a generator), dags/ (one file calling the kit's DAG "
        "factory), expectations/gx (the example's starter data-quality suites), tests/ (the "
        "example through the kit's testing helpers) "
        "and a README. Refuses a folder that holds anything.",
    )
    p.add_argument("folder", type=Path, help="the project's folder (new, or empty)")
    p.add_argument("--name", help="the project's name (default: the folder's)")
    p.set_defaults(handler=_cmd_init)

    p = sub.add_parser(
        "setup",
        help="make an installed kit ready: fetch the locked JVM jars (hashes checked) into the "
        "user's cache, place the stream's decoder, train the driver's class archive",
        description="Idempotent; offline once done. Jars come from Maven Central (or "
        "STREAMSHIFT_MAVEN_REPOSITORY) as pinned in streamshift/jars.lock, into "
        "~/.cache/streamshift/jars (XDG_CACHE_HOME). A kit's repository uses scripts/setup.",
    )
    p.add_argument(
        "--no-archive", action="store_true", help="skip the class-data-sharing archive's training"
    )
    p.add_argument(
        "--prune",
        action="store_true",
        help="remove the cache's jar folders of other locks (an earlier kit's); without it, "
        "setup says how many there are",
    )
    p.set_defaults(handler=_cmd_setup)

    p = sub.add_parser(
        "settings", help="show every setting, its value, where it came from, and its default"
    )
    p.set_defaults(handler=_cmd_settings)

    p = sub.add_parser(
        "spark-submit-args",
        help="print the spark-submit options (jars, Delta, settings) for spark_jobs/ and "
        'streaming/, quoted for the shell: eval spark-submit "$(streamshift spark-submit-args)" '
        "spark_jobs/run.py eod ...",
    )
    p.set_defaults(handler=_cmd_submit_args)

    p = sub.add_parser(
        "kafka",
        help="run the embedded single-node Kafka broker (KRaft) on 127.0.0.1",
        description="Start, stop or inspect the local Kafka broker. Its data lives under "
        "STREAMSHIFT_HOME/kafka; its port is the one in STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS.",
    )
    p.add_argument("action", choices=["start", "stop", "status"])
    p.set_defaults(handler=_cmd_kafka)

    p = sub.add_parser(
        "engine",
        help="run the warm Spark engine (a Spark Connect server) on 127.0.0.1",
        description="Start, stop or inspect the local warm engine: Spark's Spark Connect "
        "server with Delta and the kit's jars, at STREAMSHIFT_ENGINE. While it is up, eod, "
        "reconcile, close, replay, promote and quality run on it and start no JVM of their "
        "own: each hands its job to the engine's job runner, which keeps a process ready with "
        "a session open. While it is down they start a local Spark session. Its logs are "
        "STREAMSHIFT_HOME/engine/engine.log and runner.log.",
    )
    p.add_argument("action", choices=["up", "down", "status"])
    p.set_defaults(handler=_cmd_engine)

    p = sub.add_parser(
        "topics",
        help="create each flow's Kafka topic and its dead-letter topic (idempotent)",
        description="Create <flow> and <flow>.dlq on the brokers of "
        "STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS, with STREAMSHIFT_KAFKA_TOPIC_PARTITIONS, "
        "_REPLICATION_FACTOR and _RETENTION_MS; topics that exist are left as they are.",
    )
    p.add_argument("--flow", action="append", help="only this flow (repeatable; default: all)")
    p.set_defaults(handler=_cmd_topics)

    p = sub.add_parser(
        "airflow",
        help="run the embedded Airflow 3 (API server + UI, scheduler, DAG processor, triggerer)",
        description="up: start the local Airflow (SQLite, LocalExecutor) under "
        "STREAMSHIFT_HOME/airflow with the repo's dags/ and plugins/, wait until its API answers, "
        "print the UI address and the admin login (password generated once, kept under the "
        "Airflow home). down: stop it. status: exit 0 when every component runs and the API "
        "answers, 3 otherwise. cli ARGS: run `airflow ARGS` against the local stack (backfills, "
        "connections, pools). The port is STREAMSHIFT_AIRFLOW_PORT.",
    )
    p.add_argument("action", choices=["up", "down", "status", "cli"])
    p.add_argument(
        "airflow_args",
        nargs=argparse.REMAINDER,
        help="with cli: an airflow command run with the local stack's environment, e.g. "
        "`backfill create --dag-id eod_<flow> --from-date 2026-11-16 --to-date 2026-11-18`",
    )
    p.set_defaults(handler=_cmd_airflow)

    p = sub.add_parser(
        "demo",
        help="run the demo on the embedded local stack",
        description="Walk one flow from stage batch through shadow to stream on the local "
        "Airflow, Kafka broker and Spark: generated days loaded by EOD DAG runs, the stream "
        "job, reconciliation, the promotion gate, a correction, the day's report. "
        "Data goes under STREAMSHIFT_HOME/demo (emptied first); bin/demo runs it.",
    )
    p.add_argument("--flow", required=True, help="the flow to walk (it needs a generator)")
    p.add_argument(
        "--rows", type=int, default=DEMO_ROWS, help="rows in the first generated day (%(default)s)"
    )
    p.set_defaults(handler=_cmd_demo)
