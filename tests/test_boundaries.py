"""The layout by runtime, held by folder rules: what needs a SparkSession lives in
``streamshift/engine/``, and nothing JVM-free imports it.

* ``spec/`` (pure), ``store/`` (JVM-free IO) and ``control/`` (JVM-free decisions and views)
  never import ``engine/``, nor the entry layers (``airflow/``, ``cli/``, ``local/``): not at
  module level, not inside a function. ``spec/`` imports only ``spec/``; ``store/`` only
  ``spec/`` and ``store/``.
* ``airflow/``, ``cli/`` and ``local/`` are entry points: they reach ``engine/`` only inside the
  function that runs a job, never at import.
* ``engine/`` never imports the entry layers; among them, ``cli/`` may import ``local/`` and
  ``airflow/``, ``local/`` may import ``airflow/``, ``airflow/`` neither.
* Nothing imports ``cli/`` but ``cli/`` itself and the thin spark-submit entry files.
* No import circle among the package's modules (function-local imports count too).
* Outside ``cli/`` (whose handlers stay lazy for ``--help``), JVM-free modules are imported at
  the top of a module, never inside a function.
* Importing every module of the JVM-free folders, the entry layers, the DAG files and the
  plugin imports no pyspark, delta or great_expectations (in a fresh interpreter, so nothing an
  earlier test imported can hide a leak).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "streamshift"
HEAVY = ("pyspark", "delta", "great_expectations")
JVM_FREE = ("spec", "store", "control")
ENTRY = ("airflow", "cli", "local")
# The entry layers, outermost first: each may import only those after it.
ENTRY_ORDER = ("cli", "local", "airflow")
# What may import cli/: the folder itself and the spark-submit entry files.
CLI_CALLERS = ("streamshift/cli/", "streamshift/entry/", "spark_jobs/run.py", "streaming/run.py")
# what each folder may import from the package at all (None: anything)
MAY_IMPORT = {
    "spec": {"spec"},
    "store": {"spec", "store"},
    "control": {"spec", "store", "control"},
    "engine": {"spec", "store", "control", "engine"},
}

PROBE = """
import importlib, importlib.util, json, pkgutil, sys
from pathlib import Path
import streamshift
loaded = []
for folder in sys.argv[1].split(","):
    package = importlib.import_module(f"streamshift.{folder}")
    loaded.append(package.__name__)
    for m in pkgutil.walk_packages(package.__path__, f"streamshift.{folder}."):
        if m.name.endswith(".__main__"):  # runs a command when imported
            continue
        importlib.import_module(m.name)
        loaded.append(m.name)
