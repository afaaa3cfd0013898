"""The version of a flow its tables are written by: fingerprinted from what the code does,
recorded per layer in ``control/flow_versions``, checked before every write.

A flow's *components* are its declared shape (columns and types, key, version, event-time and
business-date columns, optional columns' defaults, reference tables' schemas) and a digest of
the analysed plan of each rule, of ``deleted``, of ``prepare`` and of each view, each built on
empty frames (empty reference tables, not the loaded ones), with expression ids and the leaf
relations stripped: what the code does, not its text (a lambda's source misses the helpers it
calls; bytecode depends on the Python version). The fingerprint digests them.

Every writing job (``Target.create_tables``) checks its code against the recorded version. The
fast path needs no Spark: the flow's files hash as they did when the version was recorded.
Otherwise the components are built and compared (:mod:`streamshift.control.plan`): the same
code is recorded again under its new files; a change that is in place only (an optional column
added) is applied by the job itself, to both layers, and recorded as the next version; anything
else is refused until ``streamshift evolve`` applies it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from streamshift.control import plan as plans
from streamshift.engine.write.commits import merge_into, overwrite
from streamshift.engine.write.predicates import same_columns
from streamshift.engine.write.target import (
    delta_log_version,
    empty_reference,
    ensure_table,
    is_table,
    read,
    state_schema,
    view_schema,
)
from streamshift.engine.write.transforms import latest_per_key, parse, quarantine_rows, raw_schema
from streamshift.spec import sqltext as sql
from streamshift.spec.catalog import (
    FLOW_VERSIONS_SCHEMA,
    LAYERS,
    QUARANTINE_SCHEMA,
    ControlTables,
    LayerTables,
)
from streamshift.spec.contract import FAILED, IS_DELETED, SOURCE
from streamshift.spec.errors import StreamshiftError
from streamshift.spec.flow import Flow
from streamshift.spec.registry import UnknownFlowError, flow_folder, get_flow
from streamshift.spec.sqltext import delta_path, identifier
from streamshift.store import versions as records
from streamshift.store.processes import os_user

if TYPE_CHECKING:
    from streamshift.engine.write.target import Target
    from streamshift.spec.settings import Settings

FIRST_USE, SAME_CODE, IN_PLACE, EVOLVED = (
    records.FIRST_USE,
    records.SAME_CODE,
    records.IN_PLACE,
    records.EVOLVED,
)


class FlowChangedError(StreamshiftError):
    """The flow's code is not the version its tables were written by, and the change is more
    than a job applies itself."""

    final = True


# ---- the fingerprint ----------------------------------------------------------------------
_IDS = re.compile(r"#\d+")
_LAMBDA = re.compile(r"\b([a-z])_\d+\b")  # lambda variables (x_12): numbered per JVM
_LEAF = re.compile(r"(LogicalRDD|LocalRelation|Scan ExistingRDD|LocalTableScan)\b.*")
_PLAN_ID = re.compile(r",?\s*\[plan_id=\d+\]")


def analysed_plan(spark: SparkSession, frame: DataFrame) -> str:
    """``frame``'s analysed logical plan, normalised: expression ids, lambda variable numbers
    and the leaf relations' rows stripped (through SQL ``EXPLAIN``: Spark Connect offers it)."""
    name = f"_streamshift_plan_{uuid.uuid4().hex[:12]}"
    frame.createOrReplaceTempView(name)
    try:
        text = str(spark.sql(f"EXPLAIN EXTENDED SELECT * FROM {name}").first()[0])  # type: ignore[index]
    finally:
        spark.catalog.dropTempView(name)
    analysed = text.split("== Analyzed Logical Plan ==", 1)[1]
    analysed = analysed.split("== Optimized Logical Plan ==", 1)[0]
    lines = analysed.strip().splitlines()[1:]  # the first is the output schema
    # Below the temporary view's own Project / SubqueryAlias / View lines.
    start = next(i for i, line in enumerate(lines) if f"View (`{name}`" in line) + 1
    body = lines[start:]
    indent = min((len(x) - len(x.lstrip(" +-:")) for x in body), default=0)
    normal = []
    for line in body:
        line = _PLAN_ID.sub("", _LAMBDA.sub(r"\1_", _IDS.sub("", line[indent:])))
        normal.append(_LEAF.sub("Relation", line.rstrip()))
    return "\n".join(normal)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _columns(schema: StructType) -> list[list[str]]:
    return [[f.name, f.dataType.simpleString()] for f in schema.fields]


