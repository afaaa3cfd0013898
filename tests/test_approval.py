"""Four-eyes promotion, the parts a browser does not reach: the approval's answer when its
time runs out, and how the record task records an answer (the browser and REST flows are in
tests/test_airflow_ui.py)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from streamshift.core.requests import JobRequest, PromoteRequest
from streamshift.core.settings import load_settings

pytestmark = [pytest.mark.spark]


def test_an_unanswered_promotion_is_a_recorded_rejection_and_a_retry_records_it_once(
    spark, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The approval's answer when its time runs out, as Airflow's scheduler resumes it (the
    defaults, *Reject*, with nobody as the responder): the request carries "timed out"; the
    record task records it once however often it runs, fails saying so, and moves no stage."""
    import dataclasses
    from types import SimpleNamespace

    from streamshift.control.stages import PromotionRejected, promote
    from streamshift.jobs.requests import run
    from streamshift.orchestrate.approval import PromotionApproval
    from streamshift.read.control import current_stage, promotion_decisions

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