for folder in ("dags", "plugins"):
    for path in sorted(Path(folder).glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"_probe_{folder}_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        loaded.append(str(path))
heavy = sorted({n.split(".")[0] for n in sys.modules} & set(sys.argv[2:]))
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


def test_the_jvm_free_folders_the_entry_layers_dags_and_plugins_import_no_spark() -> None:
    result = _run(PROBE, ",".join(JVM_FREE + ENTRY), *HEAVY)
    assert isinstance(result, dict)
    # The probe really walked the folders (and whatever DAGs and plugins exist).
    for module in ("spec.settings", "spec.flow", "store.tables", "control.trace", "airflow.dags"):
        assert f"streamshift.{module}" in result["loaded"]
    assert any(p.startswith("dags/") for p in result["loaded"])
    assert result["heavy"] == [], f"imported {result['heavy']} (loaded: {result['loaded']})"


def _imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, module, at import time) of every import in ``path`` but those for type checkers
    only; ``from x import y`` names ``x.y`` (a module or a name in ``x``)."""
    found: list[tuple[int, str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.extend((child.lineno, a.name, not in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module:
                found.extend(
                    (child.lineno, f"{child.module}.{a.name}", not in_function) for a in child.names
                )
            function = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            visit(child, in_function or function)

    visit(ast.parse(path.read_text()), False)
    return found


def _folder(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "streamshift" and len(parts) > 1 else None


def test_each_folder_imports_only_what_its_runtime_allows() -> None:
    broken = []
    for path in sorted(PACKAGE.rglob("*.py")):
        folder = path.relative_to(PACKAGE).parts[0]
        if folder not in (*MAY_IMPORT, *ENTRY):
            continue
        for line, module, at_import in _imports(path):
            where = f"{path.relative_to(REPO)}:{line} imports {module}"
            target = _folder(module)
            heavy = module.split(".")[0] in HEAVY
            rules = (
                folder in MAY_IMPORT and target is not None and target not in MAY_IMPORT[folder],
                folder in JVM_FREE and heavy and at_import,
                folder in ENTRY and at_import and (heavy or target == "engine"),
            )
            if any(rules):
                broken.append(where)
    assert broken == []


FLOW_NAMES_PROBE = (
    "import sys, json; from streamshift.spec.registry import flow_names; "
    "print(json.dumps([flow_names(), 'pyspark' in sys.modules, 'flows.trades' in sys.modules]))"
)


def test_flow_names_come_from_the_registry_without_importing_flows() -> None:
    names, spark_loaded, flow_loaded = _run(FLOW_NAMES_PROBE)  # type: ignore[misc]
    assert "trades" in names
    assert not spark_loaded and not flow_loaded


KIT = ("streamshift", "dags", "plugins", "spark_jobs", "streaming")


def test_nothing_in_the_kit_names_a_flow() -> None:
    """The kit is generic: flows live in flows/ (and their suites in expectations/)."""
    from streamshift.spec.registry import flow_names

    flows = flow_names()
    named = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for folder in KIT
        for path in sorted((REPO / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for flow in flows
        if flow.rstrip("s") in line.lower()
    ]
    assert len(flows) >= 2
    assert named == []


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        found[name] = path
    return found


def _imported_modules(path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules ``path`` imports (``from a import b`` names ``a.b`` when that is a
    module, else ``a``)."""
    return {
        module if module in modules else module.rpartition(".")[0]
        for _line, module, _at_import in _imports(path)
    } & set(modules)


def test_the_entry_layers_import_each_other_only_outward_in() -> None:
    broken = []
    for path in sorted(PACKAGE.rglob("*.py")):
        folder = path.relative_to(PACKAGE).parts[0]
        if folder not in ENTRY_ORDER:
            continue
        inner = ENTRY_ORDER[ENTRY_ORDER.index(folder) + 1 :]
        for line, module, _at_import in _imports(path):
            target = _folder(module)
            if target in ENTRY_ORDER and target != folder and target not in inner:
                broken.append(f"{path.relative_to(REPO)}:{line} imports {module}")
    assert broken == []


def test_nothing_imports_the_cli_but_its_entry_files() -> None:
    callers = []
    for folder in KIT:
        for path in sorted((REPO / folder).rglob("*.py")):
            where = str(path.relative_to(REPO))
            if where.startswith(CLI_CALLERS):
                continue
            callers += [
                f"{where}:{line} imports {module}"
                for line, module, _at_import in _imports(path)
                if _folder(module) == "cli"
            ]
    assert callers == []


def test_no_import_circle_in_the_package() -> None:
    modules = _modules()
    graph = {m: _imported_modules(p, modules) - {m} for m, p in modules.items()}
    circles: list[list[str]] = []
    done: set[str] = set()

    def walk(module: str, trail: list[str]) -> None:
        if module in trail:
            circles.append(trail[trail.index(module) :] + [module])
            return
        if module in done:
            return
        for target in sorted(graph[module]):
            walk(target, [*trail, module])
        done.add(module)

    for module in sorted(graph):
        walk(module, [])
    # The check sees circles: a pair that imports each other is found.
    assert "streamshift.spec.settings" in graph["streamshift.spec.catalog"]
    assert circles == []


def test_jvm_free_modules_are_imported_at_the_top() -> None:
    inside = [
        f"{path.relative_to(REPO)}:{line} imports {module} inside a function"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "cli"
        for line, module, at_import in _imports(path)
        if not at_import and _folder(module) in JVM_FREE
    ]
    assert inside == []
