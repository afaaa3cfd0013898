"""The recorded versions of a flow (``control/flow_versions``) and the digest of its source
files, read without Spark: what every writing job checks first, and what ``status``, the page
and ``plan`` show."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamshift.spec.catalog import ControlTables, LayerTables
from streamshift.store.tables import rows

if TYPE_CHECKING:
    from streamshift.spec.flow import Flow
    from streamshift.spec.settings import Settings

# What recorded a version: the layer's first write, the same code under changed files, a
# change a job applied in place, ``streamshift evolve``, a version built beside the live one
# (``evolve --shadow``; not live), the switch of readers to a version (``promote --version``).
FIRST_USE, SAME_CODE, IN_PLACE, EVOLVED = "first use", "same code, new files", "in place", "evolve"
SHADOW, SWITCHED = "shadow", "switched"


def _recorded(warehouse: Path, flow: str) -> list[dict[str, Any]]:
    found = rows(ControlTables(warehouse).flow_versions, where=[("flow", "=", flow)])
    for row in found:
        row["root"] = row.get("root") or ""  # (a table recorded before version folders)
    return found


def _latest_per_layer(found: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    latest: dict[str, dict[str, Any]] = {}
    for row in found:
        held = latest.get(row["layer"])
        # The newest record wins: a switch back (promote --version N-1) records a lower version.
        if held is None or (row["deployed_at"], row["version"]) > (
            held["deployed_at"],
            held["version"],
        ):
            latest[row["layer"]] = row
    return {k: {**v, "components": json.loads(v["components"])} for k, v in latest.items()}


def deployed_layers(warehouse: Path, flow: str) -> dict[str, dict[str, Any]]:
    """The live version of ``flow`` per layer: its latest record that is not a shadow (its
    row, ``components`` parsed); a layer never written has none. One read."""
    return _latest_per_layer([r for r in _recorded(warehouse, flow) if r["how"] != SHADOW])


def shadows(warehouse: Path, flow: str) -> dict[str, dict[str, Any]]:
    """The versions of ``flow`` built beside the live one and not switched to, per layer
    (newest; none when no shadow is pending)."""
    found = _recorded(warehouse, flow)
    live = _latest_per_layer([r for r in found if r["how"] != SHADOW])
    built = _latest_per_layer([r for r in found if r["how"] == SHADOW])
    return {
        layer: row
        for layer, row in built.items()
        if layer not in live or row["deployed_at"] > live[layer]["deployed_at"]
    }


def recorded_version(warehouse: Path, flow: str, version: int) -> dict[str, dict[str, Any]]:
    """Version ``version`` of ``flow`` per layer, as last recorded (any how), or none."""
    return _latest_per_layer([r for r in _recorded(warehouse, flow) if r["version"] == version])


def highest_version(warehouse: Path, flow: str) -> int:
    """The highest version of ``flow`` ever recorded, shadows included (0: none)."""
    return max((r["version"] for r in _recorded(warehouse, flow)), default=0)


# Per flow_versions log commit: the live roots read (every reader resolves them).
_ROOTS: dict[str, tuple[str, dict[tuple[str, str], str]]] = {}


def live_root(warehouse: Path, flow: str, layer: str) -> str:
    """The folder the live tables of ``flow`` in ``layer`` live in ("" : the layer's own)."""
    import os

    path = Path(ControlTables(warehouse).flow_versions)
    log = path / "_delta_log"
    try:
        newest = max((e for e in os.listdir(log) if e.endswith(".json")), default="")
    except FileNotFoundError:
        return ""
    known = _ROOTS.get(str(path))
    if known is None or known[0] != newest:
        known = (newest, {})
        _ROOTS[str(path)] = known
    roots = known[1]
    if (flow, layer) not in roots:
        live = deployed_layers(warehouse, flow).get(layer)
        roots[(flow, layer)] = live["root"] if live else ""
    return roots[(flow, layer)]


def live_tables(warehouse: Path, flow: Flow, layer: str) -> LayerTables:
    """The tables of ``flow`` in ``layer`` that readers are served and writers write: where
    the layer's pointer (its live version's ``root``) says."""
    return LayerTables(warehouse, flow, layer, live_root(warehouse, flow.name, layer))


def deployed(warehouse: Path, flow: str, layer: str) -> dict[str, Any] | None:
    """The latest recorded version of ``flow`` in ``layer``, or None before it was written."""
    return deployed_layers(warehouse, flow).get(layer)


def logic_changed_at(warehouse: Path, flow: str) -> Any:
    """When ``streamshift evolve`` last recorded a version of ``flow`` (None: never): evidence
    made before speaks for the old code."""
    evolved = [
        r["deployed_at"] for r in history(warehouse, flow) if r["how"] in (EVOLVED, SWITCHED)
    ]
    return max(evolved, default=None)


def history(warehouse: Path, flow: str) -> list[dict[str, Any]]:
    """Every recorded version of ``flow`` in both layers, oldest first."""
    found = rows(ControlTables(warehouse).flow_versions, where=[("flow", "=", flow)])
    return sorted(found, key=lambda r: (r["deployed_at"], r["layer"]))


def _latest_comparison(settings: Settings, flow: str, version: int) -> list[dict[str, Any]]:
    """The latest recorded run of each (table, layer, date) of ``version``'s comparison with
    the live version (a build killed after some of its records and run again recorded twice)."""
    prefix = f"shadow:v{version}:"
    latest: dict[tuple[str, str, Any], dict[str, Any]] = {}
    for r in rows(ControlTables(settings.warehouse).recon_runs, where=[("flow", "=", flow)]):
        if r["recon"].startswith(prefix):
            key = (r["recon"], r["left_side"], r["business_date"])
            if key not in latest or r["run_at"] > latest[key]["run_at"]:
                latest[key] = {**r, "table": r["recon"].removeprefix(prefix)}
    return list(latest.values())


def version_differences(settings: Settings, flow: str, version: int) -> list[dict[str, Any]]:
    """The recorded comparison of ``version`` (built beside the live one) with the live
    version: per table and layer, the dates compared, the dates and rows that differ."""
    by_table: dict[tuple[str, str], dict[str, Any]] = {}
    for r in _latest_comparison(settings, flow, version):
        held = by_table.setdefault(
            (r["table"], r["left_side"]),
            {"table": r["table"], "live": r["left_side"], "dates": 0, "differ": 0, "breaks": 0},
        )
        held["dates"] += 1
        held["differ"] += 0 if r["clean"] else 1
        held["breaks"] += r["breaks"]
    return sorted(by_table.values(), key=lambda d: (d["live"], d["table"]))


# The columns the page and the report show of each example (the Migration page, the day's report).
EXAMPLE_COLUMNS = ("layer", "table", "kind", "key", "column", "live", "new", "difference")


def version_examples(
    settings: Settings, flow: str, version: int, limit: int = 8
) -> list[dict[str, Any]]:
    """The first recorded differences of ``version`` from the live version (layer, table,
    key, column, the live and the new value)."""
    runs = {
        r["run_id"]: (r["left_side"].split()[0], r["table"])
        for r in _latest_comparison(settings, flow, version)
    }
    found = [
        {
            **r,
            "layer": runs[r["run_id"]][0],
            "table": runs[r["run_id"]][1],
            "live": r["left_value"],
            "new": r["right_value"],
        }
        for r in rows(ControlTables(settings.warehouse).recon_breaks, where=[("flow", "=", flow)])
        if r["run_id"] in runs
    ]
    order = sorted(found, key=lambda r: (r["layer"], r["table"], r["key"], r["column"] or ""))
    return order[:limit]


def expired_roots(
    found: list[dict[str, Any]], retention: dt.timedelta, now: dt.datetime
) -> list[tuple[str, int]]:
    """The version folders of one flow's records ``found`` that upkeep may remove: (root,
    version) of each that is neither live nor the newest shadow, and that readers switched away
    from (or, never served, that was built) longer than ``retention`` before ``now``."""
    for row in found:
        row["root"] = row.get("root") or ""
    served = sorted((r for r in found if r["how"] != SHADOW), key=lambda r: r["deployed_at"])
    if not served:
        return []
    live_root_now = served[-1]["root"]
    keep = {live_root_now}
    built = sorted((r for r in found if r["how"] == SHADOW), key=lambda r: r["deployed_at"])
    if built and built[-1]["deployed_at"] > served[-1]["deployed_at"]:
        keep.add(built[-1]["root"])  # pending: not switched to yet
    last_needed: dict[str, dt.datetime] = {}
    version_of: dict[str, int] = {}
    for row in [*served, *built]:
        version_of.setdefault(row["root"], row["version"])
    for i, row in enumerate(served):
        # Served until the next served record that points elsewhere.
        after = next((r for r in served[i + 1 :] if r["root"] != row["root"]), None)
        until = after["deployed_at"] if after else now
        last_needed[row["root"]] = max(last_needed.get(row["root"], until), until)
    for row in built:
        last_needed.setdefault(row["root"], row["deployed_at"])
    return sorted(
        (root, version_of[root])
        for root, at in last_needed.items()
        if root not in keep and now - at >= retention
    )


def remove_expired(
    warehouse: Path, flow: Flow, retention_days: int, now: dt.datetime | None = None
) -> list[str]:
    """Remove the tables of ``flow``'s versions :func:`expired_roots` names, in both layers
    (upkeep); what was removed. A version folder goes whole; the layer's own folder keeps the
    tables its flows share (quarantine, late events) and loses the flow's."""
    import shutil

    now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    expired = expired_roots(_recorded(warehouse, flow.name), dt.timedelta(days=retention_days), now)
    removed = []
    for root, version in expired:
        for layer in ("batch", "stream"):
            tables = LayerTables(warehouse, flow, layer, root)
            if root:
                paths = [Path(warehouse) / layer / root]
            else:
                own = [tables.current, tables.history, tables.redeliveries]
                paths = [Path(p) for p in [*own, *(tables.view(v.name) for v in flow.views)]]
            for path in paths:
                if path.exists():
                    shutil.rmtree(path)
                    removed.append(f"version {version}: {path.relative_to(warehouse)}")
    return removed


def files_digest(folder: Path | None, extra: tuple[Path, ...] = ()) -> str:
    """sha256 of the Python files under ``folder`` (and the files ``extra``), by content: the
    flow's source as it is on disk. Empty when there is no folder (a flow defined elsewhere is
    fingerprinted on every check)."""
    if folder is None or not folder.is_dir():
        return ""
    sha = hashlib.sha256()
    for path in sorted([*folder.rglob("*.py"), *extra]):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        sha.update(str(path.relative_to(folder.parent)).encode() + b"\0")
        sha.update(hashlib.sha256(path.read_bytes()).digest())
    return sha.hexdigest()[:32]
