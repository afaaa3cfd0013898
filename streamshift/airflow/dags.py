"""DAG factories: ``eod_<flow>``, ``late_data_<flow>`` and ``maintenance_<flow>`` per flow;
``stream_supervisor`` and ``streamshift_promote`` once.

Imported by ``dags/streamshift_dags.py`` at parse time, so this module imports ``airflow.sdk``,
``pendulum`` and the Spark-free core only. Spark work runs on the warm engine through the
``spark_connect`` connection (:mod:`streamshift.airflow.engine_operator`: the task's
process is a Spark Connect client, so the same DAG runs against a local engine or one whose
master is a cluster); upkeep alone is a ``spark-submit`` through ``spark_default``. The Python
tasks import what they need when they run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.utils.skipmixin import SkipMixin
from airflow.sdk import (
    DAG,
    Asset,
    BaseOperator,
    Param,
    PokeReturnValue,
    TriggerRule,
    get_current_context,
    task,
)
from airflow.sdk.exceptions import AirflowFailException

from streamshift.airflow import tasks as T
from streamshift.airflow.approval import EvolveApproval, PromotionApproval, SwitchApproval
from streamshift.airflow.engine_operator import EngineOperator
from streamshift.airflow.waiting import CompleteFileSensor
from streamshift.control.cutoff import check_cut_off
from streamshift.control.jobs import RequestRefused, check
from streamshift.control.report import write_report
from streamshift.control.stages import PromotionRefused, check_promotion
from streamshift.control.trace import default_layer
from streamshift.entry import BATCH_JOB
from streamshift.spec.catalog import SPARK_POOL, landing_dir
from streamshift.spec.project import ENV as PROJECT_ENV
from streamshift.spec.project import ProjectError, find_project
from streamshift.spec.registry import flow_names, get_flow
from streamshift.spec.requests import (
    JobRequest,
    MaintainRequest,
    PlanRequest,
    PromoteRequest,
    RedriveRequest,
    SwitchRequest,
)
from streamshift.spec.settings import Settings, load_settings
from streamshift.spec.stages import NAMES
from streamshift.store.eodfile import BadFileError
from streamshift.store.quality import QualityError
from streamshift.store.quarantine import pending
from streamshift.store.records import current_stage, late_dates_to_reconcile
from streamshift.store.versions import recorded_version

OWNER = "streamshift"
START = pendulum.datetime(2026, 1, 1, tz="UTC")
# After the close of business, Monday to Friday (the logical date is the business date).
EOD_SCHEDULE = "0 22 * * 1-5"
MAINTENANCE_SCHEDULE = "0 3 * * 0"  # Sundays, when no EOD run writes
DEFAULT_ARGS: dict[str, Any] = {
    "owner": OWNER,
    "retries": 2,
    # The first retry after 15-30 s, the second after 30-60 s (Airflow adds its jitter).
    "retry_delay": dt.timedelta(seconds=15),
    "retry_exponential_backoff": 2.0,  # a multiplier: True would be 1.0, a constant delay
    "max_retry_delay": dt.timedelta(minutes=10),
}


def _settings() -> Settings:
    return load_settings()


def published_asset(flow: str) -> Asset:
    """The Airflow asset a business day's publication updates: ``eod_<flow>``'s when the day is
    loaded (or corrected), reconciled, through the data-quality verdict and reported (``cause``
    ``eod``); ``late_data_<flow>``'s when late events changed a closed day and it was
    re-reconciled and re-reported (``cause`` ``late data``). A downstream DAG runs on it with
    ``schedule=published_asset(flow)``; each event's ``extra`` holds the summary
    (``business_date``, ``cause``, ``stage``, ``verdict``, ``breaks``, ``quality``, ``report``)."""
    return Asset(
        name=f"{flow}_eod_published",
        uri=f"x-streamshift://{flow}/eod-published",
        group="streamshift",
    )


class StreamshiftSparkSubmitOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` whose failure says, in one line, what the job itself said.

    The job (``streamshift.cli.main``) writes its error message to ``STREAMSHIFT_ERROR_FILE``;
    on failure the task raises with that line instead of only spark-submit's exit code. When
    the job marks it final (bad input, a refused request: a retry would fail the same way), the
    task fails at once instead of spending its retries on more Spark jobs.
    """

    def execute(self, context: Any) -> Any:
        import os
        import tempfile

        fd, path = tempfile.mkstemp(prefix="streamshift-error-", suffix=".txt")
        os.close(fd)
        self.env_vars = {**(self.env_vars or {}), "STREAMSHIFT_ERROR_FILE": path}
        try:
            return super().execute(context)
        except Exception as exc:
            said, _, marks = Path(path).read_text().strip().partition("\n")
            if said and marks.strip() == "final":
                from airflow.sdk.exceptions import AirflowFailException

                raise AirflowFailException(f"{self.task_id} failed: {said}") from exc
            if said:
                raise RuntimeError(f"{self.task_id} failed: {said}") from exc
            raise
        finally:
            Path(path).unlink(missing_ok=True)


