"""One entry for every request-style job: ``run(spark, request)``.

The CLI builds a request from its arguments, a DAG task from its params and the stage
(:mod:`streamshift.spec.requests`); both hand it here, with a local session or a Spark
Connect session of the warm engine alike. The job is looked up in the registry
(:mod:`streamshift.control.jobs`), whose JVM-free checks refuse first, before any session
starts, what would fail anyway. Errors are :class:`~streamshift.spec.errors.StreamshiftError`\\ s
whose ``final`` says whether a retry can help.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from streamshift.control.jobs import JobContext, JobDone, job_for
from streamshift.spec.requests import JobRequest
from streamshift.spec.settings import Settings, load_settings
from streamshift.store.quality import datasets

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def run(spark: SparkSession, request: JobRequest, settings: Settings | None = None) -> JobDone:
    """Run ``request`` in ``spark``: its job, then (when the request names a quality run) the
    day's data-quality suites in the same session, then the job's verdict."""
    context = JobContext.of(settings or load_settings(), request)
    job = job_for(request)
    validates = job.validates is not None and _quality_run_of(request) is not None
    if validates and datasets(context.flow.name):
        _import_quality_beside()
    module, _, name = job.run.partition(":")
    result = getattr(importlib.import_module(module), name)(spark, context, request)
    quality = None
    if validates:
        assert job.validates is not None
        quality = _quality(spark, context, request, *job.validates(request))
    done = JobDone(request, result, quality)
    if job.verdict is not None:
        job.verdict(done)
    return done


def _quality_run_of(request: JobRequest) -> str | None:
    return getattr(request, "quality_run", None)


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


def _quality(spark: SparkSession, context: JobContext, request: Any, layer: str, file: Any) -> str:
    """The day's data-quality suites in the job's own session (one engine round, not two):
    recorded under the request's ``quality_run``; the verdict is the data_quality task's."""
    from streamshift.engine.validate import run_quality

    flow = context.flow
    if not datasets(flow.name):
        return f"flow {flow.name} has no data-quality suites: nothing to validate"
    day, run_id = request.business_day, _quality_run_of(request)
    return run_quality(
        spark, context.settings, flow, day, layer, file=file, run_id=run_id
    ).describe()
