"""A changed flow built beside the live one, compared with it, then switched to (or back).

``streamshift evolve --flow F --shadow`` builds version N's tables in the version folder
``<layer>/v<N>/<flow>/`` of each layer the flow has written: history re-applied through the
code on disk (parse, ``prepare`` with today's reference feed, the rules, the deletion flag), a
version that now fails a rule in the folder's own quarantine and its key back to its highest
valid version, current state from the re-applied history, every view recomputed; the flow's
redeliveries, quarantine and late events copied. The live tables are read, never written.
Each view of every date (and current state) is then reconciled against the live version,
recorded in ``recon_runs``/``recon_breaks`` under ``shadow:v<N>:<table>``: the change's effect,
per group, before anyone is served it. Version N is recorded as a ``shadow`` row per layer.

``streamshift promote --flow F --version N`` switches readers and writers to version N: the
flow's running stream job is stopped (it finishes its batch), the versions the live tables got
since N was built are applied to N's tables through the write path, then one commit of
``flow_versions`` points both layers at N (``switched``). The supervisor restarts the stream on
the code on disk, which must be N's. The same command with an older version switches back to
its tables (kept until upkeep's retention). A killed switch is completed by running it again.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamshift.engine import versions as code
from streamshift.engine.compare import BREAK_COLUMNS, KINDS, MISSING_RIGHT, compare
from streamshift.engine.jobs.serve import layer_name
from streamshift.engine.recon import ensure_recon_tables, new_run_id
from streamshift.engine.write.apply import apply_changes
from streamshift.engine.write.commits import append, overwrite
from streamshift.engine.write.target import Target, ensure_state_table, is_table, read
from streamshift.engine.write.transforms import (
    checked_changes,
    latest_per_key,
    quarantine_rows,
    state_columns,
)
from streamshift.spec.catalog import (
    LAYERS,
    RECON_RUNS_SCHEMA,
    SHADOW_RECON,
    ControlTables,
    LayerTables,
    version_root,
)
from streamshift.spec.contract import (
    APPLIED_AT,
    FAILED,
    IS_DELETED,
    LOG_REF,
    RAW,
    SOURCE,
    SOURCE_REF,
)
from streamshift.store import heartbeat
from streamshift.store import versions as records
from streamshift.store.processes import terminate

if TYPE_CHECKING:
    from streamshift.spec.flow import Flow
    from streamshift.spec.settings import Settings

EXAMPLES = 5  # differences shown per table


def _say(message: str) -> None:
    print(f"[shadow] {message}", file=sys.stderr, flush=True)


def _shown(value: object) -> str:
    return "null" if value is None else str(value)


def recon_name(version: int, table: str) -> str:
    """The reconciliation a shadow's comparison is recorded under."""
    return f"{SHADOW_RECON}:v{version}:{table}"


# ---- building -------------------------------------------------------------------------------
def _inputs(flow: Flow, history: DataFrame) -> DataFrame:
    """History's versions as the write path's input: the flow's columns (an optional column
    the table lacks at its default), where each came from, when it was applied."""
    have = set(history.columns)
    columns = [
        F.col(c) if c in have else F.lit(flow.default_text(c)).alias(c) for c in flow.columns
    ]
    ride = [c for c in (SOURCE, SOURCE_REF, LOG_REF, APPLIED_AT) if c in have]
    return history.select(*columns, *ride)


def reapply_history(
    spark: SparkSession,
    flow: Flow,
    live: LayerTables,
    target: Target,
    batch_id: str,
) -> tuple[int, int]:
    """``target``'s history, quarantine and current state from ``live``'s history re-applied
    through the flow's code (one overwrite each; quarantine appended). Returns (versions kept,
    versions that now fail a rule)."""
    checked = checked_changes(flow, _inputs(flow, read(spark, live.history)), target.reference)
    checked = checked.persist()
    try:
        failing = checked.where(F.size(FAILED) > 0)
        kept = state_columns(flow, checked.where(F.size(FAILED) == 0))
        part = (flow.business_date,)
        overwrite(kept, target.tables.history, part)
        history = read(spark, target.tables.history)
        overwrite(latest_per_key(flow, history), target.tables.current, part)
        moved = failing.count()
        if moved:
            append(quarantine_rows(flow, failing, batch_id), target.tables.quarantine)
        return history.count(), moved
    finally:
        checked.unpersist()


