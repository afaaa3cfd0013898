"""The Migration page of the Airflow UI: each flow's stage, evidence and health.

A FastAPI app the Airflow plugin (``plugins/streamshift_migration.py``) mounts in the API
server under ``/streamshift``, shown in the UI's navigation as an external view:

* ``GET  /streamshift/migration`` — the page (HTML);
* ``GET  /streamshift/api/flows`` — the same data as JSON, one object per flow;
* ``POST /streamshift/api/flows/{flow}/promote`` — the promotion gate (409 with the CLI's
  message when it says no); when it says yes, a ``streamshift_promote`` DAG run triggered as
  the signed-in user, which records the change with that user as ``changed_by``;
* ``POST /streamshift/api/flows/{flow}/redrive`` — a ``streamshift_redrive`` run for one rule's
  quarantined rows (or all), of one business date (or all), triggered as the signed-in user
  (``streamshift redrive``); the page lists the serving layer's quarantine by rule and by date,
  each with a Re-drive button, and the latest outcomes;
* ``GET  /streamshift/api/runs/{dag_id}/{run_id}`` — a promotion's or a re-drive's run state
  and, while a promotion waits for a second user's approval, the link to Airflow's Required
  actions where they answer;
* ``GET  /streamshift/trace?flow=F&key=K[&layer=L]`` — where a key's changes went (the page's
  search box; ``streamshift trace``), and ``/streamshift/api/flows/{flow}/trace?key=K`` as JSON;
* ``GET  /streamshift/explain?flow=F&view=V&date=D&group=c=v,...[&layer=L]`` — why a view row
  is what it is (``streamshift explain``; every break the page shows links to its explanation,
  or to the key's trace for a break of the EOD file), and ``/streamshift/api/flows/{flow}/explain``
  as JSON;
* ``GET  /streamshift/reports/{flow}/{date}`` — the day's HTML report;
* ``GET  /streamshift/data_docs/...`` — Great Expectations Data Docs (what the report and the
  page link to).

Airflow does not authenticate plugin apps: every route here requires a signed-in Airflow
user (the UI's ``_token`` cookie or an ``Authorization: Bearer`` token) through Airflow's own
``get_user`` dependency and auth manager — 401 without a credential, 403 with a bad one or
without the right. Reads go through deltalake: the API server never starts a JVM or imports
pyspark.

No ``from __future__ import annotations`` here: FastAPI reads the routes' annotations, which
name classes local to the functions that add the routes.
"""

import datetime as dt
import json
from pathlib import Path
from typing import Any

from streamshift.control import explain as ex
from streamshift.control.report import report_dir
from streamshift.control.stages import PromotionRefused, check_promotion
from streamshift.control.summary import query_value as _q
from streamshift.control.summary import summaries
from streamshift.control.trace import (
    COLUMNS,
    default_layer,
    shown_ref,
    table_rows,
    trace,
    trace_link,
)
from streamshift.spec.formatting import html_cell as _e
from streamshift.spec.formatting import html_table
from streamshift.spec.registry import UnknownFlowError, get_flow, require_flow
from streamshift.spec.settings import load_settings
from streamshift.store.airflow_api import AirflowApiError, AirflowClient
from streamshift.store.heartbeat import not_applied_yet
from streamshift.store.versions import EXAMPLE_COLUMNS, live_tables

PROMOTE_DAG = "streamshift_promote"
REDRIVE_DAG = "streamshift_redrive"


# ---- the page -----------------------------------------------------------------------------
# The page's HTML is Jinja2 templates (templates/), its script a static file (static/), both
# inside the package; values reach the HTML through ``cell`` (the CLI's formatting, escaped).
PAGE_FILES = Path(__file__).resolve().parent
_TEMPLATES: Any = None


def _templates() -> Any:
    """The page's Jinja2 environment (Jinja2 ships with Airflow), made once."""
    global _TEMPLATES
    if _TEMPLATES is None:
        import jinja2
        from markupsafe import Markup

        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader([PAGE_FILES / "templates", PAGE_FILES / "static"]),
            autoescape=jinja2.select_autoescape(["html"]),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
        )
        env.filters["cell"] = lambda value: Markup(_e(value))
        env.filters["q"] = _q
        env.globals["table"] = lambda rows, columns, cls="", links=None: Markup(
            html_table(rows, columns, cls, links)
        )
        env.globals["stream_class"] = _stream_class
        env.globals["example_columns"] = EXAMPLE_COLUMNS
        _TEMPLATES = env
    return _TEMPLATES


