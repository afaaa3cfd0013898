"""A checked request run in this process: a Spark session (the engine's when it answers, else a
local one; a spark-submit driver's own), the job, and what it did printed. A reconciliation
that found breaks it was asked to fail on, or a quality run with a failing expectation, exits 1.

:func:`run_here` is what a command runs when no job runner takes its request
(:func:`streamshift.local.submit.submit`), and what a spark-submit driver runs;
:func:`run_handed_over` is what a process of the engine's runner runs for a command.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import TYPE_CHECKING

from streamshift.control.jobs import QualityFailed, Verdict
from streamshift.control.outcome import handled, report_error
from streamshift.engine.jobs.requests import run
from streamshift.engine.spark import describe_session, get_spark
from streamshift.spec.registry import get_flow
from streamshift.spec.requests import JobRequest
from streamshift.spec.settings import Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamshift.spec.flow import Flow


def session_for(flow_name: str, engine: bool = True) -> tuple[Settings, SparkSession, Flow]:
    """(settings, spark, flow) for work on ``flow_name``; says what Spark it runs on.

    ``engine``: a request-style job runs on the warm engine when it is up; the long-running
    applications (stream, serve) and upkeep (``maintain``, which checkpoints Delta's log
    through the JVM) pass False and run in a session of their own."""
    settings = load_settings()
    flow = get_flow(flow_name)
    print("starting Spark ...", file=sys.stderr, flush=True)
    spark = get_spark(settings, app_name=f"streamshift-{flow_name}", engine=engine)
    print(describe_session(spark), file=sys.stderr, flush=True)
    return settings, spark, flow


def run_here(request: JobRequest) -> int:
    """Run a checked ``request`` in this process; its exit status."""
    settings, spark, _flow = session_for(request.flow, engine=not request.needs_jvm)  # type: ignore[attr-defined]
    try:
        print(run(spark, request, settings).describe())
    except Verdict as found:
        print(str(found))
        return 1
    except QualityFailed as failed:
        print(failed.done.result.describe())
        print(str(failed), file=sys.stderr)
        report_error(str(failed))
        return 1
    return 0


def run_handed_over(request: JobRequest) -> int:
    """Run a checked ``request`` in a process of the engine's job runner, ending as a command
    does (:func:`streamshift.control.outcome.handled`): the command that handed it over exits
    with the status returned."""
    print(
        f"[streamshift] running in process {os.getpid()}, made ready by the engine's job runner",
        file=sys.stderr,
    )
    try:
        return handled(run_here, request)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1
    except Exception:  # noqa: BLE001 - a command's own process would print the traceback
        traceback.print_exc()
        return 1
