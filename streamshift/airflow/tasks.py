"""What the DAGs' Python tasks do, as plain functions (no Airflow, no Spark at import).

The DAG factories in :mod:`streamshift.airflow.dags` wrap these in ``@task``; tests call
them directly. Landing convention, per flow and business date::

    STREAMSHIFT_HOME/landing/<flow>/<date>/<flow>_eod_<date>.csv   the day's EOD file
    STREAMSHIFT_HOME/landing/<flow>/<date>/external_<date>.csv     optional: an external view
                                                                  file (e.g. clearing positions)

A ``file`` parameter names a file relative to ``landing/<flow>/`` and must stay inside it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from streamshift.control.jobs import check
from streamshift.spec.catalog import default_file, external_file, landing_dir
from streamshift.spec.errors import StreamshiftError
from streamshift.spec.registry import get_flow
from streamshift.spec.requests import CloseRequest, EodRequest, JobRequest, ReconcileRequest
from streamshift.spec.settings import Settings, load_settings
from streamshift.spec.stages import CORRECT, LOAD
from streamshift.spec.stages import stage as stage_of
from streamshift.store.eodfile import check_file
from streamshift.store.quality import Check, QualityError, QualityRun, datasets, new_run_id
from streamshift.store.records import quality_run_rows

MODES = ("delta", "replace")
# Spark jobs queue for this pool's slots (one on the local stack: two cores); runs waiting for
# their files hold none, so a backfill never waits behind today's sensor.
# The JSON-schema pattern of the ``file`` param: relative, no '..' segment.
FILE_PATTERN = r"^(?!/)(?!.*(^|/)\.\.(/|$))[A-Za-z0-9_.=+@,/-]+$"


class InputError(StreamshiftError, ValueError):
    """A DAG run's parameters do not name a usable business date, mode or file."""

    final = True


def resolve_in_landing(landing: Path, file: str) -> Path:
    """``file`` (relative to ``landing``) as an absolute path that stays inside ``landing``.

    Rejects absolute paths, ``..`` and symlinks that lead out of the folder.
    """
    if not file or file.startswith("/") or ".." in Path(file).parts:
        raise InputError(
            f"file {file!r} must be a path relative to the landing folder {landing} "
            "without '..' (e.g. 2026-11-20/<flow>_eod_2026-11-20.csv)"
        )
    root = landing.resolve()
    resolved = (landing / file).resolve()
    if not resolved.is_relative_to(root):
        raise InputError(
            f"file {file!r} resolves to {resolved}, outside the landing folder "
            f"{root}; copy the file into the landing folder instead of linking to it"
        )
    return resolved


def business_date_of(param: str | None, logical_date: dt.date) -> str:
    text = param or logical_date.isoformat()
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise InputError(f"business_date {text!r} is not a date; use YYYY-MM-DD") from None


def refuse_unknown_params(dag_id: str, params: Mapping[str, Any], known: Iterable[str]) -> None:
    """:class:`InputError` when a run's params hold a key the DAG does not declare. Airflow
    keeps a trigger's conf keys that name no param: a misspelt one would leave its param at
    the default (the run's own date, the first flow) and the run would act on that silently."""
    names = list(known)
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise InputError(
            f"unknown param {', '.join(map(repr, unknown))}: {dag_id} takes {', '.join(names)}"
        )


