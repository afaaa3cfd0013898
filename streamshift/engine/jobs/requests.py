"""One entry for every request-style job: ``run(spark, request)``.

The CLI builds a request from its arguments, a DAG task from its params and the stage
(:mod:`streamshift.spec.requests`); both hand it here, with a local session or a Spark
Connect session of the warm engine alike. What can be refused without Spark (a missing file,
a closed gate, a cut-off not reached) is refused by :func:`check` first, before any session
starts. Errors are :class:`~streamshift.spec.errors.StreamshiftError`\\ s whose ``final`` says
whether a retry can help.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.registry import get_flow
from streamshift.spec.requests import (
    CloseRequest,
    EodRequest,
    JobRequest,
    MaintainRequest,
    PromoteRequest,
    QualityRequest,
    ReconcileRequest,
    RedriveRequest,
    ReplayRequest,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamshift.spec.settings import Settings


class RequestRefused(StreamshiftError):
    """A request that cannot run as asked (a missing file, a flag without its partner)."""

    final = True


class QualityFailed(StreamshiftError):
    """A quality run in which an expectation with policy ``fail`` failed; ``done`` holds the
    run, whose report names it."""

    final = True

    def __init__(self, message: str, done: JobDone) -> None:
        super().__init__(message)
        self.done = done


class BreaksFound(StreamshiftError):
    """A reconciliation asked to fail on breaks found some (``fail_on_breaks``)."""

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


def check(settings: Settings, request: JobRequest) -> None:
    """Refuse, without a JVM, what would fail anyway."""
    get_flow(request.flow)  # type: ignore[attr-defined]  # an unknown flow fails here
    if isinstance(request, EodRequest):
        from streamshift.store.eodfile import wait_until_complete

        if not request.file.exists():
            raise RequestRefused(
                f"EOD file {request.file} not found; pass the path of an existing CSV file"
            )
        wait_until_complete(
            request.file, get_flow(request.flow), settings.file_stable_seconds, _progress
        )
    elif isinstance(request, ReconcileRequest):
        from streamshift.engine.jobs.reconcile import check_reconcile

        if request.replace and not request.correct:
            raise RequestRefused(
                "--replace goes with --correct (the EOD file replaces the whole day)"
            )
        check_reconcile(
            settings, get_flow(request.flow), request.against, request.eod_file, request.correct
        )
    elif isinstance(request, CloseRequest):
        from streamshift.engine.jobs import close

        _progress(f"checking {request.flow} {request.business_date}'s cut-off and offsets")
        close.check(settings, request)
    elif isinstance(request, ReplayRequest):
        from streamshift.engine.jobs.replay import check_replay

        # A range the broker cannot serve is refused before Spark starts.
        check_replay(settings, get_flow(request.flow), request.start, request.end, request.topic)
    elif isinstance(request, QualityRequest):
        _check_quality(settings, request)
    elif isinstance(request, PromoteRequest):
        from streamshift.control.stages import APPROVED, check_promotion

        if request.approval in (None, APPROVED):  # (a rejection is recorded, gate or not)
            check_promotion(
                settings, request.flow, request.to, force=request.force, reason=request.reason
            )


def run(spark: SparkSession, request: JobRequest, settings: Settings | None = None) -> JobDone:
    """Run ``request`` in ``spark``."""
    from streamshift.spec.settings import load_settings

    settings = settings or load_settings()
    flow = get_flow(request.flow)  # type: ignore[attr-defined]
    if _validates(request):
        _import_quality_beside()
    if isinstance(request, EodRequest):
        result = _eod(spark, settings, request)
        layer, file = request.layer, request.file
    elif isinstance(request, ReconcileRequest):
        from streamshift.engine.jobs.reconcile import run_reconcile

        result = run_reconcile(
            spark,
            settings,
            flow,
            request.business_date,
            against=request.against,
            eod_file=request.eod_file,
            parity=request.parity,
            correct=request.correct,
            replace=request.replace,
        )
        layer, file = "stream", request.eod_file
    elif isinstance(request, CloseRequest):
        from streamshift.engine.jobs import close

        result = close.run(spark, request, settings)
        layer, file = "stream", None
    elif isinstance(request, PromoteRequest):
        from streamshift.engine.jobs.promote import decide

        return JobDone(request, decide(spark, settings, request))
    elif isinstance(request, RedriveRequest):
        from streamshift.engine.jobs import redrive

        return JobDone(request, redrive.run(spark, request, settings))
    elif isinstance(request, ReplayRequest):
        from streamshift.engine.jobs.replay import replay

        r = request
        return JobDone(r, replay(spark, settings, flow, r.start, r.end, r.into, topic=r.topic))
    elif isinstance(request, QualityRequest):
        return _quality_run(spark, settings, request)
    elif isinstance(request, MaintainRequest):
        from streamshift.engine.jobs.maintain import run_maintain

        return JobDone(request, run_maintain(spark, settings, flow))
    else:
        raise TypeError(f"no job runs {type(request).__name__}")
    quality = _quality(spark, settings, request, layer, file)
    done = JobDone(request, result, quality)
    if isinstance(request, ReconcileRequest) and request.fail_on_breaks and result.breaks:
        raise BreaksFound(f"{done.describe()}\nbreaks found and --fail-on-breaks was given")
    return done


def _eod(spark: SparkSession, settings: Settings, request: EodRequest) -> Any:
    from streamshift.engine.jobs.eod import run_eod
    from streamshift.engine.write.target import Target
    from streamshift.spec.stages import stage
    from streamshift.store.records import current_stage

    flow = get_flow(request.flow)
    target = Target.open(spark, settings, flow, request.layer)
    # A load of the batch layer in a loading stage closes the date where the stage says; any
    # other load closes the layer it wrote.
    now = stage(current_stage(settings, flow.name))
    closes = now.closes_layers if now.loads and request.layer == "batch" else (request.layer,)
    return run_eod(
        spark, target, request.business_date, request.file, replace=request.replace, closes=closes
    )


def _validates(request: JobRequest) -> bool:
    """Whether the job runs the flow's data-quality suites (a quality request, or a write whose
    request names a quality run, of a flow that has suites)."""
    from streamshift.store.quality import datasets

    asked = isinstance(request, QualityRequest) or getattr(request, "quality_run", None)
    return bool(asked) and bool(datasets(request.flow))  # type: ignore[attr-defined]


def _import_quality_beside() -> None:
    """Import Great Expectations on a side thread while the job's first steps run.

    Its import is seconds of pure Python; the job's steps before the validation spend theirs
    waiting for Spark, so a process that validates after writing does not pay both in turn.
    The validation's own import waits for this one (Python's import lock), never repeats it."""
    if "great_expectations" in sys.modules:
        return
    import threading

    def load() -> None:
        try:
            import great_expectations  # noqa: F401

            import streamshift.engine.validate  # noqa: F401
        except Exception:  # noqa: BLE001, S110 - the validation's own import says what is wrong
            pass

    threading.Thread(target=load, name="import-great-expectations", daemon=True).start()


def _quality(spark, settings, request, layer, file) -> str | None:  # type: ignore[no-untyped-def]
    """The day's data-quality suites in the job's own session (one engine round, not two):
    recorded under the request's ``quality_run``; the verdict is the data_quality task's."""
    from streamshift.engine.validate import run_quality
    from streamshift.store.quality import datasets

    run_id = getattr(request, "quality_run", None)
    if not run_id:
        return None
    flow = get_flow(request.flow)
    if not datasets(flow.name):
        return f"flow {flow.name} has no data-quality suites: nothing to validate"
    day = request.business_day
    return run_quality(spark, settings, flow, day, layer, file=file, run_id=run_id).describe()


def _check_quality(settings: Settings, request: QualityRequest) -> None:
    from streamshift.engine.validate import holds_nothing, nothing_to_validate, wanted_datasets
    from streamshift.store.quality import datasets

    if not datasets(request.flow):
        raise RequestRefused(
            f"flow {request.flow!r} has no data-quality suites (expectations/gx/expectations/"
            f"{request.flow}/); flows with suites have a folder there"
        )
    if request.file is not None and not request.file.exists():
        raise RequestRefused(
            f"EOD file {request.file} not found; pass an existing CSV file or no --file"
        )
    flow = get_flow(request.flow)
    wanted_datasets(flow, list(request.datasets))
    if request.file is None and holds_nothing(settings, flow, request.business_date, request.layer):
        raise nothing_to_validate(flow, request.business_date, request.layer)


def _quality_run(spark: SparkSession, settings: Settings, request: QualityRequest) -> JobDone:
    from streamshift.engine.validate import run_quality

    r = request
    only = list(r.datasets) or None
    run = run_quality(
        spark, settings, get_flow(r.flow), r.business_date, r.layer, file=r.file, only=only
    )
    done = JobDone(r, run)
    if run.failures:
        raise QualityFailed(run.failure_line(), done)
    return done


def _progress(message: str) -> None:
    print(f"[streamshift] {message}", file=sys.stderr, flush=True)