def _copy_rows(spark: SparkSession, flow: Flow, source: str, into: str) -> int:
    """The flow's rows of a shared table (quarantine, late events, redeliveries) copied."""
    if not is_table(spark, source):
        return 0
    frame = read(spark, source)
    if "flow" in frame.columns:
        frame = frame.where(F.col("flow") == flow.name)
    if not is_table(spark, into):
        return 0
    wanted = read(spark, into).columns
    have = set(frame.columns)
    rows = frame.select(*[F.col(c) if c in have else F.lit(None).alias(c) for c in wanted])
    rows = rows.persist()
    try:
        count = rows.count()
        if count:
            append(rows, into)
        return count
    finally:
        rows.unpersist()


@dataclass
class ShadowResult:
    flow: str
    version: int
    live_version: int
    plan: Any
    layers: dict[str, dict[str, int]] = field(default_factory=dict)
    reference: str = ""  # the digest of the reference feed history was re-applied with
    # (layer, table) -> (dates compared, groups that differ, breaks)
    differences: dict[tuple[str, str], tuple[int, int, int]] = field(default_factory=dict)
    examples: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    # (layer, table) -> (columns only the new version has, columns only the live one has)
    reshaped: dict[tuple[str, str], tuple[list[str], list[str]]] = field(default_factory=dict)

    def describe(self) -> str:
        head = (
            f"{self.flow}: version {self.version} built beside the live version "
            f"{self.live_version} (source: the live history"
            + (f", reference feed {self.reference}" if self.reference else "")
            + "; nothing served changed)"
        )
        lines = [head]
        lines += [f"  {c.describe()}" for c in self.plan.changes]
        for layer, counts in self.layers.items():
            lines.append(
                f"  {layer} layer: {counts['history']} versions re-applied, "
                f"{counts['quarantined']} now fail a rule (quarantined in the shadow)"
            )
        for (layer, table), (dates, groups, breaks) in sorted(self.differences.items()):
            added, dropped = self.reshaped.get((layer, table), ([], []))
            shape = "".join(
                f"; {what} {', '.join(cols)} (not compared)"
                for what, cols in (("new columns", added), ("columns dropped", dropped))
                if cols
            )
            lines.append(
                f"  {table} ({layer}): {groups} groups differ over {dates} dates ({breaks} breaks)"
                f"{shape}"
                if breaks
                else f"  {table} ({layer}): the same on {dates} dates{shape}"
            )
            for b in self.examples.get((layer, table), []):
                what = (
                    f"{b['column']}: {_shown(b['left_value'])} → {_shown(b['right_value'])}"
                    if b["column"]
                    else "only in the live version"
                    if b["kind"] == MISSING_RIGHT
                    else "only in the new version"
                )
                lines.append(f"    {b['key']}  {what}")
        lines.append(
            f"  every difference: the Migration page, and control/recon_breaks under recon "
            f"{recon_name(self.version, '<table>')}; serve it with `streamshift promote --flow "
            f"{self.flow} --version {self.version}`"
        )
        return "\n".join(lines)


