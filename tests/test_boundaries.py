"""The Spark-free boundary: what DAG parsing, the Airflow web process and read commands import.

Each check runs in a fresh interpreter, so nothing an earlier test imported can hide a leak.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("pyspark", "delta", "great_expectations")

PROBE = """
import importlib, importlib.util, json, pkgutil, sys
from pathlib import Path
import streamshift.core as core
loaded = []
for m in pkgutil.walk_packages(core.__path__, "streamshift.core."):
    importlib.import_module(m.name)
    loaded.append(m.name)
for folder in ("dags", "plugins"):
    for path in sorted(Path(folder).glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"_probe_{folder}_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        loaded.append(str(path))
heavy = sorted({n.split(".")[0] for n in sys.modules} & set(sys.argv[1:]))
print(json.dumps({"loaded": loaded, "heavy": heavy}))
"""


def _run(code: str, *args: str) -> object:
    """Run ``code`` in a fresh interpreter at the repo root; its last stdout line as JSON."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_core_dags_and_plugins_import_no_spark_delta_or_great_expectations() -> None:
    result = _run(PROBE, *HEAVY)
    assert isinstance(result, dict)
    # The probe really walked the core (and whatever DAGs and plugins exist).
    for module in ("settings", "flow", "registry", "catalog", "contract", "heartbeat"):
        assert f"streamshift.core.{module}" in result["loaded"]
    assert result["heavy"] == [], f"imported {result['heavy']} (loaded: {result['loaded']})"


FLOW_NAMES_PROBE = (
    "import sys, json; from streamshift.core.registry import flow_names; "
    "print(json.dumps([flow_names(), 'pyspark' in sys.modules, 'flows.trades' in sys.modules]))"
)


def test_flow_names_come_from_the_registry_without_importing_flows() -> None:
    names, spark_loaded, flow_loaded = _run(FLOW_NAMES_PROBE)  # type: ignore[misc]
    assert "trades" in names
    assert not spark_loaded and not flow_loaded


KIT = ("streamshift", "dags", "plugins", "spark_jobs", "streaming")


def test_nothing_in_the_kit_names_a_flow() -> None:
    """The kit is generic: flows live in flows/ (and their suites in expectations/)."""
    from streamshift.core.registry import flow_names

    named = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for folder in KIT
        for path in sorted((REPO / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for flow in flow_names()
        if flow.rstrip("s") in line.lower()
    ]
    assert len(flow_names()) >= 2
    assert named == []