_COMPONENTS: dict[int, tuple[Flow, dict[str, Any]]] = {}


def components(spark: SparkSession, flow: Flow) -> dict[str, Any]:
    """What the flow's code declares and does (JSON-able; see the module's note)."""
    known = _COMPONENTS.get(id(flow))
    if known is not None and known[0] is flow:
        return known[1]
    try:
        found = _components(spark, flow)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise FlowChangedError(
            f"flow {flow.name}: its code does not build on empty frames ({first}); fix the "
            "flow's module (a column it names that no schema or reference table has?)"
        ) from exc
    _COMPONENTS[id(flow)] = (flow, found)
    return found


def _components(spark: SparkSession, flow: Flow) -> dict[str, Any]:
    empty_raw = spark.createDataFrame([], raw_schema(flow)).withColumn(SOURCE, F.lit(""))
    parsed = spark.createDataFrame([], empty_raw.transform(parse(flow)).schema)
    prepared = flow.prepare(parsed, empty_reference(spark, flow))
    leaf = spark.createDataFrame([], prepared.schema)
    state = spark.createDataFrame([], state_schema(spark, flow)).where(~F.col(IS_DELETED))
    found: dict[str, Any] = {
        "columns": _columns(flow.schema),
        "schema": flow.schema.jsonValue(),
        "key": flow.key,
        "version": flow.version,
        "business_date": flow.business_date,
        "event_time": flow.event_time,
        "optional": {c: flow.default_text(c) for c in flow.optional},
        "reference": {r.name: r.schema for r in flow.reference},
        "prepare": _digest(analysed_plan(spark, prepared)),
        "deleted": _digest(analysed_plan(spark, leaf.select(flow.deleted().alias("d")))),
        "rules": {
            r.name: _digest(analysed_plan(spark, leaf.select(r.passes().alias("r"))))
            for r in flow.rules
        },
        "state": _columns(state_schema(spark, flow)),
        "views": {
            v.name: {
                "group": list(v.group_key),
                "columns": _columns(view_schema(spark, flow, v.name)),
                "plan": _digest(analysed_plan(spark, v.compute(state))),
            }
            for v in flow.views
        },
    }
    return found


def fingerprint(found: dict[str, Any]) -> str:
    return _digest(json.dumps(found, sort_keys=True))


def _over_old_inputs(spark: SparkSession, flow: Flow, old: dict[str, Any]) -> dict[str, Any] | None:
    """The new code's components over the old version's input columns (None when they are the
    same, or when the new code cannot be built over them: then its plans changed anyway)."""
    if old["columns"] == _columns(flow.schema):
        return None
    schema = StructType.fromJson(old["schema"])
    as_before = dataclasses.replace(
        flow,
        schema=schema,
        optional={c: v for c, v in flow.optional.items() if c in schema.names},
    )
    try:
        return components(spark, as_before)
    except Exception:  # noqa: BLE001 - the new logic needs the new columns: a change
        return None
    finally:
        _COMPONENTS.pop(id(as_before), None)


def plans_for(
    spark: SparkSession,
    warehouse: Path,
    flow: Flow,
    recorded: dict[str, dict[str, Any]] | None = None,
) -> dict[str, plans.Plan]:
    """What changed in each layer since its recorded version (``recorded``: the layers'
    records when the caller read them already)."""
    held = records.deployed_layers(warehouse, flow.name) if recorded is None else recorded
    return {layer: _plan(spark, flow, layer, held.get(layer)) for layer in LAYERS}


