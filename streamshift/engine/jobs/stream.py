"""The always-on streaming job: Kafka → decode → ``apply_changes`` inside ``foreachBatch``.

Exactly once end to end comes from three things together: Spark's checkpoint (offsets of a
batch are logged before it runs, and the batch counts as done only after ``foreachBatch``
returns), a write path that is idempotent for a replayed batch (insert-only history by key
and version, version-gated current state, recomputed view groups, quarantine and late events
merged by their natural keys), and a dead-letter forward that skips messages the quarantine
already holds. A ``kill -9`` at any point is repaired by restarting on the same checkpoint.

SIGTERM (or Ctrl-C) stops gracefully: no new batch starts, the batch in flight finishes and is
committed, then the query stops.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener

from streamshift.engine.decode import decode
from streamshift.engine.versions import FlowChangedError, ensure_deployed, still_deployed
from streamshift.engine.write.apply import PRUNE_KEYS_BELOW, ApplyResult, apply_changes
from streamshift.engine.write.target import Target, read, warm_state
from streamshift.spec.contract import MALFORMED, SOURCE_REF, STREAM_TRIGGER
from streamshift.spec.errors import StreamshiftError
from streamshift.spec.flow import Flow
from streamshift.store import heartbeat
from streamshift.store.events import (
    DECODE_ERROR,
    KAFKA_KEY,
    KAFKA_SOURCE,
    KAFKA_TS,
    KAFKA_VALUE,
    UNDECODABLE_RULES,
    dlq_topic,
    topic_for,
)
from streamshift.store.kafka import ensure_topics, producer_config
from streamshift.store.processes import process_start

if TYPE_CHECKING:
    from streamshift.spec.settings import Settings


class StreamError(StreamshiftError):
    pass


class StopRequested(Exception):
    """Raised by a batch that would start after a stop was requested: it is not committed."""


# ---- dead-letter topic --------------------------------------------------------------------
def forward_undecodable(
    spark: SparkSession,
    settings: Settings,
    flow: Flow,
    target: Target,
    decoded: DataFrame,
    dlq: str,
    batch_label: str,
) -> int:
    """Send undecodable messages (raw bytes, original key) to ``dlq``; return how many.

    ``decoded``: rows with ``decode``'s columns (the stream passes the apply's frame).

    Messages the quarantine already holds were forwarded by an earlier run of this batch and
    are skipped, so a replayed batch does not forward twice. (A crash between the forward and
    the quarantine write can still repeat a message; DLQ messages carry the original
    topic:partition:offset as header ``streamshift.source_ref`` for consumers to de-duplicate.)
    """
    from confluent_kafka import Producer

    bad = (
        decoded.where(F.col(MALFORMED).isin(*UNDECODABLE_RULES))
        .select(SOURCE_REF, MALFORMED, DECODE_ERROR, KAFKA_KEY, KAFKA_VALUE)
        .collect()
    )
    if not bad:
        return 0
    refs = [r[SOURCE_REF] for r in bad]
    done = {
        r[0]
        for r in read(spark, target.tables.quarantine)
        .where((F.col("flow") == flow.name) & F.col("source_ref").isin(refs))
        .select("source_ref")
        .collect()
    }
    todo = [r for r in bad if r[SOURCE_REF] not in done]
    if not todo:
        return 0
    failures: list[str] = []

    def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            failures.append(str(err))

    producer = Producer(producer_config(settings))
    for r in todo:
        headers = [
            ("streamshift.rule", r[MALFORMED].encode()),
            ("streamshift.error", (r[DECODE_ERROR] or "").encode()),
            ("streamshift.source_ref", r[SOURCE_REF].encode()),
            ("streamshift.batch", batch_label.encode()),
        ]
        producer.produce(
            dlq, key=r[KAFKA_KEY], value=r[KAFKA_VALUE], headers=headers, on_delivery=delivered
        )
        producer.poll(0)
    remaining = producer.flush(60)
    if failures or remaining:
        raise StreamError(
            f"dead-letter topic {dlq} did not acknowledge {len(failures) + remaining} "
            f"messages ({failures[:1]}); the batch will be retried"
        )
    return len(todo)


# ---- the foreachBatch function ------------------------------------------------------------
class StateWarmer:
    """After a small micro-batch, the state of the tables every batch's critical path reads
    (history, current state, the views) computed on a side thread: a batch's first read of a
    table after its own commit otherwise starts by computing it (bench/delta_floor.py), and on
    a quiet stream that thread runs while the query waits for events. After a large batch (a
    busy stream, a backlog) the next batch starts at once and would only share the two cores
    with the pass: none starts (BENCHMARKS.md, 1,000 events/s with and without the thread).
    One pass at a time: a batch that ends while the last one's pass runs starts none."""

    def __init__(self, flow: Flow, target: Target) -> None:
        tables = target.tables
        self.spark = target.spark
        self.paths = [tables.history, tables.current, *(tables.view(v.name) for v in flow.views)]
        self.thread: threading.Thread | None = None

    def after_batch(self, accepted: int) -> None:
        """A pass after a batch of ``accepted`` rows, unless the write path took it as large
        (``PRUNE_KEYS_BELOW`` accepted rows or more) or the last pass still runs."""
        if accepted >= PRUNE_KEYS_BELOW or (self.thread is not None and self.thread.is_alive()):
            return
        self.thread = threading.Thread(
            target=warm_state, args=(self.spark, self.paths), name="warm-state", daemon=True
        )
        self.thread.start()


