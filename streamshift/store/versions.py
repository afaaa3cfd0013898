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


def deployed(warehouse: Path, flow: str, layer: str) -> dict[str, Any] | None:
    """The latest recorded version of ``flow`` in ``layer`` (its row, ``components`` parsed),
    or None before the layer was first written."""
    found = rows(
        ControlTables(warehouse).flow_versions,
        where=[("flow", "=", flow), ("layer", "=", layer)],
    )
    if not found:
        return None
    latest = max(found, key=lambda r: (r["version"], r["deployed_at"]))
    return {**latest, "components": json.loads(latest["components"])}


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