def _plan(
    spark: SparkSession, flow: Flow, layer: str, recorded: dict[str, Any] | None
) -> plans.Plan:
    """What changed in ``layer`` since ``recorded`` (nothing recorded: no change)."""
    if recorded is None:
        return plans.Plan(flow.name, layer, None, ())
    old = recorded["components"]
    new = components(spark, flow)
    if fingerprint(new) == recorded["fingerprint"]:
        return plans.Plan(flow.name, layer, recorded["version"], ())
    return plans.diff(
        flow.name, layer, recorded["version"], old, new, _over_old_inputs(spark, flow, old)
    )


# ---- the flow's source files ----------------------------------------------------------------
_FILES: dict[int, tuple[Flow, str]] = {}


def files_of(flow: Flow) -> str:
    """The digest of the flow's source files when this process first asked (the code it runs
    is the code it imported; files changed since are another version)."""
    known = _FILES.get(id(flow))
    if known is not None and known[0] is flow:
        return known[1]
    try:
        folder = flow_folder(flow.name)
        registered = get_flow(flow.name)
    except UnknownFlowError:
        folder, registered = None, None
    digest = records.files_digest(folder)
    if registered is not flow and registered is not None:
        # A flow object made in the process (a test's variant): its code is not the files'.
        digest = ""
    _FILES[id(flow)] = (flow, digest)
    return digest


# ---- checking and recording -------------------------------------------------------------------
# Per warehouse and flow: the flow object checked and the flow_versions commit it was checked at
# (a stream asks before every batch: one listing of the log when nothing moved).
_CHECKED: dict[tuple[str, str], tuple[Flow, int]] = {}


def _record(
    spark: SparkSession,
    warehouse: Path,
    flow: Flow,
    found: dict[str, Any],
    version: int,
    how: str,
    changes: str,
    root: str | None = None,
    by: str | None = None,
) -> None:
    """One commit: ``version`` of ``flow`` recorded for both layers, its tables in ``root``
    (None: where each layer's live tables are)."""
    path = ControlTables(warehouse).flow_versions
    ensure_table(spark, path, FLOW_VERSIONS_SCHEMA)
    rows = [
        (
            flow.name,
            layer,
            version,
            fingerprint(found),
            json.dumps(found, sort_keys=True),
            files_of(flow),
            spark.version,
            how,
            changes,
            by or os_user(),
            None,
            records.live_root(warehouse, flow.name, layer) if root is None else root,
        )
        for layer in LAYERS
    ]
    # Not through commits.append: a control record, outside the write path's fault counting.
    # mergeSchema: a table recorded before version folders gains ``root``.
    frame = spark.createDataFrame(rows, FLOW_VERSIONS_SCHEMA)
    frame = frame.withColumn("deployed_at", F.current_timestamp())
    frame.write.format("delta").mode("append").option("mergeSchema", "true").save(path)
    _CHECKED.pop((str(warehouse), flow.name), None)


def record_version(
    spark: SparkSession,
    warehouse: Path,
    flow: Flow,
    version: int,
    how: str,
    changes: str,
    *,
    root: str | None = None,
    by: str | None = None,
) -> None:
    """Record the code on disk as ``version`` of ``flow`` (both layers, one commit)."""
    _record(spark, warehouse, flow, components(spark, flow), version, how, changes, root, by)


def _say(message: str) -> None:
    print(f"[streamshift] {message}", file=sys.stderr, flush=True)