@dataclass
class StreamTotals:
    batches: int = 0
    received: int = 0
    accepted: int = 0
    rejected: int = 0
    late: int = 0
    dead_lettered: int = 0
    unknown_rows: int = 0
    unknown_fields: set[str] = field(default_factory=set)
    last: dict[int, ApplyResult] = field(default_factory=dict)
    # Data-quality samples of every Nth batch (STREAMSHIFT_STREAM_QUALITY_EVERY), by batch id.
    sampled: dict[int, dict[str, Any]] = field(default_factory=dict)

    def add(self, batch_id: int, result: ApplyResult, dead: int) -> None:
        self.batches += 1
        self.received += result.received
        self.accepted += result.accepted
        self.rejected += result.rejected
        self.late += result.late
        self.dead_lettered += dead
        self.unknown_rows += result.unknown_rows
        self.unknown_fields.update(result.unknown_fields)
        self.last[batch_id] = result  # read by the progress listener, which runs behind
        for old in sorted(self.last)[:-50]:
            del self.last[old]

    def describe(self) -> str:
        return (
            f"{self.batches} batches, {self.received} events: {self.accepted} accepted, "
            f"{self.rejected} quarantined ({self.dead_lettered} to the dead-letter topic), "
            f"{self.late} late"
            + (
                f"; {self.unknown_rows} held fields the flow does not declare "
                f"({', '.join(sorted(self.unknown_fields))}): ignored"
                if self.unknown_rows
                else ""
            )
        )


