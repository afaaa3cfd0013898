"""Migration stages per flow (batch → shadow → stream → kappa), changed only by ``promote``.

Every change is a row of the ``stage_changes`` Delta table (from, to, when, by whom, forced,
reason, evidence); the current stage is the last change's target (``batch`` before any).
A promotion to ``stream`` or ``kappa`` needs reconciliation evidence: the last N business
dates reconciled stream-vs-batch (``parity``) must all be clean. ``--force`` overrides the
gate but needs a reason, and records it. Demotion is always allowed, and recorded.

What readers are served in each stage is :mod:`streamshift.control.serving`.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamshift.control.recon import latest_runs, parity_by_date
from streamshift.core.catalog import STAGE_CHANGES_SCHEMA, ControlTables
from streamshift.core.errors import StreamshiftError
from streamshift.core.flow import Flow
from streamshift.write.target import read_or_empty

if TYPE_CHECKING:
    from streamshift.core.settings import Settings

STAGES = ("batch", "shadow", "stream", "kappa")
GATED = ("stream", "kappa")


class PromotionRefused(StreamshiftError):
    pass


def stage_changes_path(settings: Settings) -> str:
    return ControlTables(settings.warehouse).stage_changes


def _changes(spark: SparkSession, settings: Settings, flow: Flow) -> DataFrame:
    """The flow's recorded stage changes (none before the first promotion)."""
    return read_or_empty(spark, stage_changes_path(settings), STAGE_CHANGES_SCHEMA).where(
        F.col("flow") == flow.name
    )


def stage_history(spark: SparkSession, settings: Settings, flow: Flow) -> list[dict[str, Any]]:
    return [r.asDict() for r in _changes(spark, settings, flow).orderBy("changed_at").collect()]


def current_stage(spark: SparkSession, settings: Settings, flow: Flow) -> str:
    last = _changes(spark, settings, flow).orderBy(F.col("changed_at").desc()).first()
    return last["to_stage"] if last else "batch"


@dataclass
class Evidence:
    window: int
    dates: list[dict[str, Any]]  # newest first: business_date, clean, breaks, run_id

    @property
    def unclean(self) -> list[dict[str, Any]]:
        return [d for d in self.dates if not d["clean"]]

    @property
    def sufficient(self) -> bool:
        return len(self.dates) >= self.window and not self.unclean

    def problems(self) -> list[str]:
        out = [
            f"{d['business_date']} had {d['breaks']} breaks (run {d['run_id']})"
            for d in self.unclean
        ]
        if len(self.dates) < self.window:
            out.append(
                f"only {len(self.dates)} of the {self.window} business dates needed have "
                "been reconciled"
            )
        return out

    def as_json(self) -> str:
        return json.dumps({"window": self.window, "dates": self.dates}, default=str)


def promotion_evidence(spark: SparkSession, settings: Settings, flow: Flow) -> Evidence:
    """The latest parity reconciliation of each of the last N reconciled business dates."""
    per_date = parity_by_date(latest_runs(spark, settings, flow))
    rows = (
        per_date.orderBy(F.col("business_date").desc()).limit(settings.promotion_window).collect()
    )
    return Evidence(settings.promotion_window, [r.asDict() for r in rows])


@dataclass
class StageChange:
    flow: str
    from_stage: str
    to_stage: str
    forced: bool
    reason: str | None
    evidence: Evidence | None

    def describe(self) -> str:
        text = f"{self.flow}: {self.from_stage} → {self.to_stage}"
        if self.forced:
            text += f" (FORCED: {self.reason})"
        if self.evidence is not None and self.evidence.dates:
            dates = ", ".join(str(d["business_date"]) for d in self.evidence.dates)
            text += f"; evidence: parity clean on {dates}"
        return text


def promote(
    spark: SparkSession,
    settings: Settings,
    flow: Flow,
    to: str,
    *,
    force: bool = False,
    reason: str | None = None,
    by: str | None = None,
) -> StageChange:
    """Move ``flow`` to stage ``to``; raises :class:`PromotionRefused` saying why not."""
    if to not in STAGES:
        raise PromotionRefused(f"unknown stage {to!r}; stages are {', '.join(STAGES)}")
    if force and not (reason and reason.strip()):
        raise PromotionRefused(
            "--force needs --reason TEXT: a forced promotion is recorded with who forced it and why"
        )
    now = current_stage(spark, settings, flow)
    if to == now:
        raise PromotionRefused(f"{flow.name} is already in stage {now}")
    promoting = STAGES.index(to) > STAGES.index(now)
    if promoting and STAGES.index(to) != STAGES.index(now) + 1:
        step = STAGES[STAGES.index(now) + 1]
        raise PromotionRefused(
            f"{flow.name} is in stage {now}; promote one stage at a time (next: {step})"
        )
    evidence = promotion_evidence(spark, settings, flow) if promoting and to in GATED else None
    if evidence is not None and not evidence.sufficient and not force:
        raise PromotionRefused(
            f"promotion of {flow.name} to {to} refused: it needs the last {evidence.window} "
            f"reconciled business dates clean (stream vs batch); "
            + "; ".join(evidence.problems())
            + ". Reconcile more dates (streamshift reconcile) or, if you must, pass "
            "--force --reason TEXT"
        )
    change = StageChange(flow.name, now, to, force, reason, evidence)
    row = [
        (
            flow.name,
            now,
            to,
            dt.datetime.now(dt.UTC).replace(tzinfo=None),
            by or _user(),
            force,
            reason,
            evidence.as_json() if evidence else None,
        )
    ]
    spark.createDataFrame(row, STAGE_CHANGES_SCHEMA).write.format("delta").mode("append").save(
        stage_changes_path(settings)
    )
    return change


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
