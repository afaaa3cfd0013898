"""The serving job: a view kept in Spark's state store and published to a compacted topic.

Beside the Delta write path, not instead of it: ``streamshift serve --flow F`` reads the flow's
topic, runs the flow's own front (decode, parse, ``prepare``, rules — the transforms the write
path runs), and keeps an additive view (:meth:`~streamshift.spec.flow.View.additive`) in one
stateful operator — by default ``transformWithState`` with the JVM processor
``AdditiveViewState`` (``jvm/udf``), or with ``--engine python`` ``transformWithStateInPandas``
with ``_processor`` below, the same logic in Spark's Python workers:

* per key, the version it last applied and that version's group and measure inputs;
* per group, the running sums (with their non-null counts) and the live row count.

A new version moves its old contribution out of the old group and its new one into the new
group (the current-state MERGE's rule: only a higher version replaces a stored one). Each
micro-batch publishes the groups it changed to ``<topic>.<view>`` (compacted): key = the group
as JSON, value = the view's row as JSON, a tombstone when the group emptied. Values are the
view's columns exactly as the Delta view holds them after catch-up: sums of integers and
decimals are exact; sums of a floating-point column agree within rounding (see ``Measure``).

Exactly once: the state store (RocksDB) commits with the query's checkpoint, so a restarted job
neither loses nor double-counts a change; a batch published twice (a crash between publish and
commit) publishes the same absolute values again. Rejected rows are left to the write path,
which quarantines them.

Progress: one line per micro-batch in ``status/<flow>-serve-<view>.progress.jsonl`` and a
heartbeat beside it in the stream job's format, so `streamshift status` and the Migration page
list ``<flow>/serve-<view>`` with the stream jobs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, localcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from streamshift.spec.contract import FAILED, IS_DELETED, SERVE_ENGINES, SOURCE_REF
from streamshift.spec.errors import StreamshiftError
from streamshift.spec.flow import SUM, Flow, View
from streamshift.spec.settings import Settings
from streamshift.store import heartbeat
from streamshift.store.events import TRANSPORT_COLUMNS, serving_topic, topic_for
from streamshift.store.kafka import ensure_topics
from streamshift.store.processes import process_start

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
LIVE_ROWS = "live_rows"  # the group's live rows; 0 = the group emptied (a tombstone)


class ServeError(StreamshiftError):
    pass


def additive_view(flow: Flow, view_name: str | None) -> View:
    """The view to serve; refuses one that is not declared by additive measures."""
    view = flow.view(view_name) if view_name else flow.views[0]
    if not view.is_additive:
        raise ServeError(
            f"view {view.name} of flow {flow.name} is not declared by additive measures, so it "
            "cannot be kept incrementally; declare it with View.additive(...) (sums and counts "
            "only: a minimum or maximum cannot move by deltas) or read it from its Delta table"
        )
    return view


# ---- the incremental form of an additive view (pure Python, runs in Spark's Python workers)
def _finish(total: Decimal | float | None, scale: int | None, kind: str, out_scale: int) -> Any:
    """A sum as Spark gives it: ``round(sum, scale)`` half-up, then the cast to the view's type."""
    if total is None:
        return None
    value = Decimal(str(total)) if isinstance(total, float) else total
    if scale is not None:
        value = value.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
    if kind == "decimal":
        return value.quantize(Decimal(1).scaleb(-out_scale), rounding=ROUND_HALF_UP)
    if kind == "integer":
        return int(value)  # Spark's cast to an integral type truncates toward zero
    return float(value)


