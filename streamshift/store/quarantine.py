"""The quarantine as ``streamshift redrive`` sees it, read without a JVM (deltalake): which
quarantined rows a re-drive would try (those no re-drive has applied yet)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import TYPE_CHECKING, Any

from streamshift.spec.catalog import ControlTables, quarantine_path
from streamshift.spec.contract import VERSION_CONFLICT_RULE
from streamshift.store.tables import rows as table_rows
from streamshift.store.versions import live_root

if TYPE_CHECKING:
    from streamshift.spec.settings import Settings

APPLIED, STILL_FAILING, UNREADABLE = "applied", "still failing", "unreadable"
# The first delivery of a version stays, whatever is fixed: conflicts are not re-driven.
NOT_REDRIVEN = (VERSION_CONFLICT_RULE,)


def pending(
    settings: Settings,
    flow: str,
    layer: str,
    rule: str | None = None,
    business_date: dt.date | None = None,
) -> list[dict]:  # type: ignore[type-arg]
    """The quarantined rows of ``flow`` (its name: no flow spec, so no PySpark import) the
    request covers that no re-drive has applied yet (no JVM)."""
    where: list[tuple[str, str, Any]] = [("flow", "=", flow)]
    if rule:
        where.append(("rule", "=", rule))
    if business_date:
        where.append(("business_date", "=", business_date))
    root = live_root(settings.warehouse, flow, layer)
    quarantined = table_rows(quarantine_path(settings.warehouse, layer, root), where=where)
    done = {
        r["source_ref"]
        for r in table_rows(
            ControlTables(settings.warehouse).redrives,
            where=[("flow", "=", flow), ("layer", "=", layer), ("outcome", "=", APPLIED)],
        )
    }
    found: dict[str, dict] = {}  # type: ignore[type-arg]  # one per delivery (rules differ)
    for q in sorted(quarantined, key=lambda q: q["quarantined_at"]):
        if q["rule"] not in NOT_REDRIVEN and q["source_ref"] not in done:
            found.setdefault(q["source_ref"], q)
    return list(found.values())


def rules_held(settings: Settings, flow: str, layer: str) -> Counter[str]:
    """The rules the layer's quarantine holds rows of ``flow`` under, with their row counts
    (no JVM; none when nothing was ever quarantined)."""
    path = quarantine_path(settings.warehouse, layer, live_root(settings.warehouse, flow, layer))
    return Counter(r["rule"] for r in table_rows(path, ["rule"], where=[("flow", "=", flow)]))
