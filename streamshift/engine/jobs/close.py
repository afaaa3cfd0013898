"""Close a business date at its cut-off (stage kappa).

The gate (:func:`streamshift.control.cutoff.close_gate`) needs no JVM, so the CLI and the EOD
DAG ask it first and refuse at once; the job checks again and records the close in
``day_closes`` for the layers the stage's close covers. ``force`` (with a reason) closes
without waiting and is recorded as forced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamshift.control.cutoff import CutOffCheck, close_gate
from streamshift.spec import stages
from streamshift.spec.requests import CloseRequest
from streamshift.store.processes import os_user

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamshift.control.jobs import JobContext


@dataclass(frozen=True)
class CloseResult:
    request: CloseRequest
    layers: tuple[str, ...]
    how: str
    check: CutOffCheck | None

    def describe(self) -> str:
        r = self.request
        text = f"{r.flow} {r.business_date} closed in the {' and '.join(self.layers)} layer"
        if self.how == stages.BY_FORCE:
            return f"{text} (FORCED: {r.reason})"
        assert self.check is not None
        needed = sum(self.check.needed.values())
        return f"{text} at its cut-off {self.check.at:%Y-%m-%d %H:%M:%S} UTC ({needed} offsets)"


def run(spark: SparkSession, context: JobContext, request: CloseRequest) -> CloseResult:
    """Check the cut-off again and record the close in the layers the stage's close covers."""
    from streamshift.engine.write.target import Target

    settings, flow, now = context.settings, context.flow, context.stage
    found = close_gate(settings, flow, request, now)
    layers = now.closes_layers
    how = stages.BY_FORCE if found is None else stages.BY_CUT_OFF
    Target.open(spark, settings, flow, "stream").close_day(
        request.business_date,
        how,
        layers,
        by=request.by or os_user(),
        reason=request.reason,
        detail=found.detail() if found else None,
    )
    return CloseResult(request, layers, how, found)
