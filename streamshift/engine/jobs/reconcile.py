"""The reconciliation jobs of a business date, and the EOD correction of the stream layer.

``reconcile_date`` runs the reconciliations a date's inputs allow — parity (stream vs batch,
per view), external (serving layer vs an external view file), eod_file (current state vs the
EOD file) — records each in ``recon_runs``/``recon_breaks`` and returns the results.

``correct_through_log`` is the ``stream`` stage's EOD step: the EOD file's rows the stream
layer does not hold at the same version (and, for a whole-day file, cancels of the keys it
lacks) are produced to the flow's topic (source ``eod_correction``, ``file:line`` in headers)
and applied by the stream job, so the next reconciliation is clean unless the file itself
disagrees. ``eod_correct`` applies the same differences to a layer directly.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamshift.control.jobs import check_reconcile
from streamshift.control.serving import serving_layer
from streamshift.engine.compare import compare
from streamshift.engine.eodread import check_control_totals, read_eod_file
from streamshift.engine.recon import (
    ReconResult,
    new_run_id,
    read_external_view,
    record,
)
from streamshift.engine.versions import ensure_deployed
from streamshift.engine.write import runs
from streamshift.engine.write.apply import ApplyResult, apply_changes
from streamshift.engine.write.runs import file_digest, run_key
from streamshift.engine.write.target import Target, when_small
from streamshift.engine.write.transforms import (
    EOD_CORRECTION_SOURCE,
    checked_changes,
    latest_per_key,
    parse,
    replacement_cancels,
)
from streamshift.spec.catalog import EOD_FILE, EXTERNAL, PARITY
from streamshift.spec.contract import FAILED, IS_DELETED, MALFORMED, SOURCE, SOURCE_REF
from streamshift.spec.errors import ReconcileError
from streamshift.spec.flow import Flow
from streamshift.store.eodfile import FileLayout, check_file
from streamshift.store.processes import os_user
from streamshift.store.records import closed_dates, current_stage

if TYPE_CHECKING:
    from streamshift.control.jobs import JobContext
    from streamshift.spec.requests import ReconcileRequest
    from streamshift.spec.settings import Settings


def _say(message: str) -> None:
    print(f"[reconcile] {message}", file=sys.stderr, flush=True)


def _file_state(
    spark: SparkSession, flow: Flow, path: Path, business_date: dt.date, reference
) -> DataFrame:  # type: ignore[no-untyped-def]
    """The EOD file's latest accepted version per key for ``business_date``."""
    layout = check_file(path, flow, whole_day=False)
    raw = read_eod_file(spark, path, flow, layout).withColumn(SOURCE, F.lit("eod_file"))
    checked = checked_changes(flow, raw, reference).where(F.size(FAILED) == 0)
    return latest_per_key(flow, checked).where(F.col(flow.business_date) == F.lit(business_date))


def open_layers(spark: SparkSession, settings: Settings, flow: Flow) -> dict[str, Target]:
    """Handles on both layers (nothing is read or created by opening them)."""
    return {layer: Target.open(spark, settings, flow, layer) for layer in ("batch", "stream")}


def _serving(flow: Flow, target: Target, table: str, business_date: dt.date) -> DataFrame:
    """A view (or ``current``) of one date from the layer that serves it."""
    return target.table(table).where(F.col(flow.business_date) == F.lit(business_date))


def reconcile_date(
    spark: SparkSession,
    settings: Settings,
    flow: Flow,
    business_date: dt.date,
    *,
    against: Path | None = None,
    eod_file: Path | None = None,
    parity: bool = True,
    targets: dict[str, Target] | None = None,
    stage: str | None = None,
) -> list[ReconResult]:
    """Run the reconciliations the inputs allow for ``business_date`` and record them."""
    stage = stage or current_stage(settings, flow.name)
    targets = targets or open_layers(spark, settings, flow)
    # Both layers are compared through the code that wrote them, or not at all.
    ensure_deployed(targets["batch"])
    with when_small(targets.values(), [business_date], files=[against, eod_file]):
        return _reconcile_date(
            spark, settings, flow, business_date, against, eod_file, parity, targets, stage
        )