def _page(template: str, **values: Any) -> str:
    return str(_templates().get_template(template).render(**values))


def _trace(settings: Any, flow: str, key: str, layer: str | None) -> Any:
    """The key's trace in ``layer``, by default the layer that serves in the flow's stage."""

    if layer not in (None, "batch", "stream"):
        from fastapi import HTTPException

        raise HTTPException(404, f"unknown layer {layer!r}: batch or stream")
    spec = get_flow(flow)
    chosen = layer or default_layer(settings, flow)
    return trace(spec, live_tables(settings.warehouse, spec, chosen), key)


def render_trace(settings: Any, flow: str, key: str, layer: str | None) -> str:
    """Where a key's changes went, as a page (``streamshift trace``)."""

    found = _trace(settings, flow, key, layer)
    rows = [dict(zip(COLUMNS, r, strict=True)) for r in table_rows(found)]
    now = found.current
    state = (
        "no current version"
        if now is None
        else f"current version {now['version']}{' (deleted)' if now['deleted'] else ''}, "
        f"from {shown_ref(now)}"
    )
    other = "batch" if found.layer == "stream" else "stream"
    return _page(
        "trace.html",
        title=f"trace {key}",
        flow=flow,
        key=key,
        layer=found.layer,
        state=state,
        other=other,
        rows=rows,
        columns=COLUMNS,
        waiting=not_applied_yet(settings, flow, found.layer),
    )


def _explain(settings: Any, flow: str, view: str, day: str, group: str, layer: str | None) -> Any:
    """The explanation of one view row in ``layer`` (by default the serving one)."""
    from fastapi import HTTPException

    if layer not in (None, "batch", "stream"):
        raise HTTPException(404, f"unknown layer {layer!r}: batch or stream")
    try:
        business_date = dt.date.fromisoformat(day)
        return ex.explain_in(settings, flow, view, business_date, group, layer, changes=100)
    except (ValueError, ex.ExplainError) as e:
        raise HTTPException(400, str(e.args[0] if e.args else e)) from None


def render_explain(
    settings: Any, flow: str, view: str, day: str, group: str, layer: str | None
) -> str:
    """Why a view row is what it is, as a page (``streamshift explain``)."""

    found = _explain(settings, flow, view, day, group, layer)
    named = ", ".join(f"{k}={v}" for k, v in found.group.items())
    other = "batch" if found.layer == "stream" else "stream"
    members = [
        {
            **dict(zip(ex.MEMBER_COLUMNS, r, strict=True)),
            "trace": trace_link(flow, m["key"], found.layer),
        }
        for r, m in zip(ex.member_rows(found), found.members, strict=True)
    ]
    changes = [
        {
            **dict(zip(ex.CHANGE_COLUMNS, r, strict=True)),
            "trace": trace_link(flow, c["key"], found.layer),
        }
        for r, c in zip(ex.change_rows(found), found.changes, strict=True)
    ]
    row = (
        "its row, made by its members"
        if found.row is not None
        else "no row now: every member left"
        if found.changes_total
        else "no row, and no change ever touched this group (check the values, or the other layer)"
    )
    here = f"explain?flow={_q(flow)}&view={_q(view)}&date={_q(day)}&group={_q(group)}"
    return _page(
        "explain.html",
        title=f"explain {named}",
        flow=flow,
        view=found.view,
        named=named,
        layer=found.layer,
        row=row,
        here=here,
        other=other,
        measures=ex.measure_lines(found),
        members=members,
        members_total=len(found.members),
        member_columns=ex.MEMBER_COLUMNS,
        changes=changes,
        changes_total=found.changes_total,
        change_columns=ex.CHANGE_COLUMNS,
        waiting=not_applied_yet(settings, flow, found.layer),
    )


def render(flows: list[dict[str, Any]], user: str) -> str:
    """The Migration page of ``flows`` (each a :func:`flow_summary`), for ``user``."""
    return _page("migration.html", flows=flows, user=user)


