"""What the Migration page shows of each flow, as plain data read without a JVM or Airflow: its
stage and the next, the evidence streak and the gate, the last reconciliation and its worst
breaks (each with the link that explains it), data quality, quarantine by rule and date, the
streams, the stage history and the four-eyes decisions. The page (``streamshift.airflow.
migration``) renders it and serves it as JSON."""

from __future__ import annotations

import datetime as dt
import json
import urllib.parse
from typing import Any

from streamshift.control.report import report_dir
from streamshift.control.stages import GATED, promotion_evidence
from streamshift.control.trace import (
    serving_layer_of,
    trace_link,
)
from streamshift.spec.catalog import LAYERS, PARITY, ControlTables
from streamshift.spec.registry import flow_folder, flow_names, get_flow
from streamshift.spec.settings import Settings
from streamshift.spec.stages import FIRST, next_stage
from streamshift.spec.stages import stage as stage_of
from streamshift.store.heartbeat import read_status
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
from streamshift.store.versions import (
    SWITCHED,
    deployed,
    files_digest,
    shadows,
    version_differences,
    version_examples,
)


def query_value(text: str) -> str:
    """``text`` as a URL query value."""
    return urllib.parse.quote(text, safe="")


STREAK_DAYS = 30
WORST = 10


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
    code = code_summary(settings, flow)
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
        "code": code,
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


def _said(recorded: dict[str, Any]) -> str:
    """What a version record says changed (a switch: the version it switched from)."""
    if recorded["how"] == SWITCHED:
        came = json.loads(recorded["changes"] or "{}").get("from", {})
        before = sorted({v["version"] for v in came.values()})
        return f"from version {', '.join(map(str, before))}" if before else ""
    return str(recorded["changes"] or "")


def code_summary(settings: Settings, flow: str) -> dict[str, Any]:
    """The flow version each layer's tables were written by, and whether the flow's files
    changed since (a pending plan: ``streamshift plan`` says what it needs)."""
    layers = {}
    for layer in LAYERS:
        recorded = deployed(settings.warehouse, flow, layer)
        if recorded is not None:
            layers[layer] = {
                "version": recorded["version"],
                "how": recorded["how"],
                "changes": _said(recorded),
                "deployed_at": recorded["deployed_at"],
                "deployed_by": recorded["deployed_by"],
                "files": recorded["files"],
            }
    on_disk = files_digest(flow_folder(flow))
    changed = bool(layers) and any(v["files"] and v["files"] != on_disk for v in layers.values())
    pending = (
        f"the flow's files changed since version {max(v['version'] for v in layers.values())} "
        f"was recorded: run streamshift plan --flow {flow} to see what the change needs"
        if changed
        else None
    )
    built = shadows(settings.warehouse, flow)
    shadow = None
    if built:
        version = max(r["version"] for r in built.values())
        shadow = {
            "version": version,
            "built_at": max(r["deployed_at"] for r in built.values()),
            "differences": version_differences(settings, flow, version),
            "examples": version_examples(settings, flow, version),
            "switch": f"streamshift promote --flow {flow} --version {version}",
        }
    return {"layers": layers, "pending": pending, "shadow": shadow}


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
                f"explain?flow={query_value(flow)}&view={query_value(view.name)}&date={day.isoformat()}"
                f"&group={query_value(group)}"
            )
    return None