def _reconcile_date(
    spark: SparkSession,
    settings: Settings,
    flow: Flow,
    business_date: dt.date,
    against: Path | None,
    eod_file: Path | None,
    parity: bool,
    targets: dict[str, Target],
    stage: str,
) -> list[ReconResult]:
    run_id = new_run_id()
    results: list[ReconResult] = []
    bd = F.col(flow.business_date) == F.lit(business_date)

    if parity:
        for view in flow.views:
            _say(f"parity of {view.name} for {business_date}: batch vs stream")
            # A layer not loaded yet reads as empty.
            left = targets["batch"].table(view.name).where(bd).localCheckpoint()
            right = targets["stream"].table(view.name).where(bd).localCheckpoint()
            columns = [c for c in left.columns if c not in view.group_key]
            recon = PARITY if len(flow.views) == 1 else f"{PARITY}:{view.name}"
            result = ReconResult(
                run_id, recon, business_date, "batch", "stream", left.count(), right.count()
            )
            results.append(
                record(
                    spark,
                    settings,
                    flow,
                    compare(left, right, view.group_key, columns, view.tolerances),
                    result,
                    stage,
                )
            )

    # The layer readers are served the date from in this stage (read once for both below).
    if against is not None or eod_file is not None:
        closed = closed_dates(settings, flow.name)
        layer = serving_layer(stage, business_date, closed)

    if against is not None:
        view = flow.views[0]
        _say(f"external: serving {view.name} vs {against}")
        serving = _serving(flow, targets[layer], view.name, business_date)
        external = (
            read_external_view(spark, against, view.group_key, serving.schema)
            .where(bd)
            .localCheckpoint()
        )
        columns = [c for c in external.columns if c not in view.group_key]
        serving = serving.select(*view.group_key, *columns).localCheckpoint()
        result = ReconResult(
            run_id,
            EXTERNAL,
            business_date,
            f"serving ({stage})",
            str(against),
            serving.count(),
            external.count(),
        )
        results.append(
            record(
                spark,
                settings,
                flow,
                compare(
                    serving,
                    external,
                    view.group_key,
                    columns,
                    view.tolerances,
                ),
                result,
                stage,
            )
        )

    if eod_file is not None:
        _say(f"current state vs the EOD file {eod_file}")
        reference = targets["stream"].reference
        # Both sides computed once, as the few columns compared: each query below then plans
        # and reads a materialised input instead of the Delta table and the parsed file again.
        current = (
            _serving(flow, targets[layer], "current", business_date)
            .select(flow.key, flow.version, IS_DELETED)
            .localCheckpoint()
        )
        in_file = (
            _file_state(spark, flow, eod_file, business_date, reference)
            .select(flow.key, flow.version)
            .localCheckpoint()
        )
        current = _without_cancelled_absent(flow, current, in_file)
        current, in_file, late = _without_late(
            flow, targets[layer], business_date, current, in_file
        )
        if late:
            _say(
                f"{late} keys are ahead of the file by late events after the close: late, not breaks"
            )
        key = (flow.key,)
        result = ReconResult(
            run_id,
            EOD_FILE,
            business_date,
            f"current ({stage})",
            str(eod_file),
            current.count(),
            in_file.count(),
        )
        results.append(
            record(
                spark,
                settings,
                flow,
                compare(
                    current.select(flow.key, flow.version),
                    in_file.select(flow.key, flow.version),
                    key,
                    [flow.version],
                ),
                result,
                stage,
            )
        )
    return results


def _without_cancelled_absent(flow: Flow, current: DataFrame, in_file: DataFrame) -> DataFrame:
    """``current`` without the keys it holds cancelled that the file does not list (a whole-day
    file's replacement cancelled them): both sides agree they are not live."""
    listed = in_file.select(F.col(flow.key).alias("_listed"))
    cancelled_absent = (
        current.where(F.col(IS_DELETED))
        .join(listed, F.col(flow.key) == F.col("_listed"), "left_anti")
        .select(flow.key)
    )
    return current.join(cancelled_absent, flow.key, "left_anti")


def _without_late(
    flow: Flow, target: Target, business_date: dt.date, current: DataFrame, in_file: DataFrame
) -> tuple[DataFrame, DataFrame, int]:
    """Both sides without the keys that late events (changes after the date closed) put
    ahead of the file — a higher version, or a key the file lacks: those are late, not breaks.
    Returns them and how many keys were set aside."""
    late = (
        target.table("late_events")
        .where(
            (F.col("flow") == F.lit(flow.name)) & (F.col("business_date") == F.lit(business_date))
        )
        .select(F.col("key").alias("_late_key"))
        .distinct()
    )
    file_versions = in_file.select(F.col(flow.key).alias("_fk"), F.col(flow.version).alias("_fv"))
    ahead = (
        current.select(flow.key, flow.version)
        .join(late, F.col(flow.key) == F.col("_late_key"))
        .join(file_versions, F.col(flow.key) == F.col("_fk"), "left")
        .where(F.col("_fv").isNull() | (F.col(flow.version) > F.col("_fv")))
        .select(flow.key)
    ).localCheckpoint()
    count = ahead.count()
    if not count:
        return current, in_file, 0
    return (
        current.join(ahead, flow.key, "left_anti"),
        in_file.join(ahead, flow.key, "left_anti"),
        count,
    )