def _spark_kwargs(
    task_id: str, application: Path, settings: Settings, doc: str, **extra: Any
) -> dict[str, Any]:
    """A Spark job through ``spark_default``: jars and the deployment's conf, never a master."""
    from streamshift.engine.spark import submit_conf, tuning_conf

    conf = {**submit_conf(settings), **tuning_conf(settings)}
    return {
        "task_id": task_id,
        "conn_id": "spark_default",
        "application": str(application),
        "jars": ",".join(str(j) for j in settings.spark_jars),
        "conf": conf,
        "driver_memory": settings.spark_driver_memory,
        "name": f"streamshift-{task_id}",
        "pool": SPARK_POOL,
        "doc_md": doc,
        **extra,
    }


def spark_task(
    task_id: str, application: Path, args: Any, settings: Settings, doc: str, **extra: Any
) -> SparkSubmitOperator:
    """A job as a ``spark-submit`` (upkeep only: ``maintain`` checkpoints Delta's log through
    the JVM, which Spark Connect does not offer)."""
    return StreamshiftSparkSubmitOperator(
        application_args=args, **_spark_kwargs(task_id, application, settings, doc, **extra)
    )


ENGINE_CONN = "spark_connect"


def _engine_kwargs(task_id: str, doc: str, **extra: Any) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "conn_id": ENGINE_CONN,
        "python_callable": T.run_on_engine,
        "pool": SPARK_POOL,
        "doc_md": doc,
        **extra,
    }


def engine_task(task_id: str, request: Any, doc: str, **extra: Any) -> Any:
    """The job ``request`` (a typed request's JSON, usually an XCom) on the warm engine, in the
    task's own process (no JVM in the worker), through the ``spark_connect`` connection."""
    return EngineOperator(op_kwargs={"request": request}, **_engine_kwargs(task_id, doc, **extra))


def mapped_engine_task(task_id: str, requests: Any, doc: str) -> Any:
    """One engine job per element of ``requests`` (an XCom list of ``{"request": JSON}``;
    dynamic task mapping)."""
    return EngineOperator.partial(**_engine_kwargs(task_id, doc)).expand(op_kwargs=requests)


@contextlib.contextmanager
def _no_retry_on(*errors: type[Exception]) -> Iterator[None]:
    """Fail the task at once, in one line, on errors a retry cannot fix (bad params, files)."""
    from airflow.sdk.exceptions import AirflowFailException

    try:
        yield
    except errors as exc:
        raise AirflowFailException(str(exc)) from exc


def _run_params(context: Any) -> dict[str, Any]:
    """The run's params, each one the DAG declares (a misspelt conf key fails the run at once,
    naming the DAG's params)."""
    params = dict(context["params"])
    dag = context["dag"]
    with _no_retry_on(T.InputError):
        T.refuse_unknown_params(dag.dag_id, params, dag.params.keys())
    return params


def _logical_day() -> dt.date:
    context = get_current_context()
    logical = context.get("logical_date") or context["dag_run"].run_after
    return pendulum.instance(logical).date()


