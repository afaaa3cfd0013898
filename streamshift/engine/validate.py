"""Running the data-quality checkpoints: Great Expectations 1.x on Spark DataFrames.

Each suite validates one dataset of one business date, as a Spark DataFrame (never a pandas
copy): ``raw`` (the day's EOD file, typed), ``current`` (the layer's current state of the
date), a view (e.g. ``positions``), ``quarantine`` (the date's rejected rows). Thresholds that
depend on the data are computed from the tables and passed in as expectation parameters:

* ``rows_low`` / ``rows_high`` — the median row count of the recent dates (``row_count_history``
  of them) times ``1 ∓ row_count_band``;
* ``known_<reference table>`` — the values of the reference table's first column;
* ``live_rows`` — the date's live (not deleted) rows of current state;
* ``quarantine_max_rows`` — ``quarantine_max_share`` of the date's rows (current + quarantined).

The repo's project is copied to ``STREAMSHIFT_HOME/quality/gx`` and run there (results are
kept there; Data Docs go to ``STREAMSHIFT_HOME/reports/data_docs``). Every check is also a row
of the ``quality_runs`` Delta table, which the report, the promotion gate and the Airflow page
read.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import fcntl
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamshift.engine.write.target import Target, ensure_table, when_small
from streamshift.spec.catalog import QUALITY_RUNS_SCHEMA, ControlTables
from streamshift.spec.contract import IS_DELETED, MALFORMED, SOURCE_REF
from streamshift.spec.flow import Flow
from streamshift.spec.suites import complete_project
from streamshift.store.data_docs import localize
from streamshift.store.eodfile import check_file
from streamshift.store.quality import (
    POLICIES,
    Check,
    QualityError,
    QualityRun,
    gx_project,
    new_run_id,
    nothing_to_validate,
    suite_document,
    wanted_datasets,
)
from streamshift.store.tables import rows

if TYPE_CHECKING:
    from streamshift.spec.settings import Settings

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")  # no network calls home


def _say(message: str) -> None:
    print(f"[quality] {message}", file=sys.stderr, flush=True)


def quality_root(settings: Settings) -> Path:
    return settings.home / "quality"


def data_docs_dir(settings: Settings) -> Path:
    return settings.reports / "data_docs"


@contextlib.contextmanager
def _project(settings: Settings) -> Iterator[Any]:
    """A file context on a fresh copy of the repo's project, one run at a time."""
    import great_expectations as gx

    root = quality_root(settings)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        gx_dir, kept = root / "gx", gx_project()
        for part in ("expectations", "validation_definitions", "checkpoints"):
            shutil.rmtree(gx_dir / part, ignore_errors=True)
            if (kept / part).is_dir():
                shutil.copytree(kept / part, gx_dir / part)
        shutil.copy2(kept / "great_expectations.yml", gx_dir / "great_expectations.yml")
        # A suite is the one file a team keeps; its definition, checkpoint and asset follow.
        complete_project(gx_dir)
        # What is validated: each suite with its flow's overrides (flows/<flow>/quality.json).
        for path in (gx_dir / "expectations").glob("*/*.json"):
            suite = f"{path.parent.name}.{path.stem}"
            path.write_text(json.dumps(suite_document(suite), indent=2))
        yield gx.get_context(mode="file", project_root_dir=str(root))


# ---- datasets and parameters --------------------------------------------------------------
def _on(df: DataFrame, column: str, day: dt.date) -> DataFrame:
    return df.where(F.col(column) == F.lit(day))


def dataset_frame(
    spark: SparkSession, target: Target, dataset: str, day: dt.date, file: Path | None
) -> DataFrame | None:
    """The date's rows of one dataset; ``None`` for ``raw`` without a file."""
    flow = target.flow
    if dataset == "raw":
        if file is None:
            return None
        from streamshift.engine.eodread import read_eod_file

        layout = check_file(file, flow, whole_day=False)
        return typed(flow, read_eod_file(spark, file, flow, layout))
    if dataset == "quarantine":
        return _on(
            target.table("quarantine").where(F.col("flow") == flow.name), "business_date", day
        )
    if dataset == "current" or dataset in {v.name for v in flow.views}:
        return _on(target.table(dataset), flow.business_date, day)
    raise QualityError(f"suite {flow.name}.{dataset} names no dataset of flow {flow.name}")