class GracefulStop:
    """Counts batches in flight; once a stop is requested no new batch starts."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self._idle = threading.Condition()
        self._in_flight = 0
        self.version_moved = False  # stopped because the flow's recorded version changed

    def enter(self) -> None:
        with self._idle:
            if self.requested.is_set():
                raise StopRequested("stop requested before the batch started")
            self._in_flight += 1

    def leave(self) -> None:
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)


def batch_writer(
    settings: Settings,
    flow: Flow,
    target: Target,
    dlq: str,
    label: str,
    totals: StreamTotals,
    stop: GracefulStop,
    on_step: Callable[[int, str], None] | None = None,
) -> Callable[[DataFrame, int], None]:
    """The ``foreachBatch`` function: decode, dead-letter, then the one write path.

    ``on_step(batch_id, step)`` hears of each step of a batch as it ends: a batch of a whole
    backlog runs for minutes, and the heartbeat shows it working meanwhile.
    """
    warmer = StateWarmer(flow, target) if settings.stream_warm_state else None

    def write(batch: DataFrame, batch_id: int) -> None:
        if not still_deployed(target):
            # Another job recorded a new version of the flow (evolve, or a change applied in
            # place): this process runs the code it imported. The batch is not committed; the
            # process stops and is started again (the supervisor does) on the code on disk.
            stop.version_moved = True
            stop.requested.set()
        stop.enter()
        # Spark runs a query's jobs under its run id as the job group: the jobs this call adds
        # to the group are the micro-batch's (reported per batch in the progress log).
        jobs = target.spark.sparkContext
        group = jobs.getLocalProperty("spark.jobGroup.id")
        before = set(jobs.statusTracker().getJobIdsForGroup(group)) if group else set()
        try:
            # Not persisted: the apply's own frame is the batch's one cache (a second cache, of
            # the decoded messages, costs a large batch time: bench/stream_throughput.py). Only
            # undecodable messages keep their Kafka key, value and time, for the dead-letter
            # topic, which gets them from the apply's frame before quarantine records them.
            decoded = batch.transform(
                decode(flow, refuse_unknown=settings.unknown_fields == "refuse")
            )
            undecodable = F.col(MALFORMED).isNotNull()
            changes = decoded.withColumns(
                {c: F.when(undecodable, F.col(c)) for c in (KAFKA_KEY, KAFKA_VALUE, KAFKA_TS)}
            )
            batch_label = f"{label}:{batch_id}"
            dead = [0]

            def dead_letters(checked: DataFrame, rejected_by_rule: dict[str, int]) -> None:
                # A message the decoder refused has its rule first (``parse`` puts the
                # reader's rule before any other), so the counts tell whether there are any:
                # a batch without one skips the pass over the batch.
                if rejected_by_rule.keys() & set(UNDECODABLE_RULES):
                    dead[0] = forward_undecodable(
                        target.spark, settings, flow, target, checked, dlq, batch_label
                    )

            result = apply_changes(
                flow,
                changes,
                KAFKA_SOURCE,
                target,
                batch_id=batch_label,
                on_step=None if on_step is None else partial(on_step, batch_id),
                before_writes=("dead letters", dead_letters),
            )
            every = settings.stream_quality_every
            if every and batch_id % every == 0:
                from streamshift.engine.validate import sample_batch

                # Reads the batch again (from Kafka): one batch in ``every``.
                totals.sampled[batch_id] = sample_batch(
                    settings, flow, target.tables.layer, decoded, batch_id
                )
                for old in sorted(totals.sampled)[:-5]:
                    del totals.sampled[old]
            if group:
                ran = set(jobs.statusTracker().getJobIdsForGroup(group)) - before
                result.spark_jobs = len(ran)
            totals.add(batch_id, result, dead[0])
            if warmer is not None:
                warmer.after_batch(result.accepted)
        except SystemExit as exc:
            # py4j answers the JVM only for an Exception: a SystemExit escaping a callback
            # would leave the micro-batch waiting forever. Fail the batch (and the query).
            raise RuntimeError(f"batch {batch_id} stopped by SystemExit({exc.code!r})") from exc
        finally:
            stop.leave()

    return write


# ---- progress -----------------------------------------------------------------------------
def _offsets(text: str | None) -> dict[str, dict[str, int]] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def phases(progress: Any) -> dict[str, float]:
    """Where a micro-batch's time went: Spark's phases, and the state store's share of them."""
    seconds = {
        k: v / 1000
        for k, v in progress.durationMs.items()
        if k in ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")
    }
    for name, metric in (("state updates", "allUpdatesTimeMs"), ("state commit", "commitTimeMs")):
        if progress.stateOperators:
            seconds[name] = sum(getattr(op, metric) for op in progress.stateOperators) / 1000
    return seconds


