"""Four eyes on a promotion: the standard provider's ``ApprovalOperator`` in the
``streamshift_promote`` DAG, between the gate and the record.

A promotion into a stage whose stream layer serves readers (``Stage.approved_entry``: stream
and kappa) waits in Airflow's *Required actions* for a second user. At run time the request is
assigned to the approvers (``STREAMSHIFT_APPROVERS``) other than the user who triggered the run,
so the requester cannot approve their own request; the approver sees the gate's evidence. An
unanswered request is rejected after ``STREAMSHIFT_APPROVAL_TIMEOUT_MINUTES`` (the default
answer is *Reject*). Any other move (shadow, a demotion) passes straight through.

The task returns the promotion request with its answer; ``record_promotion`` records the
answer and, when approved, the change (through the gate again). Unlike the provider's operator
it skips nothing on *Reject*: the rejection has to be recorded.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator
from airflow.sdk.exceptions import AirflowFailException

from streamshift.control.stages import APPROVED, REJECTED, TIMED_OUT, promotion_evidence
from streamshift.spec.requests import (
    EvolveRequest,
    JobRequest,
    PlanRequest,
    PromoteRequest,
    SwitchRequest,
)
from streamshift.spec.settings import load_settings
from streamshift.spec.stages import needs_approval
from streamshift.store.records import current_stage
from streamshift.store.versions import version_differences

if TYPE_CHECKING:
    from streamshift.spec.settings import Settings


def _request(context: Any, source: str) -> PromoteRequest:
    request = JobRequest.from_json(context["ti"].xcom_pull(task_ids=source))
    assert isinstance(request, PromoteRequest)
    return dataclasses.replace(request, run_id=context["dag_run"].run_id)


def approvers(configured: str, requester: str | None) -> list[str]:
    """Who may answer: the configured approvers but the requester."""
    names = [n.strip() for n in configured.split(",") if n.strip()]
    return [n for n in dict.fromkeys(names) if n != requester]


def second_users(
    operator: HITLOperator, settings: Settings, requester: str | None, what: str
) -> list[str]:
    """Assign ``operator``'s request to the approvers but ``requester``; who they are. None
    left fails the task, saying what to set."""
    who = approvers(settings.approvers, requester)
    if not who:
        raise AirflowFailException(
            f"no approver other than {requester}: {what} needs a second user. Set "
            "STREAMSHIFT_APPROVERS to users who may approve"
        )
    operator.assigned_users = [{"id": name, "name": name} for name in who]
    return who


def evidence_markdown(settings: Settings, request: PromoteRequest, now: str) -> str:
    """What the approver reads: the move, who asks and why, and the gate's evidence."""

    asks = f"**{request.by}** asks to promote **{request.flow}** from stage **{now}** to "
    lines = [f"{asks}**{request.to}**.", ""]
    if request.force:
        lines += [f"FORCED past the gate: {request.reason}", ""]
    elif request.reason:
        lines += [f"Reason: {request.reason}", ""]
    evidence = promotion_evidence(settings, request.flow, request.to)
    kind = f"{evidence.describe_kind()}, reconciled in stage {evidence.made_in}"
    lines += [
        f"Evidence ({kind}; the gate needs the last {evidence.window} clean):",
        "",
        "| business date | breaks | rows | clean |",
        "|---|---|---|---|",
    ]
    for d in evidence.dates:
        lines.append(
            f"| {d['business_date']} | {d['breaks']} | {d.get('rows', '')} | "
            f"{'yes' if d['clean'] else 'NO'} |"
        )
    if not evidence.dates:
        lines.append("| (none) | | | |")
    problems = evidence.problems()
    if problems:
        lines += ["", "Gate: " + "; ".join(problems)]
    return "\n".join(lines)


class PromotionApproval(ApprovalOperator):
    """Wait for a second user's approval of the promotion ``source``'s XCom asks for (see the
    module's note)."""

    def __init__(self, *, source: str, **kwargs: Any) -> None:
        super().__init__(
            subject="Promotion",  # set per run in execute()
            defaults=[self.REJECT],  # what a time-out answers
            **kwargs,
        )
        self.source = source

    def execute(self, context: Any) -> Any:

        settings = load_settings()
        request = _request(context, self.source)
        now = current_stage(settings, request.flow)
        if not needs_approval(now, request.to):
            self.log.info("%s → %s needs no approval", now, request.to)
            return request.to_json()
        who = second_users(self, settings, request.by, f"a promotion to {request.to}")
        self.subject = f"Promote {request.flow} from {now} to {request.to}?"
        self.body = evidence_markdown(settings, request, now)
        self.response_timeout = dt.timedelta(minutes=settings.approval_timeout_minutes)
        self.log.info(
            "waiting for %s to approve (Browse → Required actions); rejected after %s",
            " or ".join(who),
            self.response_timeout,
        )
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:

        answer = HITLOperator.execute_complete(self, context, event)  # (no skipping)
        request = _request(context, self.source)
        user = answer["responded_by_user"]
        name = user["name"] if user else None
        if user is None:
            decision = TIMED_OUT
        elif answer["chosen_options"] == [self.APPROVE] and user["id"] != request.by:
            decision = APPROVED
        else:  # (a requester's own approval, should an auth manager let it through, is none)
            decision = REJECTED
        self.log.info("%s: %s", decision, name or "nobody answered in time")
        return dataclasses.replace(request, approval=decision, approved_by=name).to_json()