def typed(flow: Flow, raw: DataFrame, *keep: str) -> DataFrame:
    """Raw-form rows (flow columns as text) with the flow's types; unparseable values null."""
    columns = [F.col(f.name).try_cast(f.dataType).alias(f.name) for f in flow.schema]
    return raw.select(*columns, *keep)


def _median_rows(
    spark: SparkSession, target: Target, dataset: str, day: dt.date, history: int
) -> float | None:
    """Median row count of the dataset over the ``history`` most recent dates before ``day``
    (looking back 3 calendar days per date wanted, so Delta prunes partitions)."""
    flow = target.flow
    since = day - dt.timedelta(days=3 * history)
    if dataset == "raw":  # the files as received: the EOD runs' counts (read without Spark)
        runs = rows(
            target.tables.eod_runs,
            ["business_date", "received"],
            [("flow", "=", flow.name), ("business_date", "<", day), ("business_date", ">=", since)],
        )
        per_day: dict[dt.date, int] = {}
        for r in runs:
            per_day[r["business_date"]] = max(per_day.get(r["business_date"], 0), r["received"])
        counts = [per_day[d] for d in sorted(per_day, reverse=True)[:history]]
    else:
        bd = F.col(flow.business_date)
        frame = target.table("current" if dataset == "current" else dataset)
        recent = frame.where((bd < F.lit(day)) & (bd >= F.lit(since))).groupBy(bd).count()
        found = {r[0]: int(r["count"]) for r in recent.collect()}
        counts = [found[d] for d in sorted(found, reverse=True)[:history]]
    return statistics.median(counts) if counts else None


def _known_values(flow: Flow) -> dict[str, list[str]]:
    out = {}
    for ref in flow.reference:
        with open(ref.path, newline="") as handle:
            reader = csv.reader(handle)
            next(reader, None)
            out[f"known_{ref.name}"] = sorted({row[0] for row in reader if row})
    return out


def _last_commit(path: str) -> tuple[int, int] | None:
    """(version, commit timestamp in ms) of the table's last commit; None when never written."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        history = DeltaTable(path).history(1)
    except TableNotFoundError:
        return None
    return (int(history[0]["version"]), int(history[0]["timestamp"])) if history else None


def view_pair(
    spark: SparkSession, target: Target, view: str, day: dt.date
) -> tuple[DataFrame, DataFrame]:
    """The date's rows of a view and of current state, as one consistent pair.

    A writer commits current state, then the views it touched. While a stream writes, the
    latest current state can be a batch ahead of the latest view. So the view is read at its
    last commit, and current state as of that commit's time: the state the view was
    computed from.
    """
    bd = target.flow.business_date
    view_path, current_path = target.tables.view(view), target.tables.current
    view_last, current_last = _last_commit(view_path), _last_commit(current_path)
    if view_last is None or current_last is None:
        return _on(target.table(view), bd, day), _on(target.table("current"), bd, day)
    version = current_last[0]
    if view_last[1] < current_last[1]:  # current state moved on after the view's last commit
        version = _version_at(current_path, view_last[1])
    pinned_view = spark.read.format("delta").option("versionAsOf", view_last[0]).load(view_path)
    current = spark.read.format("delta").option("versionAsOf", version).load(current_path)
    return _on(pinned_view, bd, day), _on(current, bd, day)


def _version_at(path: str, at_ms: int, look_back: int = 100) -> int:
    """The table's last version committed at or before ``at_ms`` (commit info timestamps, the
    clock the view's commit was stamped with)."""
    from deltalake import DeltaTable

    history = DeltaTable(path).history(look_back)
    before = [int(h["version"]) for h in history if int(h["timestamp"]) <= at_ms]
    return max(before) if before else min(int(h["version"]) for h in history)


