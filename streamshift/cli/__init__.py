"""The ``streamshift`` command: thin argument parsing around one function per subcommand."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from streamshift.control.outcome import handled
from streamshift.spec.errors import StreamshiftError
from streamshift.spec.settings import describe, load_settings, shown
from streamshift.spec.stages import NAMES as STAGE_NAMES


class UserError(StreamshiftError):
    """A command-line mistake; printed without a traceback, exit code 2."""

    final = True


def _cmd_settings(args: argparse.Namespace) -> int:
    settings = load_settings()
    for name, default, doc in describe():
        field_name = name.removeprefix("STREAMSHIFT_").lower()
        value = shown(field_name, getattr(settings, field_name))
        print(f"{name:42} = {value:28}  # {doc} (default {default})")
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
        started = engine.start(progress=_say_progress)
        print(f"engine {'' if started else 'already '}{engine.status().describe()}")
    elif args.action == "down":
        print("engine stopped" if engine.stop() else "the engine was not running; nothing to stop")
    else:
        status = engine.status()
        print(f"engine {status.describe()}")
        return 0 if status.running else 3
    return 0


def _known_flow(flow: str) -> str:
    from streamshift.spec.registry import flow_names

    if flow not in flow_names():
        raise UserError(f"unknown flow {flow!r}; flows: {', '.join(flow_names())}")
    return flow


def _cmd_maintain(args: argparse.Namespace) -> int:
    from streamshift.engine.jobs.maintain import flow_tables
    from streamshift.spec.registry import get_flow
    from streamshift.spec.requests import MaintainRequest

    _known_flow(args.flow)
    settings = load_settings()
    if not flow_tables(settings, get_flow(args.flow)):  # said without starting Spark
        print(
            f"nothing to maintain: {args.flow} has no tables under {settings.warehouse} yet "
            "(the first EOD load or stream batch writes them)"
        )
        return 0
    return _run_request(MaintainRequest(args.flow))


def _cmd_topics(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from streamshift.spec.registry import flow_names
    from streamshift.store.events import dlq_topic
    from streamshift.store.kafka import ensure_topic, unreachable

    settings = load_settings()
    for flow in args.flow or flow_names():
        _known_flow(flow)
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
    return run_demo(load_settings(), _known_flow(args.flow), rows=args.rows)


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date; use YYYY-MM-DD") from None


def _say_progress(message: str) -> None:
    print(f"[streamshift] {message}", file=sys.stderr, flush=True)


def _spark(flow_name: str, engine: bool = True):  # type: ignore[no-untyped-def]
    from streamshift.engine.jobs.execute import session_for

    return session_for(flow_name, engine)


def _run_request(request) -> int:  # type: ignore[no-untyped-def]
    from streamshift.local.submit import submit

    return submit(request)


def _cmd_request(args: argparse.Namespace) -> int:
    from streamshift.spec.requests import JobRequest

    try:
        request = JobRequest.from_json(args.json)
    except (ValueError, TypeError) as exc:
        raise UserError(
            f"not a job request: {exc}; pass a JSON object with its kind and fields "
            "(streamshift request --help)"
        ) from None
    _known_flow(request.flow)  # type: ignore[attr-defined]
    return _run_request(request)


def _cmd_eod(args: argparse.Namespace) -> int:
    from streamshift.spec.requests import EodRequest

    _known_flow(args.flow)
    replace = args.replace or args.mode == "replace"
    return _run_request(
        EodRequest(
            args.flow, args.date, args.file, args.layer, replace, quality_run=args.quality_run
        )
    )


def _serving_layer_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--layer",
        choices=["batch", "stream"],
        help="default: the layer that serves readers in the flow's stage (batch in shadow)",
    )


def _cmd_explain(args: argparse.Namespace) -> int:
    from streamshift.control import explain as ex
    from streamshift.spec.formatting import format_table, json_text

    flow = _known_flow(args.flow)
    try:
        found = ex.explain_in(
            load_settings(),
            flow,
            args.view,
            args.date,
            args.group,
            args.layer,
            changes=args.changes,
            skip=args.skip,
        )
    except ex.ExplainError as e:
        raise UserError(str(e)) from None
    view, layer = found.view, found.layer
    if args.format == "json":
        print(json_text(found.as_json()))
        return 0 if found.row or found.changes_total else 1
    named = ", ".join(f"{k}={v}" for k, v in found.group.items())
    if found.row is None and not found.changes_total:
        print(
            f"{flow}: view {view} of the {layer} layer has no row {named} and no "
            f"change ever touched it; check the values (streamshift show --flow {flow} "
            f"--view {view} --layer {layer}), or --layer "
            f"{'batch' if layer == 'stream' else 'stream'}"
        )
        return 1
    state = "no row now (every member left)" if found.row is None else "its row:"
    print(f"{flow} view {view}, {layer} layer, {named}: {state}")
    for line in ex.measure_lines(found):
        print(f"  {line}")
    print(f"\nmembers ({len(found.members)} live keys):")
    sys.stdout.write(format_table(ex.MEMBER_COLUMNS, ex.member_rows(found)))
    shown = f"{args.skip + 1}-{args.skip + len(found.changes)} of {found.changes_total}"
    print(f"\nchanges that moved it, newest first ({shown}; --changes/--skip page them):")
    sys.stdout.write(format_table(ex.CHANGE_COLUMNS, ex.change_rows(found)))
    return 0


def _cmd_trace(args: argparse.Namespace) -> int:
    from streamshift.control.trace import COLUMNS, default_layer, shown_ref, table_rows, trace
    from streamshift.spec.catalog import LayerTables
    from streamshift.spec.formatting import format_table, json_text
    from streamshift.spec.registry import get_flow

    _known_flow(args.flow)
    settings, flow = load_settings(), get_flow(args.flow)
    layer = args.layer or default_layer(settings, flow.name)
    found = trace(flow, LayerTables(settings.warehouse, flow, layer), args.key)
    if args.format == "json":
        print(json_text(found.as_json()))
    elif not found.events:
        print(
            f"{flow.name}: the {layer} layer has received nothing for key {args.key!r} "
            f"(quarantine included); check the key, or --layer "
            f"{'batch' if layer == 'stream' else 'stream'}"
        )
        return 1
    else:
        now = found.current
        state = (
            "none"
            if now is None
            else f"version {now['version']}{' (deleted)' if now['deleted'] else ''} from "
            f"{shown_ref(now)}"
        )
        print(f"{flow.name} key {args.key} in the {layer} layer: current {state}")
        sys.stdout.write(format_table(COLUMNS, table_rows(found)))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from streamshift.control.serving import held_dates, serving_view_rows, show, view_rows
    from streamshift.spec.registry import get_flow

    settings, flow = load_settings(), get_flow(args.flow)
    if args.layer == "serving":
        result = serving_view_rows(settings, flow, args.view, args.date, args.limit)
    else:
        dates = None if args.date is None else [args.date]
        result = view_rows(settings, flow, args.layer, args.view, dates, limit=args.limit)
    if not result.columns:  # the table was never written (an empty one still has columns)
        print(
            f"flow {flow.name}: the {args.layer} layer has no {args.view} table yet (nothing was loaded "
            f"into it under {settings.warehouse}); load a day with `streamshift eod --flow "
            f"{flow.name} --date D --file F`, or run `streamshift stream --flow {flow.name}`.",
            file=sys.stderr,
        )
        return 0
    show(result, args.format, sys.stdout)
    if args.date is not None and not result.rows and args.layer != "serving":
        held = held_dates(settings, flow, args.layer, args.view)
        if held:
            span = f"{held[0]}" if len(held) == 1 else f"{len(held)} dates, {held[0]} to {held[-1]}"
            print(
                f"the {args.layer} layer holds no {args.view} rows for {args.date}; "
                f"it holds {span}",
                file=sys.stderr,
            )
    return 0


def _cmd_reconcile(args: argparse.Namespace) -> int:
    from streamshift.spec.requests import ReconcileRequest

    _known_flow(args.flow)
    return _run_request(
        ReconcileRequest(
            args.flow,
            args.date,
            against=args.against,
            eod_file=args.eod_file,
            parity=not args.no_parity,
            correct=args.correct,
            replace=args.replace,
            fail_on_breaks=args.fail_on_breaks,
            quality_run=args.quality_run,
        )
    )


def _cmd_close(args: argparse.Namespace) -> int:
    from streamshift.spec.requests import CloseRequest

    _known_flow(args.flow)
    return _run_request(
        CloseRequest(
            args.flow, args.date, args.force, args.reason, args.by, quality_run=args.quality_run
        )
    )


def _cmd_redrive(args: argparse.Namespace) -> int:
    from collections import Counter

    from streamshift.control.trace import default_layer
    from streamshift.spec.registry import get_flow
    from streamshift.spec.requests import RedriveRequest
    from streamshift.store.quarantine import pending

    settings, flow = load_settings(), get_flow(_known_flow(args.flow))
    layer = args.layer or default_layer(settings, flow.name)
    found = pending(settings, flow.name, layer, args.rule, args.date)
    if not found:  # said without starting Spark
        scope = " ".join(f"--{k} {v}" for k, v in (("rule", args.rule), ("date", args.date)) if v)
        print(
            f"{flow.name}: nothing to re-drive in the {layer} layer's quarantine {scope}".rstrip()
            + f" (streamshift show --flow {flow.name} --view quarantine --layer {layer} lists it)"
        )
        return 0
    rules = ", ".join(f"{n} {r}" for r, n in sorted(Counter(q["rule"] for q in found).items()))
    print(f"[streamshift] re-driving {len(found)} quarantined rows ({rules})", file=sys.stderr)
    return _run_request(RedriveRequest(flow.name, args.rule, args.date, layer, args.by))


def _cmd_stage(args: argparse.Namespace) -> int:
    from streamshift.control.stages import promotion_evidence
    from streamshift.spec.stages import next_stage, stage
    from streamshift.store.records import (
        current_stage,
        day_closes,
        promotion_decisions,
        stage_history,
    )

    settings, flow = load_settings(), _known_flow(args.flow)
    now = stage(current_stage(settings, flow))
    print(f"{flow}: stage {now.name} ({now.summary})")
    following = next_stage(now.name)
    if following is not None and now.evidence is not None:
        evidence = promotion_evidence(settings, flow, following.name)
        print(
            f"evidence for {following.name} (last {evidence.window} reconciled dates, "
            f"{evidence.describe_kind()}, in stage {evidence.made_in}):"
        )
        _print_evidence(evidence)
    elif following is not None:
        print(f"promotion to {following.name} needs no evidence")
    closes = day_closes(settings, flow)[-5:]
    print(
        f"last closed dates (a stage-{now.name} day closes by {now.closes_by.replace('_', ' ')}):"
    )
    for c in closes:
        reason = f" ({c['reason']})" if c["reason"] else ""
        print(
            f"    {c['business_date']}  {c['layer']} layer  {c['how']}{reason}  "
            f"by {c['closed_by']} at {c['closed_at']}"
        )
    if not closes:
        print("    none yet")
    print("stage history:")
    for change in stage_history(settings, flow):
        forced = f" FORCED ({change['reason']})" if change["forced"] else ""
        print(
            f"    {change['changed_at']}  {change['from_stage']} → {change['to_stage']}  "
            f"by {change['changed_by']}{forced}"
        )
    decisions = promotion_decisions(settings, flow)
    if decisions:
        print("promotion approvals (four eyes):")
    for d in decisions:
        answered = f"by {d['decided_by']}" if d["decided_by"] else "(nobody answered)"
        print(
            f"    {d['decided_at']}  {d['from_stage']} → {d['to_stage']}  asked by "
            f"{d['requested_by']}: {d['decision']} {answered}  (run {d['run_id']})"
        )
    return 0


def _print_evidence(evidence: Any) -> None:
    for d in evidence.dates:
        quality = d.get("quality_failures")
        print(
            f"    {d['business_date']}  {'clean' if d['clean'] else str(d['breaks']) + ' breaks'}"
            f"  (run {d['run_id']})"
            + (f"; data quality failed: {', '.join(quality)}" if quality else "")
        )
    for problem in evidence.problems():
        print(f"    not enough: {problem}")


def _timestamp(text: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a timestamp; use ISO 8601, e.g. 2026-11-20T08:00:00Z"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _cmd_replay(args: argparse.Namespace) -> int:
    from streamshift.spec.requests import ReplayRequest

    _known_flow(args.flow)
    return _run_request(
        ReplayRequest(args.flow, getattr(args, "from"), args.to, args.into, args.topic)
    )


def _cmd_report(args: argparse.Namespace) -> int:
    from streamshift.control.report import write_report
    from streamshift.spec.registry import flow_names

    if args.flow not in flow_names():
        raise UserError(f"unknown flow {args.flow!r}; flows: {', '.join(flow_names())}")
    html_path, json_path = write_report(load_settings(), args.flow, args.date, echo=True)
    print(f"report: {html_path}")
    print(f"summary for machines: {json_path}")
    return 0


def _cmd_promote(args: argparse.Namespace) -> int:
    from streamshift.control.stages import check_promotion
    from streamshift.spec.requests import PromoteRequest
    from streamshift.spec.stages import needs_approval
    from streamshift.store.records import current_stage

    _known_flow(args.flow)
    request = PromoteRequest(args.flow, args.to, args.force, args.reason, args.by)
    settings = load_settings()
    if args.force or not needs_approval(current_stage(settings, args.flow), args.to):
        return _run_request(request)  # (--force: an admin's recorded break-glass)
    check_promotion(settings, args.flow, args.to, reason=args.reason)  # refused: say so now
    return _request_approval(settings, request)


def _request_approval(settings, request) -> int:  # type: ignore[no-untyped-def]
    """Start the ``streamshift_promote`` run that waits for a second user's approval."""
    from urllib.parse import quote

    from streamshift.airflow.approval import approvers
    from streamshift.local.airflow import USER, LocalAirflow

    airflow = LocalAirflow(settings)
    if not airflow.status().up:
        raise UserError(
            f"a promotion to {request.to} waits for a second user's approval in Airflow, which "
            "is not running: start it (streamshift airflow up) and run this again; an admin "
            "may instead record it at once with --force --reason TEXT (break-glass)"
        )
    conf = {"flow": request.flow, "to": request.to, "force": False, "reason": request.reason}
    run = airflow.client(USER).trigger("streamshift_promote", conf)
    run_id = run["dag_run_id"]
    who = " or ".join(approvers(settings.approvers, USER)) or "(nobody: set STREAMSHIFT_APPROVERS)"
    print(f"promotion of {request.flow} to {request.to} requested as {USER}: run {run_id}")
    print(
        f"it waits for {who} to approve under Browse → Required actions: "
        f"{airflow.url}/dags/streamshift_promote/runs/{quote(run_id, safe='')}/tasks/approve/"
        "required_actions"
    )
    return 0