class EvolveApproval(ApprovalOperator):
    """Wait for a second user's approval of a flow's change, showing the plan (the ``source``
    task's output); the evolve request it returns is what ``evolve`` runs. A plan with nothing
    to do passes straight through; a rejection or no answer in time fails the run."""

    def __init__(self, *, source: str, flow_task: str, **kwargs: Any) -> None:
        super().__init__(subject="Evolve", defaults=[self.REJECT], **kwargs)
        self.source, self.flow_task = source, flow_task

    def _request(self, context: Any) -> EvolveRequest:
        request = JobRequest.from_json(context["ti"].xcom_pull(task_ids=self.flow_task))
        assert isinstance(request, PlanRequest)
        return EvolveRequest(request.flow)

    def execute(self, context: Any) -> Any:
        settings = load_settings()
        request = self._request(context)
        plan = str(context["ti"].xcom_pull(task_ids=self.source) or "")
        if "changes since" not in plan:
            self.log.info("nothing to evolve: %s", plan)
            return request.to_json()
        requester = context["dag_run"].triggering_user_name
        second_users(self, settings, requester, "a flow's change")
        self.subject = f"Evolve {request.flow}?"
        self.body = f"**{requester}** asks to apply this change:\n\n```\n{plan}\n```"
        self.response_timeout = dt.timedelta(minutes=settings.approval_timeout_minutes)
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        answer = HITLOperator.execute_complete(self, context, event)  # (no skipping)
        user = answer["responded_by_user"]
        requester = context["dag_run"].triggering_user_name
        if user is None:
            raise AirflowFailException("nobody approved the change in time: not applied")
        if answer["chosen_options"] != [self.APPROVE] or user["id"] == requester:
            raise AirflowFailException(f"{user['name']} rejected the change: not applied")
        self.log.info("approved by %s", user["name"])
        return self._request(context).to_json()


class SwitchApproval(ApprovalOperator):
    """Wait for a second user's approval of a switch to another version of the flow's
    tables, showing that version's recorded differences from the live one."""

    def __init__(self, *, source: str, **kwargs: Any) -> None:
        super().__init__(subject="Switch", defaults=[self.REJECT], **kwargs)
        self.source = source

    def _request(self, context: Any) -> SwitchRequest:
        request = JobRequest.from_json(context["ti"].xcom_pull(task_ids=self.source))
        assert isinstance(request, SwitchRequest)
        return dataclasses.replace(request, run_id=context["dag_run"].run_id)

    def execute(self, context: Any) -> Any:
        settings = load_settings()
        request = self._request(context)
        second_users(self, settings, request.by, "a switch of the version served")
        self.subject = f"Serve version {request.version} of {request.flow}?"
        lines = [
            f"**{request.by}** asks to serve version **{request.version}** of "
            f"**{request.flow}**." + (f" Reason: {request.reason}" if request.reason else ""),
            "",
            "| table | compared with | dates | dates that differ | differences |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {d['table']} | {d['live']} | {d['dates']} | {d['differ']} | {d['breaks']} |"
            for d in version_differences(settings, request.flow, request.version)
        ] or ["| (no comparison recorded: a roll back) | | | | |"]
        self.body = "\n".join(lines)
        self.response_timeout = dt.timedelta(minutes=settings.approval_timeout_minutes)
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        answer = HITLOperator.execute_complete(self, context, event)  # (no skipping)
        request = self._request(context)
        user = answer["responded_by_user"]
        if user is None:
            decision = TIMED_OUT
        elif answer["chosen_options"] == [self.APPROVE] and user["id"] != request.by:
            decision = APPROVED
        else:
            decision = REJECTED
        self.log.info("%s: %s", decision, user["name"] if user else "nobody answered in time")
        return dataclasses.replace(
            request, approval=decision, approved_by=user["name"] if user else None
        ).to_json()