def _processor(spec: dict[str, Any]):  # type: ignore[no-untyped-def]
    """The ``StatefulProcessor`` for ``spec`` (plain data, shipped to the Python workers)."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class AdditiveViewState(StatefulProcessor):
        def init(self, handle) -> None:  # type: ignore[no-untyped-def]
            self.rows = handle.getMapState("rows", spec["key_ddl"], spec["row_ddl"])
            self.groups = handle.getMapState("groups", spec["group_ddl"], spec["totals_ddl"])

        def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:  # type: ignore[no-untyped-def]
            with localcontext(prec=80):  # exact decimal sums, as Spark's are
                out = self._apply(pd.concat(list(rows), ignore_index=True))
            if out:
                yield pd.DataFrame(out, columns=spec["output_columns"])

        def _apply(self, frame: pd.DataFrame) -> list[tuple[Any, ...]]:
            n_groups, n_sums = len(spec["group"]), len(spec["sums"])
            # The batch's winner per key: highest version, ties by source reference
            # (``latest_per_key``); a null version sorts last.
            frame = frame.sort_values(["v", "ref"], ascending=[False, True], na_position="last")
            frame = frame.drop_duplicates("k")
            moves: dict[tuple[Any, ...], list[Any]] = defaultdict(lambda: [0] + [None, 0] * n_sums)

            def move(group: tuple[Any, ...], inputs: tuple[Any, ...], sign: int) -> None:
                m = moves[group]
                m[0] += sign
                for i, x in enumerate(inputs):
                    if x is not None:
                        m[1 + 2 * i] = (m[1 + 2 * i] or 0) + sign * x
                        m[2 + 2 * i] += sign

            for r in frame.itertuples(index=False):
                k = (r.k,)
                version = None if pd.isna(r.v) else Decimal(r.v)  # the state's DECIMAL(38,0)
                old = self.rows.getValue(k)
                if old is not None and (version is None or old[0] is None or version <= old[0]):
                    continue  # only a higher version replaces the stored one
                if old is not None and old[1]:
                    move(tuple(old[2 : 2 + n_groups]), tuple(old[2 + n_groups :]), -1)
                group = tuple(getattr(r, f"g{i}") for i in range(n_groups))
                group = tuple(None if pd.isna(g) else g for g in group)
                inputs = tuple(getattr(r, f"m{i}") for i in range(n_sums))
                inputs = tuple(None if pd.isna(x) else x for x in inputs)
                live = not bool(r.deleted)
                if live:
                    move(group, inputs, +1)
                self.rows.updateValue(k, (version, live, *group, *inputs))
            out = []
            for group, m in moves.items():
                if m[0] == 0 and all(m[2 + 2 * i] == 0 and not m[1 + 2 * i] for i in range(n_sums)):
                    continue  # what left the group came back: nothing changed
                stored = self.groups.getValue(group)
                totals: list[Any] = list(stored) if stored is not None else [0] + [None, 0] * n_sums
                totals[0] += m[0]
                for i in range(n_sums):
                    count = totals[2 + 2 * i] + m[2 + 2 * i]
                    if m[1 + 2 * i] is not None:
                        totals[1 + 2 * i] = (totals[1 + 2 * i] or 0) + m[1 + 2 * i]
                    totals[2 + 2 * i] = count
                    if count == 0:
                        totals[1 + 2 * i] = None  # Spark's sum of no values is null
                if totals[0] <= 0:
                    self.groups.removeKey(group)
                    out.append((*group, *([None] * len(spec["measures"])), 0))
                    continue
                self.groups.updateValue(group, tuple(totals))
                values = []
                for measure in spec["measures"]:
                    if measure["sum"] is None:  # a count of live rows
                        values.append(totals[0])
                    else:
                        i = measure["sum"]
                        values.append(
                            _finish(
                                totals[1 + 2 * i],
                                measure["scale"],
                                measure["kind"],
                                measure["out_scale"],
                            )
                        )
                out.append((*group, *values, totals[0]))
            return out

        def close(self) -> None:
            pass

    return AdditiveViewState()


def _kind(data_type: DataType) -> tuple[str, int]:
    from pyspark.sql.types import DecimalType, DoubleType, FloatType, IntegralType

    if isinstance(data_type, DecimalType):
        return "decimal", data_type.scale
    if isinstance(data_type, IntegralType):
        return "integer", 0
    if isinstance(data_type, DoubleType | FloatType):
        return "float", 0
    raise ServeError(f"a measure of type {data_type.simpleString()} cannot be served")


def _sum_type(data_type: DataType) -> str:
    """The state's type for a summed column: exact decimals for decimals and integers."""
    from pyspark.sql.types import DecimalType, IntegralType

    if isinstance(data_type, DecimalType):
        return f"DECIMAL(38,{data_type.scale})"
    if isinstance(data_type, IntegralType):
        return "DECIMAL(38,0)"  # no float64 on the way through pandas
    return "DOUBLE"