def _cmd_quality(args: argparse.Namespace) -> int:
    from streamshift.engine.validate import data_docs_dir
    from streamshift.spec.requests import QualityRequest

    _known_flow(args.flow)
    request = QualityRequest(args.flow, args.date, args.layer, args.file, tuple(args.dataset or ()))
    code = _run_request(request)
    print(f"Data Docs: {data_docs_dir(load_settings()) / 'index.html'}")
    return code


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


def _trigger(text: str) -> str:
    """'1s', '500ms', '2m' or Spark's own '10 seconds' → Spark's processingTime interval."""
    import re

    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|milliseconds?|seconds?|minutes?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not an interval; use e.g. 1s, 500ms, 2m")
    number, unit = match.groups()
    unit = {"ms": "milliseconds", "s": "seconds", "m": "minutes"}.get(unit, unit)
    return f"{number} {unit if unit.endswith('s') else unit + 's'}"


def _trigger_options(p: argparse.ArgumentParser) -> None:
    """--trigger or --available-now, for the commands that run a streaming query."""
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--trigger",
        default="1 seconds",
        type=_trigger,
        help="micro-batch interval, e.g. 1s, 500ms, 2m (default 1s)",
    )
    mode.add_argument(
        "--available-now", action="store_true", help="process what the topic holds now, then stop"
    )


