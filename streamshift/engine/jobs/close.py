"""Close a business date at its cut-off (stage kappa): ``run(spark, request)``.

The check (:func:`streamshift.control.cutoff.check_cut_off`) needs no JVM, so the CLI and
the EOD DAG ask it first and refuse at once; the job checks again and records the close in
``day_closes`` for the layers the stage's close covers. ``force`` (with a reason) closes
without waiting and is recorded as forced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamshift.control.cutoff import CloseRefused, CutOffCheck, check_cut_off
from streamshift.spec import stages
from streamshift.spec.registry import get_flow
from streamshift.spec.requests import CloseRequest
from streamshift.store.processes import os_user
from streamshift.store.records import current_stage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamshift.spec.settings import Settings


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


def check(settings: Settings, request: CloseRequest) -> CutOffCheck | None:
    """The gate, without a JVM: ``None`` for a forced close, else a ready check; raises
    :class:`CloseRefused` saying what the close waits for."""
    return _gate(settings, request, stages.stage(current_stage(settings, request.flow)))


def _gate(settings: Settings, request: CloseRequest, now: stages.Stage) -> CutOffCheck | None:
    if request.force:
        if not (request.reason and request.reason.strip()):
            raise CloseRefused("--force needs --reason TEXT: a forced close is recorded with why")
        return None
    if now.closes_by != stages.BY_CUT_OFF:
        raise CloseRefused(
            f"{request.flow} is in stage {now.name}, where a day closes by its "
            f"{now.closes_by.replace('_', ' ')}, not at a cut-off; pass --force --reason TEXT "
            "to close it anyway"
        )
    found = check_cut_off(settings, get_flow(request.flow), request.business_date)
    if not found.ready:
        raise CloseRefused(
            f"{request.flow} {request.business_date} cannot close yet: waiting for "
            f"{found.waiting_for()}"
        )
    return found


def run(
    spark: SparkSession, request: CloseRequest, settings: Settings | None = None
) -> CloseResult:
    """Check the cut-off again and record the close in the layers the stage's close covers."""
    from streamshift.engine.write.target import Target
    from streamshift.spec.settings import load_settings

    settings = settings or load_settings()
    now = stages.stage(current_stage(settings, request.flow))
    found = _gate(settings, request, now)
    flow = get_flow(request.flow)
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