def _publish(asset: Asset, inputs: dict[str, Any]) -> dict[str, Any]:
    """The day's summary (``tasks.summary``): logged as one line, carried by the asset's event
    as its ``extra``, returned for XCom. Called by a task with ``outlets=[asset]``."""
    result, line = T.summary(_settings(), inputs)
    print(f"SUMMARY {line}")
    get_current_context()["outlet_events"][asset].extra = result
    return result


def _date_of(mapped: dict[str, str]) -> str:
    """The business date of a mapped job's request."""

    day = JobRequest.from_json(mapped["request"]).business_day
    assert day is not None
    return day.isoformat()


def _write_report(flow: str, business_date: str) -> str:

    html_path, _ = write_report(_settings(), flow, dt.date.fromisoformat(business_date))
    print(f"report: {html_path}")
    return str(html_path)


# The tasks resolve_inputs chooses among: a wait, the Spark job that follows it, reconcile.
_CHOSEN = (
    "wait_for_eod_file",
    "wait_for_cut_off",
    "load_eod_file",
    "correct_stream_layer",
    "close_day",
    "reconcile",
)


class ResolveInputs(BaseOperator, SkipMixin):
    """``resolve_inputs``: validate the params, find the file, read the stage, and skip the
    tasks of the paths the stage does not take (and ``reconcile`` when there is nothing to
    reconcile against), as a branch task would: one scheduling round less per fork. Its
    outputs are pushed as a ``multiple_outputs`` task's are. What it skipped is recorded the
    way a branch's is, so a skipped task that is cleared stays skipped."""

    inherits_from_skipmixin = True

    def __init__(self, *, flow: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.flow = flow

    def execute(self, context: Any) -> None:

        s, params = _settings(), _run_params(context)
        with _no_retry_on(T.InputError):
            resolved = T.resolve_inputs(
                s, self.flow, params, _logical_day(), current_stage(s, self.flow)
            )
        wait = "wait_for_eod_file" if resolved["waits_for_file"] else "wait_for_cut_off"
        taken = {wait, resolved["path"], *(["reconcile"] if resolved["reconcile"] else [])}
        skipped = [t for t in _CHOSEN if t not in taken]
        ti = context["ti"]
        for key, value in resolved.items():
            ti.xcom_push(key, value)
        ti.xcom_push("return_value", resolved)
        print(f"stage {resolved['stage']}: {resolved['path']}; skipped: {', '.join(skipped)}")
        self.skip(ti, [self.dag.get_task(t) for t in skipped])


class EodFileSensor(CompleteFileSensor):
    """The EOD file's wait, then its file-level checks in pure Python (header, delimiter,
    truncation): a bad file fails the task at once, without retries, before any Spark job."""

    template_fields = (*CompleteFileSensor.template_fields, "resolved")

    def __init__(self, *, resolved: Any, **kwargs: Any):
        super().__init__(**kwargs)
        self.resolved = resolved

    def on_complete(self, context: Any) -> None:

        with _no_retry_on(T.InputError, BadFileError):
            checked = T.check_raw_file(_settings(), self.resolved)
        print(f"{checked['file']}: {checked['data_lines']} data lines, columns ok")


def eod_dag(flow: str) -> DAG:
    """``eod_<flow>``: wait for the day's EOD file, check it, load or correct, reconcile, report."""
    settings = _settings()
    with DAG(
        dag_id=f"eod_{flow}",
        schedule=EOD_SCHEDULE,
        start_date=START,
        catchup=False,
        # Runs may wait for their files side by side; their Spark jobs queue for SPARK_POOL.
        max_active_runs=4,
        default_args=DEFAULT_ARGS,
        tags=["streamshift", "eod", flow],
        params={
            "business_date": Param(
                None,
                type=["null", "string"],
                format="date",
                description="Business date YYYY-MM-DD; empty: the run's logical date",
            ),
            "mode": Param(
                "delta",
                type="string",
                enum=list(T.MODES),
                description="delta: the file holds changed rows; replace: the whole day",
            ),
            "file": Param(
                None,
                type=["null", "string"],
                pattern=T.FILE_PATTERN,
                description=f"Optional file relative to {landing_dir(settings, flow)} (no '..'); "
                f"default: <date>/{flow}_eod_<date>.csv",
            ),
        },
        doc_md=f"""
### End of day for `{flow}`
Runs on business days after the close (or triggered with params). **resolve_inputs** reads the
flow's migration stage and skips the tasks of the paths it does not take; the EOD file is found in
`{landing_dir(settings, flow)}/<date>/`, and **wait_for_eod_file** waits until it is complete,
then checks it (header, delimiter, truncation) before any Spark job:

* `batch`, `shadow`: **load_eod_file** into the batch layer, then **reconcile** (stream vs batch in
  `shadow`; against `external_<date>.csv` when it is there);
* `stream`: **correct_stream_layer** reconciles the file against the stream layer, applies the
  differences as corrections (`mode=replace` also cancels what the whole-day file lacks) and
  closes the date;
* `kappa`: no EOD file: **wait_for_cut_off** until the date's cut-off plus grace has passed and
  the stream has committed every offset the topic held then, **close_day**, then **reconcile**
  against `external_<date>.csv` when it is there.

The Spark job that writes the day also validates it with the flow's Great Expectations suites, in
the same application; then **data_quality** gives the verdict and writes the day's report (a `fail`
expectation fails the run naming it, once the report shows it; a `warn` one is recorded), and
**publish_summary** publishes (XCom + one line in the log). Backfill with
`airflow backfill create --dag-id eod_{flow} --from-date D1 --to-date D2`.
""",
    ) as dag:
        # Indexed by key (``inputs["file"]``), passed whole to the Python tasks: as the XCom
        # of a ``multiple_outputs`` task, which the typing of ``.output`` does not describe.
        inputs: Any = ResolveInputs(
            task_id="resolve_inputs",
            flow=flow,
            doc_md="Validate the params, find the file, read the stage, and skip what the "
            "stage does not run (one task decides the path: no branch task per fork).",
        ).output

        wait = EodFileSensor(
            task_id="wait_for_eod_file",
            filepath=inputs["file"],
            resolved=inputs,
            flow=flow,
            stable_seconds=settings.file_stable_seconds,
            poke_interval=60,
            timeout=12 * 3600,
            doc_md="Wait for the EOD file to arrive and be complete, as the flow declares: a "
            "done-marker, a trailer line, or a size that stopped changing (deferred: a waiting "
            "run holds no worker slot; a half-copied file is never loaded). Then the file-level "
            "checks in pure Python (header, delimiter, truncation): a bad file fails here, "
            "before any Spark job.",
        )

        @task.sensor(
            poke_interval=60,
            timeout=24 * 3600,
            mode="reschedule",
            doc_md="Kappa: wait until the date's cut-off plus grace has passed and the stream has "
            "committed every offset the topic held at it (checked without a JVM; a waiting run "
            "holds no worker slot between pokes).",
        )
        def wait_for_cut_off(resolved: dict[str, Any]) -> PokeReturnValue:

            day = dt.date.fromisoformat(resolved["business_date"])
            found = check_cut_off(_settings(), get_flow(flow), day)
            if not found.ready:
                print(f"{flow} {day}: waiting for {found.waiting_for()}")
            return PokeReturnValue(is_done=found.ready)

        close = engine_task(
            "close_day",
            inputs["close_request"],
            "Close the date in the stream layer at its cut-off (`streamshift close`) and "
            "validate it.",
        )

        load = engine_task(
            "load_eod_file",
            inputs["load_request"],
            "Load the EOD file into the batch layer (`streamshift eod`).",
        )
        correct = engine_task(
            "correct_stream_layer",
            inputs["correct_request"],
            "Reconcile the EOD file against the stream layer and apply the differences.",
        )

        reconcile = engine_task(
            "reconcile",
            inputs["reconcile_request"],
            "Reconcile stream vs batch and against external files.",
            trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS,
        )

        @task(
            task_id="data_quality",
            trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS,
            retries=0,  # a failed expectation fails the same way again
            doc_md="The verdict of the Great Expectations checks the load (or correction) job "
            "ran on the day in its Spark application, read from `quality_runs` without a JVM, and "
            "the day's HTML and JSON report, which shows it (read without Spark). An expectation "
            "with policy `fail` fails this task naming it, once the report is written; `warn` "
            "is recorded and the run goes on.",
        )
        def data_quality(resolved: dict[str, Any]) -> dict[str, int]:
            from airflow.sdk.exceptions import AirflowFailException

            try:
                with _no_retry_on(QualityError):
                    run = T.quality_verdict(_settings(), resolved)
            finally:
                # The report is written whatever the verdict: a failed run's report shows why.
                _write_report(flow, resolved["business_date"])
            if run is None:
                print(
                    f"flow {flow} has no data-quality suites: nothing to check (write starter "
                    f"ones with `streamshift quality --flow {flow} --write-suites`)"
                )
                return {}
            print(run.describe())
            if run.failures:
                raise AirflowFailException(f"data_quality failed: {run.failure_line()}")
            return run.counts()

        quality = data_quality(inputs)

        published = published_asset(flow)

        @task(
            outlets=[published],
            doc_md=f"Publish the run's summary: XCom, one readable line in the log, and an "
            f"event of the asset `{published.name}` carrying it (downstream DAGs run on it).",
        )
        def publish_summary(resolved: dict[str, Any]) -> dict[str, Any]:
            return _publish(published, resolved)

        cut_off = wait_for_cut_off(inputs)
        inputs >> [wait, cut_off]
        cut_off >> close
        wait >> [load, correct]
        [load, close] >> reconcile
        [load, correct, close, reconcile] >> quality
        # Published only when no `fail` expectation failed.
        quality >> publish_summary(inputs)
    return dag


def late_data_dag(flow: str) -> DAG:
    """``late_data_<flow>``: re-reconcile, re-report and publish again (an event of
    ``published_asset(flow)``) the dates that received late events."""
    with DAG(
        dag_id=f"late_data_{flow}",
        schedule="@hourly",
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        tags=["streamshift", "late-data", flow],
        doc_md=f"""
### Late data for `{flow}`
Hourly: finds the business dates whose late events arrived after the date's last
reconciliation, and re-runs **reconcile**, **write_report** and **publish_summary** for each
(one mapped task per date; each publish is an event of the asset `{flow}_eod_published`).
""",
    ) as dag:

        @task(doc_md="Dates with late events newer than their last reconciliation.")
        def find_late_dates() -> list[dict[str, str]]:

            s = _settings()
            stage = current_stage(s, flow)
            todo = []
            found = []
            for d in late_dates_to_reconcile(s, flow):
                request = T.reconcile_request(s, flow, d.isoformat(), stage)
                if request:
                    todo.append({"request": request.to_json()})
                    found.append(d.isoformat())
                else:
                    print(f"{d}: stage {stage} and no external file: nothing to reconcile against")
            print(f"{len(todo)} dates to re-reconcile: {', '.join(found) or 'none'}")
            return todo

        dates = find_late_dates()
        reconcile = mapped_engine_task("reconcile", dates, "Re-reconcile one late date.")

        @task(doc_md="Re-write one re-reconciled date's report (reads without Spark).")
        def write_report(args: dict[str, str]) -> str:
            return _write_report(flow, _date_of(args))

        published = published_asset(flow)

        @task(
            outlets=[published],
            doc_md=f"Publish one re-reconciled date again: its summary in XCom and the log, and "
            f"an event of the asset `{published.name}` with `cause` `late data`.",
        )
        def publish_summary(args: dict[str, str]) -> dict[str, Any]:
            return _publish(published, {"flow": flow, "business_date": _date_of(args)})

        reconcile >> write_report.expand(args=dates) >> publish_summary.expand(args=dates)
    return dag


def maintenance_dag(flow: str) -> DAG:
    """``maintenance_<flow>``: weekly table upkeep (compaction, VACUUM, log checkpoints)."""
    settings = _settings()
    with DAG(
        dag_id=f"maintenance_{flow}",
        schedule=MAINTENANCE_SCHEDULE,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        tags=["streamshift", "maintenance", flow],
        doc_md=f"""
### Table upkeep for `{flow}`
Sundays at 03:00 UTC: for every table of the flow in both layers, compaction of small files
(the data does not change), VACUUM of files no version within the table's retention needs
(Delta's default, 7 days), and a Delta log checkpoint (`streamshift maintain --flow {flow}`).
""",
    ) as dag:
        spark_task(
            "compact_vacuum_checkpoint",
            BATCH_JOB,
            [MaintainRequest(flow).to_json()],
            settings,
            "Compaction, VACUUM (the tables' retention) and a log checkpoint of the flow's tables.",
        )
    return dag


def _migration_dag(dag_id: str, params: dict[str, Param], doc_md: str) -> DAG:
    """A DAG a user triggers to change a flow, with a second user's approval on the way:
    triggered only, and not retried (a change is one deliberate act). Runs do not queue behind
    each other: one waiting for its approval does not hold up another flow's."""
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=START,
        catchup=False,
        is_paused_upon_creation=False,
        default_args={**DEFAULT_ARGS, "retries": 0},
        tags=["streamshift", "migration"],
        params=params,
        doc_md=doc_md,
    )


