"""Four-eyes promotion, the parts a browser does not reach: the approval's answer when its
time runs out, and how the record task records an answer (the browser and REST flows are in
tests/test_airflow_ui.py)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from streamshift.spec.requests import JobRequest, PromoteRequest
from streamshift.spec.settings import load_settings

pytestmark = [pytest.mark.spark]


def test_an_unanswered_promotion_is_a_recorded_rejection_and_a_retry_records_it_once(
    spark, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The approval's answer when its time runs out, as Airflow's scheduler resumes it (the
    defaults, *Reject*, with nobody as the responder): the request carries "timed out"; the
    record task records it once however often it runs, fails saying so, and moves no stage."""
    import dataclasses
    from types import SimpleNamespace

    from streamshift.airflow.approval import PromotionApproval
    from streamshift.control.stages import PromotionRejected
    from streamshift.engine.jobs.promote import promote
    from streamshift.engine.jobs.requests import run
    from streamshift.store.records import current_stage, promotion_decisions

    settings = load_settings({}, home=tmp_path, spark_master="local[2]")
    promote(spark, settings, "trades", "shadow", by="test")
    asked = dataclasses.replace(
        PromoteRequest("trades", "stream", True, "pilot", "operator"), run_id="manual__1"
    )
    context = {
        "ti": SimpleNamespace(xcom_pull=lambda task_ids: asked.to_json()),
        "dag_run": SimpleNamespace(run_id="manual__1"),
    }
    timed_out = {
        "chosen_options": ["Reject"],
        "params_input": {},
        "responded_at": dt.datetime.now(dt.UTC),
        "responded_by_user": None,
        "timedout": True,
    }
    approval = PromotionApproval(task_id="approve", source="check_gate")
    answer = JobRequest.from_json(approval.execute_complete(context, timed_out))
    assert isinstance(answer, PromoteRequest)
    assert (answer.approval, answer.approved_by, answer.run_id) == ("timed out", None, "manual__1")
    own = {
        **timed_out,
        "chosen_options": ["Approve"],
        "responded_by_user": {"id": "operator", "name": "operator"},
    }
    assert JobRequest.from_json(approval.execute_complete(context, own)).approval == "rejected"

    for _attempt in range(2):  # the task and its retry
        with pytest.raises(PromotionRejected, match="not approved in time"):
            run(spark, answer, settings)
    [decided] = promotion_decisions(settings, "trades")
    assert (decided["decision"], decided["decided_by"], decided["requested_by"]) == (
        "timed out",
        None,
        "operator",
    )
    assert current_stage(settings, "trades") == "shadow"


def test_the_cli_asks_airflow_for_the_approval_and_says_so_when_it_is_not_running(
    spark, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """`streamshift promote --to stream` with the gate open needs the promote DAG's approval:
    with no Airflow running it changes nothing and says what to start (or the break-glass); a
    closed gate is refused first, in the gate's words."""
    from flows.trades import FLOW
    from flows.trades.generate import generate_day
    from streamshift.engine.jobs.eod import run_eod
    from streamshift.engine.jobs.promote import promote
    from streamshift.engine.jobs.reconcile import reconcile_date
    from streamshift.engine.write.target import Target
    from streamshift.store.records import current_stage
    from tests.cli_support import LOCAL_SPARK, run_cli

    settings = load_settings({}, home=tmp_path, spark_master="local[2]", promotion_window=1)
    promote(spark, settings, "trades", "shadow", by="test")
    closed = run_cli(tmp_path, "promote", "--flow", "trades", "--to", "stream",
                     promotion_window="1", **LOCAL_SPARK)  # fmt: skip
    assert closed.returncode == 2 and "only 0 of the 1 business dates" in closed.stderr

    day = dt.date(2026, 11, 20)
    eod = generate_day(day, 20, tmp_path / "files", seed=3, progress=False).eod
    for layer in ("batch", "stream"):
        run_eod(spark, Target.open(spark, settings, FLOW, layer), day, eod)
    [parity] = reconcile_date(spark, settings, FLOW, day)
    assert parity.clean
    asked = run_cli(tmp_path, "promote", "--flow", "trades", "--to", "stream",
                    promotion_window="1", airflow_port="1", **LOCAL_SPARK)  # fmt: skip
    assert asked.returncode == 2, asked.stderr
    assert "waits for a second user's approval in Airflow, which is not running" in asked.stderr
    assert "streamshift airflow up" in asked.stderr and "--force --reason" in asked.stderr
    assert current_stage(settings, "trades") == "shadow"