def resolve_inputs(
    settings: Settings, flow: str, params: dict[str, Any], logical_date: dt.date, stage: str
) -> dict[str, Any]:
    """Everything the run's later tasks need, decided once: date, mode, file, stage, the
    Spark jobs' arguments. Raises :class:`InputError` before any Spark job starts."""
    business_date = business_date_of(params.get("business_date"), logical_date)
    mode = params.get("mode") or "delta"
    if mode not in MODES:
        raise InputError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    landing = landing_dir(settings, flow)
    path = resolve_in_landing(landing, params.get("file") or default_file(flow, business_date))
    now = stage_of(stage)
    day = dt.date.fromisoformat(business_date)
    # The Spark job that writes the day (load or correction) validates it in the same
    # session, recorded under this id; the data_quality task reads the verdict.
    quality_run = new_run_id()
    external = _external(settings, flow, business_date)
    # The correction job reconciles the file itself (and the external file when there).
    reconcile = None if now.corrects else reconcile_request(settings, flow, business_date, stage)
    load = EodRequest(flow, day, path, "batch", mode == "replace", quality_run=quality_run)
    correct = ReconcileRequest(
        flow,
        day,
        against=external,
        eod_file=path,
        parity=False,
        correct=True,
        replace=mode == "replace",
        quality_run=quality_run,
    )
    return {
        "flow": flow,
        "business_date": business_date,
        "mode": mode,
        "file": str(path),
        "stage": stage,
        "external": str(external) if external else None,
        "path": {LOAD: "load_eod_file", CORRECT: "correct_stream_layer"}.get(now.eod, "close_day"),
        "waits_for_file": now.waits_for_file,
        # Batch: only an external file to reconcile against; shadow: stream vs batch too;
        # kappa: the external file.
        "reconcile": reconcile is not None,
        # The Spark jobs' requests, as JSON (XCom): one engine task runs each.
        "load_request": load.to_json(),
        "reconcile_request": reconcile.to_json() if reconcile else None,
        "correct_request": correct.to_json(),
        "close_request": CloseRequest(flow, day, quality_run=quality_run).to_json(),
        "quality_run": quality_run,
    }


def _external(settings: Settings, flow: str, business_date: str) -> Path | None:
    """The date's external file when it has landed."""
    external = external_file(settings, flow, business_date)
    return external if external.exists() else None


def reconcile_request(
    settings: Settings, flow: str, business_date: str, stage: str
) -> ReconcileRequest | None:
    """The reconciliation of a date: stream vs batch where the stage reconciles parity
    (shadow), the EOD file against the stream layer where the stage corrects with it (stream;
    when the day's file is in the landing folder), and against the landed external file when
    there is one; None when there is nothing to reconcile against."""
    now = stage_of(stage)
    external = _external(settings, flow, business_date)
    eod = landing_dir(settings, flow) / default_file(flow, business_date)
    eod_file = eod if now.corrects and eod.exists() else None
    if not now.parity and not external and not eod_file:
        return None
    return ReconcileRequest(
        flow,
        dt.date.fromisoformat(business_date),
        against=external,
        eod_file=eod_file,
        parity=now.parity,
    )


class ForceRefused(StreamshiftError):
    """A forced promotion by a user without the admin role."""

    final = True


ADMIN_ROLE = "admin"


def user_role(user: str) -> str | None:
    """The Airflow auth manager's role of ``user`` (None: unknown user, or an auth manager
    whose roles are not readable from its configuration)."""
    from airflow.configuration import conf

    if not conf.get("core", "auth_manager", fallback="").endswith("SimpleAuthManager"):
        return None
    if conf.getboolean("core", "simple_auth_manager_all_admins", fallback=False):
        return ADMIN_ROLE
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    roles = {u.username: u.role for u in SimpleAuthManager.get_users()}
    role = roles.get(user)
    return str(role).lower() if role else None


def check_may_force(user: str, force: bool) -> None:
    """Forcing past the promotion gate needs the admin role; raises :class:`ForceRefused`."""
    if not force:
        return
    role = user_role(user)
    if role != ADMIN_ROLE:
        raise ForceRefused(
            f"{user} (role {role or 'unknown'}) may not force a promotion past the gate: that "
            "needs the admin role. Ask an admin, or promote without force once the evidence is "
            "clean"
        )