def promote_dag(flows: list[str]) -> DAG:
    """``streamshift_promote``: move a flow to another stage through the promotion gate (the
    record re-checks the gate as it writes, so promotions may run side by side)."""

    with _migration_dag(
        "streamshift_promote",
        params={
            "flow": Param(flows[0] if flows else None, type="string", enum=flows),
            "to": Param("shadow", type="string", enum=list(NAMES), description="the new stage"),
            "force": Param(False, type="boolean", description="override the gate (needs reason)"),
            "reason": Param(None, type=["null", "string"], description="why; kept with the change"),
        },
        doc_md="""
### Promote a flow
The same gate as `streamshift promote`: promotion to `stream` or `kappa` needs the last N
reconciled business dates clean (the evidence the stage before makes); `force` (admins only)
overrides the evidence with a recorded `reason`, never the approval; demotion is always
allowed. **check_gate** answers without Spark (a refusal fails the run at once, saying why).
**approve**: a promotion to `stream` or `kappa` waits for a second user (four eyes) under
*Browse → Required actions*, showing the evidence; the user who triggered the run cannot
approve it, and no answer in time counts as a rejection. **record_promotion** records the
answer and, when approved, re-checks the gate and records the change with the triggering user
as `changed_by`; a rejection fails the run, recorded. The Migration page triggers this DAG.
""",
    ) as dag:

        @task(doc_md="The promotion gate, read without Spark; the record job's request.")
        def check_gate() -> str:

            context = get_current_context()
            params = _run_params(context)
            user = context["dag_run"].triggering_user_name or OWNER
            force, reason = bool(params.get("force")), params.get("reason")
            with _no_retry_on(T.ForceRefused):
                T.check_may_force(user, force)
            with _no_retry_on(PromotionRefused):
                change = check_promotion(
                    _settings(), params["flow"], params["to"], force=force, reason=reason
                )
            print(f"gate: {change.describe()} (by {user})")
            return PromoteRequest(params["flow"], params["to"], force, reason, user).to_json()

        gate = check_gate()
        approval = PromotionApproval(
            task_id="approve",
            source="check_gate",
            doc_md="A second user approves a promotion to stream or kappa (four eyes).",
        )
        gate >> approval
        engine_task(
            "record_promotion",
            approval.output,
            "Record the approver's answer and, when approved, the stage change (the gate is "
            "checked again as it is recorded).",
        )
    return dag


