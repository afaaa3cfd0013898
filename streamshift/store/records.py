"""The control tables read without a JVM: stages, reconciliation runs and breaks, EOD runs.

What the CLI's read commands, the report, the Migration page, the DAGs' Python tasks and the
promotion gate need. Small tables, read whole per flow and shaped in Python.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from streamshift.spec.catalog import PARITY, SHADOW_RECON, ControlTables
from streamshift.spec.settings import Settings
from streamshift.spec.stages import FIRST
from streamshift.store.tables import rows
from streamshift.store.versions import live_root


def _control(settings: Settings) -> ControlTables:
    return ControlTables(settings.warehouse)


def stage_history(settings: Settings, flow: str) -> list[dict[str, Any]]:
    """The flow's recorded stage changes, oldest first."""
    changes = rows(_control(settings).stage_changes, where=[("flow", "=", flow)])
    return sorted(changes, key=lambda r: r["changed_at"])


def promotion_decisions(settings: Settings, flow: str) -> list[dict[str, Any]]:
    """Answers to the flow's promotions that waited for approval, oldest first."""
    decided = rows(_control(settings).promotion_decisions, where=[("flow", "=", flow)])
    return sorted(decided, key=lambda r: r["decided_at"])


def current_stage(settings: Settings, flow: str) -> str:
    """The flow's migration stage: the last recorded change's target (``batch`` before any)."""
    history = stage_history(settings, flow)
    return str(history[-1]["to_stage"]) if history else FIRST


def closed_dates(settings: Settings, flow: str, layer: str | None = None) -> set[dt.date]:
    """Business dates closed for ``flow`` (in ``layer``, or in any layer): by the EOD load,
    the EOD file's reconciliation or the cut-off, as the stage says."""
    return closed_dates_in(_control(settings).day_closes, flow, layer)


def closed_dates_in(day_closes: str, flow: str, layer: str | None = None) -> set[dt.date]:
    """:func:`closed_dates` from the ``day_closes`` table at ``day_closes``."""
    where: list[tuple[str, str, Any]] = [("flow", "=", flow)]
    if layer is not None:
        where.append(("layer", "=", layer))
    return {r["business_date"] for r in rows(day_closes, ["business_date"], where)}


def day_closes(
    settings: Settings, flow: str, business_date: dt.date | None = None
) -> list[dict[str, Any]]:
    """The recorded closes of ``flow`` (of one date), oldest first."""
    where: list[tuple[str, str, Any]] = [("flow", "=", flow)]
    if business_date is not None:
        where.append(("business_date", "=", business_date))
    return sorted(rows(_control(settings).day_closes, where=where), key=lambda r: r["closed_at"])


def latest_runs(settings: Settings, flow: str, stage: str | None = None) -> list[dict[str, Any]]:
    """The latest run of each reconciliation of each business date (a date re-reconciled
    after a repair counts by its newest result), by date then reconciliation; with ``stage``,
    only runs made in that stage."""
    latest: dict[tuple[dt.date, str], dict[str, Any]] = {}
    where: list[tuple[str, str, Any]] = [("flow", "=", flow)]
    if stage is not None:
        where.append(("stage", "=", stage))
    for run in rows(_control(settings).recon_runs, where=where):
        if run["recon"].startswith(f"{SHADOW_RECON}:"):
            continue  # a version's comparison with the live one: not the day's reconciliation
        key = (run["business_date"], run["recon"])
        if key not in latest or run["run_at"] > latest[key]["run_at"]:
            latest[key] = run
    return [latest[k] for k in sorted(latest)]