def referenced(document: dict[str, Any]) -> set[str]:
    """The expectation parameters (``{"$PARAMETER": name}``) a suite document uses."""
    names: set[str] = set()
    for expectation in document["expectations"]:
        for value in expectation["kwargs"].values():
            if isinstance(value, dict) and "$PARAMETER" in value:
                names.add(value["$PARAMETER"])
    return names


class DayFacts:
    """Counts of the date several suites' parameters need, each computed once."""

    def __init__(self, current: DataFrame, quarantine: DataFrame):
        self._current, self._quarantine = current, quarantine
        self._counts: dict[str, int] = {}

    def _count(self, name: str, frame: DataFrame) -> int:
        if name not in self._counts:
            self._counts[name] = frame.count()
        return self._counts[name]

    @property
    def current_rows(self) -> int:
        return self._count("current", self._current)

    @property
    def live_rows(self) -> int:
        return self._count("live", self._current.where(~F.col(IS_DELETED)))

    @property
    def quarantined_rows(self) -> int:
        return self._count("quarantine", self._quarantine)


def parameters(
    spark: SparkSession,
    target: Target,
    document: dict[str, Any],
    dataset: str,
    day: dt.date,
    facts: DayFacts,
    current_pair: DataFrame | None = None,
) -> dict[str, Any]:
    """The expectation parameters one suite uses for one date (see the module doc); only
    those its expectations reference are computed. ``current_pair``: for a view, the current
    state it was computed from (:func:`view_pair`)."""
    wanted = referenced(document)
    meta = document.get("meta", {}).get("streamshift", {})
    params: dict[str, Any] = {k: v for k, v in _known_values(target.flow).items() if k in wanted}
    if wanted & {"rows_low", "rows_high"}:
        band = float(meta.get("row_count_band", 0.3))
        history = int(meta.get("row_count_history", 10))
        median = _median_rows(spark, target, dataset, day, history)
        params["rows_low"] = 0 if median is None else int(median * (1 - band))
        params["rows_high"] = None if median is None else int(median * (1 + band)) + 1
    if "live_rows" in wanted:
        params["live_rows"] = (
            facts.live_rows
            if current_pair is None
            else current_pair.where(~F.col(IS_DELETED)).count()
        )
    if "quarantine_max_rows" in wanted:
        share = float(meta.get("quarantine_max_share", 0.05))
        seen = facts.current_rows + facts.quarantined_rows
        params["quarantine_max_rows"] = int(share * seen)
    return params


# ---- results ------------------------------------------------------------------------------
def _short(values: Any, n: int = 3) -> str:
    values = list(values)
    text = ", ".join(str(v) for v in values[:n])
    return text + (f", … ({len(values)})" if len(values) > n else "")


def _observed(result: dict[str, Any]) -> str:
    if "observed_value" in result:
        observed = result["observed_value"]
        return "no values" if observed is None else str(observed)
    if "unexpected_count" in result:
        count = result["unexpected_count"]
        if not count:
            return f"0 of {result.get('element_count', '?')} unexpected"
        sample = _short(result.get("partial_unexpected_list") or [])
        return f"{count} of {result.get('element_count', '?')} unexpected ({sample})"
    return "?"


def _threshold(kind: str, kwargs: dict[str, Any]) -> str:
    mostly = kwargs.get("mostly")
    text = _bounds(kind, kwargs)
    return f"{text} (≥ {mostly:.0%} of rows)" if mostly is not None and mostly < 1 else text


def _bounds(kind: str, kwargs: dict[str, Any]) -> str:
    if "value_set" in kwargs:
        values = kwargs["value_set"] or []
        return f"one of {len(values)} known values"
    if "min_value" in kwargs or "max_value" in kwargs:
        low, high = kwargs.get("min_value"), kwargs.get("max_value")
        low_op = ">" if kwargs.get("strict_min") else "≥"
        parts = [
            f"{low_op} {low}" if low is not None else "",
            f"≤ {high}" if high is not None else "",
        ]
        return " and ".join(p for p in parts if p) or "any"
    if kind.endswith("to_be_unique"):
        return "unique"
    if kind.endswith("not_be_null"):
        return "no nulls"
    if "column_A" in kwargs and "column_B" in kwargs:
        op = "≥" if kwargs.get("or_equal") else ">"
        return f"{kwargs['column_A']} {op} {kwargs['column_B']}"
    return kind