def _cmd_stream(args: argparse.Namespace) -> int:
    from streamshift.engine.jobs.stream import run_stream, stream_topics
    from streamshift.spec.registry import get_flow
    from streamshift.store.processes import lower_priority

    settings = load_settings()
    stream_topics(settings, get_flow(args.flow), args.topic)  # the broker, before Spark
    lower_priority(settings.stream_nice)  # before the JVM starts: it inherits it
    settings, spark, flow = _spark(args.flow, engine=False)
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
    settings, spark, flow = _spark(args.flow, engine=False)
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


def _cmd_status(args: argparse.Namespace) -> int:
    from streamshift.engine.spark import engine_answers
    from streamshift.store.heartbeat import read_status

    settings = load_settings()
    if not settings.engine:
        print("engine: none configured (STREAMSHIFT_ENGINE is empty): jobs start their own Spark")
    elif engine_answers(settings):
        print(f"engine: answering at {settings.engine}")
    else:
        print(
            f"engine: not answering at {settings.engine}: request-style jobs start their own "
            "Spark (start it with `streamshift engine up`)"
        )
    statuses = [
        s for s in read_status(settings.home, settings) if args.flow is None or s.flow == args.flow
    ]
    if not statuses:
        print("no streaming job has run here yet (start one with `streamshift stream --flow F`)")
        return 3
    for status in statuses:
        print(status.describe())
    return 0 if all(s.running for s in statuses) else 3