def eod_correct(
    spark: SparkSession,
    settings: Settings,
    flow: Flow,
    business_date: dt.date,
    eod_file: Path,
    target: Target | None = None,
    *,
    replace: bool = False,
) -> ApplyResult:
    """Apply the EOD file's rows the stream layer lacks (or holds at a lower version); with
    ``replace`` (the file is the whole day), also cancel the day's live keys it lacks."""
    target = (target or Target.open(spark, settings, flow, "stream")).create_tables()
    layout = check_file(eod_file, flow, whole_day=replace)
    with when_small([target], [business_date], files=[eod_file]):
        run, differing = _corrections(spark, flow, business_date, eod_file, target, layout, replace)
        _say(f"applying the EOD file's differences to the stream layer ({eod_file})")
        result = _apply_corrections(flow, differing, eod_file, target, business_date)
        runs.finish(spark, target, run)
        return result


def _apply_corrections(
    flow: Flow, changes: DataFrame, eod_file: Path, target: Target, business_date: dt.date
) -> ApplyResult:
    return apply_changes(
        flow,
        changes,
        EOD_CORRECTION_SOURCE,
        target,
        batch_id=f"{EOD_CORRECTION_SOURCE}:{eod_file}",
        closing_date=business_date,
    )


@dataclass
class Produced:
    """EOD corrections produced to the flow's topic and applied by the stream job."""

    topic: str
    produced: int
    ends: dict[int, int]
    seconds: float
    malformed: ApplyResult | None = None

    def describe(self) -> str:
        text = (
            f"{self.produced} corrections produced to {self.topic} and applied by the stream job "
            f"in {self.seconds:.1f}s (offsets {dict(sorted(self.ends.items()))})"
        )
        if self.malformed is not None and self.malformed.rejected:
            text += f"; {self.malformed.rejected} unreadable lines quarantined"
        return text


def correct_through_log(
    spark: SparkSession,
    settings: Settings,
    flow: Flow,
    business_date: dt.date,
    eod_file: Path,
    target: Target,
    *,
    replace: bool = False,
) -> Produced:
    """Stage stream's correction: the EOD file's differences (and a replacement's cancels) are
    produced to the topic the stream job reads, with their source and ``file:line`` in
    headers, so the stream job stays the layer's single writer, a replay of the topic
    reproduces them and ``serve`` sees them. Returns once the stream has committed them
    (:class:`ReconcileError` after ``correction_wait_seconds``). A re-run derives the same
    differences from the pinned state and produces identical messages; the write path keeps
    one copy of each version."""
    from streamshift.engine.jobs.through_log import NotApplied, produce_and_wait

    started = time.monotonic()
    target.create_tables()
    layout = check_file(eod_file, flow, whole_day=replace)
    with when_small([target], [business_date], files=[eod_file]):
        run, differing = _corrections(spark, flow, business_date, eod_file, target, layout, replace)
        differing = differing.persist()
        # A line no reader could split is no event: it goes to quarantine from here.
        bad = differing.where(F.col(MALFORMED).isNotNull())
        malformed = (
            _apply_corrections(flow, bad, eod_file, target, business_date)
            if not bad.isEmpty()
            else None
        )
        rows = [
            r.asDict()
            for r in differing.where(F.col(MALFORMED).isNull())
            .select(*flow.columns, SOURCE, SOURCE_REF)
            .collect()
        ]
        differing.unpersist()
    try:
        topic, sent = produce_and_wait(
            settings, flow, target.tables.layer, rows, f"corrections of {eod_file.name}"
        )
    except NotApplied as e:
        raise ReconcileError(str(e)) from None
    runs.finish(spark, target, run)
    return Produced(topic, len(rows), sent.ends, time.monotonic() - started, malformed)


