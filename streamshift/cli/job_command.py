"""The request-style jobs: each builds one typed request and hands it to
:func:`streamshift.cli.common.run_request` (checked, then run on the engine or here).

Handlers import what they use beyond ``spec/`` inside themselves: ``streamshift --help``
builds every group's parsers, so a group's import stays as light as ``spec/``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from streamshift.cli.common import (
    UserError,
    add_quality_run,
    date_arg,
    known_flow,
    run_request,
    serving_layer_argument,
    timestamp_arg,
)
from streamshift.spec.settings import load_settings
from streamshift.spec.stages import NAMES as STAGE_NAMES
from streamshift.spec.stages import needs_approval


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


def _cmd_request(args: argparse.Namespace) -> int:

    from streamshift.spec.requests import JobRequest

    try:
        request = JobRequest.from_json(args.json)
    except (ValueError, TypeError) as exc:
        raise UserError(
            f"not a job request: {exc}; pass a JSON object with its kind and fields "
            "(streamshift request --help)"
        ) from None
    known_flow(request.flow)  # type: ignore[attr-defined]
    return run_request(request)


def _cmd_eod(args: argparse.Namespace) -> int:

    from streamshift.spec.requests import EodRequest

    known_flow(args.flow)
    replace = args.replace or args.mode == "replace"
    return run_request(
        EodRequest(
            args.flow, args.date, args.file, args.layer, replace, quality_run=args.quality_run
        )
    )


def _cmd_reconcile(args: argparse.Namespace) -> int:

    from streamshift.spec.requests import ReconcileRequest

    known_flow(args.flow)
    return run_request(
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

    known_flow(args.flow)
    return run_request(
        CloseRequest(
            args.flow, args.date, args.force, args.reason, args.by, quality_run=args.quality_run
        )
    )


def _cmd_redrive(args: argparse.Namespace) -> int:
    from collections import Counter

    from streamshift.control.jobs import check
    from streamshift.control.trace import default_layer
    from streamshift.spec.requests import RedriveRequest
    from streamshift.store.quarantine import pending

    settings, name = load_settings(), known_flow(args.flow)
    layer = args.layer or default_layer(settings, name)
    request = RedriveRequest(name, args.rule, args.date, layer, args.by)
    check(settings, request)  # a rule the quarantine does not hold is refused, naming its rules
    found = pending(settings, name, layer, args.rule, args.date)
    if not found:  # said without starting Spark
        scope = " ".join(f"--{k} {v}" for k, v in (("rule", args.rule), ("date", args.date)) if v)
        print(
            f"{name}: nothing to re-drive in the {layer} layer's quarantine {scope}".rstrip()
            + f" (streamshift show --flow {name} --view quarantine --layer {layer} lists it)"
        )
        return 0
    rules = ", ".join(f"{n} {r}" for r, n in sorted(Counter(q["rule"] for q in found).items()))
    print(f"[streamshift] re-driving {len(found)} quarantined rows ({rules})", file=sys.stderr)
    return run_request(request)


def _cmd_replay(args: argparse.Namespace) -> int:

    from streamshift.spec.requests import ReplayRequest

    known_flow(args.flow)
    return run_request(
        ReplayRequest(args.flow, getattr(args, "from"), args.to, args.into, args.topic)
    )


def _switch(args: argparse.Namespace) -> int:
    """``promote --version N``: at once with --force --reason, else through the
    ``streamshift_switch`` run that waits for a second user."""
    from streamshift.local.airflow import USER, LocalAirflow
    from streamshift.spec.requests import SwitchRequest

    if args.to:
        raise UserError("give one of --to STAGE (a stage) and --version N (a version's tables)")
    settings = load_settings()
    if args.force:
        if not args.reason:
            raise UserError("--force needs --reason TEXT (kept with the switch)")
        return run_request(SwitchRequest(args.flow, args.version, args.by, args.reason))
    airflow = LocalAirflow(settings)
    if not airflow.status().up:
        raise UserError(
            "switching the version served waits for a second user's approval in Airflow, "
            "which is not running: start it (streamshift airflow up) and run this again; an "
            "admin may instead switch at once with --force --reason TEXT (break-glass)"
        )
    conf = {"flow": args.flow, "version": args.version, "reason": args.reason}
    run = airflow.client(USER).trigger("streamshift_switch", conf)
    print(
        f"switch of {args.flow} to version {args.version} requested as {USER}: run "
        f"{run['dag_run_id']}; it waits for a second user under Browse → Required actions"
    )
    return 0


def _cmd_promote(args: argparse.Namespace) -> int:
    from streamshift.control.stages import check_promotion
    from streamshift.spec.requests import PromoteRequest
    from streamshift.store.records import current_stage

    known_flow(args.flow)
    if args.version is not None:
        return _switch(args)
    if not args.to:
        raise UserError("give --to STAGE (or --version N to serve another version's tables)")
    request = PromoteRequest(args.flow, args.to, args.force, args.reason, args.by)
    settings = load_settings()
    if args.force or not needs_approval(current_stage(settings, args.flow), args.to):
        return run_request(request)  # (--force: an admin's recorded break-glass)
    check_promotion(settings, args.flow, args.to, reason=args.reason)  # refused: say so now
    return _request_approval(settings, request)


def _cmd_quality(args: argparse.Namespace) -> int:
    from streamshift.engine.validate import data_docs_dir
    from streamshift.spec.requests import QualityRequest

    known_flow(args.flow)
    if args.write_suites:
        return _write_suites(args.flow)
    if args.date is None:
        raise UserError(
            "the following arguments are required: --date (or --write-suites, to write the "
            "flow's starter suites)"
        )
    request = QualityRequest(args.flow, args.date, args.layer, args.file, tuple(args.dataset or ()))
    code = run_request(request)
    print(f"Data Docs: {data_docs_dir(load_settings()) / 'index.html'}")
    return code


def _write_suites(flow: str) -> int:
    from streamshift.spec.registry import get_flow
    from streamshift.spec.suites import write_starter_suites
    from streamshift.store.quality import gx_project

    root = gx_project()
    written = write_starter_suites(get_flow(flow), root)
    folder = root / "expectations" / flow
    if not written:
        print(f"{flow} has a suite for every dataset already ({folder}); none overwritten")
        return 0
    for path in written:
        print(f"wrote {path}")
    print(
        f"tune their thresholds and policies in {folder}, then validate a date with "
        f"`streamshift quality --flow {flow} --date D` (the EOD DAG runs them after each load)"
    )
    return 0


def _cmd_maintain(args: argparse.Namespace) -> int:
    from streamshift.engine.jobs.maintain import flow_tables
    from streamshift.spec.registry import get_flow
    from streamshift.spec.requests import MaintainRequest

    known_flow(args.flow)
    settings = load_settings()
    if not flow_tables(settings, get_flow(args.flow)):  # said without starting Spark
        print(
            f"nothing to maintain: {args.flow} has no tables under {settings.warehouse} yet "
            "(the first EOD load or stream batch writes them)"
        )
        return 0
    return run_request(MaintainRequest(args.flow))


def _cmd_plan(args: argparse.Namespace) -> int:
    from streamshift.control.plan import Plan
    from streamshift.spec.catalog import LAYERS
    from streamshift.spec.requests import PlanRequest
    from streamshift.store.versions import deployed_layers

    known_flow(args.flow)
    if not deployed_layers(load_settings().warehouse, args.flow):
        # Nothing recorded to compare the code with: said without starting Spark.
        print("\n".join(Plan(args.flow, layer, None, ()).describe() for layer in LAYERS))
        return 0
    return run_request(PlanRequest(args.flow))


def _cmd_evolve(args: argparse.Namespace) -> int:
    from streamshift.spec.requests import EvolveRequest

    known_flow(args.flow)
    if args.shadow and args.reapply:
        raise UserError("--shadow re-applies history already; give one of --shadow, --reapply")
    return run_request(EvolveRequest(args.flow, args.reapply, args.shadow))


def add_commands(sub: Any) -> None:
    """The group's subcommands, in the order ``--help`` lists them."""
    p = sub.add_parser(
        "request",
        help="run one typed job request given as JSON (what the DAGs' tasks pass, and "
        "spark_jobs/run.py on a cluster)",
        description="Run a job request (streamshift.spec.requests): a JSON object with its "
        '"kind" (eod, reconcile, close, promote, redrive, replay, quality, maintain, plan, '
        "evolve, switch) and its "
        "fields, e.g. "
        '{"kind": "eod", "flow": "<flow>", "business_date": "2026-11-20", "file": "f.csv"}. '
        "The same checks and job as the command of that name.",
    )
    p.add_argument("json", help="the request, as JSON")
    p.set_defaults(handler=_cmd_request)

    p = sub.add_parser(
        "eod",
        help="load an EOD file through the write path",
        description="Load an end-of-day CSV (header row, the flow's columns) for one business "
        "date. A delta file carries only changed rows; with --replace the file is the whole "
        "day and rows of that date absent from it are cancelled. A file that cannot be read "
        "fails with the line and problem and changes nothing; bad rows are quarantined.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--date", required=True, type=date_arg, help="business date YYYY-MM-DD")
    p.add_argument("--file", required=True, type=Path, help="the EOD file (CSV with a header)")
    p.add_argument("--replace", action="store_true", help="the file is the whole day")
    p.add_argument(
        "--mode",
        choices=["delta", "replace"],
        help="the same as a flag: delta (default) or replace (the same as --replace)",
    )
    p.add_argument(
        "--layer", choices=["batch", "stream"], default="batch", help="the layer to load into"
    )
    add_quality_run(p, "the day")
    p.set_defaults(handler=_cmd_eod)

    p = sub.add_parser(
        "reconcile",
        help="reconcile a business date: stream vs batch, vs an external file, vs the EOD file",
        description="Compare the stream and batch layers' views for the date (parity), the "
        "serving layer against an external positions file (--against), and the current state "
        "against the EOD file (--eod-file). Breaks go to recon_breaks, a summary to "
        "recon_runs. Exit 1 with --fail-on-breaks when any break is found.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument("--date", required=True, type=date_arg)
    p.add_argument("--against", type=Path, help="external view file, e.g. clearing positions")
    p.add_argument("--eod-file", type=Path, help="the day's EOD file")
    p.add_argument("--no-parity", action="store_true", help="skip stream vs batch")
    p.add_argument("--fail-on-breaks", action="store_true", help="exit 1 when a break is found")
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
    add_quality_run(p, "the day's stream layer (with --eod-file as the raw file)")
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
    p.add_argument("--date", required=True, type=date_arg)
    p.add_argument("--force", action="store_true", help="close without waiting (needs --reason)")
    p.add_argument("--reason", help="why (required with --force; recorded)")
    p.add_argument("--by", help="who is recorded as closed_by (default: the OS user)")
    add_quality_run(p, "the closed date's stream layer")
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
    p.add_argument("--date", type=date_arg, help="only rows of this business date")
    serving_layer_argument(p)
    p.add_argument("--by", help="who is recorded as redriven_by (default: the OS user)")
    p.set_defaults(handler=_cmd_redrive)

    p = sub.add_parser(
        "replay",
        help="reprocess a time range of the flow's topic into a layer (kappa)",
        description="Read the topic between two timestamps as a bounded batch and apply it "
        "through the write path. Refused when the broker no longer retains the range.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument(
        "--from", required=True, type=timestamp_arg, help="ISO timestamp (UTC if no zone)"
    )
    p.add_argument("--to", required=True, type=timestamp_arg, help="ISO timestamp, exclusive")
    p.add_argument(
        "--into", required=True, choices=["batch", "stream"], help="the layer to write again"
    )
    p.add_argument("--topic", help="topic (default: the flow's name)")
    p.set_defaults(handler=_cmd_replay)

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
    p.add_argument("--to", choices=list(STAGE_NAMES), help="the stage")
    p.add_argument(
        "--version",
        type=int,
        help="instead of a stage: serve this version's tables (one built by evolve --shadow, "
        "or an earlier one to roll back to); the code on disk must be that version's. Waits "
        "for a second user in the streamshift_switch DAG unless --force --reason",
    )
    p.add_argument(
        "--force", action="store_true", help="past the gate and the approval (admins; --reason)"
    )
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
    p.add_argument("--date", type=date_arg, help="business date YYYY-MM-DD (required to validate)")
    p.add_argument(
        "--layer", choices=["batch", "stream"], default="batch", help="the layer to validate"
    )
    p.add_argument("--file", type=Path, help="the day's EOD file, for the raw-file suite")
    p.add_argument(
        "--write-suites",
        action="store_true",
        help="instead of validating, write starter suites for the flow's datasets that have "
        "none (key, version and business date present; one current row per key; one view row "
        "per group; reference values known; row counts near the recent median; a small "
        "quarantine), to tune; never overwrites a suite",
    )
    p.add_argument(
        "--dataset",
        action="append",
        help="validate only this dataset (raw, current, a view, quarantine); repeatable",
    )
    p.set_defaults(handler=_cmd_quality)

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
        "plan",
        help="say what changed in a flow's code since its tables' recorded version, and "
        "what each change needs (exit 1 when a change is breaking)",
        description="Compare the flow's code on disk with the version each layer's tables "
        "were written by (control/flow_versions): columns and types, key and version "
        "columns, optional columns, reference schemas, and the analysed plans of its rules, "
        "prepare and views. Each change says what it needs: in place (an optional column "
        "added, a type widened: the next job applies it), applies to new changes (a rule, "
        "prepare), the view recomputed for every date, or breaking (a dropped or renamed "
        "column, a narrowed type, a changed key: refused). Nothing is written. Exit 0 when "
        "there is nothing to do or the plan can be applied, 1 when it is breaking. See "
        "docs/flows.md, 'Changing a flow'.",
    )
    p.add_argument("--flow", required=True)
    p.set_defaults(handler=_cmd_plan)

    p = sub.add_parser(
        "evolve",
        help="apply a flow's plan to both layers and record the new version",
        description="Apply what `streamshift plan` says to both layers: alter the tables "
        "(optional columns added, types widened), recompute every date of each changed view "
        "from current state, record the new version. Until then loads, corrections and the "
        "stream refuse to write under the changed code. A killed run is repaired by running "
        "it again. A breaking plan is refused with nothing changed.",
    )
    p.add_argument("--flow", required=True)
    p.add_argument(
        "--reapply",
        action="store_true",
        help="also check both layers' history with the rules as they are now: a version that "
        "fails one moves to quarantine under it and its key falls back to its highest valid "
        "version; every view is then recomputed",
    )
    p.add_argument(
        "--shadow",
        action="store_true",
        help="build the new version's tables beside the live ones instead (history re-applied "
        "through the new code, prepare included) and record their differences from the live "
        "tables per group; nothing served changes until `streamshift promote --version N`",
    )
    p.set_defaults(handler=_cmd_evolve)