def state_spec(flow: Flow, view: View, schema: StructType) -> dict[str, Any]:
    """The processor's plain-data description of ``view`` over rows of ``schema``: state and
    output layouts, the summed columns and how each measure is finished."""
    sums = [m for m in view.measures if m.kind == SUM]

    def ddl(name: str) -> str:
        return schema[name].dataType.simpleString()

    version_type = _sum_type(schema[flow.version].dataType)
    sum_ddls = [_sum_type(schema[cast(str, m.column)].dataType) for m in sums]  # a sum has one
    group_ddl = ", ".join(f"g{i} {ddl(c)}" for i, c in enumerate(view.group_key))
    measures = []
    for m in view.measures:
        kind, out_scale = _kind(m.data_type)
        index = None if m.column is None else sums.index(m)
        measures.append({"sum": index, "scale": m.scale, "kind": kind, "out_scale": out_scale})
    return {
        "key_ddl": f"k {ddl(flow.key)}",
        "version_type": version_type,
        "sum_ddls": sum_ddls,
        "row_ddl": ", ".join(
            [f"v {version_type}", "live BOOLEAN", group_ddl]
            + [f"m{i} {t}" for i, t in enumerate(sum_ddls)]
        ),
        "group_ddl": group_ddl,
        "totals_ddl": ", ".join(
            ["live_rows BIGINT"] + [f"s{i} {t}, n{i} BIGINT" for i, t in enumerate(sum_ddls)]
        ),
        "group": list(view.group_key),
        "sums": [m.column for m in sums],
        "measures": measures,
        "output_columns": [*view.group_key, *(m.name for m in view.measures), LIVE_ROWS],
        "output_ddl": ", ".join(
            [f"{c} {ddl(c)}" for c in view.group_key]
            + [f"{m.name} {m.data_type.simpleString()}" for m in view.measures]
            + [f"{LIVE_ROWS} BIGINT"]
        ),
    }


ENGINES = SERVE_ENGINES
JVM_PROCESSOR = "dev.streamshift.AdditiveViewState"  # jvm/udf, built by scripts/setup


def view_changes(flow: Flow, view: View, accepted: DataFrame, engine: str = "jvm") -> DataFrame:
    """Per micro-batch, the view's rows for the groups it changed (``live_rows`` 0 = emptied).

    ``accepted`` is the flow's accepted changes (``checked_changes`` without failed rules).
    ``engine`` runs the state processor in the JVM (``jvm/udf``'s ``AdditiveViewState``: state
    reads and writes are in-process RocksDB calls) or in Python workers (``_processor``, through
    ``transformWithStateInPandas``: a socket round trip per state call). Both keep the same
    state and publish the same rows; their checkpoints are not interchangeable.
    """
    from pyspark.sql import functions as F

    if engine not in ENGINES:
        raise ServeError(f"unknown state engine {engine!r}; choose one of {', '.join(ENGINES)}")
    spec = state_spec(flow, view, accepted.schema)
    inputs = [F.col(c).alias(f"g{i}") for i, c in enumerate(view.group_key)] + [
        F.col(column).cast(t).alias(f"m{i}")
        for i, (column, t) in enumerate(zip(spec["sums"], spec["sum_ddls"], strict=True))
    ]
    frame = accepted.select(
        F.col(flow.key).alias("k"),
        F.col(flow.version).cast(spec["version_type"]).alias("v"),
        F.col(SOURCE_REF).alias("ref"),
        F.col(IS_DELETED).alias("deleted"),
        *inputs,
    )
    if engine == "jvm":
        return _jvm_view_changes(frame, spec)
    # One state key: a CANCEL may carry no group, so a row must be found by its key alone and
    # its group's totals updated in the same call.
    return (
        frame.withColumn("all", F.lit(0))
        .groupBy("all")
        .transformWithStateInPandas(
            statefulProcessor=_processor(spec),
            outputStructType=spec["output_ddl"],
            outputMode="Update",
            timeMode="None",
        )
    )


