"""The demo: one flow walked the whole road, batch → shadow → stream → kappa, on the embedded
local stack.

1. stage ``batch``: a generated day loaded from its EOD file (poison rows among them), then
   its corrections;
2. stage ``shadow``: the local broker and the streaming job start; the next day's events go
   through Kafka as they happen, one correction is timed from produce to the view table,
   and at end of day the EOD files load the batch layer and reconciliation compares the two;
   more days follow, one with a gap in the stream — reconciliation names the break and the
   gate refuses promotion until enough clean days follow (where no promotion can come between,
   a day's events go to Kafka while the previous day's EOD run runs, as trading goes on);
3. stage ``stream``: the stream misses an event, the EOD run finds it against the EOD file,
   produces it to the topic as a correction and reconciles clean; two more days reconcile
   clean against their files, the evidence for kappa;
4. stage ``kappa`` (approved by a second user): no EOD file; the day closes at its cut-off once
   the stream has read what the topic held then, and is reconciled against the clearing
   house's file; a late event arrives after the close, is recorded as late, and the late-data
   DAG re-reconciles the date; the day's report shows it.

The days are the latest business days, the last one the latest whose cut-off has passed, so
that it can close. Everything lives under ``STREAMSHIFT_HOME/demo`` (emptied at the start);
what the demo starts (broker, streaming job) it stops. Any flow with a generator can be walked
(``--flow``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamshift.control.report import report_dir
from streamshift.control.serving import view_rows
from streamshift.control.stages import PromotionRefused, check_promotion
from streamshift.control.trace import COLUMNS, table_rows, trace
from streamshift.spec.catalog import external_file, landing_dir
from streamshift.spec.dayfiles import DEMO_ROWS
from streamshift.spec.formatting import format_table
from streamshift.spec.registry import get_flow, get_generator
from streamshift.spec.settings import Settings
from streamshift.spec.stages import needs_approval
from streamshift.store.endpoints import without_connect_client
from streamshift.store.heartbeat import processed_events, read_heartbeat, read_status
from streamshift.store.kafka import admin_client
from streamshift.store.produce import produce_rows, read_rows
from streamshift.store.records import current_stage

LATER_DAY_ROWS = 1_500
DEMO_WINDOW = 2  # promotion window for the demo (the default setting is 5)


def _say(message: str) -> None:
    print(f"\n== {message}", flush=True)


def traced(flow: Any, tables: Any, key: str) -> None:
    """Print ``streamshift trace``'s table of ``key``: every delivery, its source and outcome."""

    sys.stdout.write(format_table(COLUMNS, table_rows(trace(flow, tables, key))))
    sys.stdout.flush()


@dataclasses.dataclass(frozen=True)
class DemoDays:
    """The demo's business days, oldest first; the last (kappa's) is the latest business day
    whose cut-off plus grace has passed, so that it can close."""

    batch: dt.date  # loaded in stage batch
    first_shadow: dt.date  # the first shadow day, streamed as it happens
    shadow: tuple[dt.date, ...]  # then three more shadow days, the first with a gap in the stream
    stream: tuple[dt.date, ...]  # two in stage stream: the evidence for kappa
    kappa: dt.date

    @classmethod
    def ending_by(cls, cut_off_at, now: dt.datetime) -> DemoDays:  # type: ignore[no-untyped-def]
        """``cut_off_at(date)``: when the date closes (UTC); ``now``: an aware datetime."""
        days: list[dt.date] = []
        d = now.astimezone(dt.UTC).date()
        while len(days) < 8:  # newest first: business days, the newest one already closable
            if d.weekday() < 5 and (days or cut_off_at(d) <= now):
                days.append(d)
            d -= dt.timedelta(days=1)
        days.reverse()
        return cls(days[0], days[1], tuple(days[2:5]), tuple(days[5:7]), days[7])


