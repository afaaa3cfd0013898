"""The reads, without a JVM: show, trace, explain, the stage and its evidence, status, the report.

Handlers import what they use beyond ``spec/`` inside themselves: ``streamshift --help``
builds every group's parsers, so a group's import stays as light as ``spec/``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from streamshift.cli.common import UserError, date_arg, known_flow, serving_layer_argument
from streamshift.spec.settings import load_settings
from streamshift.spec.stages import next_stage, stage


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


def _cmd_show(args: argparse.Namespace) -> int:
    from streamshift.control.serving import held_dates, serving_view_rows, show, view_rows
    from streamshift.spec.registry import get_flow

    if args.limit < 0:
        raise UserError(f"--limit {args.limit}: give 0 (every row) or a positive number")
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


def _cmd_trace(args: argparse.Namespace) -> int:
    from streamshift.control.trace import COLUMNS, default_layer, shown_ref, table_rows, trace
    from streamshift.spec.formatting import format_table, json_text
    from streamshift.spec.registry import get_flow
    from streamshift.store.heartbeat import not_applied_yet
    from streamshift.store.versions import live_tables

    known_flow(args.flow)
    settings, flow = load_settings(), get_flow(args.flow)
    layer = args.layer or default_layer(settings, flow.name)
    found = trace(flow, live_tables(settings.warehouse, flow, layer), args.key)
    if args.format == "json":
        print(json_text(found.as_json()))
        return 0
    waiting = not_applied_yet(settings, flow.name, layer)
    if not found.events:
        print(
            f"{flow.name}: the {layer} layer has received nothing for key {args.key!r} "
            f"(quarantine included); check the key, or --layer "
            f"{'batch' if layer == 'stream' else 'stream'}"
        )
        if waiting:
            print(f"note: {waiting}")
        return 1
    now = found.current
    state = (
        "none"
        if now is None
        else f"version {now['version']}{' (deleted)' if now['deleted'] else ''} from "
        f"{shown_ref(now)}"
    )
    print(f"{flow.name} key {args.key} in the {layer} layer: current {state}")
    sys.stdout.write(format_table(COLUMNS, table_rows(found)))
    if waiting:
        print(f"note: {waiting}")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    from streamshift.control import explain as ex
    from streamshift.spec.formatting import format_table, json_text
    from streamshift.store.heartbeat import not_applied_yet

    settings, flow = load_settings(), known_flow(args.flow)
    try:
        found = ex.explain_in(
            settings,
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
    waiting = not_applied_yet(settings, flow, layer)
    if found.row is None and not found.changes_total:
        print(
            f"{flow}: view {view} of the {layer} layer has no row {named} and no "
            f"change ever touched it; check the values (streamshift show --flow {flow} "
            f"--view {view} --layer {layer}), or --layer "
            f"{'batch' if layer == 'stream' else 'stream'}"
        )
        if waiting:
            print(f"note: {waiting}")
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
    if waiting:
        print(f"\nnote: {waiting}")
    return 0


def _cmd_stage(args: argparse.Namespace) -> int:
    from streamshift.control.stages import promotion_evidence
    from streamshift.store.records import (
        current_stage,
        day_closes,
        promotion_decisions,
        stage_history,
    )

    settings, flow = load_settings(), known_flow(args.flow)
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
    changes = stage_history(settings, flow)
    for change in changes:
        forced = f" FORCED ({change['reason']})" if change["forced"] else ""
        print(
            f"    {change['changed_at']}  {change['from_stage']} → {change['to_stage']}  "
            f"by {change['changed_by']}{forced}"
        )
    if not changes:
        print("    none yet")
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


def _cmd_report(args: argparse.Namespace) -> int:
    from streamshift.control.report import write_report

    known_flow(args.flow)
    html_path, json_path = write_report(load_settings(), args.flow, args.date, echo=True)
    print(f"report: {html_path}")
    print(f"summary for machines: {json_path}")
    return 0


def add_commands(sub: Any) -> None:
    """The group's subcommands, in the order ``--help`` lists them."""
    p = sub.add_parser(
        "show",
        help="print a view, the current state or the quarantine",
        description="Print a view (e.g. positions), the current state (--view current) or the "
        "quarantine (--view quarantine) of one layer, optionally for one business date. "
        "Reads the Delta tables through deltalake: no Spark, no JVM.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--view", required=True, help="a view name, current, quarantine, late_events")
    p.add_argument("--date", type=date_arg, help="business date YYYY-MM-DD (default: all)")
    p.add_argument(
        "--layer",
        choices=["batch", "stream", "serving"],
        default="batch",
        help="serving: what readers get in the flow's migration stage",
    )
    p.add_argument(
        "--format", choices=["table", "csv"], default="table", help="csv: for other tools"
    )
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
        "is listed at each delivery. A note follows when the layer's stream job is not "
        "running or events on its topic wait for it (a change sent lately may be among them). "
        "Reads the Delta tables through deltalake: no Spark, no JVM.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--key", required=True, help="a value of the flow's key column")
    serving_layer_argument(p)
    p.add_argument(
        "--format", choices=["table", "json"], default="table", help="json: for other tools"
    )
    p.set_defaults(handler=_cmd_trace)

    p = sub.add_parser(
        "explain",
        help="why a view's row is what it is: its members and the changes that moved it",
        description="One group of a view on one date: the row, how each measure comes from "
        "the group's members (sums and counts add up their contributions; a minimum or "
        "maximum names the member setting it; a mean gives its sum and count), the live keys "
        "in it with their versions and source_ref, and the applied versions that moved it, "
        "newest first, each with its delta; a note when the layer's stream job is not "
        "running or events on its topic wait for it. Reads the Delta tables through "
        "deltalake: no Spark, no JVM.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--view", help="default: the flow's first view")
    p.add_argument("--date", required=True, type=date_arg, help="the business date, YYYY-MM-DD")
    p.add_argument(
        "--group",
        required=True,
        help="the group's other columns, col=value,... (e.g. book=EQ-1,instrument=AAPL)",
    )
    serving_layer_argument(p)
    p.add_argument(
        "--format", choices=["table", "json"], default="table", help="json: for other tools"
    )
    p.add_argument("--changes", type=int, default=20, help="at most this many changes (0: all)")
    p.add_argument("--skip", type=int, default=0, help="skip the newest N changes (paging)")
    p.set_defaults(handler=_cmd_explain)

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
        "status",
        help="show the streaming jobs (stream and serve): running or not, last batch, the batch in flight, lag",
        description="Read the heartbeats the streaming jobs (`stream`, and `serve` as "
        "<flow>/serve-<view>) write under STREAMSHIFT_HOME/status. "
        "Exit code 0 when every job shown is running, 3 otherwise.",
    )
    p.add_argument("--flow", help="only this flow")
    p.set_defaults(handler=_cmd_status)

    p = sub.add_parser(
        "report",
        help="write the day's HTML report (reconciliation, parity streak, lag, quarantine, stages)",
        description="Write report.html (charts inline) and report.json under "
        "STREAMSHIFT_HOME/reports/<flow>/<date>/.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--date", required=True, type=date_arg)
    p.set_defaults(handler=_cmd_report)
