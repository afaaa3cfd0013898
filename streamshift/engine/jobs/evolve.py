"""The ``plan`` and ``evolve`` jobs: a flow's change, said and applied
(:mod:`streamshift.engine.versions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamshift.control.plan import Plan
from streamshift.control.stages import APPROVED, PromotionRejected
from streamshift.engine.shadow import ShadowResult, SwitchResult, build_shadow, switch_version
from streamshift.engine.versions import EvolveResult, evolve, plans_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamshift.control.jobs import JobContext
    from streamshift.spec.requests import EvolveRequest, PlanRequest, SwitchRequest


@dataclass(frozen=True)
class PlanResult:
    plans: tuple[Plan, ...]

    @property
    def breaking(self) -> bool:
        return any(p.breaking for p in self.plans)

    def describe(self) -> str:
        return "\n".join(p.describe() for p in self.plans)


def run_plan(spark: SparkSession, context: JobContext, request: PlanRequest) -> PlanResult:
    found = plans_for(spark, context.settings.warehouse, context.flow)
    return PlanResult(tuple(found.values()))


def run_evolve(
    spark: SparkSession, context: JobContext, request: EvolveRequest
) -> EvolveResult | ShadowResult:
    if request.shadow:
        return build_shadow(spark, context.settings, context.flow)
    return evolve(spark, context.settings, context.flow, reapply=request.reapply)


def run_switch(spark: SparkSession, context: JobContext, request: SwitchRequest) -> SwitchResult:
    if request.approval not in (None, APPROVED):
        who = request.approved_by or "nobody in time (a time-out counts as a rejection)"
        raise PromotionRejected(
            f"switch of {request.flow} to version {request.version} rejected by {who}; "
            "nothing was switched"
        )
    return switch_version(spark, context.settings, context.flow, request.version, request.by)