def checks_of(suite: str, validation: Any) -> list[Check]:
    checks = []
    for r in validation.results:
        config = r.expectation_config
        severity = getattr(config.severity, "value", str(config.severity))
        checks.append(
            Check(
                suite=suite,
                expectation=(config.meta or {}).get("name") or config.type,
                policy=POLICIES.get(severity, "fail"),
                success=bool(r.success),
                observed=_observed(r.result or {}),
                threshold=_threshold(config.type, dict(config.kwargs)),
            )
        )
    return checks


def validate_frames(
    settings: Settings,
    flow: Flow,
    day: dt.date,
    layer: str,
    frames: dict[str, tuple[DataFrame, dict[str, Any]]],
    *,
    build_docs: bool = True,
    run_id: str | None = None,
) -> QualityRun:
    """Run each suite's checkpoint on its DataFrame with its parameters."""
    run = QualityRun(
        run_id=run_id or new_run_id(),
        flow=flow.name,
        business_date=day.isoformat(),
        layer=layer,
    )
    with _project(settings) as context:
        identifiers = []
        for dataset, (frame, params) in frames.items():
            suite = f"{flow.name}.{dataset}"
            _say(f"validating {suite} ({layer} layer, {day})")
            checkpoint = context.checkpoints.get(suite)
            result = checkpoint.run(
                batch_parameters={"dataframe": frame},
                expectation_parameters=params,
                run_id=_run_identifier(run, suite),
            )
            for identifier, validation in result.run_results.items():
                _name_data_asset(context, identifier, validation)
                run.checks += checks_of(suite, validation)
                identifiers.append(identifier)
                run.docs[suite] = _docs_page(identifier)
        if build_docs and identifiers:
            _say(f"building Data Docs under {data_docs_dir(settings)}")
            started = time.time()
            context.build_data_docs(resource_identifiers=identifiers)
            localize(data_docs_dir(settings), since=started - 2)  # coarse mtimes
    return run


def _name_data_asset(context: Any, identifier: Any, validation: Any) -> None:
    """Give the stored result its data asset's name where Data Docs look for it.

    GX 1.x's validation page reads the name from ``meta.batch_spec``, which a dataframe asset's
    batch spec lacks, so every page said "Data asset: None" (great_expectations#10339); the
    name is in ``meta.active_batch_definition``."""
    asset = (validation.meta.get("active_batch_definition") or {}).get("data_asset_name")
    spec = validation.meta.get("batch_spec")
    if asset and isinstance(spec, dict) and not spec.get("data_asset_name"):
        validation.meta["batch_spec"] = {**spec, "data_asset_name": asset}
        context.validation_results_store.set(identifier, validation)


def _run_identifier(run: QualityRun, suite: str) -> Any:
    from great_expectations.core.run_identifier import RunIdentifier

    return RunIdentifier(run_name=f"{run.business_date}-{run.layer}-{run.run_id}")


def _docs_page(identifier: Any) -> str:
    """The Data Docs page of one validation result, relative to the data_docs folder."""
    *suite_and_run, batch = identifier.to_tuple()  # suite parts (a.b → a, b), run name, time
    return "/".join(["validations", *suite_and_run, f"{batch}.html"])


def record(spark: SparkSession, settings: Settings, run: QualityRun) -> None:
    path = ControlTables(settings.warehouse).quality_runs
    ensure_table(spark, path, QUALITY_RUNS_SCHEMA, ("business_date",))
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    rows = [
        (
            run.run_id,
            run.flow,
            dt.date.fromisoformat(run.business_date),
            run.layer,
            c.suite,
            c.expectation,
            c.policy,
            c.success,
            c.observed,
            c.threshold,
            run.docs.get(c.suite),
            now,
        )
        for c in run.checks
    ]
    if rows:
        spark.createDataFrame(rows, QUALITY_RUNS_SCHEMA).write.format("delta").mode("append").save(
            path
        )