# ---- the app ------------------------------------------------------------------------------
def _credential(request: Any) -> str | None:
    """The caller's Airflow token: the Bearer header, else the UI's session cookie."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return str(header[7:].strip())
    token = request.cookies.get(COOKIE_NAME_JWT_TOKEN)
    return str(token) if token else None


def _airflow_api(method: str, path: str, token: str | None, body: Any = None) -> Any:
    """Airflow's own REST API on this API server, called as the signed-in user (their token,
    forwarded: the page holds no identity of its own)."""
    from airflow.configuration import conf
    from fastapi import HTTPException

    base = conf.get("api", "base_url", fallback="http://127.0.0.1:8080")
    try:
        return AirflowClient.as_caller(base, token).call(method, path, body)
    except AirflowApiError as exc:
        detail: Any = exc.detail
        try:
            detail = json.loads(detail).get("detail", detail)
        except (ValueError, AttributeError):
            pass
        raise HTTPException(exc.status, f"Airflow answered {exc.status}: {detail}") from None


def _stream_class(stream: dict[str, Any]) -> str:
    return "failing" if stream["failing"] else "running" if stream["running"] else "stopped"


def create_app() -> Any:
    """The page's FastAPI app: every route needs a signed-in Airflow user who may view plugins.

    Airflow and FastAPI are imported here, not at the module's top: the page's renderers
    (``render``, ``render_trace``, ``render_explain``) serve tests and tools with neither."""
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view
    from fastapi import Depends, FastAPI

    app = FastAPI(
        title="streamshift Migration",
        description="Each flow's migration stage, evidence and health; promotion through the gate.",
        dependencies=[Depends(requires_access_view(AccessView.PLUGINS))],
        # FastAPI serves these without its app dependencies (no user asked): off, so every
        # route of the app needs a signed-in Airflow user.
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    _read_routes(app)
    _action_routes(app)
    _file_routes(app)
    return app


def _known(flow: str) -> str:
    """``flow``, or 404 naming the flows there are."""
    from fastapi import HTTPException

    try:
        return require_flow(flow)
    except UnknownFlowError as exc:
        raise HTTPException(404, str(exc)) from None


def _read_routes(app: Any) -> None:
    """The page, trace and explain, as HTML and as JSON: reads through deltalake."""
    from airflow.api_fastapi.core_api.security import GetUserDep
    from fastapi.encoders import jsonable_encoder
    from fastapi.responses import HTMLResponse, JSONResponse

    @app.get("/migration", response_class=HTMLResponse)
    def page(user: GetUserDep) -> str:
        return render(summaries(load_settings()), user.get_name())

    @app.get("/trace", response_class=HTMLResponse)
    def trace_page(flow: str, key: str, layer: str | None = None) -> str:
        return render_trace(load_settings(), _known(flow), key, layer)

    @app.get("/explain", response_class=HTMLResponse)
    def explain_page(flow: str, view: str, date: str, group: str, layer: str | None = None) -> str:
        return render_explain(load_settings(), _known(flow), view, date, group, layer)

    @app.get("/api/flows/{flow}/explain")
    def explain_json(
        flow: str, view: str, date: str, group: str, layer: str | None = None
    ) -> JSONResponse:
        found = _explain(load_settings(), _known(flow), view, date, group, layer)
        return JSONResponse(jsonable_encoder(found.as_json()))

    @app.get("/api/flows/{flow}/trace")
    def trace_json(flow: str, key: str, layer: str | None = None) -> JSONResponse:
        return JSONResponse(
            jsonable_encoder(_trace(load_settings(), _known(flow), key, layer).as_json())
        )

    @app.get("/api/flows")
    def flows() -> JSONResponse:
        return JSONResponse(jsonable_encoder(summaries(load_settings())))


def _may_trigger(user: Any, dag_id: str, what: str) -> None:
    """403 unless ``user`` may start runs of ``dag_id`` (Airflow's auth manager says)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        DagAccessEntity,
        DagDetails,
    )
    from fastapi import HTTPException

    if not get_auth_manager().is_authorized_dag(
        method="POST",
        access_entity=DagAccessEntity.RUN,
        details=DagDetails(id=dag_id),
        user=user,
    ):
        raise HTTPException(403, f"{user.get_name()} may not trigger {dag_id}, so may not {what}")


def _triggered(dag_id: str, conf: dict[str, Any], request: Any, user: Any, message: str) -> Any:
    """A run of ``dag_id`` started through Airflow's REST API as the signed-in user."""
    from fastapi.responses import JSONResponse

    run = _airflow_api(
        "POST",
        f"/api/v2/dags/{dag_id}/dagRuns",
        _credential(request),
        {"logical_date": None, "conf": conf},
    )
    body = {"run_id": run["dag_run_id"], "state": run["state"], "message": message}
    return JSONResponse({**body, "by": user.get_name()}, status_code=202)


