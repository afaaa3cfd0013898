"""A team's project: the folder holding its project file, its flows package and its settings.

The project file is ``streamshift.toml``, or the ``[tool.streamshift]`` table of a
``pyproject.toml``. It is found from where a command runs: ``STREAMSHIFT_PROJECT`` (the
project's folder or its file) when set, else by walking up from the working folder to the
first folder holding one. Its keys::

    name = "payments"            # the project's name (default: its folder's)
    flows = "flows"              # the flows package, a folder under the project's root
    kit = ">=0.1,<0.2"           # the kit versions the project runs with
    [settings]                   # any setting by field name (see `streamshift settings`)
    home = "var"                 # relative paths are the project's
    kafka_sasl_password_cmd = "pass show kafka"   # secrets: only ever by command

An unknown key (or setting: ``streamshift.spec.settings``) is an error naming the file, so a typo never falls back to a default. Reading
it needs no JVM and imports nothing of the project.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from streamshift.spec.errors import StreamshiftError

PROJECT_FILE = "streamshift.toml"
PYPROJECT = "pyproject.toml"
ENV = "STREAMSHIFT_PROJECT"
KEYS = {"name", "flows", "kit", "settings"}
SECRET_WORDS = ("password", "secret", "token")  # a setting so named is a secret


class ProjectError(StreamshiftError, ValueError):
    """The project file cannot be read, or says something the kit does not know."""

    final = True


@dataclass(frozen=True)
class Project:
    root: Path
    file: Path
    name: str
    flows: str = "flows"
    kit: str = ""
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def flows_dir(self) -> Path:
        return self.root.joinpath(*self.flows.split("."))


def _table(path: Path) -> dict[str, Any] | None:
    """The project's table of ``path``; None for a pyproject.toml without one."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ProjectError(f"cannot read the project file {path}: {exc}") from None
    if path.name == PYPROJECT:
        tool = data.get("tool", {})
        return tool.get("streamshift") if isinstance(tool, dict) else None
    return data


def _setting_text(key: str, value: object, path: Path) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise ProjectError(f"{path}: setting {key} must be a string, number or boolean")


def _secret_from(command: str, key: str, path: Path) -> str:
    try:
        done = subprocess.run(
            command, shell=True, capture_output=True, text=True, timeout=60, check=False
        )
    except subprocess.TimeoutExpired:
        raise ProjectError(f"{path}: {key}_cmd did not answer within 60 s") from None
    if done.returncode != 0:
        raise ProjectError(
            f"{path}: {key}_cmd failed (exit {done.returncode}): "
            f"{done.stderr.strip().splitlines()[-1:] or ''}"
        )
    return done.stdout.strip()


def parse(path: Path) -> Project | None:
    """The project of one file (None: a pyproject.toml that is not a streamshift project)."""
    table = _table(path)
    if table is None:
        return None
    unknown = sorted(set(table) - KEYS)
    if unknown:
        raise ProjectError(
            f"{path}: unknown key {', '.join(unknown)}; a project file has {', '.join(sorted(KEYS))}"
        )
    root = path.parent
    flows = table.get("flows", "flows")
    if not isinstance(flows, str) or not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", flows):
        raise ProjectError(f'{path}: flows must name a Python package, e.g. flows = "flows"')
    raw = table.get("settings", {})
    if not isinstance(raw, dict):
        raise ProjectError(f"{path}: settings must be a table ([settings])")
    settings: dict[str, str] = {}
    for key, value in raw.items():
        name = key.removesuffix("_cmd")
        if key == name and any(w in name for w in SECRET_WORDS):
            raise ProjectError(
                f"{path}: keep the secret {key} out of the project file: set "
                f"STREAMSHIFT_{key.upper()}, or {key}_cmd = a command that prints it"
            )
        text = _setting_text(key, value, path)
        settings[name] = _secret_from(text, key, path) if key != name else text
    return Project(
        root=root,
        file=path,
        name=str(table.get("name") or root.name),
        flows=flows,
        kit=str(table.get("kit", "")),
        settings=settings,
    )


def _project_file(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / PROJECT_FILE
        if candidate.is_file():
            return candidate
        pyproject = folder / PYPROJECT
        if pyproject.is_file() and "[tool.streamshift" in pyproject.read_text(encoding="utf-8"):
            return pyproject
    return None


@lru_cache(maxsize=8)
def _found(named: str, cwd: str) -> Project | None:
    """The project, read and its kit pin checked once per process and place."""
    project = _read(named, cwd)
    if project is not None:
        check_kit(project)
    return project


def _read(named: str, cwd: str) -> Project | None:
    if named:
        given = Path(named).expanduser().resolve()
        path = given if given.is_file() else _project_file_in(given)
        project = parse(path)
        if project is None:
            raise ProjectError(f"{ENV}={named}: {path} has no [tool.streamshift] table")
        return project
    found = _project_file(Path(cwd))
    return None if found is None else parse(found)


def _project_file_in(folder: Path) -> Path:
    for name in (PROJECT_FILE, PYPROJECT):
        if (folder / name).is_file():
            return folder / name
    raise ProjectError(
        f"{ENV}={folder}: no {PROJECT_FILE} or {PYPROJECT} there; point it at a project's "
        "folder (`streamshift init DIR` makes one)"
    )


def find_project(
    environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Project | None:
    """The project this process runs in, or None when there is none (see the module's doc)."""
    environ = os.environ if environ is None else environ
    where = str((cwd or Path.cwd()).resolve())
    return _found(environ.get(ENV, ""), where)


def check_kit(project: Project) -> None:
    """Refuse to run a project pinned to other versions of the kit."""
    if not project.kit:
        return
    from importlib.metadata import PackageNotFoundError, version

    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        wanted = SpecifierSet(project.kit)
    except InvalidSpecifier:
        raise ProjectError(
            f"{project.file}: kit = {project.kit!r} is not a version range"
        ) from None
    try:
        have = version("streamshift")
    except PackageNotFoundError:  # the kit run from a checkout that is not installed
        return
    if have not in wanted:
        raise ProjectError(
            f"{project.file} wants streamshift {project.kit}, and {have} is installed: install a "
            f"matching kit (uv pip install 'streamshift{project.kit}') or change the pin"
        )