def evolve_dag(flows: list[str]) -> DAG:
    """``streamshift_evolve``: a flow's change planned, approved by a second user, applied."""
    with _migration_dag(
        "streamshift_evolve",
        params={"flow": Param(flows[0] if flows else None, type="string", enum=flows)},
        doc_md="""
### Evolve a flow
The same as `streamshift plan` then `streamshift evolve`, with four eyes between. **plan** says
what changed in the flow's code since each layer's recorded version and what each change needs
(a breaking change fails the run: nothing is applied). **approve** waits for a second user
under *Browse → Required actions*, showing the plan; the user who triggered the run cannot
approve it, and no answer in time counts as a rejection. **evolve** applies the plan to both
layers and records the new version (docs/flows.md, "Changing a flow").
""",
    ) as dag:

        @task(doc_md="The plan job's request for the flow asked for.")
        def which_flow() -> str:
            return PlanRequest(_run_params(get_current_context())["flow"]).to_json()

        flow = which_flow()
        planned = engine_task(
            "plan", flow, "What changed and what each change needs (fails when breaking)."
        )
        approval = EvolveApproval(
            task_id="approve",
            source="plan",
            flow_task="which_flow",
            doc_md="A second user approves the plan (four eyes).",
        )
        flow >> planned >> approval
        engine_task("evolve", approval.output, "Apply the approved plan to both layers; record it.")
    return dag


