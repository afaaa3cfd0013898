"""The flow registry: the flows of the project this process runs in, and of installed packages.

A project's flows are the packages (or modules) of its flows package that do not start with
``_``, each declaring ``FLOW`` (``streamshift.spec.project`` finds the project). An installed
package may add flows through the ``streamshift.flows`` entry point group: the entry point's
name is the flow's, its value the module declaring ``FLOW``. A name found twice is an error
naming both places.

``flow_names`` lists flows without importing them, so a DAG file can build one DAG per flow
without importing pyspark. A flow may ship a data generator as ``<flows>/<name>/generate.py``
with a ``generate_day(business_date, n, out_dir, seed=..., progress=...)`` function, and its
data-quality suites as ``<flows>/<name>/quality.json``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.project import Project, find_project

if TYPE_CHECKING:
    from streamshift.spec.flow import Flow

ENTRY_POINTS = "streamshift.flows"


class UnknownFlowError(StreamshiftError):
    final = True


class DuplicateFlowError(StreamshiftError):
    final = True


@dataclass(frozen=True)
class FlowSource:
    """Where a flow is declared: its module, and the place to name in messages."""

    name: str
    module: str
    origin: str
    folder: Path | None = None  # a project's flow: its package folder


def _project_flows(project: Project) -> list[FlowSource]:
    folder = project.flows_dir
    if not folder.is_dir():
        raise UnknownFlowError(
            f"{project.file} names the flows package {project.flows!r}, and {folder} is no "
            "folder: create it (with an __init__.py) or change `flows`"
        )
    return [
        FlowSource(
            m.name,
            f"{project.flows}.{m.name}",
            str(folder / m.name),
            folder / m.name if m.ispkg else None,
        )
        for m in pkgutil.iter_modules([str(folder)])
        if not m.name.startswith("_")
    ]


@lru_cache(maxsize=1)
def _installed_flows() -> tuple[FlowSource, ...]:
    """The ``streamshift.flows`` entry points (read once per process: a scan of every
    installed distribution's metadata)."""
    return tuple(
        FlowSource(ep.name, ep.value.split(":")[0], f"entry point {ep.value} ({ep.dist.name})")
        if ep.dist is not None
        else FlowSource(ep.name, ep.value.split(":")[0], f"entry point {ep.value}")
        for ep in entry_points(group=ENTRY_POINTS)
    )


def flow_sources() -> dict[str, FlowSource]:
    """Every flow this process can run, by name, without importing one."""
    project = find_project()
    found: dict[str, FlowSource] = {}
    for source in [*(_project_flows(project) if project else []), *_installed_flows()]:
        if source.name in found:
            raise DuplicateFlowError(
                f"flow {source.name!r} is declared twice: {found[source.name].origin} and "
                f"{source.origin}; rename one"
            )
        found[source.name] = source
    return found


def flow_names() -> list[str]:
    """Names of the declared flows, without importing them (safe for DAG parsing)."""
    return sorted(flow_sources())


def require_flow(name: str) -> str:
    """``name``, or :class:`UnknownFlowError` saying what to do: the one check of a flow's name
    every entry point makes (the CLI, the Migration page), without importing the flow."""
    _source(name)
    return name


def _source(name: str) -> FlowSource:
    sources = flow_sources()
    if name not in sources:
        if not sources and find_project() is None:
            raise UnknownFlowError(
                f"unknown flow {name!r}: no streamshift project here (no streamshift.toml or "
                "pyproject.toml with [tool.streamshift] in this folder or above it); run from "
                "your project, set STREAMSHIFT_PROJECT, or make one with `streamshift init DIR`"
            )
        raise UnknownFlowError(
            f"unknown flow {name!r}; declared flows: {', '.join(sorted(sources)) or 'none'}"
        )
    return sources[name]


# The project whose flows this process loads, by root, with its flows' digest at import.
_in_use: dict[Path, tuple[Project, str]] = {}
_inserted: set[str] = set()  # the project roots this process put on sys.path


def _forget(project: Project) -> None:
    """Another project's flows out of this process (the engine's runner forks each job from a
    process that imported the flows of the project it started in). Only its flows package:
    the root may also hold the kit itself, or a virtualenv."""
    package = project.flows
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]
    root = str(project.root)
    if root in _inserted:  # a root that was on the path anyway (an editable kit's) stays
        _inserted.discard(root)
        sys.path.remove(root)


def flows_digest(project: Project) -> str:
    """The flows package's files as they are on disk (path, size, modification time): what a
    process that imported them compares before a job, without importing anything."""
    sha = hashlib.sha256()
    folder = project.flows_dir
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        if path.is_file() and "__pycache__" not in path.parts:
            stat = path.stat()
            sha.update(f"{path.relative_to(folder)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return sha.hexdigest()


def forget_stale() -> bool:
    """Before a job in a process that outlives one (the engine's job runner forks each job
    from a process that imported the flows when it started): the flows of this process's
    project are imported again from disk if their files changed since. True if they did."""
    project = find_project()
    if project is None or project.root not in _in_use:
        return False
    if flows_digest(project) == _in_use[project.root][1]:
        return False
    _forget(_in_use.pop(project.root)[0])
    importlib.invalidate_caches()
    return True


def use_project() -> Project | None:
    """Make the project's modules importable in this process and the processes it starts
    (Spark's Python workers, a spark-submit driver): its root first on ``sys.path`` and on
    ``PYTHONPATH``."""
    project = find_project()
    if project is None:
        return None
    root = str(project.root)
    for other in [r for r in _in_use if r != project.root]:
        _forget(_in_use.pop(other)[0])
    if project.root not in _in_use:
        _in_use[project.root] = (project, flows_digest(project))
    if root not in sys.path:
        sys.path.insert(0, root)
        _inserted.add(root)
        importlib.invalidate_caches()
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *filter(None, paths)])
    return project


def _module(source: FlowSource, submodule: str = "") -> Any:
    use_project()
    return importlib.import_module(source.module + submodule)


def get_flow(name: str) -> Flow:
    flow: Flow = _module(_source(name)).FLOW
    return flow


def flow_folder(name: str) -> Path | None:
    """The folder of the flow's package (its reference data, quality.json), found without
    importing the flow; None for a flow that is a single module."""
    source = _source(name)
    if source.folder is not None:
        return source.folder
    use_project()
    spec = importlib.util.find_spec(source.module)
    locations = spec.submodule_search_locations if spec else None
    return Path(next(iter(locations))) if locations else None


def get_generator(name: str) -> Callable[..., Any]:
    """The flow's ``generate_day`` function; a clear error when the flow ships none."""
    source = _source(name)
    try:
        module = _module(source, ".generate")
    except ModuleNotFoundError as exc:
        if exc.name != f"{source.module}.generate":
            raise
        raise UnknownFlowError(
            f"flow {name!r} ships no data generator ({source.origin}/generate.py with generate_day)"
        ) from None
    generate: Callable[..., Any] = module.generate_day
    return generate
