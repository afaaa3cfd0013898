"""The data-quality job: the flow's Great Expectations suites over a date of a layer (and, with
``file``, over the raw rows of that EOD file); its verdict fails the job when an expectation
with policy ``fail`` failed (:func:`streamshift.control.jobs.quality_verdict`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamshift.engine.validate import run_quality
from streamshift.store.quality import QualityRun

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamshift.control.jobs import JobContext
    from streamshift.spec.requests import QualityRequest


def run(spark: SparkSession, context: JobContext, request: QualityRequest) -> QualityRun:
    only = list(request.datasets) or None
    day, layer = request.business_date, request.layer
    return run_quality(
        spark, context.settings, context.flow, day, layer, file=request.file, only=only
    )