def _jvm_view_changes(frame: DataFrame, spec: dict[str, Any]) -> DataFrame:
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    spark = frame.sparkSession
    measures = ";".join(
        f"{-1 if m['sum'] is None else m['sum']}:{-1 if m['scale'] is None else m['scale']}"
        for m in spec["measures"]
    )
    processor = spark._jvm.dev.streamshift.AdditiveViewState  # type: ignore[union-attr]
    try:
        jdf = processor.apply(
            frame._jdf,  # type: ignore[attr-defined]
            spec["key_ddl"],
            spec["row_ddl"],
            spec["group_ddl"],
            spec["totals_ddl"],
            spec["output_ddl"],
            measures,
        )
    except TypeError as e:  # py4j's JavaPackage: the class is not on the classpath
        raise ServeError(
            f"the JVM state processor {JVM_PROCESSOR} is not on this Spark session's classpath "
            "(streamshift/jars/streamshift-udf.jar); run `streamshift setup` (the "
            "kit's repository: scripts/setup), or serve "
            "with --engine python"
        ) from e
    return ClassicDataFrame(jdf, spark)


def as_messages(view: View, changes: DataFrame) -> DataFrame:
    """Kafka rows of the compacted topic: key = the group, value = the row (null = emptied)."""
    from pyspark.sql import functions as F

    return changes.select(
        F.to_json(F.struct(*view.group_key)).alias("key"),
        F.when(F.col(LIVE_ROWS) > 0, F.to_json(F.struct(*(m.name for m in view.measures)))).alias(
            "value"
        ),
    )


# ---- the job --------------------------------------------------------------------------------
def layer_name(view: str) -> str:
    """The serving job's name in heartbeats and progress logs (``<flow>/serve-<view>``)."""
    return f"serve-{view}"


def progress_path(settings: Settings, flow: str, view: str) -> Path:
    """The serving job's progress log: one line per micro-batch (benches read it too)."""
    return heartbeat.progress_path(settings.home, flow, layer_name(view))


@dataclass
class ServeRun:
    batches: int = 0
    events: int = 0
    published: int = 0
    seconds: float = 0.0
    topic: str = ""

    def describe(self) -> str:
        return (
            f"served {self.events} events in {self.batches} micro-batches: {self.published} "
            f"changed groups published to {self.topic} ({self.seconds:.0f}s)"
        )


class _Heartbeat:
    """``serve``'s heartbeat, in the stream job's format: `streamshift status`, the Migration
    page and supervisors read both the same way (``last_seen`` shows it alive when idle)."""

    EVERY = 10.0  # seconds between heartbeats of an idle job

    def __init__(self, path: Path, **beat: Any) -> None:
        self.path, self.beat, self._at = path, beat, 0.0

    def save(self, **changes: Any) -> None:
        heartbeat.update_heartbeat(self.path, self.beat, **changes)
        self._at = time.monotonic()

    def touch(self) -> None:
        if time.monotonic() - self._at >= self.EVERY:
            self.save()


VIEW_MARKER = "streamshift-view.json"  # beside the checkpoint: the view logic its state holds


def rebuild_if_changed(spark: SparkSession, flow: Flow, view: View, checkpoint: str) -> None:
    """A checkpoint whose state a view's other logic built (``streamshift evolve`` changed
    the view) is moved aside: the query then builds its state again from the topic's start
    and publishes every group anew. The view's logic is its fingerprint's part
    (:func:`streamshift.engine.versions.components`)."""
    from streamshift.engine.versions import components

    logic = components(spark, flow)["views"][view.name]
    folder = Path(checkpoint)
    marker = folder / VIEW_MARKER
    if folder.is_dir() and marker.is_file() and json.loads(marker.read_text()) != logic:
        aside = folder.with_name(f"{folder.name}.before-{time.strftime('%Y%m%dT%H%M%S')}")
        shutil.move(str(folder), str(aside))
        print(
            f"[serve] the view {view.name} changed since its state was built: rebuilding it from "
            f"the topic (the old checkpoint is kept at {aside})",
            file=sys.stderr,
            flush=True,
        )
    folder.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(logic, sort_keys=True))


