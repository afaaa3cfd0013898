"""What the command groups share: the user's-mistake error, argument types and options, the
Spark session of a command, and the one way a command runs a job."""

from __future__ import annotations

import argparse
import datetime as dt

from streamshift.spec.errors import StreamshiftError


class UserError(StreamshiftError):
    """A command-line mistake; printed without a traceback, exit code 2."""

    final = True


def known_flow(flow: str) -> str:
    """``flow``, or a user's-mistake error naming the declared flows (or the missing project)."""
    from streamshift.spec.registry import UnknownFlowError, require_flow

    try:
        return require_flow(flow)
    except UnknownFlowError as exc:
        raise UserError(str(exc)) from None


def date_arg(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date; use YYYY-MM-DD") from None


def timestamp_arg(text: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a timestamp; use ISO 8601, e.g. 2026-11-20T08:00:00Z"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def spark_session(flow_name: str, engine: bool = True):  # type: ignore[no-untyped-def]
    from streamshift.engine.jobs.execute import session_for

    return session_for(flow_name, engine)


def run_request(request) -> int:  # type: ignore[no-untyped-def]
    from streamshift.local.submit import submit

    return submit(request)


def serving_layer_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--layer",
        choices=["batch", "stream"],
        help="default: the layer that serves readers in the flow's stage (batch in shadow)",
    )


def add_quality_run(p: argparse.ArgumentParser, what: str) -> None:
    """``--quality-run``, for the jobs that write a day (the EOD DAG's load and correction)."""
    p.add_argument(
        "--quality-run",
        metavar="RUN_ID",
        help=f"then validate {what} with the flow's data-quality suites in the same Spark "
        "application, recorded in quality_runs under RUN_ID (the EOD DAG's data_quality task "
        "gives the verdict); failed expectations do not change the exit status",
    )


def trigger_arg(text: str) -> str:
    """'1s', '500ms', '2m' or Spark's own '10 seconds' → Spark's processingTime interval."""
    import re

    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|milliseconds?|seconds?|minutes?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not an interval; use e.g. 1s, 500ms, 2m")
    number, unit = match.groups()
    unit = {"ms": "milliseconds", "s": "seconds", "m": "minutes"}.get(unit, unit)
    return f"{number} {unit if unit.endswith('s') else unit + 's'}"


def trigger_options(p: argparse.ArgumentParser, default: str = "1 seconds") -> None:
    """--trigger or --available-now, for the commands that run a streaming query."""
    mode = p.add_mutually_exclusive_group()
    shown = default.replace(" milliseconds", "ms").replace(" seconds", "s")
    mode.add_argument(
        "--trigger",
        default=default,
        type=trigger_arg,
        help=f"micro-batch interval, e.g. 1s, 500ms, 2m (default {shown})",
    )
    mode.add_argument(
        "--available-now", action="store_true", help="process what the topic holds now, then stop"
    )
