"""Airflow 3's REST API, asked without Airflow's own packages: the one client the CLI, the demo,
the tests and the Migration page share (JVM-free, stdlib HTTP)."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from streamshift.spec.errors import StreamshiftError


class AirflowError(StreamshiftError):
    """The local Airflow could not be started, reached or used."""


class AirflowApiError(AirflowError):
    def __init__(self, status: int, detail: str):
        super().__init__(f"Airflow API answered {status}: {detail[:1000]}")
        self.status, self.detail = status, detail


class AirflowClient:
    """A small client of Airflow 3's REST API, always acting as one caller: a user who logs in
    with a password (the CLI's approval request and the demo, each as its own user: the
    SimpleAuthManager's token auth), or the holder of a token (the Migration page forwards the
    signed-in user's). Four eyes never collapse into one identity: nothing here holds a
    service account."""

    def __init__(
        self,
        url: str,
        user: str,
        secret: str | None = None,
        scheduler_log: Path | None = None,
        *,
        token: str | None = None,
        timeout: float = 60,
    ):
        self.url, self.user, self._password = url.rstrip("/"), user, secret
        self._token: str | None = token
        self.timeout = timeout
        # The local stack's scheduler log: what its scheduler has done (``wait_for_input``).
        self.scheduler_log = scheduler_log

    @classmethod
    def as_caller(cls, url: str, token: str | None, timeout: float = 30) -> AirflowClient:
        """A client acting with a caller's own token (no password: it cannot log in as
        anyone else)."""
        return cls(url, "(the caller)", token=token or "", timeout=timeout)

    def token(self) -> str:
        if self._token is None:
            if self._password is None:
                raise AirflowError(f"no password for Airflow user {self.user}: cannot log in")
            body = self._send(
                "POST",
                "/auth/token",
                {"username": self.user, "password": self._password},
                auth=False,
            )
            self._token = str(body["access_token"])
        return self._token

    def _send(
        self, method: str, path: str, body: dict[str, Any] | None = None, auth: bool = True
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if auth:
            request.add_header("Authorization", f"Bearer {self.token()}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise AirflowApiError(exc.code, detail) from None
        return json.loads(text) if text else None

    def get(self, path: str) -> Any:
        return self._send("GET", path)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Any REST call, as this client's caller."""
        return self._send(method, path, body)

    def unpause(self, dag_id: str) -> None:
        self._send("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def pause(self, dag_id: str) -> None:
        """The scheduler starts no run and no task of the DAG (``dag.test()`` runs its own)."""
        self._send("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": True})

    def trigger(
        self,
        dag_id: str,
        conf: dict[str, Any],
        logical_date: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"logical_date": logical_date, "conf": conf}
        if run_id:
            body["dag_run_id"] = run_id
        run: dict[str, Any] = self._send("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)
        return run

    @staticmethod
    def _run_path(dag_id: str, run_id: str) -> str:
        # Run ids hold ':' and '+' (``manual__2026-11-26T21:01:40+00:00``).
        return f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        run: dict[str, Any] = self.get(self._run_path(dag_id, run_id))
        return run

    def delete_run(self, dag_id: str, run_id: str) -> None:
        self._send("DELETE", self._run_path(dag_id, run_id))

    def hitl(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        """A human-in-the-loop task's request and answer (``hitlDetails``)."""
        detail: dict[str, Any] = self.get(
            f"{self._run_path(dag_id, run_id)}/taskInstances/{task_id}/-1/hitlDetails"
        )
        return detail

    def respond(self, dag_id: str, run_id: str, task_id: str, *chosen: str) -> dict[str, Any]:
        """Answer a human-in-the-loop task as this client's user (403 when not assigned)."""
        detail: dict[str, Any] = self._send(
            "PATCH",
            f"{self._run_path(dag_id, run_id)}/taskInstances/{task_id}/-1/hitlDetails",
            {"chosen_options": list(chosen)},
        )
        return detail

    def clear(self, dag_id: str, run_id: str, *task_ids: str) -> dict[str, Any]:
        """Clear tasks of a run, as the UI's Clear does (the run goes back to queued)."""
        body = {"dry_run": False, "only_failed": False, "dag_run_id": run_id, "task_ids": task_ids}
        cleared: dict[str, Any] = self._send(
            "POST", f"/api/v2/dags/{dag_id}/clearTaskInstances", body
        )
        return cleared

    def set_run_state(self, dag_id: str, run_id: str, state: str) -> dict[str, Any]:
        """Mark a run ``success`` or ``failed``, as the UI's run page does."""
        run: dict[str, Any] = self._send("PATCH", self._run_path(dag_id, run_id), {"state": state})
        return run

    def runs(self, dag_id: str, run_type: str) -> list[dict[str, Any]]:
        """The DAG's runs of one type (``manual``, ``backfill``, ``scheduled``; the last 100)."""
        runs = self.get(f"/api/v2/dags/{dag_id}/dagRuns?limit=100")["dag_runs"]
        return [r for r in runs if r["run_type"] == run_type]

    def returned(self, dag_id: str, run_id: str, task_id: str) -> Any:
        """What one task of the run returned (its ``return_value`` XCom)."""
        path = f"{self._run_path(dag_id, run_id)}/taskInstances/{task_id}/xcomEntries"
        return self.get(f"{path}/return_value")["value"]

    def cancel_backfill(self, backfill_id: int) -> dict[str, Any]:
        """Fail the backfill's queued runs and start no more (running ones go on)."""
        backfill: dict[str, Any] = self._send("PUT", f"/api/v2/backfills/{backfill_id}/cancel")
        return backfill

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """One try's log of a task, as text (Airflow 3 answers structured entries)."""
        path = f"{self._run_path(dag_id, run_id)}/taskInstances/{task_id}/logs/{try_number}"
        body = self.get(f"{path}?full_content=true")
        content = body.get("content", "") if isinstance(body, dict) else body
        if not isinstance(content, list):
            return str(content)
        lines = []
        for entry in content:
            if not isinstance(entry, dict):
                lines.append(str(entry))
                continue
            lines.append(str(entry.get("event", entry)))
            # A failed task's exception is in its entry's error_detail, not in the event.
            for error in entry.get("error_detail") or []:
                lines.append(f"{error.get('exc_type')}: {error.get('exc_value')}")
        return "\n".join(lines)

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """The run's task instances (state, start and end dates, ...)."""
        body = self.get(f"{self._run_path(dag_id, run_id)}/taskInstances?limit=100")
        instances: list[dict[str, Any]] = body["task_instances"]
        return instances

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        return {t["task_id"]: t["state"] for t in self.task_instances(dag_id, run_id)}

    def wait_for_dag(self, dag_id: str, timeout: float = 180) -> None:
        """Wait until the DAG processor has parsed ``dag_id``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.get(f"/api/v2/dags/{dag_id}")
                return
            except AirflowApiError as exc:
                if exc.status != 404:
                    raise
            time.sleep(1)
        raise AirflowError(
            f"DAG {dag_id} did not appear within {timeout:.0f}s (parse error? "
            "see the dag-processor log)"
        )

    def wait_for_input(
        self, dag_id: str, run_id: str, task_id: str, timeout: float = 600, settle: float = 8
    ) -> None:
        """Wait until a human-in-the-loop task awaits its answer and the scheduler has seen
        its worker exit (at most ``settle`` seconds more).

        Airflow 3.3.2's scheduler fails a deferred task whose answer re-queues it before the
        scheduler has seen its worker exit ("finished with state success, but the task
        instance's state attribute is queued", apache/airflow#67287): an answer given within a
        second or two of the request, as a script gives it, loses the run. A person never
        answers that fast. A script of the local stack waits for its scheduler's log to show
        the task instance finished as awaiting input; any other waits ``settle`` seconds, a
        scheduler loop or two."""
        deadline = time.monotonic() + timeout
        while (state := self.task_states(dag_id, run_id).get(task_id)) != "awaiting_input":
            if self.run(dag_id, run_id)["state"] in ("success", "failed"):
                raise AirflowError(f"{dag_id} {run_id} ended before {task_id} asked for input")
            if time.monotonic() > deadline:
                raise AirflowError(
                    f"{dag_id} {run_id}: {task_id} is {state}, not awaiting input, after "
                    f"{timeout:.0f}s; see its task log"
                )
            time.sleep(0.5)
        if self.scheduler_log is None:
            time.sleep(settle)  # nothing to read: a scheduler loop or two
            return
        settled = time.monotonic() + settle
        ti_id = next(
            t["id"] for t in self.task_instances(dag_id, run_id) if t["task_id"] == task_id
        )
        while time.monotonic() < settled:
            if self._scheduler_saw_exit(self.scheduler_log, ti_id):
                # Then the scheduler's loop ends its transaction.
                time.sleep(max(0.0, min(settled - time.monotonic(), 0.5)))
                return
            time.sleep(0.2)

    @staticmethod
    def _scheduler_saw_exit(log: Path, ti_id: str) -> bool:
        """Whether the scheduler ``log`` records task instance ``ti_id`` (an id used once)
        finished, its worker exited, in state awaiting_input."""
        try:
            text = log.read_text(errors="replace")
        except OSError:
            return False
        return any(
            f"ti_id={ti_id}," in line and "state=awaiting_input" in line
            for line in text.splitlines()
            if "TaskInstance Finished:" in line
        )

    def wait_for_run(
        self, dag_id: str, run_id: str, timeout: float = 900, progress: bool = True
    ) -> dict[str, Any]:
        """Wait until the run ends; returns the run (``state`` success or failed)."""
        deadline, last = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            run = self.run(dag_id, run_id)
            if run["state"] in ("success", "failed"):
                return run
            if progress:
                states = self.task_states(dag_id, run_id)
                line = ", ".join(f"{t}={s}" for t, s in states.items() if s)
                if line != last:
                    print(f"[airflow] {dag_id} {run_id}: {line}", file=sys.stderr, flush=True)
                    last = line
            time.sleep(1)
        raise AirflowError(f"{dag_id} run {run_id} did not finish within {timeout:.0f}s")