def ensure_deployed(target: Target) -> None:
    """Refuse to write ``target``'s flow under code that is not its recorded version, unless
    the change is in place only: then apply it to both layers and record it."""
    spark, flow, warehouse = target.spark, target.flow, target.tables.warehouse
    root = target.tables.root
    if root != records.live_root(warehouse, flow.name, target.tables.layer):
        _ensure_version_of(spark, flow, warehouse, root)
        return
    path = ControlTables(warehouse).flow_versions
    log = delta_log_version(spark, path)
    key = (str(warehouse), flow.name)
    checked = _CHECKED.get(key)
    if checked is not None and checked[0] is flow and checked[1] == log:
        return
    files = files_of(flow)
    known = records.deployed_layers(warehouse, flow.name)  # the layers recorded so far
    every_layer = len(known) == len(LAYERS)
    if files and every_layer and all(r["files"] == files for r in known.values()):
        _CHECKED[key] = (flow, log)
        return
    found = components(spark, flow)
    mine = fingerprint(found)
    if not known:  # tables written before versions were recorded are brought to the code
        apply_in_place(spark, flow, warehouse)
        _record(spark, warehouse, flow, found, 1, FIRST_USE, "")
    elif every_layer and all(r["fingerprint"] == mine for r in known.values()):
        if files:  # the same code under changed files: recorded, so the next check is cheap
            version = max(r["version"] for r in known.values())
            _record(spark, warehouse, flow, found, version, SAME_CODE, "")
    else:
        found_plans = list(plans_for(spark, warehouse, flow, known).values())
        changed = next((p for p in found_plans if p.changes), found_plans[0])
        if not all(p.in_place for p in found_plans):
            pending = records.shadows(warehouse, flow.name)
            built = next((r for r in pending.values() if r["fingerprint"] == mine), None)
            if built is not None:
                raise FlowChangedError(
                    f"flow {flow.name}: the code on disk is version {built['version']}, built "
                    f"beside the live version {changed.deployed}: switch to it with "
                    f"`streamshift promote --flow {flow.name} --version {built['version']}`, "
                    f"or run the live jobs from version {changed.deployed}'s code"
                )
            raise FlowChangedError(
                f"flow {flow.name} changed since version {changed.deployed} was deployed "
                f"({changed.summary()}): see `streamshift plan --flow {flow.name}`, then apply "
                f"it with `streamshift evolve --flow {flow.name}`"
            )
        altered = apply_in_place(spark, flow, warehouse)
        version = max(r["version"] for r in known.values()) + (1 if changed.changes else 0)
        how = IN_PLACE if changed.changes else SAME_CODE
        _record(spark, warehouse, flow, found, version, how, changed.summary())
        if altered:
            _say(f"{flow.name}: applied in place ({changed.summary()}); now version {version}")
    _CHECKED[key] = (flow, delta_log_version(spark, path))


def _ensure_version_of(spark: SparkSession, flow: Flow, warehouse: Path, root: str) -> None:
    """Refuse to write the tables of a version folder that is not live (a shadow, or a version
    being switched to) under code other than the version's own."""
    built = [r for r in records.history(warehouse, flow.name) if (r.get("root") or "") == root]
    if not built:
        raise FlowChangedError(f"flow {flow.name}: no version of it lives in {root or 'the layer'}")
    newest = max(built, key=lambda r: r["deployed_at"])
    if newest["fingerprint"] != fingerprint(components(spark, flow)):
        raise FlowChangedError(
            f"flow {flow.name}: the code on disk is not version {newest['version']}'s, whose "
            f"tables these are ({root}); deploy its code, then run this again"
        )


def still_deployed(target: Target) -> bool:
    """Whether the flow's recorded version is still the code this process runs: one listing
    when nothing was recorded since the last check (the stream asks before every batch)."""
    spark, flow, warehouse = target.spark, target.flow, target.tables.warehouse
    key = (str(warehouse), flow.name)
    checked = _CHECKED.get(key)
    log = delta_log_version(spark, ControlTables(warehouse).flow_versions)
    if checked is not None and checked[0] is flow and checked[1] == log:
        return True
    recorded = records.deployed(warehouse, flow.name, target.tables.layer)
    if recorded is None:
        return True
    mine = fingerprint(components(spark, flow))
    if recorded["fingerprint"] != mine:
        return False
    _CHECKED[key] = (flow, log)
    return True


# ---- changing the tables ------------------------------------------------------------------
def table_schema(path: str) -> StructType:
    """A Delta table's schema from its log, without Spark."""
    from deltalake import DeltaTable

    return StructType.fromJson(json.loads(DeltaTable(path).schema().to_json()))


