"""Migration stages per flow (batch → shadow → stream → kappa), changed only by ``promote``.

Every change is a row of the ``stage_changes`` Delta table (from, to, when, by whom, forced,
reason, evidence); the current stage is the last change's target (``batch`` before any).
A promotion needs the evidence the stage before it makes (:mod:`streamshift.spec.stages`):
into ``stream``, the last N business dates reconciled stream-vs-batch in ``shadow``
(``parity``); into ``kappa``, the last N reconciliations of the EOD file against the stream
layer in ``stream`` (``eod_file``, after its correction). They must all be clean — and, when
``STREAMSHIFT_PROMOTION_QUALITY_SUITES`` lists data-quality suites, none of those suites may
have a failed ``fail`` expectation on those dates. ``--force`` overrides the
gate but needs a reason, and records it. Demotion is always allowed, and recorded.

The gate (:func:`check_promotion`) reads the control tables without a JVM, so the CLI, the
``streamshift_promote`` DAG and the Airflow Migration page ask the same question and get the
same answer; only recording the change (:mod:`streamshift.engine.jobs.promote`) writes, with
Spark.
What readers are served in each stage is :mod:`streamshift.control.serving`.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamshift.spec import stages
from streamshift.spec.catalog import PARITY, ControlTables
from streamshift.spec.errors import StreamshiftError
from streamshift.store.records import (
    current_stage,
    latest_runs,
    quality_failures_by_date,
    recon_by_date,
)
from streamshift.store.versions import logic_changed_at

if TYPE_CHECKING:
    from streamshift.spec.settings import Settings

# Stages a promotion into needs evidence for (what the stage before makes).
GATED = tuple(s.name for s in stages.STAGES if stages.entry_evidence(s.name))


class PromotionRefused(StreamshiftError):
    final = True


class PromotionRejected(PromotionRefused):
    """A second user rejected the promotion, or nobody answered in time (recorded)."""


APPROVED, REJECTED, TIMED_OUT = "approved", "rejected", "timed out"


def stage_changes_path(settings: Settings) -> str:
    return ControlTables(settings.warehouse).stage_changes


@dataclass
class Evidence:
    window: int
    kind: str  # the reconciliation: parity (stream vs batch) or eod_file (EOD file vs stream)
    made_in: str  # the stage whose runs count
    dates: list[dict[str, Any]]  # newest first: business_date, clean, breaks, rows, run_id
    # Reconciled dates passed over: neither layer held a row there (nothing was loaded), so a
    # "clean" parity proves nothing. Newest first.
    empty: list[dt.date] = field(default_factory=list)

    @property
    def unclean(self) -> list[dict[str, Any]]:
        """Dates with parity breaks, or failed data quality in the gating suites."""
        return [d for d in self.dates if not d["clean"] or d.get("quality_failures")]

    @property
    def sufficient(self) -> bool:
        return len(self.dates) >= self.window and not self.unclean

    def problems(self) -> list[str]:
        out = []
        for d in self.unclean:
            if not d["clean"]:
                out.append(f"{d['business_date']} had {d['breaks']} breaks (run {d['run_id']})")
            if d.get("quality_failures"):
                failed = ", ".join(d["quality_failures"])
                out.append(f"{d['business_date']} failed data quality ({failed})")
        if len(self.dates) < self.window:
            out.append(
                f"only {len(self.dates)} of the {self.window} business dates needed have "
                f"been reconciled ({self.describe_kind()} in stage {self.made_in})"
                + (
                    f" ({', '.join(str(d) for d in self.empty)} compared no rows in either "
                    "layer: nothing loaded there, so not evidence)"
                    if self.empty
                    else ""
                )
            )
        return out

    def describe_kind(self) -> str:
        return "stream vs batch" if self.kind == PARITY else "the EOD file vs the stream layer"

    def as_json(self) -> str:
        return json.dumps(
            {
                "window": self.window,
                "kind": self.kind,
                "made_in": self.made_in,
                "dates": self.dates,
            },
            default=str,
        )


def promotion_evidence(settings: Settings, flow: str, to: str | None = None) -> Evidence:
    """The evidence a promotion of ``flow`` into ``to`` (default: its next stage) needs: the
    latest reconciliation of the stage before ``to``'s kind (parity or eod_file), made in that
    stage, of each of the last N reconciled business dates that held data (a date neither side
    holds reconciles clean and proves nothing)."""
    if to is None:
        following = stages.next_stage(current_stage(settings, flow))
        to = following.name if following else stages.STAGES[-1].name
    before = stages.previous_stage(to) or stages.STAGES[0]
    kind = stages.entry_evidence(to) or PARITY
    made_in = before.name
    runs = latest_runs(settings, flow, stage=made_in)
    evolved = logic_changed_at(settings.warehouse, flow)
    if evolved is not None:  # evidence made before a logic change speaks for the old code
        runs = [r for r in runs if r["run_at"] >= evolved]
    reconciled = recon_by_date(runs, kind)[::-1]
    newest_first = [d for d in reconciled if d["rows"]][: settings.promotion_window]
    oldest = newest_first[-1]["business_date"] if newest_first else None
    empty = [
        d["business_date"]
        for d in reconciled
        if not d["rows"] and (oldest is None or d["business_date"] > oldest)
    ]
    suites = [s.strip() for s in settings.promotion_quality_suites.split(",") if s.strip()]
    if suites:  # the data-quality part of the gate (STREAMSHIFT_PROMOTION_QUALITY_SUITES)
        failures = quality_failures_by_date(settings, flow, suites)
        for day in newest_first:
            day["quality_failures"] = failures.get(day["business_date"], [])
    return Evidence(settings.promotion_window, kind, made_in, newest_first, empty)


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
            text += f"; evidence: {self.evidence.kind} clean on {dates}"
        return text


def check_promotion(
    settings: Settings,
    flow: str,
    to: str,
    *,
    force: bool = False,
    reason: str | None = None,
) -> StageChange:
    """The gate: the change moving ``flow`` to ``to``, or :class:`PromotionRefused` saying why
    not. Reads only (no JVM); ``engine.jobs.promote`` records what it allows."""
    if to not in stages.NAMES:
        raise PromotionRefused(f"unknown stage {to!r}; stages are {', '.join(stages.NAMES)}")
    if force and not (reason and reason.strip()):
        raise PromotionRefused(
            "--force needs --reason TEXT: a forced promotion is recorded with who forced it and why"
        )
    now = current_stage(settings, flow)
    if to == now:
        raise PromotionRefused(f"{flow} is already in stage {now}")
    promoting = stages.position(to) > stages.position(now)
    following = stages.next_stage(now)
    if promoting and following is not None and to != following.name:
        raise PromotionRefused(
            f"{flow} is in stage {now}; promote one stage at a time (next: {following.name})"
        )
    evidence = promotion_evidence(settings, flow, to) if promoting and to in GATED else None
    if evidence is not None and not evidence.sufficient and not force:
        raise PromotionRefused(
            f"promotion of {flow} to {to} refused: it needs the last {evidence.window} "
            f"reconciled business dates clean ({evidence.describe_kind()}, reconciled in "
            f"stage {evidence.made_in}); "
            + "; ".join(evidence.problems())
            + ". Reconcile more dates (streamshift reconcile) or, if you must, pass "
            "--force --reason TEXT"
        )
    return StageChange(flow, now, to, force, reason, evidence)
