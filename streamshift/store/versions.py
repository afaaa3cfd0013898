"""The recorded versions of a flow (``control/flow_versions``) and the digest of its source
files, read without Spark: what every writing job checks first, and what ``status``, the page
and ``plan`` show."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from streamshift.spec.catalog import ControlTables
from streamshift.store.tables import rows

# What recorded a version: the layer's first write, the same code under changed files, a
# change a job applied in place, ``streamshift evolve``.
FIRST_USE, SAME_CODE, IN_PLACE, EVOLVED = "first use", "same code, new files", "in place", "evolve"


def deployed_layers(warehouse: Path, flow: str) -> dict[str, dict[str, Any]]:
    """The latest recorded version of ``flow`` per layer (its row, ``components`` parsed); a
    layer never written has none. One read."""
    latest: dict[str, dict[str, Any]] = {}
    for row in rows(ControlTables(warehouse).flow_versions, where=[("flow", "=", flow)]):
        held = latest.get(row["layer"])
        if held is None or (row["version"], row["deployed_at"]) > (
            held["version"],
            held["deployed_at"],
        ):
            latest[row["layer"]] = row
    return {k: {**v, "components": json.loads(v["components"])} for k, v in latest.items()}


def deployed(warehouse: Path, flow: str, layer: str) -> dict[str, Any] | None:
    """The latest recorded version of ``flow`` in ``layer``, or None before it was written."""
    return deployed_layers(warehouse, flow).get(layer)


def logic_changed_at(warehouse: Path, flow: str) -> Any:
    """When ``streamshift evolve`` last recorded a version of ``flow`` (None: never): evidence
    made before speaks for the old code."""
    evolved = [r["deployed_at"] for r in history(warehouse, flow) if r["how"] == EVOLVED]
    return max(evolved, default=None)


def history(warehouse: Path, flow: str) -> list[dict[str, Any]]:
    """Every recorded version of ``flow`` in both layers, oldest first."""
    found = rows(ControlTables(warehouse).flow_versions, where=[("flow", "=", flow)])
    return sorted(found, key=lambda r: (r["deployed_at"], r["layer"]))


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