def _action_routes(app: Any) -> None:
    """Promotion and re-drive, each a DAG run started as the signed-in user, and their runs'
    state as the page follows them."""
    from airflow.api_fastapi.core_api.security import GetUserDep
    from fastapi import HTTPException, Request
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel

    class Promotion(BaseModel):
        to: str
        reason: str | None = None

    @app.post("/api/flows/{flow}/promote")
    def promote(
        flow: str, promotion: Promotion, request: Request, user: GetUserDep
    ) -> JSONResponse:
        _known(flow)
        _may_trigger(user, PROMOTE_DAG, "promote")
        try:
            change = check_promotion(load_settings(), flow, promotion.to, reason=promotion.reason)
        except PromotionRefused as refused:
            raise HTTPException(409, str(refused)) from None
        conf = {"flow": flow, "to": promotion.to, "force": False, "reason": promotion.reason}
        return _triggered(PROMOTE_DAG, conf, request, user, change.describe())

    class Redrive(BaseModel):
        rule: str | None = None
        business_date: dt.date | None = None

    @app.post("/api/flows/{flow}/redrive")
    def redrive(flow: str, body: Redrive, request: Request, user: GetUserDep) -> JSONResponse:
        """Start a ``streamshift_redrive`` run for the flow (one rule's rows or all, of one
        business date or all), as the signed-in user: the same job as ``streamshift redrive``."""
        _known(flow)
        _may_trigger(user, REDRIVE_DAG, "re-drive")
        scope = f"rule {body.rule}" if body.rule else "every rule"
        scope += f" on {body.business_date}" if body.business_date else ""
        message = f"re-driving {flow}'s quarantined rows of {scope}"
        conf: dict[str, Any] = {"flow": flow, "rule": body.rule}
        if body.business_date:
            conf["business_date"] = body.business_date.isoformat()
        return _triggered(REDRIVE_DAG, conf, request, user, message)

    @app.get("/api/runs/{dag_id}/{run_id}")
    def run_state(dag_id: str, run_id: str, request: Request) -> dict[str, Any]:
        """A promotion's or a re-drive's run, as the page follows it: its state and, while a
        promotion waits for a second user, where they answer (Airflow's Required actions)."""
        from urllib.parse import quote

        if dag_id not in (PROMOTE_DAG, REDRIVE_DAG):
            raise HTTPException(404, f"the page follows runs of {PROMOTE_DAG} and {REDRIVE_DAG}")
        path = f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}"
        run = _airflow_api("GET", path, _credential(request))
        approval = None
        if dag_id == PROMOTE_DAG:
            approve = _airflow_api("GET", f"{path}/taskInstances/approve", _credential(request))
            if approve.get("state") in ("awaiting_input", "deferred"):
                approval = (
                    f"../dags/{PROMOTE_DAG}/runs/{quote(run_id, safe='')}/tasks/approve/"
                    "required_actions"
                )
        return {
            "run_id": run["dag_run_id"],
            "state": run["state"],
            "conf": run.get("conf"),
            "approval": approval,
        }


def _file_routes(app: Any) -> None:
    """The day's report and Great Expectations' Data Docs, as files."""
    from fastapi import HTTPException
    from fastapi.responses import FileResponse

    @app.get("/reports/{flow}/{day}")
    def report(flow: str, day: str) -> FileResponse:
        try:
            business_date = dt.date.fromisoformat(day)
        except ValueError:
            raise HTTPException(404, f"{day!r} is not a date (YYYY-MM-DD)") from None
        path: Path = report_dir(load_settings(), _known(flow), business_date) / "report.html"
        if not path.exists():
            raise HTTPException(
                404, f"no report for {flow} on {day} yet: the EOD run's write_report writes it"
            )
        return FileResponse(path, media_type="text/html")

    @app.get("/data_docs/{page:path}")
    def data_docs(page: str) -> FileResponse:
        root = (load_settings().reports / "data_docs").resolve()
        path = (root / page).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            raise HTTPException(404, f"no Data Docs page {page!r} (run streamshift quality)")
        return FileResponse(path)
