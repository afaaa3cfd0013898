"""The reconciliation jobs of a business date, and the EOD correction of the stream layer.

``reconcile_date`` runs the reconciliations a date's inputs allow — parity (stream vs batch,
per view), external (serving layer vs an external view file), eod_file (current state vs the
EOD trades file) — records each in ``recon_runs``/``recon_breaks`` and returns the results.

``eod_correct`` is the ``stream`` stage's EOD step: the EOD file's rows the stream layer does
not hold at the same version are applied to it through ``apply_changes`` (source
``eod_correction``), so the next reconciliation is clean unless the file itself disagrees.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamshift.eodfile import check_file, read_eod_file
from streamshift.flow import Flow
from streamshift.reconcile import (
    EOD_FILE,
    EXTERNAL,
    PARITY,
    ReconResult,
    compare,
    new_run_id,
    read_external_view,
    record,
)
from streamshift.stages import current_stage, serving_frame
from streamshift.tables import read
from streamshift.writepath import (
    FAILED,
    SOURCE,
    ApplyResult,
    Target,
    apply_changes,
    checked_changes,
    latest_per_key,
)

if TYPE_CHECKING:
    from streamshift.settings import Settings

EOD_CORRECTION_SOURCE = "eod_correction"


def _say(message: str) -> None:
    print(f"[reconcile] {message}", file=sys.stderr, flush=True)


def _file_state(spark: SparkSession, flow: Flow, path: Path, business_date: dt.date,
                reference) -> DataFrame:  # type: ignore[no-untyped-def]
    """The EOD file's latest accepted version per key for ``business_date``."""
    layout = check_file(path, flow, whole_day=False)
    raw = read_eod_file(spark, path, flow, layout).withColumn(SOURCE, F.lit("eod_file"))
    checked = checked_changes(flow, raw, reference).where(F.size(FAILED) == 0)
    return latest_per_key(flow, checked).where(F.col(flow.business_date) == F.lit(business_date))


def reconcile_date(spark: SparkSession, settings: Settings, flow: Flow, business_date: dt.date, *,
                   against: Path | None = None, eod_file: Path | None = None,
                   parity: bool = True) -> list[ReconResult]:
    stage = current_stage(spark, settings, flow)
    run_id = new_run_id()
    results: list[ReconResult] = []
    bd = F.col(flow.business_date) == F.lit(business_date)
    # Opening creates a layer's tables, so a layer not loaded yet reads as empty.
    targets = {layer: Target.open(spark, settings, flow, layer) for layer in ("batch", "stream")}
    layers = {layer: target.tables for layer, target in targets.items()}

    if parity:
        for view in flow.views:
            _say(f"parity of {view.name} for {business_date}: batch vs stream")
            left = read(spark, layers["batch"].view(view.name)).where(bd)
            right = read(spark, layers["stream"].view(view.name)).where(bd)
            columns = [c for c in left.columns if c not in view.group_key]
            recon = PARITY if len(flow.views) == 1 else f"{PARITY}:{view.name}"
            result = ReconResult(run_id, recon, business_date, "batch", "stream",
                                 left.count(), right.count())
            results.append(record(spark, settings, flow,
                                  compare(left, right, view.group_key, columns, view.tolerances),
                                  result, stage))

    if against is not None:
        view = flow.views[0]
        _say(f"external: serving {view.name} vs {against}")
        serving = serving_frame(spark, settings, flow, view.name, business_date)
        external = read_external_view(spark, against, view.group_key, serving.schema).where(bd)
        columns = [c for c in external.columns if c not in view.group_key]
        result = ReconResult(run_id, EXTERNAL, business_date, f"serving ({stage})", str(against),
                             serving.count(), external.count())
        results.append(record(
            spark, settings, flow,
            compare(serving.select(*view.group_key, *columns), external, view.group_key,
                    columns, view.tolerances),
            result, stage))

    if eod_file is not None:
        _say(f"current state vs the EOD file {eod_file}")
        reference = targets["stream"].reference
        current = serving_frame(spark, settings, flow, "current", business_date)
        in_file = _file_state(spark, flow, eod_file, business_date, reference)
        key = (flow.key,)
        result = ReconResult(run_id, EOD_FILE, business_date, f"current ({stage})", str(eod_file),
                             current.count(), in_file.count())
        results.append(record(
            spark, settings, flow,
            compare(current.select(flow.key, flow.version), in_file.select(flow.key, flow.version),
                    key, [flow.version]),
            result, stage))
    return results


def eod_correct(spark: SparkSession, settings: Settings, flow: Flow, business_date: dt.date,
                eod_file: Path) -> ApplyResult:
    """Apply the EOD file's rows the stream layer lacks (or holds at a lower version)."""
    target = Target.open(spark, settings, flow, "stream")
    layout = check_file(eod_file, flow, whole_day=False)
    raw = read_eod_file(spark, eod_file, flow, layout)
    current = read(spark, target.tables.current).select(
        F.col(flow.key).alias("_k"), F.col(flow.version).alias("_v"))
    typed_key = F.trim(F.col(flow.key))
    typed_version = F.trim(F.col(flow.version)).try_cast("int")
    differing = (
        raw.join(current, typed_key == F.col("_k"), "left")
        .where(F.col("_v").isNull() | typed_version.isNull() | (typed_version > F.col("_v")))
        .drop("_k", "_v")
    )
    _say(f"applying the EOD file's differences to the stream layer ({eod_file})")
    return apply_changes(flow, differing, EOD_CORRECTION_SOURCE, target,
                         batch_id=f"{EOD_CORRECTION_SOURCE}:{eod_file}",
                         closing_date=business_date)