def switch_dag(flows: list[str]) -> DAG:
    """``streamshift_switch``: a flow's readers switched to another version of its tables, with
    a second user's approval (``streamshift promote --version``)."""
    with _migration_dag(
        "streamshift_switch",
        params={
            "flow": Param(flows[0] if flows else None, type="string", enum=flows),
            "version": Param(2, type="integer", minimum=1, description="the version to serve"),
            "reason": Param(None, type=["null", "string"], description="why; kept with it"),
        },
        doc_md="""
### Switch a flow to another version
The same as `streamshift promote --flow F --version N`: a version built beside the live one
(`streamshift evolve --shadow`) starts serving, or an earlier version is served again (a roll
back). **which_version** checks the version exists, without Spark. **approve** waits for a
second user under *Browse → Required actions*, showing the version's differences from the
live one per table; the requester cannot approve it, no answer in time is a rejection.
**switch** stops the flow's stream job, catches the version's tables up with the live ones,
switches both layers in one commit (docs/flows.md, "Changing a flow").
""",
    ) as dag:

        @task(doc_md="The switch job's request, once the version is known to exist.")
        def which_version() -> str:
            context = get_current_context()
            params = _run_params(context)
            user = context["dag_run"].triggering_user_name or OWNER
            found = recorded_version(_settings().warehouse, params["flow"], int(params["version"]))
            if not found:
                raise AirflowFailException(
                    f"flow {params['flow']} has no version {params['version']}: build one with "
                    f"streamshift evolve --flow {params['flow']} --shadow"
                )
            request = SwitchRequest(
                params["flow"], int(params["version"]), user, params.get("reason")
            )
            return request.to_json()

        asked = which_version()
        approval = SwitchApproval(
            task_id="approve", source="which_version", doc_md="A second user approves (four eyes)."
        )
        asked >> approval
        engine_task("switch", approval.output, "Catch the version up, switch both layers.")
    return dag


