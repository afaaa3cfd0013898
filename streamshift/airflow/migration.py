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
name classes local to :func:`create_app`.
"""

import datetime as dt
import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from streamshift.control import explain as ex
from streamshift.control.report import report_dir
from streamshift.control.stages import GATED, PromotionRefused, check_promotion, promotion_evidence
from streamshift.control.trace import (
    COLUMNS,
    default_layer,
    serving_layer_of,
    shown_ref,
    table_rows,
    trace,
)
from streamshift.spec.catalog import PARITY, ControlTables, LayerTables
from streamshift.spec.formatting import html_cell as _e
from streamshift.spec.formatting import html_table
from streamshift.spec.registry import get_flow
from streamshift.spec.stages import FIRST, next_stage
from streamshift.spec.stages import stage as stage_of
from streamshift.store.quality import counts_by_verdict
from streamshift.store.quarantine import pending
from streamshift.store.records import (
    breaks_of,
    latest_runs,
    promotion_decisions,
    quality_results,
    recon_by_date,
    stage_history,
)
from streamshift.store.tables import rows


def _q(text: str) -> str:
    """``text`` as a URL query value."""
    return urllib.parse.quote(text, safe="")


from streamshift.control.trace import trace_link
from streamshift.spec.registry import flow_names
from streamshift.spec.settings import Settings, load_settings
from streamshift.store.heartbeat import read_status

PROMOTE_DAG = "streamshift_promote"
REDRIVE_DAG = "streamshift_redrive"
STREAK_DAYS = 30
WORST = 10


# ---- data (no Airflow, no Spark) ----------------------------------------------------------
def flow_summary(settings: Settings, flow: str) -> dict[str, Any]:
    """Everything the page shows of one flow, as plain data."""

    def report(day: dt.date) -> str | None:
        exists = (report_dir(settings, flow, day) / "report.html").exists()
        return f"reports/{flow}/{day.isoformat()}" if exists else None

    history = stage_history(settings, flow)
    stage = history[-1]["to_stage"] if history else FIRST
    latest = latest_runs(settings, flow)
    # The evidence this stage makes for the next (parity in shadow, the EOD file in stream).
    kind = stage_of(stage).evidence or PARITY
    streak = recon_by_date(latest, kind)[-STREAK_DAYS:]
    clean_run = 0
    for day in reversed(streak):
        if not day["rows"]:  # nothing in either layer: shown, not counted (as by the gate)
            continue
        if not day["clean"]:
            break
        clean_run += 1
    evidence = promotion_evidence(settings, flow)
    last: dict[str, Any] | None = None
    if latest:
        last_day = max(r["business_date"] for r in latest)
        runs = [r for r in latest if r["business_date"] == last_day]
        worst = breaks_of(settings, flow, last_day, [r["run_id"] for r in runs], WORST)
        last = {
            "business_date": last_day,
            "breaks": sum(int(r["breaks"]) for r in runs),
            "runs": runs,
            "worst": [{**b, "why": break_link(flow, last_day, b["key"])} for b in worst],
            "report": report(last_day),
        }
    checks = quality_results(settings, flow)
    quality = None
    if checks:
        day = max(r["business_date"] for r in checks)
        today = [r for r in checks if r["business_date"] == day]
        quality = {
            "business_date": day,
            "counts": counts_by_verdict(today),
            "failed": [
                f"{r['suite']} {r['expectation']} ({r['policy']})"
                for r in today
                if not r["success"]
            ],
            "data_docs": {
                f"{r['suite']} ({r['layer']})": f"data_docs/{r['docs_page']}"
                for r in today
                if r["docs_page"]
            },
        }
    streams = [s for s in read_status(settings.home, settings) if s.flow == flow]
    following = next_stage(stage)
    quarantine = _quarantine(settings, flow, stage)
    next_name = following.name if following else None
    return {
        "flow": flow,
        "stage": stage,
        "next_stage": next_name,
        "next_is_gated": next_name in GATED,
        "stage_history": history,
        "approvals": promotion_decisions(settings, flow),
        "evidence": {
            "window": evidence.window,
            "sufficient": evidence.sufficient,
            "problems": evidence.problems(),
        },
        "parity_streak": [{**d, "report": report(d["business_date"])} for d in streak],
        "streak_kind": "stream vs batch" if kind == PARITY else "the EOD file vs the stream layer",
        "clean_days_in_a_row": clean_run,
        "last_reconciliation": last,
        "quality": quality,
        "quarantine": quarantine,
        "streams": [
            {
                "layer": s.layer,
                "running": s.running,
                "failing": s.failing,
                "lag": s.lag_now if s.lag_now is not None else s.beat.get("lag"),
                "last_batch_at": s.beat.get("last_batch_at"),
                "status": s.describe(),
            }
            for s in streams
        ],
    }


def _quarantine(settings: Settings, flow: str, stage: str) -> dict[str, Any]:
    """The quarantined rows a re-drive would try in the layer serving in ``stage`` (read
    once for the page), counted by rule, and the latest re-drive outcomes there."""
    from collections import Counter

    layer = serving_layer_of(stage)
    by_date = Counter((q["rule"], q["business_date"]) for q in pending(settings, flow, layer))
    outcomes = rows(
        ControlTables(settings.warehouse).redrives,
        where=[("flow", "=", flow), ("layer", "=", layer)],
    )
    latest = sorted(outcomes, key=lambda r: r["redriven_at"], reverse=True)[:WORST]
    return {
        "layer": layer,
        "by_rule": [
            row for rule in sorted({r for r, _ in by_date}) for row in _dates_of(rule, by_date)
        ],
        "redrives": latest,
    }


def _dates_of(rule: str, by_date: dict[tuple[str, Any], int]) -> list[dict[str, Any]]:
    """A rule's rows of the page's quarantine table: one per business date (None: rows whose
    date did not parse, which only the rule's re-drive of every date takes), after one for all
    of them when there are several or the only one is unread."""
    days = sorted(((d, n) for (r, d), n in by_date.items() if r == rule), key=lambda dn: str(dn[0]))
    total = sum(n for _, n in days)
    several = len(days) > 1 or days[0][0] is None
    every = [{"rule": rule, "business_date": "all", "rows": total}] if several else []
    return every + [{"rule": rule, "business_date": d, "rows": n} for d, n in days]


def summaries(settings: Settings) -> list[dict[str, Any]]:
    return [flow_summary(settings, flow) for flow in flow_names()]


def break_link(flow: str, day: dt.date, key: str) -> str | None:
    """Where a break is explained: a view group's explanation, or a key's trace for a break
    of the EOD file (its key names the flow's key column). ``key`` is the break's JSON."""

    spec = get_flow(flow)
    try:
        named = json.loads(key)
    except ValueError:
        return None
    if not isinstance(named, dict):
        return None
    if set(named) == {spec.key}:
        return trace_link(flow, named[spec.key])
    for view in spec.views:
        if set(named) == set(view.group_key):
            group = ",".join(f"{c}={named[c]}" for c in view.group_key if c != spec.business_date)
            return (
                f"explain?flow={_q(flow)}&view={_q(view.name)}&date={day.isoformat()}"
                f"&group={_q(group)}"
            )
    return None


# ---- the page -----------------------------------------------------------------------------
def _flow_section(s: dict[str, Any]) -> str:
    flow = s["flow"]

    def state(d: dict[str, Any]) -> tuple[str, str, str]:  # class, title, mark
        if not d["rows"]:
            return "empty", "no rows in either layer (not evidence)", "∅"
        if d["clean"]:
            return "clean", "clean", "✓"
        return "breaks", f"{d['breaks']} breaks", str(d["breaks"])

    streak = "".join(
        f"<li class='day {state(d)[0]}' data-date='{d['business_date']}'"
        f" data-breaks='{d['breaks']}' title='{d['business_date']}: {state(d)[1]}'>"
        + (
            f"<a href='{_e(d['report'])}'>{d['business_date']}</a>"
            if d["report"]
            else _e(d["business_date"])
        )
        + f" <span>{state(d)[2]}</span></li>"
        for d in s["parity_streak"]
    )
    last = s["last_reconciliation"]
    if last:
        report = (
            f"<a class='report' href='{_e(last['report'])}'>report of {last['business_date']}</a>"
            if last["report"]
            else "<span class='none'>no report written for this date yet</span>"
        )
        recon = (
            f"<p>business date <b class='last-date'>{last['business_date']}</b>: "
            f"<b class='last-breaks'>{last['breaks']}</b> breaks · {report}</p>"
            + html_table(
                last["runs"],
                ["recon", "breaks", "missing_left", "missing_right", "value_mismatch", "run_id"],
                "runs",
            )
            + "<h4>Worst breaks</h4>"
            + html_table(
                last["worst"],
                ["recon", "kind", "key", "column", "left_value", "right_value", "difference"],
                "worst",
                links={"key": "why"},
            )
        )
    else:
        recon = "<p class='none'>not reconciled yet</p>"
    streams = (
        "".join(
            f"<li class='stream {_stream_class(x)}'>{_e(x['status'])}</li>" for x in s["streams"]
        )
        or "<li class='none'>no streaming job has run for this flow</li>"
    )
    quality = s["quality"]
    if quality:
        n = quality["counts"]
        docs = " · ".join(
            f"<a class='data-docs' href='{_e(href)}'>{_e(name)}</a>"
            for name, href in sorted(quality["data_docs"].items())
        )
        quality_html = (
            f"<p>business date <b class='quality-date'>{quality['business_date']}</b>: "
            f"<b class='q-pass'>{n['pass']}</b> pass · <b class='q-warn'>{n['warn']}</b> warn · "
            f"<b class='q-fail'>{n['fail']}</b> fail</p>"
            + "".join(f"<p class='q-failed'>{_e(f)}</p>" for f in quality["failed"])
            + f"<p>Data Docs: {docs} · <a href='data_docs/index.html'>all runs</a></p>"
        )
    else:
        quality_html = "<p class='none'>no data-quality run yet</p>"
    quarantine = s["quarantine"]

    def rule_row(q: dict[str, Any]) -> str:
        # a date's own row re-drives that date; "all" the rule's every date; a row whose date
        # is unread only with them all
        day = q["business_date"]
        shown = "all dates" if day == "all" else ("no date" if day is None else str(day))
        date = "" if day in ("all", None) else str(day)
        button = (
            f"<button data-flow='{_e(flow)}' data-rule='{_e(q['rule'])}' "
            f"data-date='{date}'>Re-drive</button>"
            if day is not None
            else ""
        )
        return (
            f"<tr data-rule='{_e(q['rule'])}' data-date='{_e(shown)}'"
            + (" class='rule'" if day == "all" else "")
            + f"><td data-col='rule'>{_e(q['rule'])}</td><td data-col='business_date'>"
            f"{_e(shown)}</td><td data-col='rows'>{q['rows']}</td><td>{button}</td></tr>"
        )

    rules = "".join(rule_row(q) for q in quarantine["by_rule"])
    redrive = (
        (
            "<div class='redrive'><table class='quarantine'><thead><tr><th>rule</th>"
            "<th>business date</th><th>rows</th><th></th></tr></thead>"
            f"<tbody>{rules}</tbody></table><p class='outcome'></p></div>"
        )
        if rules
        else "<p class='none quarantine'>nothing to re-drive</p>"
    ) + (
        "<h4>Latest re-drives</h4>"
        + html_table(
            quarantine["redrives"],
            ["redriven_at", "source_ref", "rule", "outcome", "rules", "redriven_by"],
            "redrives",
        )
        if quarantine["redrives"]
        else ""
    )
    evidence = s["evidence"]
    gate = (
        "gate open: the last reconciled dates are clean"
        if evidence["sufficient"]
        else "gate closed: " + "; ".join(evidence["problems"])
    )
    promote = ""
    if s["next_stage"]:
        note = gate if s["next_is_gated"] else "no reconciliation evidence needed for this step"
        promote = (
            f"<div class='promote'><button data-flow='{_e(flow)}' data-to='{_e(s['next_stage'])}'>"
            f"Promote to {_e(s['next_stage'])}</button> <input class='reason' "
            f"placeholder='reason (optional)'> <span class='gate'>{_e(note)}</span>"
            f"<p class='outcome'></p></div>"
        )
    return f"""
<section class="flow" data-flow="{_e(flow)}">
<h2>{_e(flow)} <span class="stage" data-stage="{_e(s["stage"])}">{_e(s["stage"])}</span></h2>
{promote}
<h3>Evidence streak <small>({_e(s["streak_kind"])}, newest last; <b class="clean-run">{s["clean_days_in_a_row"]}</b>
clean in a row; promotion needs {evidence["window"]})</small></h3>
<ol class="streak">{streak or f"<li class='none'>no reconciliation of {_e(s['streak_kind'])} yet</li>"}</ol>
<h3>Last reconciliation</h3>
{recon}
<h3>Data quality</h3>
{quality_html}
<h3>Quarantine <small>({_e(quarantine["layer"])} layer; rows a re-drive would try)</small></h3>
{redrive}
<h3>Stream</h3>
<ul class="streams">{streams}</ul>
<h3>Stage history</h3>
{html_table(s["stage_history"], ["changed_at", "from_stage", "to_stage", "changed_by", "forced", "reason"], "history")}
<h3>Promotion approvals (four eyes)</h3>
{html_table(s["approvals"], ["decided_at", "from_stage", "to_stage", "requested_by", "decision", "decided_by"], "approvals")}
</section>"""


SCRIPT = """
// Both buttons start a DAG run through the page's API as the signed-in user, then follow it:
// the page reloads when it succeeds; a refusal or a failed run is said where the button is.
async function start(button, out, url, payload) {
  button.disabled = true;
  const resp = await fetch(url, {method: 'POST', headers: {'Content-Type': 'application/json'},
    body: JSON.stringify(payload)});
  const body = await resp.json();
  if (resp.ok) return body;
  out.className = 'outcome refused'; out.textContent = body.detail; button.disabled = false;
  return null;
}
async function follow(out, body, dag, onPoll) {
  for (;;) {
    await new Promise(r => setTimeout(r, 3000));
    const run = await (await fetch(`api/runs/${dag}/${encodeURIComponent(body.run_id)}`)).json();
    if (run.state === 'success') { location.reload(); return; }
    if (onPoll) onPoll(run);
    if (run.state === 'failed') { out.className = 'outcome refused'; out.textContent = `run ${body.run_id} failed: see its log in the DAG ${dag}`; return; }
  }
}
for (const button of document.querySelectorAll('.redrive button')) {
  button.addEventListener('click', async () => {
    const out = button.closest('.redrive').querySelector('.outcome');
    out.className = 'outcome running'; out.textContent = 're-driving ...';
    const body = await start(button, out, `api/flows/${button.dataset.flow}/redrive`,
      {rule: button.dataset.rule, business_date: button.dataset.date || null});
    if (!body) return;
    out.textContent = `${body.message} (run ${body.run_id}) ...`;
    await follow(out, body, 'streamshift_redrive');
  });
}
for (const button of document.querySelectorAll('.promote button')) {
  button.addEventListener('click', async () => {
    const box = button.closest('.promote'), out = box.querySelector('.outcome');
    out.textContent = 'checking the gate ...';
    const reason = box.querySelector('.reason').value || null;
    const body = await start(button, out, `api/flows/${button.dataset.flow}/promote`,
      {to: button.dataset.to, reason});
    if (!body) return;
    out.className = 'outcome running';
    out.textContent = `${body.message}: recording (run ${body.run_id}) ...`;
    await follow(out, body, 'streamshift_promote', run => {
      if (!run.approval) return;
      out.className = 'outcome awaiting'; out.innerHTML = '';
      out.append(`${body.message}: waiting for a second user's approval (run ${body.run_id}) — `);
      const link = document.createElement('a'); link.href = run.approval; link.target = '_top';
      link.textContent = 'Required actions'; out.append(link);
    });
  });
}
"""


def _trace(settings: Any, flow: str, key: str, layer: str | None) -> Any:
    """The key's trace in ``layer``, by default the layer that serves in the flow's stage."""

    if layer not in (None, "batch", "stream"):
        from fastapi import HTTPException

        raise HTTPException(404, f"unknown layer {layer!r}: batch or stream")
    spec = get_flow(flow)
    chosen = layer or default_layer(settings, flow)
    return trace(spec, LayerTables(settings.warehouse, spec, chosen), key)


def _answer_page(title: str) -> str:
    """The head of an answer page (a trace, an explanation), linking back to the page."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>streamshift · {_e(title)}</title>
<style>body {{ font-family: system-ui, sans-serif; margin: 1em 2em; }}
table {{ border-collapse: collapse; font-size: .85em; }}
td, th {{ padding: 2px 8px; border-bottom: 1px solid #eee; text-align: left; }}</style></head>
<body><p><a href="migration">← Migration</a></p>
"""


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
    return (
        _answer_page(f"trace {key}")
        + f"""<h1>{_e(flow)} key <span class="key">{_e(key)}</span></h1>
<p class="current">The {_e(found.layer)} layer: {_e(state)}. Every version it received, in the
order received (<code>applied*</code>: still current).
<a href="trace?flow={_q(flow)}&amp;key={_q(key)}&amp;layer={other}">The {other} layer</a>.</p>
{html_table(rows, COLUMNS, "trace")}
</body></html>"""
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
    measures = "".join(f"<li>{_e(line)}</li>" for line in ex.measure_lines(found))
    row = (
        "its row, made by its members"
        if found.row is not None
        else "no row now: every member left"
        if found.changes_total
        else "no row, and no change ever touched this group (check the values, or the other layer)"
    )
    more = (
        f" (the newest {len(found.changes)} of {found.changes_total}; "
        f"<code>streamshift explain --changes 0</code> lists all)"
        if found.changes_total > len(found.changes)
        else ""
    )
    here = f"explain?flow={_q(flow)}&amp;view={_q(view)}&amp;date={_q(day)}&amp;group={_q(group)}"
    return (
        _answer_page(f"explain {named}")
        + f"""<h1>{_e(flow)} · {_e(found.view)} <span class="group">{_e(named)}</span></h1>
<p class="layer">The {_e(found.layer)} layer: {row}. <a href="{here}&amp;layer={other}">The {other} layer</a>.</p>
<ul class="measures">{measures}</ul>
<h2>Members <small>({len(found.members)} live keys)</small></h2>
{html_table(members, ex.MEMBER_COLUMNS, "members", links={"key": "trace"})}
<h2>Changes that moved it <small>newest first{more}</small></h2>
{html_table(changes, ex.CHANGE_COLUMNS, "changes", links={"key": "trace"})}
</body></html>"""
    )


def render(flows: list[dict[str, Any]], user: str) -> str:
    sections = "".join(_flow_section(s) for s in flows)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>streamshift · Migration</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1em 2em; color: #222; }}
h2 {{ border-bottom: 1px solid #ddd; }} .stage {{ background: #4c72b0; color: #fff;
  padding: 0 .5em; border-radius: 4px; font-size: .8em; }}
table {{ border-collapse: collapse; font-size: .85em; }}
td, th {{ padding: 2px 8px; border-bottom: 1px solid #eee; text-align: left; }}
.none {{ color: #888; }} ol.streak {{ list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 4px; }}
.day {{ padding: 2px 6px; border-radius: 3px; font-size: .8em; }}
.day.clean {{ background: #d4edda; }} .day.breaks {{ background: #f8d7da; }}
.day.empty {{ background: #eee; color: #888; }}
.refused, .failing {{ color: #a00; }} .running, .awaiting {{ color: #555; }}
</style></head><body>
<h1>Migration</h1>
<form class="trace" action="trace" method="get">Where's my adjustment?
<select name="flow">{"".join(f"<option>{_e(f['flow'])}</option>" for f in flows)}</select>
<input name="key" placeholder="a key" required> <button>Trace</button></form>
<p>Signed in as <b class="user">{_e(user)}</b>. Each flow's migration stage, the reconciliation
evidence a promotion needs, and its stream's health. Promotion goes through the same gate as
<code>streamshift promote</code> and is recorded with your user name.</p>
{sections or "<p class='none'>no flows</p>"}
<script>{SCRIPT}</script>
</body></html>"""


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
    """Airflow's own REST API on this API server, called as the signed-in user."""
    from airflow.configuration import conf
    from fastapi import HTTPException

    base = conf.get("api", "base_url", fallback="http://127.0.0.1:8080").rstrip("/")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{base}{path}", data=data, method=method)
    request.add_header("Content-Type", "application/json")
    request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return json.loads(resp.read().decode() or "null")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")
        try:
            detail = json.loads(detail).get("detail", detail)
        except (ValueError, AttributeError):
            pass
        raise HTTPException(exc.code, f"Airflow answered {exc.code}: {detail}") from None


def _stream_class(stream: dict[str, Any]) -> str:
    return "failing" if stream["failing"] else "running" if stream["running"] else "stopped"


def create_app() -> Any:
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_view
    from fastapi import Depends, FastAPI, HTTPException, Request
    from fastapi.encoders import jsonable_encoder
    from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
    from pydantic import BaseModel

    may_view = [Depends(requires_access_view(AccessView.PLUGINS))]
    app = FastAPI(
        title="streamshift Migration",
        description="Each flow's migration stage, evidence and health; promotion through the gate.",
        dependencies=may_view,
        # FastAPI serves these without its app dependencies (no user asked): off, so every
        # route of the app needs a signed-in Airflow user.
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    def known(flow: str) -> str:
        if flow not in flow_names():
            raise HTTPException(404, f"unknown flow {flow!r}; flows: {', '.join(flow_names())}")
        return flow

    @app.get("/migration", response_class=HTMLResponse)
    def page(user: GetUserDep) -> str:
        return render(summaries(load_settings()), user.get_name())

    @app.get("/trace", response_class=HTMLResponse)
    def trace_page(flow: str, key: str, layer: str | None = None) -> str:
        return render_trace(load_settings(), known(flow), key, layer)

    @app.get("/explain", response_class=HTMLResponse)
    def explain_page(flow: str, view: str, date: str, group: str, layer: str | None = None) -> str:
        return render_explain(load_settings(), known(flow), view, date, group, layer)

    @app.get("/api/flows/{flow}/explain")
    def explain_json(
        flow: str, view: str, date: str, group: str, layer: str | None = None
    ) -> JSONResponse:
        found = _explain(load_settings(), known(flow), view, date, group, layer)
        return JSONResponse(jsonable_encoder(found.as_json()))

    @app.get("/api/flows/{flow}/trace")
    def trace_json(flow: str, key: str, layer: str | None = None) -> JSONResponse:
        return JSONResponse(
            jsonable_encoder(_trace(load_settings(), known(flow), key, layer).as_json())
        )

    @app.get("/api/flows")
    def flows() -> JSONResponse:
        return JSONResponse(jsonable_encoder(summaries(load_settings())))

    def may_trigger(user: Any, dag_id: str, what: str) -> None:
        """403 unless ``user`` may start runs of ``dag_id`` (Airflow's auth manager says)."""
        from airflow.api_fastapi.app import get_auth_manager
        from airflow.api_fastapi.auth.managers.models.resource_details import (
            DagAccessEntity,
            DagDetails,
        )

        if not get_auth_manager().is_authorized_dag(
            method="POST",
            access_entity=DagAccessEntity.RUN,
            details=DagDetails(id=dag_id),
            user=user,
        ):
            raise HTTPException(
                403, f"{user.get_name()} may not trigger {dag_id}, so may not {what}"
            )

    def triggered(
        dag_id: str, conf: dict[str, Any], request: Request, user: Any, message: str
    ) -> JSONResponse:
        """A run of ``dag_id`` started through Airflow's REST API as the signed-in user."""
        run = _airflow_api(
            "POST",
            f"/api/v2/dags/{dag_id}/dagRuns",
            _credential(request),
            {"logical_date": None, "conf": conf},
        )
        body = {"run_id": run["dag_run_id"], "state": run["state"], "message": message}
        return JSONResponse({**body, "by": user.get_name()}, status_code=202)

    class Promotion(BaseModel):
        to: str
        reason: str | None = None

    @app.post("/api/flows/{flow}/promote")
    def promote(
        flow: str, promotion: Promotion, request: Request, user: GetUserDep
    ) -> JSONResponse:

        known(flow)
        may_trigger(user, PROMOTE_DAG, "promote")
        try:
            change = check_promotion(load_settings(), flow, promotion.to, reason=promotion.reason)
        except PromotionRefused as refused:
            raise HTTPException(409, str(refused)) from None
        conf = {"flow": flow, "to": promotion.to, "force": False, "reason": promotion.reason}
        return triggered(PROMOTE_DAG, conf, request, user, change.describe())

    class Redrive(BaseModel):
        rule: str | None = None
        business_date: dt.date | None = None

    @app.post("/api/flows/{flow}/redrive")
    def redrive(flow: str, body: Redrive, request: Request, user: GetUserDep) -> JSONResponse:
        """Start a ``streamshift_redrive`` run for the flow (one rule's rows or all, of one
        business date or all), as the signed-in user: the same job as ``streamshift redrive``."""
        known(flow)
        may_trigger(user, REDRIVE_DAG, "re-drive")
        scope = f"rule {body.rule}" if body.rule else "every rule"
        scope += f" on {body.business_date}" if body.business_date else ""
        message = f"re-driving {flow}'s quarantined rows of {scope}"
        conf: dict[str, Any] = {"flow": flow, "rule": body.rule}
        if body.business_date:
            conf["business_date"] = body.business_date.isoformat()
        return triggered(REDRIVE_DAG, conf, request, user, message)

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

    @app.get("/reports/{flow}/{day}")
    def report(flow: str, day: str) -> FileResponse:

        try:
            business_date = dt.date.fromisoformat(day)
        except ValueError:
            raise HTTPException(404, f"{day!r} is not a date (YYYY-MM-DD)") from None
        path: Path = report_dir(load_settings(), known(flow), business_date) / "report.html"
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

    return app
