"""Events in and the always-on applications: generate a day's files, produce them to Kafka, the
stream job and ``serve``.

Handlers import what they use beyond ``spec/`` inside themselves: ``streamshift --help``
builds every group's parsers, so a group's import stays as light as ``spec/``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from streamshift.cli.common import UserError, date_arg, spark_session, trigger_options
from streamshift.spec.contract import STREAM_TRIGGER
from streamshift.spec.settings import load_settings


def _cmd_generate(args: argparse.Namespace) -> int:

    from streamshift.spec.registry import get_generator

    generate_day = get_generator(args.flow)
    if args.rows < 1:
        raise UserError("--rows must be 1 or more")
    files = generate_day(args.date, args.rows, args.out, seed=args.seed)
    for kind, path in files.as_dict().items():
        print(f"{kind:20} {path}")
    return 0


def _cmd_produce(args: argparse.Namespace) -> int:
    from streamshift.spec.registry import get_flow
    from streamshift.store.produce import produce_file

    if not args.file.exists():
        raise UserError(f"file {args.file} not found; pass an EOD-format CSV file")
    if args.rate < 0:
        raise UserError("--rate must be 0 (as fast as possible) or more events per second")
    result = produce_file(
        load_settings(), get_flow(args.flow), args.file, topic=args.topic, rate=args.rate
    )
    print(result.describe())
    return 1 if result.failed else 0


def _cmd_stream(args: argparse.Namespace) -> int:
    from streamshift.engine.jobs.stream import run_stream, stream_topics
    from streamshift.spec.registry import get_flow
    from streamshift.store.processes import lower_priority

    settings = load_settings()
    stream_topics(settings, get_flow(args.flow), args.topic)  # the broker, before Spark
    lower_priority(settings.stream_nice)  # before the JVM starts: it inherits it
    settings, spark, flow = spark_session(args.flow, engine=False)
    run = run_stream(
        spark,
        settings,
        flow,
        args.layer,
        trigger=args.trigger,
        available_now=args.available_now,
        topic=args.topic,
    )
    print(run.describe())
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from streamshift.engine.jobs.serve import (
        additive_view,
        check_checkpoint,
        checkpoint_path,
        run_serve,
        serve_topics,
    )
    from streamshift.spec.registry import get_flow

    # refuse before starting Spark
    flow = get_flow(args.flow)
    view = additive_view(flow, args.view)
    settings = load_settings()
    check_checkpoint(checkpoint_path(settings, flow, view, args.engine), args.engine)
    serve_topics(settings, flow, view, args.topic)
    settings, spark, flow = spark_session(args.flow, engine=False)
    run = run_serve(
        spark,
        settings,
        flow,
        args.view,
        topic=args.topic,
        trigger=args.trigger,
        available_now=args.available_now,
        engine=args.engine,
    )
    print(run.describe())
    return 0


def add_commands(sub: Any) -> None:
    """The group's subcommands, in the order ``--help`` lists them."""
    from streamshift.spec.contract import SERVE_ENGINES

    p = sub.add_parser(
        "generate",
        help="write a realistic generated day of a flow (flows/<flow>/generate.py)",
        description="Write the day's EOD file, corrections, a replacement file, late rows, "
        "poison rows and an external party's view of the day (with deliberate breaks).",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--date", required=True, type=date_arg)
    p.add_argument("--rows", required=True, type=int, help="rows in the day's EOD file")
    p.add_argument(
        "--out", required=True, type=Path, help="the folder to write the files into (made if new)"
    )
    p.add_argument("--seed", type=int, default=1, help="the same seed writes the same files")
    p.set_defaults(handler=_cmd_generate)

    p = sub.add_parser(
        "produce",
        help="publish an EOD-format CSV's rows as events on Kafka",
        description="Send each row of the CSV as one event (key = the flow key, value = JSON of "
        "the flow's columns) with an idempotent acks=all producer. Exits 1 if any event was "
        "not acknowledged.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--file", required=True, type=Path, help="an EOD-format CSV: one event per row")
    p.add_argument(
        "--rate", type=float, default=0.0, help="events per second (default 0: as fast as possible)"
    )
    p.add_argument("--topic", help="topic (default: the flow's name)")
    p.set_defaults(handler=_cmd_produce)

    p = sub.add_parser(
        "stream",
        help="run the flow's streaming job (Kafka → the write path)",
        description="Read the flow's topic with Spark Structured Streaming and apply every "
        "micro-batch through the same write path as the EOD batch. Undecodable messages go to "
        "quarantine and to <topic>.dlq. Offsets live in the checkpoint under "
        "STREAMSHIFT_HOME/checkpoints; SIGTERM or Ctrl-C finishes the batch in flight and stops.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument(
        "--layer", choices=["batch", "stream"], default="stream", help="the layer it writes"
    )
    trigger_options(p, default=STREAM_TRIGGER)
    p.add_argument("--topic", help="topic (default: the flow's name)")
    p.set_defaults(handler=_cmd_stream)

    p = sub.add_parser(
        "serve",
        help="keep a view in Spark's state store and publish it to a compacted topic",
        description="Read the flow's topic, run the flow's decode, rules and enrichment, and keep "
        "an additive view (View.additive: sums and counts) in Spark's state store (RocksDB, "
        "exactly once through the checkpoint). Each micro-batch publishes the groups it changed "
        "to <topic>.<view> (compacted; key = the group as JSON, value = the view's row, null "
        "when the group emptied): a low-latency read path beside the Delta tables, which the "
        "`stream` job keeps writing. Ctrl-C stops it; it resumes from its checkpoint.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--view", help="the view to serve (default: the flow's first)")
    trigger_options(p)
    p.add_argument("--topic", help="topic read (default: the flow's name)")

    p.add_argument(
        "--engine",
        choices=SERVE_ENGINES,
        default="jvm",
        help="where the state processor runs: jvm (default; jvm/udf's AdditiveViewState, "
        "in-process state calls) or python (transformWithStateInPandas). Each keeps its own "
        "checkpoint; the published rows are the same",
    )
    p.set_defaults(handler=_cmd_serve)