def redrive_dag(flows: list[str]) -> DAG:
    """``streamshift_redrive``: re-apply quarantined rows whose cause is fixed."""
    with DAG(
        dag_id="streamshift_redrive",
        schedule=None,
        start_date=START,
        catchup=False,
        is_paused_upon_creation=False,
        default_args=DEFAULT_ARGS,
        tags=["streamshift", "quarantine"],
        params={
            "flow": Param(flows[0] if flows else None, type="string", enum=flows),
            "rule": Param(None, type=["null", "string"], description="only this rule's rows"),
            "business_date": Param(
                None, type=["null", "string"], format="date", description="only this date's rows"
            ),
            "layer": Param(
                None,
                type=["null", "string"],
                enum=[None, "batch", "stream"],
                description="default: the layer serving readers in the flow's stage",
            ),
        },
        doc_md="""
### Re-drive the quarantine
The same job as `streamshift redrive`: once a cause is fixed (the reference feed in
`STREAMSHIFT_REFERENCE_DIR` has the missing book, a rule is corrected), the quarantined rows
are checked again and those that pass are applied with source `redrive` and their original
`source_ref` (in the stream layer through the flow's topic, like every change). The rest stay,
with the rules they fail now. A second run applies nothing twice (`control/redrives`).
**which_rows** lists what would be tried, without Spark; **redrive** runs on the engine.
""",
    ) as dag:

        @task(doc_md="What the re-drive covers, read without Spark; the job's request.")
        def which_rows() -> str:
            from collections import Counter

            context = get_current_context()
            params, settings = _run_params(context), _settings()
            flow = get_flow(params["flow"])
            layer = params.get("layer") or default_layer(settings, flow.name)
            day = params.get("business_date")
            day = dt.date.fromisoformat(day) if day else None
            user = context["dag_run"].triggering_user_name or OWNER
            request = RedriveRequest(flow.name, params.get("rule"), day, layer, user)
            with _no_retry_on(RequestRefused):  # a rule the quarantine does not hold
                check(settings, request)
            found = pending(settings, flow.name, layer, params.get("rule"), day)
            rules = Counter(q["rule"] for q in found)
            print(f"{len(found)} quarantined rows of the {layer} layer to try: {dict(rules)}")
            return request.to_json()

        engine_task(
            "redrive",
            which_rows(),
            "Check the rows again and apply those that pass now (recorded per row).",
        )
    return dag