def apply_in_place(spark: SparkSession, flow: Flow, warehouse: Path) -> list[str]:
    """Add the flow's optional columns its state-shaped tables lack, in both layers (a table
    not created yet is created so); the changes made."""
    wanted = state_schema(spark, flow)
    done: list[str] = []
    for path in _state_tables(spark, flow, warehouse):
        have = set(table_schema(path).names)
        adds = [f for f in wanted.fields if f.name not in have]
        refused = [f.name for f in adds if f.name not in flow.optional]
        if refused:
            raise FlowChangedError(
                f"{path} lacks {', '.join(refused)}, which the flow does not declare "
                f"optional: see `streamshift plan --flow {flow.name}`"
            )
        if adds:
            columns = ", ".join(f"{identifier(f.name)} {f.dataType.simpleString()}" for f in adds)
            try:
                spark.sql(f"ALTER TABLE {delta_path(path)} ADD COLUMNS ({columns})")
            except Exception:
                # Another job added them meanwhile (both saw the table without them).
                if not {f.name for f in adds} <= set(table_schema(path).names):
                    raise
                continue
            done.append(f"{path}: added {', '.join(f.name for f in adds)}")
    return done


def _state_tables(spark: SparkSession, flow: Flow, warehouse: Path) -> list[str]:
    """The flow's tables of current state's shape that exist, in both layers."""
    found = []
    for layer in LAYERS:
        tables = records.live_tables(warehouse, flow, layer)
        found += [
            p for p in (tables.current, tables.history, tables.redeliveries) if is_table(spark, p)
        ]
    return found


def rewrite_widened(spark: SparkSession, flow: Flow, warehouse: Path) -> list[str]:
    """Rewrite each state-shaped table whose columns the flow widened, values cast to the
    wider types (one overwrite per table). Not Delta's type widening: the JVM-free reads
    (``deltalake``) refuse a table with that feature."""
    wanted = {f.name: f.dataType for f in state_schema(spark, flow).fields}
    done: list[str] = []
    for path in _state_tables(spark, flow, warehouse):
        have = {f.name: f.dataType for f in table_schema(path).fields}
        widened = [c for c, t in wanted.items() if c in have and have[c] != t]
        if not widened:
            continue
        table = read(spark, path)
        cast = table.withColumns({c: F.col(c).cast(wanted[c]) for c in widened})
        overwrite(cast, path, (flow.business_date,))
        done.append(f"{path}: {', '.join(f'{c} → {wanted[c].simpleString()}' for c in widened)}")
    return done


@dataclass
class EvolveResult:
    flow: str
    plan: plans.Plan
    version: int
    altered: list[str] = field(default_factory=list)
    recomputed: dict[str, int] = field(default_factory=dict)  # view → rows written, per layer
    # Per layer, with --reapply: (versions now failing a rule, keys that fell back)
    reapplied: dict[str, tuple[int, int]] = field(default_factory=dict)

    def describe(self) -> str:
        if self.plan.deployed is None and not self.plan.changes:
            return f"{self.flow}: no version recorded yet (its first write records it); nothing to evolve"
        if not self.plan.changes:
            return f"{self.flow}: no change since version {self.version}; nothing to evolve"
        lines = [f"{self.flow}: evolved to version {self.version}"]
        lines += [f"  {c.describe()}" for c in self.plan.changes]
        lines += [f"  {a}" for a in self.altered]
        lines += [
            f"  re-applied to the {layer} layer's history: {moved} versions now fail a rule "
            f"(moved to quarantine), {keys} keys fell back to their highest valid version"
            for layer, (moved, keys) in self.reapplied.items()
        ]
        lines += [f"  recomputed {v}: {n} rows" for v, n in self.recomputed.items()]
        return "\n".join(lines)