def check_raw_file(settings: Settings, inputs: dict[str, Any]) -> dict[str, Any]:
    """The file-level checks (pure Python): header, delimiter, truncation; no Spark."""

    landing = landing_dir(settings, inputs["flow"])
    # Again after the wait: the file (or a link) may have changed since the run started.
    path = resolve_in_landing(landing, str(Path(inputs["file"]).relative_to(landing.resolve())))
    layout = check_file(path, get_flow(inputs["flow"]), whole_day=inputs["mode"] == "replace")
    return {"file": str(path), "data_lines": layout.data_lines, "columns": layout.header}


def quality_verdict(settings: Settings, inputs: dict[str, Any]) -> QualityRun | None:
    """The data-quality checks the day's Spark job recorded under the run's id (read without
    a JVM); ``None`` for a flow without suites. Raises :class:`QualityError` when the job
    recorded none (it failed before validating) and the caller fails on ``run.failures``."""

    flow, run_id = inputs["flow"], inputs["quality_run"]
    if not datasets(flow):
        return None
    found = quality_run_rows(settings, flow, dt.date.fromisoformat(inputs["business_date"]), run_id)
    if not found:
        raise QualityError(
            f"no data-quality results under run {run_id}: the job that wrote "
            f"{flow} {inputs['business_date']} did not validate it; see its task log"
        )
    run = QualityRun(run_id, flow, inputs["business_date"], str(found[0]["layer"]))
    run.checks = [
        Check(
            r["suite"], r["expectation"], r["policy"], r["success"], r["observed"], r["threshold"]
        )
        for r in found
    ]
    return run


def summary(settings: Settings, inputs: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The run's summary from the day's report.json: (XCom value, one line for the log).

    ``inputs`` names the flow and business date, and what published the day: an EOD run gives
    its file and mode (``cause`` ``eod``); a re-reconciliation after late events gives
    neither (``cause`` ``late data``)."""
    report_dir = settings.reports / inputs["flow"] / inputs["business_date"]
    data = json.loads((report_dir / "report.json").read_text())
    breaks = sum(int(v) for v in data.get("breaks_by_kind", {}).values())
    recons = data.get("reconciliations", [])
    verdict = "no reconciliation" if not recons else "clean" if breaks == 0 else f"{breaks} breaks"
    cause = "eod" if inputs.get("file") else "late data"
    result = {
        "flow": inputs["flow"],
        "business_date": inputs["business_date"],
        "cause": cause,
        "stage": data["stage"],
        "mode": inputs.get("mode"),
        "file": inputs.get("file"),
        "reconciliations": len(recons),
        "breaks": breaks,
        "verdict": verdict,
        "report": str(report_dir / "report.html"),
        "quality": data.get("quality", {}).get("counts", {}),
        "quality_warnings": [
            f"{q['suite']} {q['expectation']}: observed {q['observed']}, expected {q['threshold']}"
            for q in data.get("quality", {}).get("not_passed", [])
            if q["policy"] == "warn"
        ],
    }
    source = f"{inputs['mode']} file {Path(inputs['file']).name}" if cause == "eod" else "late data"
    line = (
        f"{inputs['flow']} {inputs['business_date']} (stage {data['stage']}, {source}): "
        f"{verdict} in {len(recons)} reconciliations; report {result['report']}"
    )
    if result["quality"]:
        q = result["quality"]
        line += f"; data quality {q['pass']} pass, {q['warn']} warn, {q['fail']} fail"
        line += "".join(f"; WARNING {w}" for w in result["quality_warnings"])
    return result, line


def run_on_engine(request: str, spark: Any = None) -> str:
    """An engine task's body: the job ``request`` (JSON) asks for, in ``spark``, the task's
    Spark Connect session (the operator made it); what it did, for the log and XCom."""
    from streamshift.engine.jobs.requests import run
    from streamshift.engine.spark import describe_session

    job = JobRequest.from_json(request)
    settings = load_settings()
    check(settings, job)
    print(describe_session(spark), flush=True)  # where it runs, for the task's log
    done = run(spark, job, settings).describe()
    print(done)
    return done
