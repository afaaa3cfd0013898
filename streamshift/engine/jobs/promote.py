"""Recording a stage change: the promotion through the gate (:mod:`streamshift.control.stages`,
JVM-free) written to ``stage_changes``, and a second user's answer to a promotion that waited
for approval written to ``promotion_decisions``."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from streamshift.control.stages import (
    APPROVED,
    REJECTED,
    PromotionRejected,
    StageChange,
    check_promotion,
    stage_changes_path,
)
from streamshift.engine.write.commits import merge_into
from streamshift.engine.write.target import ensure_table
from streamshift.spec import sqltext as sql
from streamshift.spec.catalog import (
    PROMOTION_DECISIONS_SCHEMA,
    STAGE_CHANGES_SCHEMA,
    ControlTables,
)
from streamshift.store.processes import os_user
from streamshift.store.records import current_stage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamshift.control.jobs import JobContext
    from streamshift.spec.requests import PromoteRequest
    from streamshift.spec.settings import Settings


def record_decision(spark: SparkSession, settings: Settings, request: PromoteRequest) -> None:
    """Record the answer to a promotion that waited for approval (``request.approval``), once
    per Airflow run: a re-run of the recording task adds no second row."""
    path = ControlTables(settings.warehouse).promotion_decisions
    ensure_table(spark, path, PROMOTION_DECISIONS_SCHEMA)
    row = (
        request.flow,
        current_stage(settings, request.flow),
        request.to,
        request.by,
        request.approval,
        request.approved_by,
        dt.datetime.now(dt.UTC).replace(tzinfo=None),
        request.run_id,
        request.force,
        request.reason,
    )
    same = sql.TRUE
    for c in ("flow", "run_id", "to_stage"):
        same = same & sql.col(c, "t").eq_null_safe(sql.col(c, "s"))
    merge_into(path, spark.createDataFrame([row], PROMOTION_DECISIONS_SCHEMA), same, insert="*")


def run(spark: SparkSession, context: JobContext, request: PromoteRequest) -> StageChange:
    """The promote job. A promotion request carrying its approval: recorded, then the change
    made when it was approved (through the gate again), or :class:`PromotionRejected` saying
    who said no."""
    settings = context.settings
    if request.approval is not None:
        record_decision(spark, settings, request)
        if request.approval != APPROVED:
            who = (
                f"rejected by {request.approved_by}"
                if request.approval == REJECTED
                else "not approved in time (a time-out counts as a rejection)"
            )
            raise PromotionRejected(
                f"promotion of {request.flow} to {request.to} {who}; recorded. Ask again once "
                "the approver's questions are answered"
            )
    return promote(
        spark,
        settings,
        request.flow,
        request.to,
        force=request.force,
        reason=request.reason,
        by=request.by,
    )


def promote(
    spark: SparkSession,
    settings: Settings,
    flow: str,
    to: str,
    *,
    force: bool = False,
    reason: str | None = None,
    by: str | None = None,
) -> StageChange:
    """Move ``flow`` to stage ``to`` through the gate and record the change (who: ``by``, else
    the OS user); raises :class:`PromotionRefused` saying why not."""
    change = check_promotion(settings, flow, to, force=force, reason=reason)
    evidence = change.evidence
    row = [
        (
            flow,
            change.from_stage,
            to,
            dt.datetime.now(dt.UTC).replace(tzinfo=None),
            by or os_user(),
            force,
            reason,
            evidence.as_json() if evidence else None,
        )
    ]
    spark.createDataFrame(row, STAGE_CHANGES_SCHEMA).write.format("delta").mode("append").save(
        stage_changes_path(settings)
    )
    return change