def evolve(
    spark: SparkSession, settings: Settings, flow: Flow, *, reapply: bool = False
) -> EvolveResult:
    """Apply the plan to both layers: alter the tables, recompute the views the plan names
    from current state for every date, record the new version; ``reapply``: history checked
    again by the changed rules first (:func:`reapply_rules`). Each step is idempotent, so a
    run killed part way is repaired by running it again."""
    warehouse = settings.warehouse
    found_plans = plans_for(spark, warehouse, flow)
    changed = next((p for p in found_plans.values() if p.changes), found_plans["batch"])
    recorded = [p.deployed for p in found_plans.values() if p.deployed is not None]
    if not changed.changes:
        return EvolveResult(flow.name, changed, max(recorded, default=1))
    if changed.breaking:
        raise FlowChangedError(
            f"flow {flow.name}: the change is breaking ({changed.summary()}); nothing was "
            "changed. Build it as a new flow, filled from history or a replay"
        )
    if changed.needs_reapply:
        raise FlowChangedError(
            f"flow {flow.name}: {changed.summary()} needs history re-applied through the new "
            "prepare, which evolve does not do yet; nothing was changed"
        )
    result = EvolveResult(flow.name, changed, max(recorded, default=0) + 1)
    result.altered = apply_in_place(spark, flow, warehouse)
    result.altered += rewrite_widened(spark, flow, warehouse)
    views = [c.subject.removeprefix("view ") for c in changed.changes if c.needs == plans.RECOMPUTE]
    if reapply:
        for layer in LAYERS:
            tables = records.live_tables(warehouse, flow, layer)
            if is_table(spark, tables.history):
                result.reapplied[layer] = reapply_rules(spark, flow, tables, result.version)
        views = [v.name for v in flow.views]  # the groups of every changed key, and more
    for layer in LAYERS:
        tables = records.live_tables(warehouse, flow, layer)
        if not is_table(spark, tables.current):
            continue
        live = read(spark, tables.current).where(~F.col(IS_DELETED))
        for name in views:
            result.recomputed[f"{name} ({layer})"] = _recompute_view(
                spark, flow, name, live, tables.view(name)
            )
    _record(
        spark, warehouse, flow, components(spark, flow), result.version, EVOLVED, changed.summary()
    )
    _CHECKED.pop((str(warehouse), flow.name), None)
    return result


def _recompute_view(spark: SparkSession, flow: Flow, name: str, live: DataFrame, path: str) -> int:
    """The view's every group recomputed from current state, written over the table in one
    commit (its schema too, when the view's columns changed)."""
    view = flow.view(name)
    values = view.compute(live).persist()
    try:
        count = values.count()
        if not is_table(spark, path):
            ensure_table(
                spark,
                path,
                view_schema(spark, flow, name),
                (flow.business_date,),
                change_data_feed=True,
            )
        overwrite(values, path, (flow.business_date,))
        return count
    finally:
        values.unpersist()


def reapply_rules(
    spark: SparkSession, flow: Flow, tables: LayerTables, version: int
) -> tuple[int, int]:
    """The layer's history checked by the flow's rules as they are now: each version that
    fails one moves to quarantine under it (``batch_id`` ``reapply:v<N>``), and its key falls
    back to its highest version still valid (none: the key leaves current state). In an order
    a re-run after a kill completes: current state first (computed from history without the
    failing versions), then quarantine, then the versions leave history; the caller then
    recomputes the views. Returns (versions moved, keys that fell back)."""
    key, ver = flow.key, flow.version
    history = read(spark, tables.history)
    checks = [F.when(~F.coalesce(r.passes(), F.lit(False)), F.lit(r.name)) for r in flow.rules]
    failing = F.filter(F.array(*checks), lambda x: x.isNotNull()) if checks else F.array()
    failed = history.withColumn(FAILED, failing).where(F.size(FAILED) > 0).persist()
    try:
        moved = failed.count()
        if not moved:
            return 0, 0
        gone = failed.select(key, ver)
        keys = gone.select(key).distinct()
        remaining = history.join(gone, [key, ver], "left_anti").join(keys, key, "left_semi")
        best = latest_per_key(flow, remaining)
        fallback = keys.join(best, key, "left").withColumn("_none", F.col(ver).isNull())
        fell_back = keys.count()
        merge_into(
            tables.current,
            fallback,
            same_columns([key]),
            delete_when=sql.col("_none", "s").eq(sql.lit(True)),
            update={c: sql.col(c, "s") for c in history.columns if c != key},
        )
        quarantined = quarantine_rows(flow, failed, f"reapply:v{version}")
        ensure_table(spark, tables.quarantine, QUARANTINE_SCHEMA)
        merge_into(
            tables.quarantine, quarantined, same_columns(["flow", "source_ref", "rule"]), insert="*"
        )
        merge_into(tables.history, gone, same_columns([key, ver]), delete_when=sql.TRUE)
        return moved, fell_back
    finally:
        failed.unpersist()