def parity_by_date(latest: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per business date, oldest first: clean when every view's latest parity run is clean;
    total breaks; rows compared (both sides, every view); the newest run id."""
    return recon_by_date(latest, PARITY)


def recon_by_date(latest: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """:func:`parity_by_date` for the reconciliations of ``kind`` (``parity`` counts every
    view's ``parity:<view>``)."""
    dates: dict[dt.date, dict[str, Any]] = {}
    for run in latest:
        if run["recon"] != kind and not run["recon"].startswith(f"{kind}:"):
            continue
        day = dates.setdefault(
            run["business_date"],
            {
                "business_date": run["business_date"],
                "clean": True,
                "breaks": 0,
                "rows": 0,
                "run_id": "",
            },
        )
        day["clean"] = day["clean"] and bool(run["clean"])
        day["breaks"] += int(run["breaks"])
        day["rows"] += int(run["left_rows"] or 0) + int(run["right_rows"] or 0)
        day["run_id"] = max(day["run_id"], run["run_id"])
    return [dates[d] for d in sorted(dates)]


def breaks_of(
    settings: Settings, flow: str, business_date: dt.date, run_ids: list[str], limit: int
) -> list[dict[str, Any]]:
    """The worst breaks of the given runs: largest absolute difference first (breaks without
    a numeric difference — missing rows — first of all), then by key."""
    if not run_ids:
        return []
    found = [
        r
        for r in rows(
            _control(settings).recon_breaks,
            where=[("flow", "=", flow), ("business_date", "=", business_date)],
        )
        if r["run_id"] in run_ids
    ]

    def severity(r: dict[str, Any]) -> float:
        return float("inf") if r["difference"] is None else abs(r["difference"])

    return sorted(found, key=lambda r: (-severity(r), r["key"]))[:limit]


def late_dates_to_reconcile(
    settings: Settings, flow: str, layers: tuple[str, ...] = ("batch", "stream")
) -> list[dt.date]:
    """Business dates with late events that arrived after the date's last reconciliation."""
    last_recon: dict[dt.date, dt.datetime] = {}
    for r in rows(
        _control(settings).recon_runs, ["business_date", "run_at", "recon"], [("flow", "=", flow)]
    ):
        if r["recon"].startswith(f"{SHADOW_RECON}:"):
            continue
        d = r["business_date"]
        last_recon[d] = max(last_recon.get(d, r["run_at"]), r["run_at"])
    dates: set[dt.date] = set()
    for layer in layers:
        root = live_root(Path(settings.warehouse), flow, layer)
        path = str(Path(settings.warehouse) / layer / root / "late_events")
        for r in rows(path, ["business_date", "arrived_at"], [("flow", "=", flow)]):
            d = r["business_date"]
            if d not in last_recon or r["arrived_at"] > last_recon[d]:
                dates.add(d)
    return sorted(dates)


def quality_results(
    settings: Settings, flow: str, business_date: dt.date | None = None
) -> list[dict[str, Any]]:
    """The latest data-quality run's checks of each (business date, suite, layer): one row per
    expectation (suite, expectation, policy, success, observed, threshold, docs_page)."""
    where: list[tuple[str, str, Any]] = [("flow", "=", flow)]
    if business_date is not None:
        where.append(("business_date", "=", business_date))
    found = rows(_control(settings).quality_runs, where=where)
    latest: dict[tuple[dt.date, str, str], str] = {}
    for r in found:
        key = (r["business_date"], r["suite"], r["layer"])
        latest[key] = max(latest.get(key, ""), r["run_id"])
    kept = [r for r in found if latest[(r["business_date"], r["suite"], r["layer"])] == r["run_id"]]
    return sorted(kept, key=lambda r: (r["business_date"], r["suite"], r["layer"]))


def quality_run_rows(
    settings: Settings, flow: str, business_date: dt.date, run_id: str
) -> list[dict[str, Any]]:
    """The checks recorded under one quality run id, by suite and expectation; when the run
    was recorded twice (its job re-ran), the later recording."""
    where = [("flow", "=", flow), ("business_date", "=", business_date), ("run_id", "=", run_id)]
    found = rows(_control(settings).quality_runs, where=where)
    if not found:
        return []
    last = max(r["run_at"] for r in found)
    return sorted(
        (r for r in found if r["run_at"] == last), key=lambda r: (r["suite"], r["expectation"])
    )


def quality_failures_by_date(
    settings: Settings, flow: str, suites: list[str]
) -> dict[dt.date, list[str]]:
    """Per business date, the ``fail``-policy expectations of ``suites`` that failed in the
    date's latest quality runs ("suite expectation")."""
    out: dict[dt.date, list[str]] = {}
    for r in quality_results(settings, flow):
        if r["suite"] in suites and r["policy"] == "fail" and not r["success"]:
            out.setdefault(r["business_date"], []).append(f"{r['suite']} {r['expectation']}")
    return out