def niceness(spark: SparkSession) -> dict[str, int]:
    """CPU niceness of the driver's Python process and of its JVM (STREAMSHIFT_STREAM_NICE)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a classic (not Spark Connect) session
    jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
    return {
        "driver": os.getpriority(os.PRIO_PROCESS, 0),
        "jvm": os.getpriority(os.PRIO_PROCESS, jvm_pid),
    }


class ProgressRecorder(StreamingQueryListener):
    """Writes the heartbeat and one progress line per batch of *one* named query."""

    def __init__(
        self,
        settings: Settings,
        flow: Flow,
        layer: str,
        totals: StreamTotals,
        echo: bool = True,
        topic: str | None = None,
    ):
        self.flow, self.layer, self.totals, self.echo = flow.name, layer, totals, echo
        self.name = heartbeat.query_name(flow.name, layer)
        self.beat_path = heartbeat.heartbeat_path(settings.home, flow.name, layer)
        self.log_path = heartbeat.progress_path(settings.home, flow.name, layer)
        self.query_id: str | None = None
        self._lock = threading.RLock()
        self.beat: dict[str, Any] = {
            "flow": flow.name,
            "layer": layer,
            "pid": os.getpid(),
            "pid_start": process_start(os.getpid()),
            "state": "starting",
            "started_at": heartbeat.now_iso(),
            "topic": topic or topic_for(flow),
        }

    def _save(self, **changes: Any) -> None:
        with self._lock:  # the listener's thread and the batch's steps both save
            heartbeat.update_heartbeat(self.beat_path, self.beat, **changes)

    def working(self, batch_id: int, step: str) -> None:
        """A step of batch ``batch_id`` ended: the heartbeat shows the job alive mid-batch
        (the supervisor restarts a job whose heartbeat is older than its stall limit)."""
        try:
            self._save(working_on={"batch_id": batch_id, "step_done": step})
        except OSError as exc:  # a status file must not fail the batch
            print(f"[stream] heartbeat not written: {exc}", file=sys.stderr, flush=True)

    def onQueryStarted(self, event) -> None:  # type: ignore[no-untyped-def]
        if event.name == self.name:
            self.query_id = str(event.id)
            self._save(state="running", query_id=self.query_id)

    def onQueryProgress(self, event) -> None:  # type: ignore[no-untyped-def]
        p = event.progress
        if str(p.id) != self.query_id:
            return
        source = p.sources[0] if p.sources else None
        latest = _offsets(source.latestOffset) if source else None
        processed = _offsets(source.endOffset) if source else None
        started_from = _offsets(source.startOffset) if source else None
        result = self.totals.last.get(p.batchId)
        record = {
            "flow": self.flow,
            "layer": self.layer,
            "batch_id": p.batchId,
            "timestamp": p.timestamp,
            "input_rows": p.numInputRows,
            "input_rows_per_second": p.inputRowsPerSecond,
            "processed_rows_per_second": p.processedRowsPerSecond,
            "duration_ms": p.batchDuration,
            "latest_offsets": latest,
            "start_offsets": started_from,
            "processed_offsets": processed,
            "lag": heartbeat.offsets_lag(latest, processed),
            "views_committed_at": result.views_committed_at if result else None,
            "seconds_by_step": result.seconds_by_step if result else None,
            "spark_jobs": result.spark_jobs if result else None,
            "spark_phases": phases(p),
            "views_from": result.views_from if result else None,
            "accepted": result.accepted if result else None,
            "rejected": result.rejected if result else None,
            "late": result.late if result else None,
            "unknown_rows": result.unknown_rows if result else None,
            "reference": result.reference if result else None,
            "unknown_fields": list(result.unknown_fields) if result else None,
            "quality": self.totals.sampled.get(p.batchId),
        }
        heartbeat.append_progress(self.log_path, record)
        if record["quality"]:
            self._save(quality=record["quality"])
        with self._lock:
            working = self.beat.get("working_on") or {}
            self._save(
                # the listener runs behind: the next batch may have reported steps already
                working_on=working if working.get("batch_id", -1) > p.batchId else None,
                last_batch_id=p.batchId,
                last_batch_at=heartbeat.now_iso(),
                input_rows=p.numInputRows,
                processed_rows_per_second=p.processedRowsPerSecond,
                duration_ms=p.batchDuration,
                lag=record["lag"],
                latest_offsets=latest,
                processed_offsets=processed,
            )
        if self.echo and p.numInputRows:
            print(
                f"[stream] batch {p.batchId}: {p.numInputRows} events in "
                f"{p.batchDuration / 1000:.1f}s ({p.processedRowsPerSecond:,.0f}/s), "
                f"lag {record['lag']}",
                file=sys.stderr,
                flush=True,
            )

    def onQueryIdle(self, event) -> None:  # type: ignore[no-untyped-def]
        if str(event.id) == self.query_id:
            self._save()

    def onQueryTerminated(self, event) -> None:  # type: ignore[no-untyped-def]
        if str(event.id) == self.query_id:
            lines = (event.exception or "").strip().splitlines()
            self._save(
                state="failed" if lines else "stopped", error=lines[0][:500] if lines else None
            )


# ---- running ------------------------------------------------------------------------------
@dataclass
class StreamRun:
    totals: StreamTotals
    stopped_by_signal: bool
    seconds: float

    def describe(self) -> str:
        how = "stopped on request" if self.stopped_by_signal else "finished"
        return f"stream {how} after {self.seconds:.0f}s: {self.totals.describe()}"


def checkpoint_path(settings: Settings, flow: Flow, layer: str) -> str:
    return str(settings.checkpoints / heartbeat.query_name(flow.name, layer))


# How long a broker may hold a fetch of Spark's Kafka source for more bytes (Kafka's default:
# 500 ms). A micro-batch only reads offsets that exist, yet its task's fetch still waits the
# whole default, most of a one-event batch's Kafka stage (BENCHMARKS.md, "Where a one-event
# serving batch goes"). A batch of many events fills the fetch anyway.
FETCH_MAX_WAIT_MS = 10


def kafka_stream(spark: SparkSession, settings: Settings, topic: str) -> DataFrame:
    """The streaming read of ``topic`` every streaming query here uses (and the benches' floor)."""
    return (
        spark.readStream.format("kafka")
        .options(**settings.spark_kafka_options())
        .option("kafka.fetch.max.wait.ms", str(FETCH_MAX_WAIT_MS))
        .option("subscribe", topic)
        # Changes produced by the kit (EOD corrections) carry their source in headers.
        .option("includeHeaders", "true")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
        .option("maxRecordsPerPartition", str(settings.kafka_max_records_per_partition))
        .load()
    )


def stream_topics(settings: Settings, flow: Flow, topic: str | None = None) -> tuple[str, str]:
    """The stream's topic and its dead-letter topic, created when missing (no JVM: the CLI asks
    before it starts Spark, so an unreachable broker is said at once)."""
    topic = topic or topic_for(flow)
    dlq = dlq_topic(topic)
    ensure_topics(settings, topic, dlq)
    return topic, dlq


def run_stream(
    spark: SparkSession,
    settings: Settings,
    flow: Flow,
    layer: str = "stream",
    *,
    trigger: str = STREAM_TRIGGER,
    available_now: bool = False,
    topic: str | None = None,
    handle_signals: bool = True,
    echo: bool = True,
    stop: GracefulStop | None = None,
) -> StreamRun:
    """Run the flow's streaming query until it finishes (available-now) or is stopped."""
    started = time.monotonic()
    topic, dlq = stream_topics(settings, flow, topic)
    target = Target.open(spark, settings, flow, layer).create_tables()
    ensure_deployed(target)  # the stream runs the recorded version (or applies a change in place)
    totals = StreamTotals()
    stop = stop or GracefulStop()
    name = heartbeat.query_name(flow.name, layer)
    recorder = ProgressRecorder(settings, flow, layer, totals, echo, topic)
    recorder.beat["nice"] = niceness(spark)
    spark.streams.addListener(recorder)
    source = kafka_stream(spark, settings, topic)
    writer = (
        source.writeStream.queryName(name)
        .foreachBatch(
            batch_writer(settings, flow, target, dlq, name, totals, stop, recorder.working)
        )
        .option("checkpointLocation", checkpoint_path(settings, flow, layer))
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime=trigger)
    )
    previous = _install_signal_handlers(stop) if handle_signals else {}
    try:
        query = writer.start()
        if echo:
            print(
                f"[stream] {name}: {topic} → {layer} layer "
                f"({'available-now' if available_now else 'trigger ' + trigger}), "
                f"checkpoint {checkpoint_path(settings, flow, layer)}",
                file=sys.stderr,
                flush=True,
            )
        _wait(query, stop)
        if stop.version_moved:
            raise FlowChangedError(
                f"{name}: the flow's recorded version changed while it ran (streamshift "
                "evolve, or a change applied in place); stopped before its next batch, "
                "restart it to run the code on disk (it resumes from its checkpoint)"
            )
        error = query.exception()
        if error is not None and not stop.requested.is_set():
            raise StreamError(
                f"streaming query {name} failed: {str(error).splitlines()[0]}; "
                "restart it — it resumes from its checkpoint"
            )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _drain_listener_bus(spark)
        spark.streams.removeListener(recorder)
    return StreamRun(totals, stop.requested.is_set(), time.monotonic() - started)


def _wait(query, stop: GracefulStop) -> None:  # type: ignore[no-untyped-def]
    from pyspark.errors import StreamingQueryException

    while query.isActive:
        if stop.requested.is_set():
            # Batches starting from now raise StopRequested (not committed); let the batch in
            # flight finish, then stop.
            stop.wait_idle(timeout=600)
            query.stop()
            return
        try:
            query.awaitTermination(0.5)
        except StreamingQueryException:
            return


def _drain_listener_bus(spark: SparkSession, timeout_ms: int = 10_000) -> None:
    """Let the last progress events reach the recorder before it is removed."""
    # Best effort: a missed last heartbeat is not an error.
    with contextlib.suppress(Exception):
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(timeout_ms)


def _install_signal_handlers(stop: GracefulStop) -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}

    def request_stop(signum, frame) -> None:  # type: ignore[no-untyped-def]
        print(
            f"[stream] {signal.Signals(signum).name}: finishing the batch in flight, then stopping",
            file=sys.stderr,
            flush=True,
        )
        stop.requested.set()

    previous: dict[int, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, request_stop)
    return previous