def build_shadow(spark: SparkSession, settings: Settings, flow: Flow) -> ShadowResult:
    """Version N of ``flow`` built beside the live one and compared with it (the module's
    note). Refused when nothing changed or the change is breaking."""
    warehouse = settings.warehouse
    found_plans = code.plans_for(spark, warehouse, flow)
    changed = next((p for p in found_plans.values() if p.changes), found_plans["batch"])
    if not changed.changes:
        raise code.FlowChangedError(
            f"flow {flow.name}: the code on disk is the live version "
            f"{changed.deployed or 1}; nothing to build beside it"
        )
    if changed.breaking:
        raise code.FlowChangedError(
            f"flow {flow.name}: the change is breaking ({changed.summary()}); nothing was "
            "built. Build it as a new flow, filled from history or a replay"
        )
    mine = code.fingerprint(code.components(spark, flow))
    pending = records.shadows(warehouse, flow.name)
    same = next((r for r in pending.values() if r["fingerprint"] == mine), None)
    if same is not None:
        raise code.FlowChangedError(
            f"flow {flow.name}: version {same['version']} is this code, built beside the live "
            f"one already: serve it with `streamshift promote --flow {flow.name} --version "
            f"{same['version']}`"
        )
    version = records.highest_version(warehouse, flow.name) + 1
    root = version_root(flow.name, version)
    for layer in LAYERS:  # a build killed before it was recorded starts over
        leftover = warehouse / layer / root
        if leftover.exists():
            shutil.rmtree(leftover)
    result = ShadowResult(flow.name, version, changed.deployed or 1, changed)
    for layer in LAYERS:
        live = records.live_tables(warehouse, flow, layer)
        if not is_table(spark, live.history):
            continue
        _say(f"re-applying the {layer} layer's history through the new code into {root}")
        target = Target(
            spark, flow, LayerTables(warehouse, flow, layer, root), None, settings.reference_dir
        ).create_tables()
        kept, moved = reapply_history(spark, flow, live, target, f"shadow:v{version}")
        result.reference = target.reference_digest
        if is_table(spark, live.redeliveries):
            ensure_state_table(spark, flow, target.tables.redeliveries)
        for source, into in (
            (live.redeliveries, target.tables.redeliveries),
            (live.quarantine, target.tables.quarantine),
            (live.late_events, target.tables.late_events),
        ):
            _copy_rows(spark, flow, source, into)
        state = read(spark, target.tables.current).where(~F.col(IS_DELETED))
        for view in flow.views:
            overwrite(view.compute(state), target.tables.view(view.name), (flow.business_date,))
        result.layers[layer] = {"history": kept, "quarantined": moved}
        found, examples, reshaped = _compare(
            spark, settings, flow, live, target.tables, result.live_version, version
        )
        result.differences.update(found)
        result.examples.update(examples)
        result.reshaped.update(reshaped)
    code.record_version(
        spark, warehouse, flow, version, records.SHADOW, changed.summary(), root=root
    )
    return result


def _compare(
    spark: SparkSession,
    settings: Settings,
    flow: Flow,
    live: LayerTables,
    shadow: LayerTables,
    live_version: int,
    version: int,
) -> tuple[
    dict[tuple[str, str], tuple[int, int, int]],
    dict[tuple[str, str], list[dict[str, Any]]],
    dict[tuple[str, str], tuple[list[str], list[str]]],
]:
    """Each view (and current state) of every date, live vs shadow, recorded as reconciliation
    runs and breaks (two commits for all); per table: (dates, groups that differ, breaks), and
    the first few differences, and the columns only the new (only the live) version has, which
    are not compared."""
    ensure_recon_tables(spark, settings)
    day = flow.business_date
    pairs = [("current", live.current, shadow.current, [flow.key])]
    pairs += [
        (v.name, live.view(v.name), shadow.view(v.name), list(v.group_key)) for v in flow.views
    ]
    found: dict[tuple[str, str], tuple[int, int, int]] = {}
    examples: dict[tuple[str, str], list[dict[str, Any]]] = {}
    reshaped: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    all_breaks: list[DataFrame] = []
    runs: list[tuple[Any, ...]] = []
    for table, left_path, right_path, key in pairs:
        if not is_table(spark, left_path):
            continue
        left, right = read(spark, left_path), read(spark, right_path)
        if table == "current":
            left, right = left.where(~F.col(IS_DELETED)), right.where(~F.col(IS_DELETED))
        key = key if day in key else [day, *key]
        columns = [
            c for c in left.columns if c in right.columns and c not in key and not c.startswith("_")
        ]
        added = [c for c in right.columns if c not in left.columns and not c.startswith("_")]
        dropped = [c for c in left.columns if c not in right.columns and not c.startswith("_")]
        if added or dropped:
            reshaped[(live.layer, table)] = (added, dropped)
        recon = recon_name(version, table)
        breaks = compare(left, right, key, columns).persist()
        keyed = breaks.withColumn(
            "business_date", F.get_json_object("key", f"$.{day}").cast("date")
        )
        per_date = {
            r["business_date"]: (r["breaks"], r["groups"])
            for r in keyed.groupBy("business_date")
            .agg(F.count("*").alias("breaks"), F.countDistinct("key").alias("groups"))
            .collect()
        }
        counts = {
            (r["business_date"], r["kind"]): r["count"]
            for r in keyed.groupBy("business_date", "kind").count().collect()
        }
        rows_by_date: dict[dt.date, list[int]] = {}
        for side, frame in ((0, left), (1, right)):
            for r in frame.groupBy(day).count().collect():
                rows_by_date.setdefault(r[day], [0, 0])[side] = r["count"]
        run_ids = {d: new_run_id() for d in rows_by_date}
        for d, (left_rows, right_rows) in sorted(rows_by_date.items()):
            n = {k: counts.get((d, k), 0) for k in KINDS}
            total = sum(n.values())
            runs.append(
                (
                    run_ids[d],
                    flow.name,
                    d,
                    recon,
                    f"{live.layer} v{live_version}",
                    f"{live.layer} v{version} (shadow)",
                    left_rows,
                    right_rows,
                    total,
                    *(n[k] for k in KINDS),
                    total == 0,
                    "",
                )
            )
        if per_date:
            mapping = F.create_map(
                *[x for d, rid in run_ids.items() for x in (F.lit(d), F.lit(rid))]
            )
            all_breaks.append(
                keyed.select(
                    mapping[F.col("business_date")].alias("run_id"),
                    F.lit(flow.name).alias("flow"),
                    "business_date",
                    F.lit(recon).alias("recon"),
                    *BREAK_COLUMNS,
                    F.current_timestamp().alias("found_at"),
                )
            )
        found[(live.layer, table)] = (
            len(rows_by_date),
            sum(g for _, g in per_date.values()),
            sum(b for b, _ in per_date.values()),
        )
        if per_date:
            examples[(live.layer, table)] = [
                r.asDict() for r in breaks.orderBy("key", "column").limit(EXAMPLES).collect()
            ]
        breaks.unpersist()
    control = ControlTables(settings.warehouse)
    if all_breaks:
        union = all_breaks[0]
        for more in all_breaks[1:]:
            union = union.unionByName(more)
        append(union, control.recon_breaks)
    if runs:
        frame = spark.createDataFrame(runs, RECON_RUNS_SCHEMA.replace(", run_at TIMESTAMP", ""))
        append(frame.withColumn("run_at", F.current_timestamp()), control.recon_runs)
    return found, examples, reshaped


