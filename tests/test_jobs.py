"""The job registry (streamshift.control.jobs): every request kind has one job, found by its
type, whose run has the one shape; the JVM-free checks refuse without starting Spark."""

from __future__ import annotations

import datetime as dt
import importlib
import inspect
from pathlib import Path

import pytest

from streamshift.control.jobs import JOBS, JobContext, RequestRefused, check, job_for
from streamshift.spec.requests import _KINDS, EodRequest, JobRequest, ReconcileRequest
from streamshift.spec.settings import load_settings


def test_every_request_kind_has_one_job_whose_run_has_the_one_shape() -> None:
    assert set(JOBS) == set(_KINDS.values())
    for request_type, job in JOBS.items():
        module, _, name = job.run.partition(":")
        run = getattr(importlib.import_module(module), name)
        assert list(inspect.signature(run).parameters) == ["spark", "context", "request"], job.run
        assert job_for(request_type.__new__(request_type)) is job


def test_a_request_no_job_runs_is_refused_by_type() -> None:
    class Unknown(JobRequest):
        kind = "unknown-for-this-test"

    try:
        with pytest.raises(TypeError, match="no job runs Unknown"):
            job_for(Unknown())
    finally:
        _KINDS.pop(Unknown.kind)


def test_checks_refuse_without_a_jvm_and_the_context_reads_the_stage_once(tmp_path: Path) -> None:
    settings = load_settings({}, home=tmp_path / "home")
    day = dt.date(2026, 11, 20)
    with pytest.raises(RequestRefused, match="not found"):
        check(settings, EodRequest("trades", day, tmp_path / "missing.csv"))
    with pytest.raises(RequestRefused, match="--replace goes with --correct"):
        check(settings, ReconcileRequest("trades", day, replace=True))
    with pytest.raises(RequestRefused, match="nothing to reconcile: with --no-parity, give"):
        check(settings, ReconcileRequest("trades", day, parity=False))
    context = check(settings, ReconcileRequest("trades", day))
    assert isinstance(context, JobContext) and context.flow.name == "trades"
    assert context.stage.name == "batch"  # a new warehouse's flow is in the first stage
    assert context.stage is context.stage  # read once, then kept