def _cmd_submit_args(args: argparse.Namespace) -> int:
    import shlex

    from streamshift.engine.spark import submit_args

    # Quoted for the shell: the drivers' JVM options hold spaces (use it through eval).
    print(shlex.join(submit_args(load_settings())))
    return 0


def _add_quality_run(p: argparse.ArgumentParser, what: str) -> None:
    """``--quality-run``, for the jobs that write a day (the EOD DAG's load and correction)."""
    p.add_argument(
        "--quality-run",
        metavar="RUN_ID",
        help=f"then validate {what} with the flow's data-quality suites in the same Spark "
        "application, recorded in quality_runs under RUN_ID (the EOD DAG's data_quality task "
        "gives the verdict); failed expectations do not change the exit status",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamshift",
        description="Lambda migration kit: one set of PySpark transforms for EOD batch "
        "and Kafka streaming. Settings come from STREAMSHIFT_* variables "
        "(see `streamshift settings`).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("settings", help="show every setting, its value and default")
    p.set_defaults(handler=_cmd_settings)

    p = sub.add_parser(
        "spark-submit-args",
        help="print the spark-submit options (jars, Delta, settings) for spark_jobs/ and "
        'streaming/, quoted for the shell: eval spark-submit "$(streamshift spark-submit-args)" '
        "spark_jobs/run.py eod ...",
    )
    p.set_defaults(handler=_cmd_submit_args)

    p = sub.add_parser(
        "request",
        help="run one typed job request given as JSON (what the DAGs' tasks pass, and "
        "spark_jobs/run.py on a cluster)",
        description="Run a job request (streamshift.spec.requests): a JSON object with its "
        '"kind" (eod, reconcile, close, promote, redrive, replay, quality, maintain) and its '
        "fields, e.g. "
        '{"kind": "eod", "flow": "<flow>", "business_date": "2026-11-20", "file": "f.csv"}. '
        "The same checks and job as the command of that name.",
    )
    p.add_argument("json", help="the request, as JSON")
    p.set_defaults(handler=_cmd_request)

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
        "maintain",
        help="compact small files, VACUUM and checkpoint the Delta log of a flow's tables",
        description="For every table of the flow in both layers: compaction of small files "
        "(OPTIMIZE; the data does not change), VACUUM of files no version within the table's "
        "retention needs (delta.deletedFileRetentionDuration, Delta's default 7 days), and a "
        "Delta log checkpoint. The maintenance_<flow> DAG runs it weekly.",
    )
    p.add_argument("--flow", required=True)
    p.set_defaults(handler=_cmd_maintain)

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
    from streamshift.local.demo import DEMO_ROWS

    p.add_argument(
        "--rows", type=int, default=DEMO_ROWS, help="rows in the first generated day (%(default)s)"
    )
    p.set_defaults(handler=_cmd_demo)

    p = sub.add_parser(
        "eod",
        help="load an EOD file through the write path",
        description="Load an end-of-day CSV (header row, the flow's columns) for one business "
        "date. A delta file carries only changed rows; with --replace the file is the whole "
        "day and rows of that date absent from it are cancelled. A file that cannot be read "
        "fails with the line and problem and changes nothing; bad rows are quarantined.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--date", required=True, type=_date, help="business date YYYY-MM-DD")
    p.add_argument("--file", required=True, type=Path)
    p.add_argument("--replace", action="store_true", help="the file is the whole day")
    p.add_argument(
        "--mode",
        choices=["delta", "replace"],
        help="the same as a flag: delta (default) or replace (the same as --replace)",
    )
    p.add_argument("--layer", choices=["batch", "stream"], default="batch")
    _add_quality_run(p, "the day")
    p.set_defaults(handler=_cmd_eod)

    p = sub.add_parser(
        "show",
        help="print a view, the current state or the quarantine",
        description="Print a view (e.g. positions), the current state (--view current) or the "
        "quarantine (--view quarantine) of one layer, optionally for one business date. "
        "Reads the Delta tables through deltalake: no Spark, no JVM.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--view", required=True, help="a view name, current, quarantine, late_events")
    p.add_argument("--date", type=_date, help="business date YYYY-MM-DD (default: all)")
    p.add_argument(
        "--layer",
        choices=["batch", "stream", "serving"],
        default="batch",
        help="serving: what readers get in the flow's migration stage",
    )
    p.add_argument("--format", choices=["table", "csv"], default="table")
    p.add_argument("--limit", type=int, default=0, help="at most this many rows (0: all)")
    p.set_defaults(handler=_cmd_show)

    p = sub.add_parser(
        "trace",
        help="where a key's changes went: every version received, its source and outcome",
        description="Every delivery of one key the layer received, in the order received, each "
        "with its source and source_ref (file:line or topic:partition:offset; 'via' names the "
        "message that carried an EOD correction or a re-driven row through the topic), when it "
        "was applied and its outcome: applied (* = still current), superseded (a higher version "
        "came in the same apply), stale (at or below a version received before it: out of order "
        "or sent again; it changed nothing), quarantined (with the rule); late where its date "
        "was closed. A version delivered again (a re-sent message, a line repeated in a file) "
        "is listed at each delivery. "
        "Reads the Delta tables through deltalake: no Spark, no JVM.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--key", required=True, help="a value of the flow's key column")
    _serving_layer_argument(p)
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(handler=_cmd_trace)

    p = sub.add_parser(
        "explain",
        help="why a view's row is what it is: its members and the changes that moved it",
        description="One group of a view on one date: the row, how each measure comes from "
        "the group's members (sums and counts add up their contributions; a minimum or "
        "maximum names the member setting it; a mean gives its sum and count), the live keys "
        "in it with their versions and source_ref, and the applied versions that moved it, "
        "newest first, each with its delta. Reads the Delta tables through deltalake: no "
        "Spark, no JVM.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--view", help="default: the flow's first view")
    p.add_argument("--date", required=True, type=_date, help="the business date, YYYY-MM-DD")
    p.add_argument(
        "--group",
        required=True,
        help="the group's other columns, col=value,... (e.g. book=EQ-1,instrument=AAPL)",
    )
    _serving_layer_argument(p)
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--changes", type=int, default=20, help="at most this many changes (0: all)")
    p.add_argument("--skip", type=int, default=0, help="skip the newest N changes (paging)")
    p.set_defaults(handler=_cmd_explain)

    p = sub.add_parser(
        "generate",
        help="write a realistic generated day of a flow (flows/<flow>/generate.py)",
        description="Write the day's EOD file, corrections, a replacement file, late rows, "
        "poison rows and an external party's view of the day (with deliberate breaks).",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--date", required=True, type=_date)
    p.add_argument("--rows", required=True, type=int, help="rows in the day's EOD file")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(handler=_cmd_generate)

    p = sub.add_parser(
        "produce",
        help="publish an EOD-format CSV's rows as events on Kafka",
        description="Send each row of the CSV as one event (key = the flow key, value = JSON of "
        "the flow's columns) with an idempotent acks=all producer. Exits 1 if any event was "
        "not acknowledged.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--file", required=True, type=Path)
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
    p.add_argument("--layer", choices=["batch", "stream"], default="stream")
    _trigger_options(p)
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
    _trigger_options(p)
    p.add_argument("--topic", help="topic read (default: the flow's name)")
    from streamshift.spec.contract import SERVE_ENGINES

    p.add_argument(
        "--engine",
        choices=SERVE_ENGINES,
        default="jvm",
        help="where the state processor runs: jvm (default; jvm/udf's AdditiveViewState, "
        "in-process state calls) or python (transformWithStateInPandas). Each keeps its own "
        "checkpoint; the published rows are the same",
    )
    p.set_defaults(handler=_cmd_serve)

    p = sub.add_parser(
        "status",
        help="show the streaming jobs (stream and serve): running or not, last batch, the batch in flight, lag",
        description="Read the heartbeats the streaming jobs (`stream`, and `serve` as "
        "<flow>/serve-<view>) write under STREAMSHIFT_HOME/status. "
        "Exit code 0 when every job shown is running, 3 otherwise.",
    )
    p.add_argument("--flow", help="only this flow")
    p.set_defaults(handler=_cmd_status)

    p = sub.add_parser(
        "reconcile",
        help="reconcile a business date: stream vs batch, vs an external file, vs the EOD file",
        description="Compare the stream and batch layers' views for the date (parity), the "
        "serving layer against an external positions file (--against), and the current state "
        "against the EOD file (--eod-file). Breaks go to recon_breaks, a summary to "
        "recon_runs. Exit 1 with --fail-on-breaks when any break is found.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--date", required=True, type=_date)
    p.add_argument("--against", type=Path, help="external view file, e.g. clearing positions")
    p.add_argument("--eod-file", type=Path, help="the day's EOD file")
    p.add_argument("--no-parity", action="store_true", help="skip stream vs batch")
    p.add_argument("--fail-on-breaks", action="store_true")
    p.add_argument(
        "--correct",
        action="store_true",
        help="stage stream: apply the EOD file's differences to the stream layer (source "
        "eod_correction), reconcile again and close the date in the stream layer",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="with --correct: the EOD file is the whole day; also cancel the stream layer's "
        "live keys of the date that the file lacks",
    )
    _add_quality_run(p, "the day's stream layer (with --eod-file as the raw file)")
    p.set_defaults(handler=_cmd_reconcile)

    p = sub.add_parser(
        "close",
        help="close a business date at its cut-off (stage kappa); later changes are late",
        description="Close the date once its cut-off plus grace (the flow's CutOff: time, "
        "zone, grace) has passed and the stream job has committed every offset the topic held "
        "at that moment (per partition; an idle partition holds nothing open). Refuses "
        "otherwise, saying what it waits for. Changes for a closed date are recorded as late "
        "events (streamshift show --view late_events --layer stream). In stage kappa the close "
        "covers the stream layer; batch and shadow close by the EOD load, stream by the EOD "
        "file's reconciliation. --force --reason closes without waiting, recorded as forced.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--date", required=True, type=_date)
    p.add_argument("--force", action="store_true", help="close without waiting (needs --reason)")
    p.add_argument("--reason", help="why (required with --force; recorded)")
    p.add_argument("--by", help="who is recorded as closed_by (default: the OS user)")
    _add_quality_run(p, "the closed date's stream layer")
    p.set_defaults(handler=_cmd_close)

    p = sub.add_parser(
        "redrive",
        help="re-apply quarantined rows whose cause is fixed (reference data, a rule)",
        description="Reads each quarantined row's payload back into the flow's columns and "
        "checks it with today's rules and reference data. The rows that pass now are applied "
        "with source redrive and their original source_ref (their trace shows both); in the "
        "stream layer they go through the flow's topic like every change, so the stream job "
        "must be running. The rest stay in quarantine, with the rules they fail now. Each "
        "outcome is a row of control/redrives: a second run skips what was applied. "
        "Conflicting versions are never re-driven.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--rule", help="only rows quarantined under this rule")
    p.add_argument("--date", type=_date, help="only rows of this business date")
    _serving_layer_argument(p)
    p.add_argument("--by", help="who is recorded as redriven_by (default: the OS user)")
    p.set_defaults(handler=_cmd_redrive)

    p = sub.add_parser(
        "stage",
        help="show a flow's migration stage, evidence and history",
        description="The flow's stage, the evidence the next promotion needs (the last N "
        "reconciled dates: stream vs batch into stream, the EOD file vs the stream layer into "
        "kappa; and data quality when STREAMSHIFT_PROMOTION_QUALITY_SUITES is set), the last "
        "closed dates and every recorded stage change. Reads without Spark.",
    )
    p.add_argument("--flow", required=True)
    p.set_defaults(handler=_cmd_stage)

    p = sub.add_parser(
        "promote",
        help="move a flow to another migration stage (gated by reconciliation)",
        description="Promote to the next stage (batch → shadow → stream → kappa) or demote to "
        "an earlier one. Promotion to stream or kappa needs the last N reconciled business "
        "dates clean (STREAMSHIFT_PROMOTION_WINDOW) and a second user's approval: it starts a "
        "streamshift_promote run in the local Airflow, which waits for one of "
        "STREAMSHIFT_APPROVERS under Browse → Required actions. --force --reason records the "
        "change at once, past the gate and the approval (an admin's break-glass).",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--to", required=True, choices=list(STAGE_NAMES))
    p.add_argument("--force", action="store_true")
    p.add_argument("--reason", help="why (required with --force)")
    p.add_argument(
        "--by",
        help="who is recorded as changed_by (default: the OS user; the streamshift_promote "
        "DAG passes the Airflow user who triggered it)",
    )
    p.set_defaults(handler=_cmd_promote)

    p = sub.add_parser(
        "quality",
        help="validate a business date's data with Great Expectations (Data Docs, exit 1 on fail)",
        description="Run the flow's Great Expectations checkpoints with Spark on the date's "
        "data: the EOD file (--file; suite <flow>.raw), the layer's current state, its views "
        "and quarantine. Each expectation has a policy beside it in its suite "
        "(expectations/gx/expectations/<flow>/): warn is recorded and the run goes on, fail "
        "makes this command exit 1 naming the expectation, its observed value and threshold. "
        "Prints a one-screen summary (expectation, policy, observed, result), records every "
        "check in the quality_runs Delta table and rebuilds Data Docs under "
        "STREAMSHIFT_HOME/reports/data_docs. Exit 0 when nothing failed (warnings allowed).",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--date", required=True, type=_date, help="business date YYYY-MM-DD")
    p.add_argument("--layer", choices=["batch", "stream"], default="batch")
    p.add_argument("--file", type=Path, help="the day's EOD file, for the raw-file suite")
    p.add_argument(
        "--dataset",
        action="append",
        help="validate only this dataset (raw, current, a view, quarantine); repeatable",
    )
    p.set_defaults(handler=_cmd_quality)

    p = sub.add_parser(
        "replay",
        help="reprocess a time range of the flow's topic into a layer (kappa)",
        description="Read the topic between two timestamps as a bounded batch and apply it "
        "through the write path. Refused when the broker no longer retains the range.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--from", required=True, type=_timestamp, help="ISO timestamp (UTC if no zone)")
    p.add_argument("--to", required=True, type=_timestamp, help="ISO timestamp, exclusive")
    p.add_argument("--into", required=True, choices=["batch", "stream"])
    p.add_argument("--topic", help="topic (default: the flow's name)")
    p.set_defaults(handler=_cmd_replay)

    p = sub.add_parser(
        "report",
        help="write the day's HTML report (reconciliation, parity streak, lag, quarantine, stages)",
        description="Write report.html (charts inline) and report.json under "
        "STREAMSHIFT_HOME/reports/<flow>/<date>/.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--date", required=True, type=_date)
    p.set_defaults(handler=_cmd_report)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return handled(args.handler, args)