def _corrections(
    spark: SparkSession,
    flow: Flow,
    business_date: dt.date,
    eod_file: Path,
    target: Target,
    layout: FileLayout,
    replace: bool,
) -> tuple[runs.PinnedRun, DataFrame]:
    """The run begun and the EOD file's differences from the stream layer as raw changes
    (source ``eod_correction``, or a replacement's cancels)."""
    raw = read_eod_file(spark, eod_file, flow, layout)
    check_control_totals(raw, flow, layout, eod_file)
    # Against current state as this run first saw it: a re-run after a kill derives the same
    # differences and repairs what the first attempt left undone (streamshift.engine.write.runs).
    mode = "replace" if replace else "delta"
    key = run_key(flow.name, target.tables.layer, business_date, mode, file_digest(eod_file))
    run = runs.begin(spark, target, "eod-correct", key)
    # Only the dates the file holds: the correction's cost does not grow with history.
    dates = [
        r[0]
        for r in parse(flow)(raw).select(flow.business_date).distinct().collect()
        if r[0] is not None
    ]
    pinned = run.current(target).where(F.col(flow.business_date).isin(dates or [business_date]))
    current = pinned.select(F.col(flow.key).alias("_k"), F.col(flow.version).alias("_v"))
    typed_key = F.trim(F.col(flow.key))
    typed_version = F.trim(F.col(flow.version)).try_cast("bigint")
    differing = (
        raw.join(current, typed_key == F.col("_k"), "left")
        .where(F.col("_v").isNull() | typed_version.isNull() | (typed_version > F.col("_v")))
        .drop("_k", "_v")
    )
    differing = differing.withColumn(SOURCE, F.lit(EOD_CORRECTION_SOURCE))
    if replace:
        cancels = replacement_cancels(flow, pinned, raw, business_date, str(eod_file))
        differing = differing.unionByName(
            cancels.withColumn(MALFORMED, F.lit(None).cast("string")), allowMissingColumns=True
        )
    return run, differing


@dataclass
class ReconcileRun:
    """One reconcile job: the reconciliations of a date and, in stage stream, the correction."""

    flow: str
    business_date: dt.date
    stage: str
    results: list[ReconResult]
    before_correction: list[ReconResult] = field(default_factory=list)
    correction: Produced | None = None

    @property
    def breaks(self) -> int:
        return sum(r.breaks for r in self.results)

    @property
    def run_id(self) -> str:
        return self.results[0].run_id if self.results else "-"

    def describe(self, worst: int = 5) -> str:
        lines = [f"before correction: {r.describe()}" for r in self.before_correction]
        if self.correction is not None:
            lines.append(f"EOD correction: {self.correction.describe()}")
        for result in self.results:
            lines.append(result.describe())
            lines += [
                f"    {b['kind']:15} {b['key']} {b['column'] or ''} "
                f"{b['left_value']} → {b['right_value']}"
                for b in result.worst[:worst]
            ]
        lines.append(
            f"run {self.run_id}: {self.breaks} breaks in {len(self.results)} "
            "reconciliations (details in recon_breaks)"
        )
        return "\n".join(lines)


def run(spark: SparkSession, context: JobContext, request: ReconcileRequest) -> ReconcileRun:
    """The reconcile job: reconcile the date; with ``correct`` (stage stream or kappa) apply the
    EOD file's differences to the stream layer and reconcile again."""
    check_reconcile(context, request)
    settings, flow, business_date = context.settings, context.flow, request.business_date
    against, eod_file, stage = request.against, request.eod_file, context.stage.name
    targets = open_layers(spark, settings, flow)

    def reconcile() -> list[ReconResult]:
        return reconcile_date(
            spark,
            settings,
            flow,
            business_date,
            against=against,
            eod_file=eod_file,
            parity=request.parity,
            targets=targets,
            stage=stage,
        )

    results = reconcile()
    run = ReconcileRun(flow.name, business_date, stage, results)
    if request.correct:
        assert eod_file is not None  # checked above
        run.before_correction = results
        # Through the topic: the stream job applies the corrections, replay and serve see them.
        run.correction = correct_through_log(
            spark,
            settings,
            flow,
            business_date,
            eod_file,
            targets["stream"],
            replace=request.replace,
        )
        run.results = reconcile()
        # Reconciled and corrected: the date is closed; later changes for it are late.
        now = context.stage
        targets["stream"].close_day(
            business_date, now.closes_by, now.closes_layers, by=os_user(), detail=str(eod_file)
        )
    return run