def checkpoint_path(settings: Settings, flow: Flow, view: View, engine: str = "jvm") -> str:
    """The query's checkpoint; each engine keeps its own (their state layouts differ)."""
    suffix = "" if engine == "jvm" else f"-{engine}"
    return str(settings.checkpoints / f"{flow.name}-serve-{view.name}{suffix}")


# The state operator each engine plans; a checkpoint records it (state/0/_metadata/v2/<batch>).
OPERATORS = {"jvm": "transformWithStateExec", "python": "transformWithStateInPandasExec"}


def check_checkpoint(path: str | Path, engine: str) -> None:
    """Refuse a checkpoint whose state another engine wrote: Spark would fail on it mid-start
    with a schema error. Checkpoints of the Python processor made before each engine kept its
    own directory sit where the JVM one's go now."""
    metadata = Path(path) / "state" / "0" / "_metadata"
    names = set()
    for entry in sorted(metadata.glob("v*/[0-9]*")) if metadata.is_dir() else []:
        for line in entry.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                names.add(json.loads(line).get("operatorInfo", {}).get("operatorName"))
    other = next((e for e, op in OPERATORS.items() if op in names and e != engine), None)
    if other is None or OPERATORS[engine] in names:
        return
    raise ServeError(
        f"the checkpoint {path} holds the state of the {other} state processor, not the "
        f"{engine} one; serve with --engine {other}"
        + (f" after moving it to {path}-{other}" if engine == "jvm" else "")
        + ", or remove it to rebuild the view from what the topic still holds"
    )


def serve_topics(
    settings: Settings, flow: Flow, view: View, topic: str | None = None
) -> tuple[str, str]:
    """The source topic and the view's compacted topic, created when missing (no JVM: the CLI
    asks before it starts Spark, so an unreachable broker is said at once)."""

    source = topic or topic_for(flow)
    out = serving_topic(source, view.name)
    ensure_topics(settings, source, out, compacted=[out])
    return source, out