def run_demo(settings: Settings, flow: str, rows: int = DEMO_ROWS) -> int:
    from streamshift.engine.spark import get_spark
    from streamshift.local.airflow import USER, LocalAirflow, password

    settings = dataclasses.replace(
        settings, home=settings.home / "demo", promotion_window=DEMO_WINDOW
    )
    airflow = LocalAirflow(settings)
    airflow.down()  # a previous demo's Airflow, if one was left running
    shutil.rmtree(settings.home, ignore_errors=True)
    settings.home.mkdir(parents=True)
    print(
        f"demo data under {settings.home} (emptied first); Spark {settings.spark_master}",
        file=sys.stderr,
        flush=True,
    )
    _say("starting the local Airflow 3 (the EOD side of the demo runs as DAG runs)")
    airflow.up()
    print(f"Airflow UI: {airflow.url}  login: {USER} / {password(settings)}  (look while it runs)")
    spark = None
    try:
        # The demo's own reads run on the warm engine Airflow's tasks use: no third JVM.
        spark = get_spark(settings, app_name="streamshift-demo", engine=True)
        demo = _Demo(spark, settings, flow, rows, airflow)
        demo.batch_stage()
        demo.with_stream(demo.shadow_stream_and_kappa_stages)
        demo.closing_words()
    finally:
        if spark is not None:
            spark.stop()  # its session ends before the engine does
        _say("stopping the local Airflow")
        airflow.down()
    return 0