# ---- switching ------------------------------------------------------------------------------
@dataclass
class SwitchResult:
    flow: str
    version: int
    previous: int
    caught_up: dict[str, int] = field(default_factory=dict)
    stopped: list[str] = field(default_factory=list)
    serving_stopped: list[str] = field(default_factory=list)
    already: bool = False

    def describe(self) -> str:
        head = (
            f"{self.flow}: version {self.version} was live already; caught up again"
            if self.already
            else f"{self.flow}: readers and writers switched from version {self.previous} to "
            f"version {self.version}"
        )
        lines = [head]
        lines += [
            f"  {layer} layer: {n} versions applied since the version was built"
            for layer, n in self.caught_up.items()
        ]
        if self.stopped:
            lines.append(
                f"  stream jobs stopped for the switch ({', '.join(self.stopped)}): the "
                "supervisor restarts them on the code on disk (or: streamshift stream --flow "
                f"{self.flow})"
            )
        if self.serving_stopped:
            lines.append(
                f"  serving jobs stopped, their view changed ({', '.join(self.serving_stopped)}): "
                f"start them again (streamshift serve --flow {self.flow} --view VIEW); each "
                "rebuilds its state with the new logic"
            )
        return "\n".join(lines)


def _stop_jobs(settings: Settings, flow: Flow, names: list[str]) -> list[str]:
    """Stop the flow's running jobs of these heartbeat names (SIGTERM: each finishes its
    batch; never this process); the names stopped."""
    stopped = []
    for name in names:
        beat = heartbeat.read_heartbeat(settings.home, flow.name, name)
        alive = beat and heartbeat.process_of(beat) and beat.get("pid") != os.getpid()
        if alive and beat.get("state") == "running":
            _say(f"stopping {flow.name}'s {name} job (pid {beat['pid']}) for the switch")
            terminate(int(beat["pid"]), timeout=120)
            stopped.append(name)
    return stopped


def _mark_for_restart(settings: Settings, flow: Flow, layers: list[str]) -> None:
    """A job stopped for the switch is not an operator's stop: the supervisor restarts it."""
    for layer in layers:
        path = heartbeat.heartbeat_path(settings.home, flow.name, layer)
        beat = heartbeat.read_heartbeat(settings.home, flow.name, layer)
        heartbeat.update_heartbeat(path, beat, state="switched", stopped_at=heartbeat.now_iso())