def run_serve(
    spark: SparkSession,
    settings: Settings,
    flow: Flow,
    view_name: str | None = None,
    *,
    topic: str | None = None,
    trigger: str = "1 second",
    available_now: bool = False,
    engine: str = "jvm",
    echo: bool = True,
) -> ServeRun:
    """Run the serving query until it finishes (available-now) or is interrupted."""
    from pyspark.sql import functions as F

    from streamshift.engine.decode import decode
    from streamshift.engine.jobs.stream import _offsets, kafka_stream, phases
    from streamshift.engine.write.target import load_reference
    from streamshift.engine.write.transforms import checked_changes

    view = additive_view(flow, view_name)
    checkpoint = checkpoint_path(settings, flow, view, engine)
    check_checkpoint(checkpoint, engine)
    rebuild_if_changed(spark, flow, view, checkpoint)
    source_topic, out_topic = serve_topics(settings, flow, view, topic)
    # The state store: RocksDB, one partition (one state key). Fixed by the checkpoint's first
    # batch; set for the query's start and restored after, so a shared session keeps its own.
    conf = {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # Otherwise every put reads the key first, only to count the store's rows (a metric
        # nothing here reads; bench/stream_throughput.py).
        "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
        "spark.sql.shuffle.partitions": "1",
    }
    saved = {k: spark.conf.get(k, None) for k in conf}
    run = ServeRun(topic=out_topic)
    started = time.monotonic()
    name = layer_name(view.name)  # the heartbeat's "layer": `streamshift status` lists it
    progress = progress_path(settings, flow.name, view.name)
    beat = _Heartbeat(
        heartbeat.heartbeat_path(settings.home, flow.name, name),
        flow=flow.name,
        layer=name,
        pid=os.getpid(),
        pid_start=process_start(os.getpid()),
        state="starting",
        started_at=heartbeat.now_iso(),
        topic=source_topic,
        serving_topic=out_topic,
    )

    visible: dict[int, float] = {}  # batch id → when its changed groups were published

    def publish(changes: DataFrame, batch_id: int) -> None:
        as_messages(view, changes).write.format("kafka").options(
            **settings.spark_kafka_options()
        ).option("topic", out_topic).save()
        visible[batch_id] = time.time()

    kafka = kafka_stream(spark, settings, source_topic)
    raw = kafka.transform(decode(flow)).drop(*TRANSPORT_COLUMNS)
    reference = load_reference(spark, flow, settings.reference_dir)
    accepted = checked_changes(flow, raw, reference).where(F.size(FAILED) == 0)
    writer = (
        view_changes(flow, view, accepted, engine)
        # counted in the same pass as the publish (the progress's observed metrics)
        .observe("published", F.count(F.lit(1)).alias("groups"))
        .writeStream.queryName(f"{flow.name}-serve-{view.name}")
        .foreachBatch(publish)
        .option("checkpointLocation", checkpoint)
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime=trigger)
    )
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        query = writer.start()
    finally:
        for name, value in saved.items():
            spark.conf.unset(name) if value is None else spark.conf.set(name, value)
    beat.save(state="running", query_id=str(query.id))
    if echo:
        print(
            f"[serve] {flow.name}.{view.name}: {source_topic} → {out_topic} "
            f"({'available-now' if available_now else 'trigger ' + trigger}; {engine} state "
            f"processor), checkpoint {checkpoint}",
            file=sys.stderr,
            flush=True,
        )
    recorded: set[int] = set()

    def record() -> None:
        """One progress line per finished batch: its offsets and when its groups were visible."""
        for p in query.recentProgress:
            # An idle trigger reports the next batch's id with no rows: not that batch.
            if not p.numInputRows or p.batchId in recorded or p.batchId not in visible:
                continue
            recorded.add(p.batchId)
            at = visible[p.batchId]
            observed = (p.observedMetrics or {}).get("published")
            published = int(observed["groups"]) if observed is not None else 0
            run.published += published
            run.batches += 1
            run.events += p.numInputRows
            source = p.sources[0]
            processed = _offsets(source.endOffset) or {}
            latest = _offsets(source.latestOffset)
            heartbeat.append_progress(
                progress,
                {
                    "batch_id": p.batchId,
                    "timestamp": p.timestamp,
                    "input_rows": p.numInputRows,
                    "published": published,
                    "visible_at": at,
                    "duration_ms": p.durationMs.get("triggerExecution"),
                    "seconds_by_step": phases(p),
                    "start_offsets": _offsets(source.startOffset) or {},
                    "processed_offsets": processed,
                },
            )
            beat.save(
                last_batch_id=p.batchId,
                last_batch_at=heartbeat.now_iso(),
                input_rows=p.numInputRows,
                processed_rows_per_second=p.processedRowsPerSecond,
                duration_ms=p.durationMs.get("triggerExecution"),
                published=run.published,
                lag=heartbeat.offsets_lag(latest, processed),
                latest_offsets=latest,
                processed_offsets=processed,
            )
            if echo:
                print(
                    f"[serve] batch {p.batchId}: {p.numInputRows} events, {published} changed "
                    f"groups published; {run.events} events so far",
                    file=sys.stderr,
                    flush=True,
                )

    # SIGTERM (a supervisor, a bench) stops the query: a batch cut short commits nothing, and
    # the state store commits with the checkpoint, so the restart redoes it exactly once.
    stopping = threading.Event()
    previous = (
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        if threading.current_thread() is threading.main_thread()
        else None
    )
    try:
        while query.isActive and not stopping.is_set():
            query.awaitTermination(1)
            record()
            beat.touch()
    except KeyboardInterrupt:
        pass
    finally:
        if query.isActive:
            query.stop()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    record()
    error = query.exception()
    if error is not None:
        beat.save(state="failed", error=str(error).splitlines()[0])
        raise ServeError(
            f"serving query failed: {str(error).splitlines()[0]}; restart it — it resumes "
            "from its checkpoint"
        )
    beat.save(state="stopped", stopped_at=heartbeat.now_iso())
    run.seconds = time.monotonic() - started
    return run
