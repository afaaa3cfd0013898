"""The job registry: every request-style job, found by its request's type.

A job has one shape. Its ``check(context, request)`` needs no JVM: the CLI and the DAG tasks
refuse at once what would fail anyway (a missing file, a closed gate, a cut-off not reached, a
range the topic no longer holds). Its ``run(spark, context, request)`` returns a result with
``describe()``; it lives in ``streamshift.engine.jobs`` and is named here as ``"module:function"``
text, so that this module (and whatever JVM-free code reads it) never imports the engine.
:func:`streamshift.engine.jobs.requests.run` looks a request up here and runs it.

The :class:`JobContext` is what every job reads once: the settings, the flow and its stage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from streamshift.control.cutoff import close_gate
from streamshift.control.outcome import say_progress
from streamshift.control.stages import APPROVED, check_promotion
from streamshift.spec import stages
from streamshift.spec.errors import ReconcileError, StreamshiftError
from streamshift.spec.flow import Flow
from streamshift.spec.registry import get_flow
from streamshift.spec.requests import (
    CloseRequest,
    EodRequest,
    EvolveRequest,
    JobRequest,
    MaintainRequest,
    PlanRequest,
    PromoteRequest,
    QualityRequest,
    ReconcileRequest,
    RedriveRequest,
    ReplayRequest,
    SwitchRequest,
)
from streamshift.spec.settings import Settings
from streamshift.store.eodfile import check_file, wait_until_complete
from streamshift.store.quality import datasets, holds_nothing, nothing_to_validate, wanted_datasets
from streamshift.store.quarantine import NOT_REDRIVEN, rules_held
from streamshift.store.records import current_stage
from streamshift.store.retention import replay_topic
from streamshift.store.versions import recorded_version


class RequestRefused(StreamshiftError):
    """A request that cannot run as asked (a missing file, a flag without its partner)."""

    final = True


@dataclass(frozen=True)
class JobDone:
    """What a job did: its own result's description, and the quality run's report if any."""

    request: JobRequest
    result: Any
    quality: str | None = None

    def describe(self) -> str:
        text = self.result.describe()
        return f"{text}\n{self.quality}" if self.quality else text


class QualityFailed(StreamshiftError):
    """A quality run in which an expectation with policy ``fail`` failed; ``done`` holds the
    run, whose report names it."""

    final = True

    def __init__(self, message: str, done: JobDone) -> None:
        super().__init__(message)
        self.done = done


class Verdict(StreamshiftError):
    """A finished job whose result is a failure: its message is the result (printed as the
    command's output), and the command exits 1."""

    final = True


class BreaksFound(Verdict):
    """A reconciliation asked to fail on breaks found some (``fail_on_breaks``)."""


@dataclass(frozen=True)
class JobContext:
    """What a job reads once and passes down: the settings, the flow, and (when a job asks)
    the flow's stage, read at most once per job."""

    settings: Settings
    flow: Flow

    @classmethod
    def of(cls, settings: Settings, request: JobRequest) -> JobContext:
        return cls(settings, get_flow(request.flow))  # type: ignore[attr-defined]

    @cached_property
    def stage(self) -> stages.Stage:
        return stages.stage(current_stage(self.settings, self.flow.name))


@dataclass(frozen=True)
class Job:
    """One job: its JVM-free check, its run as ``"module:function"``, the layer and file its
    write validates when the request names a quality run (``validates``), and what turns a
    finished run into a failure (``verdict``: raises)."""

    check: Callable[[JobContext, Any], None]
    run: str
    validates: Callable[[Any], tuple[str, Path | None]] | None = None
    verdict: Callable[[JobDone], None] | None = None


# ---- the checks --------------------------------------------------------------------------
def check_eod(context: JobContext, request: EodRequest) -> None:
    if not request.file.exists():
        raise RequestRefused(
            f"EOD file {request.file} not found; pass the path of an existing CSV file"
        )
    wait_until_complete(
        request.file, context.flow, context.settings.file_stable_seconds, say_progress
    )
    # A file that cannot be the flow's (its header, delimiter, a cut-off last line) is refused
    # here, before a Spark session starts; the job checks it again as it reads it.
    check_file(request.file, context.flow, whole_day=request.replace)


def check_reconcile(context: JobContext, request: ReconcileRequest) -> None:
    """The files exist and are complete, and ``correct`` fits the flow's stage."""
    if request.replace and not request.correct:
        raise RequestRefused("--replace goes with --correct (the EOD file replaces the whole day)")
    if not request.parity and request.against is None and request.eod_file is None:
        raise RequestRefused(
            "nothing to reconcile: with --no-parity, give --against (an external view file) "
            "or --eod-file (the day's EOD file)"
        )
    for option, path in (("--against", request.against), ("--eod-file", request.eod_file)):
        if path is not None and not path.exists():
            raise ReconcileError(f"{option} {path}: file not found; pass an existing CSV file")
        if path is not None:
            wait_until_complete(
                path, context.flow, context.settings.file_stable_seconds, say_progress
            )
    if request.eod_file is not None:  # the flow's file: refused before a session starts
        check_file(request.eod_file, context.flow, whole_day=request.replace)
    now = context.stage
    if request.correct and (request.eod_file is None or not now.corrects):
        raise ReconcileError(
            "--correct applies the EOD file (--eod-file) to the stream layer in the stage that "
            f"corrects ({', '.join(s.name for s in stages.STAGES if s.corrects)}); "
            f"{context.flow.name} is in stage {now.name}"
            + (
                f": {now.name} has no EOD file; reprocess with replay"
                if not now.waits_for_file
                else ""
            )
        )


def check_close(context: JobContext, request: CloseRequest) -> None:
    say_progress(f"checking {request.flow} {request.business_date}'s cut-off and offsets")
    close_gate(context.settings, context.flow, request, context.stage)


def check_replay(context: JobContext, request: ReplayRequest) -> None:
    # A range the broker cannot serve is refused before Spark starts.
    replay_topic(context.settings, context.flow, request.start, request.end, request.topic)


def check_promote(context: JobContext, request: PromoteRequest) -> None:
    if request.approval in (None, APPROVED):  # (a rejection is recorded, gate or not)
        check_promotion(
            context.settings, request.flow, request.to, force=request.force, reason=request.reason
        )


def check_switch(context: JobContext, request: SwitchRequest) -> None:
    found = recorded_version(context.settings.warehouse, request.flow, request.version)
    if not found:
        raise RequestRefused(
            f"flow {request.flow} has no version {request.version}: build one beside the live "
            f"version with `streamshift evolve --flow {request.flow} --shadow`"
        )


def check_quality(context: JobContext, request: QualityRequest) -> None:
    flow = context.flow
    if not datasets(flow.name):
        raise RequestRefused(
            f"flow {flow.name!r} has no data-quality suites (expectations/gx/expectations/"
            f"{flow.name}/); write starter ones with `streamshift quality --flow {flow.name} "
            "--write-suites`"
        )
    if request.file is not None and not request.file.exists():
        raise RequestRefused(
            f"EOD file {request.file} not found; pass an existing CSV file or no --file"
        )
    wanted_datasets(flow, list(request.datasets))
    day, layer = request.business_date, request.layer
    if request.file is None and holds_nothing(context.settings, flow, day, layer):
        raise nothing_to_validate(flow, day, layer)


def check_redrive(context: JobContext, request: RedriveRequest) -> None:
    """A rule the layer's quarantine holds no row under is refused, with the rules it holds: a
    misspelt rule would otherwise pass as "nothing to re-drive"."""
    if request.rule is None:
        return
    if request.rule in NOT_REDRIVEN:
        raise RequestRefused(
            f"rows quarantined under {request.rule} are never re-driven: the first delivery "
            "of a version stays; correct the key with a new version instead"
        )
    layer = request.layer or ("stream" if context.stage.serves == "stream" else "batch")
    held = rules_held(context.settings, context.flow.name, layer)
    if request.rule not in held:
        there = ", ".join(
            f"{rule} ({n} row{'s' if n > 1 else ''})" for rule, n in sorted(held.items())
        )
        raise RequestRefused(
            f"{context.flow.name}: the {layer} layer's quarantine holds no row under rule "
            f"{request.rule!r}; " + (f"its rules: {there}" if there else "it holds no rows at all")
        )


def nothing_to_check(context: JobContext, request: JobRequest) -> None:
    """A job whose request has nothing to refuse before it runs (its flow is known)."""


# ---- the verdicts ------------------------------------------------------------------------
def breaks_verdict(done: JobDone) -> None:
    if done.request.fail_on_breaks and done.result.breaks:  # type: ignore[attr-defined]
        raise BreaksFound(f"{done.describe()}\nbreaks found and --fail-on-breaks was given")


class BreakingChange(Verdict):
    """``plan`` found a change that is refused."""


def plan_verdict(done: JobDone) -> None:
    if done.result.breaking:
        raise BreakingChange(done.describe())


def quality_verdict(done: JobDone) -> None:
    if done.result.failures:
        raise QualityFailed(done.result.failure_line(), done)


JOBS: dict[type[JobRequest], Job] = {
    EodRequest: Job(
        check_eod, "streamshift.engine.jobs.eod:run", validates=lambda r: (r.layer, r.file)
    ),
    ReconcileRequest: Job(
        check_reconcile,
        "streamshift.engine.jobs.reconcile:run",
        validates=lambda r: ("stream", r.eod_file),
        verdict=breaks_verdict,
    ),
    CloseRequest: Job(
        check_close, "streamshift.engine.jobs.close:run", validates=lambda r: ("stream", None)
    ),
    PromoteRequest: Job(check_promote, "streamshift.engine.jobs.promote:run"),
    RedriveRequest: Job(check_redrive, "streamshift.engine.jobs.redrive:run"),
    ReplayRequest: Job(check_replay, "streamshift.engine.jobs.replay:run"),
    QualityRequest: Job(
        check_quality, "streamshift.engine.jobs.quality:run", verdict=quality_verdict
    ),
    MaintainRequest: Job(nothing_to_check, "streamshift.engine.jobs.maintain:run"),
    PlanRequest: Job(
        nothing_to_check, "streamshift.engine.jobs.evolve:run_plan", verdict=plan_verdict
    ),
    EvolveRequest: Job(nothing_to_check, "streamshift.engine.jobs.evolve:run_evolve"),
    SwitchRequest: Job(check_switch, "streamshift.engine.jobs.evolve:run_switch"),
}


def job_for(request: JobRequest) -> Job:
    try:
        return JOBS[type(request)]
    except KeyError:
        raise TypeError(f"no job runs {type(request).__name__}") from None


def check(settings: Settings, request: JobRequest) -> JobContext:
    """Refuse, without a JVM, what would fail anyway; the context the job runs with."""
    context = JobContext.of(settings, request)  # an unknown flow fails here
    job_for(request).check(context, request)
    return context