def stream_supervisor_dag() -> DAG:
    """``stream_supervisor``: restart dead or stalled streaming jobs from their checkpoints."""
    with DAG(
        dag_id="stream_supervisor",
        schedule="*/5 * * * *",
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args={**DEFAULT_ARGS, "retries": 1},
        tags=["streamshift", "streaming"],
        doc_md="""
### Stream supervisor
Every five minutes: for each flow whose stage runs a stream (shadow, stream, kappa), reads the
job's heartbeat and lag; a dead or stalled job is restarted from its checkpoint (a detached
`spark-submit streaming/run.py`). Restarts are logged and counted in
`STREAMSHIFT_HOME/status/<flow>-stream.restarts`; an operator's stop is honoured, and a
crash-looping job is restarted with a growing back-off and shows as failing.
""",
    ) as dag:

        @task(doc_md="Check every stream and restart the dead or stalled ones.")
        def supervise_streams() -> list[dict[str, Any]]:
            from streamshift.airflow.supervise import supervise

            actions = supervise(_settings())
            for action in actions:
                print(action["line"])
            return actions

        supervise_streams()
    return dag


def build_dags(dag_file: str) -> dict[str, DAG]:
    """Every DAG of the project holding ``dag_file`` (a project's one-line DAG file passes its
    own ``__file__``), by DAG id: one ``eod_``, ``late_data_`` and ``maintenance_<flow>`` per
    flow, the stream supervisor, the promotions and the re-drive. One project per Airflow: the
    shared DAGs' ids carry no project name."""
    if not os.environ.get(PROJECT_ENV):
        project = find_project(cwd=Path(dag_file).resolve().parent)
        if project is None:
            raise ProjectError(
                f"{dag_file} is in no streamshift project: no streamshift.toml (or pyproject.toml "
                "with [tool.streamshift]) in its folder or above it"
            )
        os.environ[PROJECT_ENV] = str(project.root)  # the tasks find it as this parse did
    dags: dict[str, DAG] = {}
    names = flow_names()
    for flow in names:
        dags[f"eod_{flow}"] = eod_dag(flow)
        dags[f"late_data_{flow}"] = late_data_dag(flow)
        dags[f"maintenance_{flow}"] = maintenance_dag(flow)
    dags["stream_supervisor"] = stream_supervisor_dag()
    dags["streamshift_promote"] = promote_dag(names)
    dags["streamshift_redrive"] = redrive_dag(names)
    dags["streamshift_evolve"] = evolve_dag(names)
    dags["streamshift_switch"] = switch_dag(names)
    return dags