class _Demo:
    def __init__(self, spark, settings: Settings, flow: str, rows: int, airflow) -> None:  # type: ignore[no-untyped-def]
        from streamshift.engine.write.target import Target

        self.spark, self.settings, self.rows = spark, settings, rows
        self.flow = get_flow(flow)
        self.view = self.flow.views[0]
        self.topic = f"{flow}-demo"
        self.dag_id = f"eod_{flow}"
        self.log = settings.home / "logs" / f"stream-{flow}.log"
        self.batch = Target.open(spark, settings, self.flow, "batch").create_tables()
        self.stream = Target.open(spark, settings, self.flow, "stream").create_tables()
        self.files: dict[dt.date, Any] = {}
        self.produced = 0
        self.job: subprocess.Popen[bytes] | None = None
        self.airflow = airflow
        self.client = airflow.client()
        self.runs = 0
        self.traced: str | None = None
        self.begun: set[dt.date] = set()  # days whose events went out during an EOD run
        self.days = DemoDays.ending_by(self.flow.cut_off.at, dt.datetime.now(dt.UTC))
        # The DAG is paused at creation; the demo's runs are triggered, its schedule's own run
        # (for the latest business day) waits for a file the demo never lands.
        self.client.wait_for_dag(self.dag_id)
        self.client.unpause(self.dag_id)
        # The late-data DAG runs hourly from the start, as in use: the run the scheduler makes
        # for the latest hour on unpausing finds nothing late, and the one the demo triggers
        # after the late events re-reconciles their date (unpaused only then, both would).
        self.late_dag = f"late_data_{self.flow.name}"
        self.client.wait_for_dag(self.late_dag)
        self.client.unpause(self.late_dag)

    # ---- helpers ------------------------------------------------------------------------
    def day_files(self, day: dt.date, rows: int):  # type: ignore[no-untyped-def]

        generate_day = get_generator(self.flow.name)
        if day not in self.files:
            self.files[day] = generate_day(
                day,
                rows,
                self.settings.home / "files" / str(day),
                seed=day.toordinal(),
                progress=rows > 5000,
            )
        return self.files[day]

    def produce(self, rows, timestamp_ms: int | None = None) -> None:  # type: ignore[no-untyped-def]

        result = produce_rows(
            self.settings,
            self.flow,
            rows,
            topic=self.topic,
            progress=False,
            timestamp_ms=timestamp_ms,
        )
        if result.failed:
            raise RuntimeError(result.describe())
        self.produced += result.acknowledged
        print(result.describe())

    def beat(self) -> dict:  # type: ignore[type-arg]

        return read_heartbeat(self.settings.home, self.flow.name, "stream")

    def wait_for(self, done, what: str, timeout: float = 600) -> None:  # type: ignore[no-untyped-def]
        assert self.job is not None
        deadline, last_print = time.monotonic() + timeout, 0.0
        while time.monotonic() < deadline:
            beat = self.beat()
            if beat.get("pid") == self.job.pid and done(beat):
                return
            if self.job.poll() is not None:
                raise RuntimeError(
                    f"the stream job exited (code {self.job.returncode}); see {self.log}"
                )
            if time.monotonic() - last_print > 10:
                last_print = time.monotonic()
                print(
                    f"  ... waiting for {what} (last batch {beat.get('last_batch_id')})", flush=True
                )
            time.sleep(0.2)  # a small file's read
        raise RuntimeError(f"timed out waiting for {what}")

    def caught_up(self) -> None:

        self.wait_for(
            lambda b: processed_events(b, self.topic) >= self.produced, "the stream to catch up"
        )

    def streamed_day(self, day: dt.date, rows, then=None) -> dict:  # type: ignore[no-untyped-def, type-arg]
        """A day as it happens (``rows`` on Kafka, unless it began during the previous day's EOD
        run); at its end the day's whole file lands while the stream catches up; then its EOD
        run. ``then``: (the next day, its rows), begun while this day's EOD run runs."""
        if day not in self.begun:
            self.produce(rows)
        file = self.land(day, "demo_eod.csv", self.files[day].eod)
        self.caught_up()
        return self.eod_run(day, file, meanwhile=then and self.begin(*then))

    def begin(self, day: dt.date, rows) -> Callable[[], None]:  # type: ignore[no-untyped-def]
        """What :meth:`eod_run` does while the run runs: the next business day's events on
        Kafka, as trading goes on while the last day's batch runs (the stream applies them
        beside the EOD run's Spark job, each about a core)."""

        def produce() -> None:
            print(f"  meanwhile {day} begins: its events on Kafka while this EOD run runs")
            self.produce(rows)
            self.begun.add(day)

        return produce

    def land(self, day: dt.date, name: str, *paths) -> str:  # type: ignore[no-untyped-def]
        """Put the files (rows concatenated under one header) in the landing folder as ``name``;
        return the path the DAG's ``file`` param takes (relative to the landing folder)."""

        folder = landing_dir(self.settings, self.flow.name) / day.isoformat()
        folder.mkdir(parents=True, exist_ok=True)
        lines = paths[0].read_text().splitlines()
        for path in paths[1:]:
            lines += path.read_text().splitlines()[1:]
        (folder / name).write_text("\n".join(lines) + "\n")
        return f"{day}/{name}"

    def eod_run(
        self,
        day: dt.date,
        file: str | None,
        mode: str = "delta",
        meanwhile: Callable[[], None] | None = None,
    ) -> dict:  # type: ignore[type-arg]
        """The EOD side: trigger eod_<flow> over the REST API, as the UI's Trigger form does,
        wait for it, print its published summary and the worst breaks of the day. ``file``:
        the landed file to load (None in stage kappa, which has none); ``meanwhile``: done
        once the run is triggered, before waiting for it."""
        self.runs += 1
        run_id = f"demo-{self.runs:02d}-{day}"
        conf = {"business_date": str(day), "mode": mode}
        if file is not None:
            conf["file"] = file
        dag_id = self.dag_id
        self.client.trigger(dag_id, conf, run_id=run_id)
        print(f"  triggered {dag_id} {run_id} with {conf}")
        print(f"  watch it: {self.airflow.url}/dags/{dag_id}/runs/{run_id}")
        if meanwhile is not None:
            meanwhile()
        run = self.client.wait_for_run(dag_id, run_id, timeout=1800, progress=False)
        states = self.client.task_states(dag_id, run_id)
        spark_tasks = ("load_eod_file", "close_day", "reconcile", "correct_stream_layer")
        ran = ", ".join(t for t in spark_tasks if states.get(t) == "success")
        skipped = ", ".join(t for t in spark_tasks if states.get(t) == "skipped")
        if run["state"] != "success":
            raise RuntimeError(
                f"{dag_id} {run_id} {run['state']} ({states}); see its task logs "
                f"in the UI at {self.airflow.url}"
            )
        summary = self.client.returned(dag_id, run_id, "publish_summary")
        print(
            f"  {run_id}: Spark jobs {ran}"
            + (f"; skipped in this stage: {skipped}" if skipped else "")
        )
        print(
            f"  summary: stage {summary['stage']}, {summary['verdict']} in "
            f"{summary['reconciliations']} reconciliations; report {summary['report']}"
        )
        report = json.loads(Path(summary["report"]).with_name("report.json").read_text())
        for b in report.get("worst_breaks", [])[:4]:
            print(
                f"     {b['kind']:14} {b['key']} {b['column'] or ''} "
                f"{b['left_value']} → {b['right_value']}"
            )
        return dict(summary)

    def promote(self, to: str) -> bool:
        """Through the gate; into stream or kappa also through the streamshift_promote DAG,
        where the demo's second user, ``approver``, approves the admin's request (four eyes)."""
        from streamshift.engine.jobs.promote import promote
        from streamshift.local.airflow import APPROVER

        name = self.flow.name
        try:
            change = check_promotion(self.settings, name, to)
        except PromotionRefused as refused:
            print(f"  REFUSED: {refused}")
            return False
        if not needs_approval(current_stage(self.settings, name), to):
            print(
                f"  promoted: {promote(self.spark, self.settings, name, to, by='demo').describe()}"
            )
            return True
        dag = "streamshift_promote"
        run_id = self.client.trigger(dag, {"flow": name, "to": to, "reason": "demo"})["dag_run_id"]
        print(f"  gate open ({change.describe()}); {dag} {run_id} waits for a second user")
        self.client.wait_for_input(dag, run_id, "approve")
        print(f"  {APPROVER} approves under Browse → Required actions ({self.airflow.url})")
        self.airflow.client(APPROVER).respond(dag, run_id, "approve", "Approve")
        run = self.client.wait_for_run(dag, run_id, timeout=600, progress=False)
        if run["state"] != "success":
            raise RuntimeError(f"{dag} {run_id} {run['state']}: see its task logs in the UI")
        print(f"  promoted: {change.describe()} (approved by {APPROVER})")
        return True

    def print_rows(self, df) -> None:  # type: ignore[no-untyped-def]

        rows = [["" if v is None else str(v) for v in r] for r in df.collect()]
        print(format_table(df.columns, rows), end="")

    # ---- stage batch ----------------------------------------------------------------------
    def batch_stage(self) -> None:
        from pyspark.sql import functions as F

        from streamshift.engine.write.target import read

        dag, view, day = self.dag_id, self.view, self.days.batch
        _say(f"stage batch: generating {self.rows} {self.flow.name} rows for {day}")
        files = self.day_files(day, self.rows)
        # The poison rows come with the day's file, a few bad rows among many as in real
        # feeds: in the small corrections file they would be over 1% of its rows, and the raw
        # suite's id-presence expectation (fail, mostly 99%) would stop the run there.
        _say(f"stage batch: the day's EOD file, poison rows among them, lands; {dag} loads it")
        self.eod_run(day, self.land(day, "demo_eod.csv", files.eod, files.poison))
        _say(f"stage batch: a corrections (delta) file lands; {dag} again")
        self.eod_run(day, self.land(day, "demo_corrections.csv", files.corrections))

        rows = read(self.spark, self.batch.tables.view(view.name)).where(
            F.col(self.flow.business_date) == F.lit(day)
        )
        measure = next(c for c in rows.columns if c not in view.group_key)
        _say(f"{view.name} for {day}, the 10 largest by {measure} (batch layer)")
        self.print_rows(rows.orderBy(F.col(measure).desc()).limit(10))
        live = read(self.spark, self.batch.tables.current).where(
            (F.col(self.flow.business_date) == F.lit(day)) & ~self.flow.deleted()
        )
        print(f"{rows.count()} {view.name} rows over {live.count()} live {self.flow.name} rows")
        _say("quarantine summary (rows rejected, by rule)")
        self.print_rows(
            read(self.spark, self.batch.tables.quarantine).groupBy("rule").count().orderBy("rule")
        )

    # ---- broker and stream job ----------------------------------------------------------
    def with_stream(self, body) -> None:  # type: ignore[no-untyped-def]
        from streamshift.local.broker import LocalBroker

        broker = LocalBroker.from_settings(self.settings)
        _say(f"starting the local Kafka broker on {broker.bootstrap}")
        started_broker = broker.start()
        print(
            f"Kafka broker {broker.status().describe()}"
            + ("" if started_broker else " (already running; left running at the end)")
        )
        try:
            if self.topic in admin_client(self.settings).list_topics(timeout=10).topics:
                admin_client(self.settings).delete_topics([self.topic])[self.topic].result(60)
                time.sleep(2)
            self.start_stream_job()
            body()
        finally:
            if self.job is not None and self.job.poll() is None:
                _say("stopping the stream job (SIGTERM: it finishes the batch in flight)")
                self.job.send_signal(signal.SIGTERM)
                try:
                    self.job.wait(120)
                except subprocess.TimeoutExpired:
                    self.job.kill()
                print(f"stream job exited with code {self.job.returncode}")
            if started_broker:
                broker.stop()
                print("Kafka broker stopped")

    def start_stream_job(self) -> None:

        log, flow = self.log, self.flow.name
        log.parent.mkdir(parents=True, exist_ok=True)
        env = {
            # The stream is an application of its own (a local session), not an engine client.
            **without_connect_client(os.environ),
            "STREAMSHIFT_HOME": str(self.settings.home),
            "STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS": self.settings.kafka_bootstrap_servers,
        }
        _say(
            f"starting the streaming job: streamshift stream --flow {flow} --topic {self.topic} "
            f"(log: {log})"
        )
        with open(log, "ab") as out:
            self.job = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "streamshift.cli",
                    "stream",
                    "--flow",
                    flow,
                    "--topic",
                    self.topic,
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.wait_for(lambda b: b.get("state") == "running", "the streaming query to start", 180)
        print("streaming query running")

    # ---- stages shadow and stream -------------------------------------------------------
    def _is_retraction(self, row: dict[str, str]) -> bool:
        values = self.flow.retraction_values
        return bool(values) and all(row.get(c) == str(v) for c, v in values.items())

    def shadow_stream_and_kappa_stages(self) -> None:
        self.shadow_and_stream_stages()
        self.kappa_stage()

    def shadow_and_stream_stages(self) -> None:
        from pyspark.sql import functions as F

        from streamshift.engine.write.target import read

        flow, key, version, view = self.flow, self.flow.key, self.flow.version, self.view
        _say(f"promoting {flow.name} to stage shadow: the stream layer is written beside the batch")
        self.promote("shadow")

        first = self.days.first_shadow
        files = self.day_files(first, self.rows)
        _say(f"stage shadow: {first}, the day's events on Kafka topic {self.topic} as they happen")
        self.produce(read_rows(files.eod, flow))
        self.caught_up()

        correction = next(
            r for r in read_rows(files.corrections, flow) if not self._is_retraction(r)
        )
        # The view group the corrected row sits in now (group columns may be derived, so they
        # are read from current state).
        current = read(self.spark, self.stream.tables.current)
        was = current.where(F.col(key) == F.lit(correction[key])).first()
        assert was is not None, f"{correction[key]} is not in the stream layer"
        group = F.lit(True)
        for column in view.group_key:
            group = group & (F.col(column) == F.lit(was[column]))

        def view_rows():  # type: ignore[no-untyped-def]
            return read(self.spark, self.stream.tables.view(view.name)).where(group)

        _say(
            f"one correction on Kafka: {key} {correction[key]}, {version} {was[version]} → "
            f"{correction[version]}; its {view.name} row before:"
        )
        before = view_rows().collect()
        self.print_rows(view_rows())
        sent = time.monotonic()
        self.produce([correction])
        # The stream's heartbeat counts an event processed once its batch has committed the
        # views: wait on that file, not by reading the view over and over on the engine (a
        # query every fraction of a second takes a core from the stream it waits for).
        self.caught_up()
        seconds = time.monotonic() - sent
        if view_rows().collect() == before:
            raise RuntimeError(f"the stream processed the correction but {view.name} is unchanged")
        print(f"the row {seconds:.1f} s after the correction was produced:")
        self.print_rows(view_rows())

        _say("the rest of the corrections and the poison rows, on Kafka")
        self.produce(read_rows(files.corrections, flow))
        self.produce(read_rows(files.poison, flow))
        landed = self.land(first, "demo_eod.csv", files.eod, files.corrections, files.poison)
        self.caught_up()
        _say(
            f"end of {first}: the EOD files land; {self.dag_id} loads the batch layer and "
            "reconciles stream vs batch (Airflow)"
        )
        days = self.days.shadow
        gap_day = days[0]

        streamed: dict[dt.date, list[dict[str, str]]] = {}  # each day's events, read once
        for day in days:
            rows = read_rows(self.day_files(day, LATER_DAY_ROWS).eod, flow)
            streamed[day] = rows[3:] if day == gap_day else rows

        self.eod_run(first, landed, meanwhile=self.begin(gap_day, streamed[gap_day]))
        for day, after in zip(days, (*days[1:], None), strict=True):
            gap = " — the stream misses 3 events today" if day == gap_day else ""
            _say(
                f"stage shadow, {day}: the day on Kafka, then the EOD load and reconciliation{gap}"
            )
            # The next day begins during this day's EOD run unless a promotion may follow it.
            then = (after, streamed[after]) if day == gap_day and after else None
            self.streamed_day(day, streamed[day], then)
            if day != gap_day:  # first with the gap in the window (refused), then without it
                _say(f"promote to stream? (needs the last {DEMO_WINDOW} reconciled dates clean)")
                if self.promote("stream"):
                    break

        d5 = self.days.stream[0]
        rows = read_rows(self.day_files(d5, LATER_DAY_ROWS).eod, flow)
        lost = rows[7]
        _say(
            f"stage stream, {d5}: the stream misses {key} {lost[key]}; the EOD run "
            "reconciles the EOD file against the stream layer and corrects it"
        )
        stream_days = self.days.stream[1:]

        streamed_eod = {  # each day's events on Kafka, read once
            day: read_rows(self.day_files(day, LATER_DAY_ROWS).eod, flow) for day in stream_days
        }
        then = (stream_days[0], streamed_eod[stream_days[0]]) if stream_days else None
        self.streamed_day(d5, [r for r in rows if r is not lost], then)
        repaired = (
            read(self.spark, self.stream.tables.current)
            .where(F.col(key) == F.lit(lost[key]))
            .select(key, version, "_source")
        )
        print(f"  the missed {key} in the stream layer now (its source is the EOD correction):")
        self.print_rows(repaired)

        self.traced = lost[key]
        for day in stream_days:
            _say(f"stage stream, {day}: the day on Kafka; the EOD run reconciles its file clean")
            self.streamed_day(day, streamed_eod[day])

    def kappa_stage(self) -> None:
        """Stage kappa: no EOD file; the day closes at its cut-off, a late event after it."""

        flow = self.flow
        _say(
            f"promote to kappa? (needs the last {DEMO_WINDOW} stage-stream reconciliations of "
            "the EOD file clean)"
        )
        if not self.promote("kappa"):
            raise RuntimeError(f"the gate refused {flow.name} into kappa: see the lines above")
        day = self.days.kappa
        files = self.day_files(day, LATER_DAY_ROWS)
        cut_off = flow.cut_off.at(day)
        # The producers stamp each event with when it happened on the day: before the cut-off.
        sent_at = int((cut_off - dt.timedelta(hours=4)).timestamp() * 1000)
        _say(
            f"stage kappa, {day}: the day on Kafka, no EOD file; it closes at its cut-off "
            f"({cut_off:%Y-%m-%d %H:%M} UTC with the grace) once the stream has read what the "
            "topic held then"
        )
        # The day as it happened (its events, then their corrections): what the clearing
        # house's file was made from, so only its deliberate breaks remain.
        self.produce(read_rows(files.eod, flow) + read_rows(files.corrections, flow),
                     timestamp_ms=sent_at)  # fmt: skip
        self.caught_up()
        external = external_file(self.settings, flow.name, str(day))
        external.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(files.external, external)
        print(f"  the clearing house's file for {day} lands: {external.name}")
        self.eod_run(day, None)

        late = read_rows(files.late, flow)
        _say(
            f"after the close: {len(late)} late events for {day} arrive on Kafka; the stream "
            "applies them and records them as late"
        )
        self.produce(late)
        self.caught_up()
        recorded = view_rows(self.settings, flow, "stream", "late_events")
        mine = [r for r in recorded.as_dicts() if str(r.get(flow.business_date)) == str(day)]
        print(f"  streamshift show --view late_events --layer stream: {len(mine)} for {day}")
        dag = self.late_dag
        _say(f"{dag}: the late date is re-reconciled against the clearing house's file")
        run_id = self.client.trigger(dag, {}, run_id=f"demo-late-{day}")["dag_run_id"]
        print(f"  watch it: {self.airflow.url}/dags/{dag}/runs/{run_id}")
        run = self.client.wait_for_run(dag, run_id, timeout=900, progress=False)
        if run["state"] != "success":
            raise RuntimeError(f"{dag} {run_id} {run['state']}: see its task logs in the UI")
        report = report_dir(self.settings, flow.name, day)
        summary = json.loads((report / "report.json").read_text())
        breaks = sum(summary["breaks_by_kind"].values())
        print(
            f"  the report for {day} now: {breaks} breaks against the clearing house's file "
            f"(the late rows moved their groups away from it); {len(summary['late_events'])} "
            "late events listed, each linking to its trace"
        )
        for status in read_status(self.settings.home, self.settings):
            print(f"streamshift status: {status.describe()}")
        self.report = (report / "report.html", report / "report.json")  # written by the DAG run
        self.last_day = day

    def closing_words(self) -> None:
        if self.traced is not None:
            _say(
                f"where's my adjustment? {self.flow.key} {self.traced}, the row the stream missed "
                "and the EOD run corrected, traced in the stream layer (streamshift trace)"
            )
            traced(self.flow, self.stream.tables, self.traced)
        html_path, json_path = self.report
        _say("the day's report")
        print(f"  {html_path}\n  {json_path} (for machines)")
        env = f"STREAMSHIFT_HOME={self.settings.home}"
        _say("try it yourself")
        flow, view = self.flow.name, self.view.name
        print(f"  {env} .venv/bin/streamshift stage --flow {flow}")
        print(
            f"  {env} .venv/bin/streamshift show --flow {flow} --view {view} --layer serving "
            f"--date {self.last_day}"
        )
        print(f"  {env} .venv/bin/streamshift report --flow {flow} --date {self.days.first_shadow}")
        print(f"  {env} .venv/bin/streamshift show --flow {flow} --view late_events --layer stream")
        if self.traced is not None:  # where the row the stream missed came from
            print(f"  {env} .venv/bin/streamshift trace --flow {flow} --key '{self.traced}'")
        print(f"  {env} .venv/bin/streamshift status")
        print(f"  {env} .venv/bin/streamshift airflow up    # the demo's DAG runs, in the UI")
        print(
            f"  then open {self.airflow.url}/plugin/migration (Browse → Migration): stages, "
            "evidence, stream health, promotion"
        )