def run_quality(
    spark: SparkSession,
    settings: Settings,
    flow: Flow,
    day: dt.date,
    layer: str,
    file: Path | None = None,
    only: list[str] | None = None,
    run_id: str | None = None,
) -> QualityRun:
    """The quality job: every suite of the flow (or ``only`` these datasets) on the date's
    data in ``layer``; results recorded in ``quality_runs`` (under ``run_id`` when given),
    Data Docs rebuilt."""
    target = Target.open(spark, settings, flow, layer)
    wanted = wanted_datasets(flow, only)
    if file is not None and not file.exists():
        raise QualityError(f"EOD file {file} not found")
    with when_small([target], [day], files=[file]):
        run = _validate_day(spark, settings, flow, day, layer, target, wanted, file, run_id)
    record(spark, settings, run)
    return run


def _validate_day(
    spark: SparkSession,
    settings: Settings,
    flow: Flow,
    day: dt.date,
    layer: str,
    target: Target,
    wanted: list[str],
    file: Path | None,
    run_id: str | None,
) -> QualityRun:
    current = dataset_frame(spark, target, "current", day, None)
    assert current is not None
    current = current.persist()
    quarantine = dataset_frame(spark, target, "quarantine", day, None)
    assert quarantine is not None
    facts = DayFacts(current, quarantine)
    if file is None and facts.current_rows == 0 and facts.quarantined_rows == 0:
        current.unpersist()
        raise nothing_to_validate(flow, day, layer)
    frames: dict[str, tuple[DataFrame, dict[str, Any]]] = {}
    views = {v.name for v in flow.views}
    for dataset in wanted:
        pair: DataFrame | None = None
        if dataset == "current":
            frame: DataFrame | None = current
        elif dataset in views:
            frame, pair = view_pair(spark, target, dataset, day)
            if frame.isEmpty() and pair.where(~F.col(IS_DELETED)).isEmpty():
                # An empty day (a header-only EOD file): no group, nothing to sum. Spark's sum
                # of no rows is null, which Great Expectations' aggregate checks fail.
                _say(f"no live rows on {day}: {flow.name}.{dataset} has nothing to validate")
                continue
        else:
            frame = dataset_frame(spark, target, dataset, day, file)
        if frame is None:
            _say(f"no EOD file given: {flow.name}.{dataset} not validated")
            continue
        document = suite_document(f"{flow.name}.{dataset}")
        params = parameters(spark, target, document, dataset, day, facts, pair)
        frames[dataset] = (frame if dataset == "current" else frame.persist(), params)
    try:
        run = validate_frames(settings, flow, day, layer, frames, run_id=run_id)
    finally:
        for frame, _ in frames.values():
            frame.unpersist()
        current.unpersist()
    return run


def sample_batch(
    settings: Settings, flow: Flow, layer: str, decoded: DataFrame, batch_id: int
) -> dict[str, Any]:
    """Validate one stream micro-batch against the flow's current-state suite: the rows the
    batch brings to current state (its latest version per key). For ``status``; never raises."""
    from streamshift.engine.write.transforms import latest_per_key

    started = dt.datetime.now(dt.UTC)
    try:
        rows = latest_per_key(
            flow, typed(flow, decoded.where(F.col(MALFORMED).isNull()), SOURCE_REF)
        )
        params = {**_known_values(flow), "rows_low": 0, "rows_high": None}
        run = validate_frames(
            settings, flow, started.date(), layer, {"current": (rows, params)}, build_docs=False
        )
    except Exception as exc:  # noqa: BLE001 - a broken check must not stop the stream
        return {"batch_id": batch_id, "at": started.isoformat(), "error": str(exc)[:300]}
    counts = run.counts()
    return {
        "batch_id": batch_id,
        "at": started.isoformat(timespec="seconds"),
        "suite": f"{flow.name}.current",
        "pass": counts["pass"],
        "warn": counts["warn"],
        "fail": counts["FAIL"],
        "failed": [f"{c.expectation}: observed {c.observed}" for c in run.checks if not c.success],
        "seconds": round((dt.datetime.now(dt.UTC) - started).total_seconds(), 2),
    }