def catch_up(
    spark: SparkSession, settings: Settings, flow: Flow, source: LayerTables, into: LayerTables
) -> int:
    """The versions ``source``'s history holds and ``into``'s does not, applied to ``into``
    through the write path (rules, quarantine, views); how many."""
    history = read(spark, source.history)
    have = read(spark, into.history).select(flow.key, flow.version)
    missing = history.join(have, [flow.key, flow.version], "left_anti")
    changes = _inputs(flow, missing).drop(APPLIED_AT)
    # Materialised: the input reads ``into``'s history, which the apply writes; evaluated again
    # after that write (as a lazy frame is, on Spark Connect) it would hold nothing.
    changes = changes.withColumn(RAW, F.to_json(F.struct(*flow.columns))).localCheckpoint()
    count = changes.count()
    if count:
        target = Target(spark, flow, into, None, settings.reference_dir)
        apply_changes(flow, changes, "catch-up", target, batch_id=f"switch:{into.root}")
    return count


def switch_version(
    spark: SparkSession, settings: Settings, flow: Flow, version: int, by: str | None = None
) -> SwitchResult:
    """Readers and writers of both layers switched to ``version``'s tables (the module's
    note). The code on disk must be that version's."""
    warehouse = settings.warehouse
    wanted = records.recorded_version(warehouse, flow.name, version)
    if not wanted:
        raise code.FlowChangedError(
            f"flow {flow.name}: no version {version} recorded (build one beside the live "
            f"version with `streamshift evolve --flow {flow.name} --shadow`)"
        )
    row = next(iter(wanted.values()))
    root = row["root"] or ""
    if code.fingerprint(code.components(spark, flow)) != row["fingerprint"]:
        raise code.FlowChangedError(
            f"flow {flow.name}: the code on disk is not version {version}'s (see `streamshift "
            f"plan --flow {flow.name}`); deploy version {version}'s code, then run this again"
        )
    live = records.deployed_layers(warehouse, flow.name)
    already = bool(live) and all(
        r["version"] == version and r["root"] == root for r in live.values()
    )
    if already:  # a switch killed after its commit: catch up from where it came from
        came = json.loads(live["batch"]["changes"] or "{}").get("from", {})
        sources = {layer: came.get(layer, {}).get("root", "") for layer in LAYERS}
        previous = int(came.get("batch", {}).get("version", version))
    else:
        sources = {layer: live[layer]["root"] if layer in live else "" for layer in LAYERS}
        previous = max((r["version"] for r in live.values()), default=0)
    result = SwitchResult(flow.name, version, previous, already=already)
    if sources == {layer: root for layer in LAYERS}:
        return result
    for layer in LAYERS:
        into = LayerTables(warehouse, flow, layer, root)
        if is_table(spark, LayerTables(warehouse, flow, layer, sources[layer]).history) and not (
            is_table(spark, into.history)
        ):
            raise code.FlowChangedError(
                f"flow {flow.name}: version {version}'s tables are gone from {root or 'the layer'} "
                "(upkeep removes versions older than its retention); nothing was switched"
            )
    result.stopped = _stop_jobs(settings, flow, list(LAYERS))
    # A serving job holds its view's state in memory: one whose view's logic differs between
    # the versions is stopped too (started again, it rebuilds its state with the new logic).
    now_views = live["batch"]["components"]["views"] if "batch" in live else {}
    then_views = row["components"]["views"]
    changed_views = [v for v in then_views if then_views[v] != now_views.get(v)]
    result.serving_stopped = _stop_jobs(settings, flow, [layer_name(v) for v in changed_views])
    for layer in LAYERS:
        source = LayerTables(warehouse, flow, layer, sources[layer])
        if is_table(spark, source.history):
            into = LayerTables(warehouse, flow, layer, root)
            _say(f"catching up version {version}'s {layer} layer from the live tables")
            result.caught_up[layer] = catch_up(spark, settings, flow, source, into)
    if not already:
        came_from = {
            layer: {"version": r["version"], "root": r["root"]} for layer, r in live.items()
        }
        code.record_version(
            spark,
            warehouse,
            flow,
            version,
            records.SWITCHED,
            json.dumps({"from": came_from}),
            root=root,
            by=by,
        )
    _mark_for_restart(settings, flow, result.stopped)
    return result
