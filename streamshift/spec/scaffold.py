"""``streamshift init DIR``: a team's project, written from the kit's template
(``streamshift/scaffold``: each ``*.tmpl`` file is written without its suffix, its
``__NAME__``, ``__FLOWS__``, ``__KIT__`` and ``__IMAGE_TAG__`` filled in), the example flow's
starter data-quality suites (:mod:`streamshift.spec.suites`), and its
``requirements.lock``: the kit's own lock and the kit's pin, which the project's image builds
from (``Dockerfile``, ``docker-compose.yml``)."""

from __future__ import annotations

import importlib.util
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.suites import write_starter_suites

if TYPE_CHECKING:
    from streamshift.spec.flow import Flow

PACKAGE = Path(__file__).resolve().parents[1]
TEMPLATE = PACKAGE / "scaffold"
# The kit's lock: the wheel carries it (setup.py copies it in); a checkout has it at its root.
LOCKS = (PACKAGE / "requirements.lock", PACKAGE.parent / "requirements.lock")
# Files whose names git or Docker want dotted; the template keeps them visible.
DOTTED = {
    "gitignore.tmpl": ".gitignore.tmpl",
    "dockerignore.tmpl": ".dockerignore.tmpl",
    "env.example.tmpl": ".env.example.tmpl",
}
# The first version of a project's image (docker-compose.yml); the team raises it.
IMAGE_TAG = "0.1.0"
FLOWS = "flows"
# Folders Great Expectations' stores expect; git keeps them by a placeholder.
EMPTY = ("expectations/gx/expectations", "expectations/gx/checkpoints",
         "expectations/gx/validation_definitions")  # fmt: skip


class InitError(StreamshiftError):
    final = True


def kit_version() -> str | None:
    """The installed kit's version (a checkout's editable install: its pyproject's)."""
    try:
        return version("streamshift")
    except PackageNotFoundError:  # pragma: no cover - the kit always runs installed
        return None


def kit_pin() -> str:
    """This kit's minor series, e.g. ``>=0.1,<0.2``."""
    have = kit_version()
    if have is None:  # pragma: no cover - the kit always runs installed
        return ""
    major, minor = (int(part) for part in have.split(".")[:2])
    return f">={major}.{minor},<{major}.{minor + 1}"


def project_lock() -> str:
    """A project's ``requirements.lock``: the kit's lock, every package pinned as the kit was
    tested with, and the kit itself."""
    kit_lock = next((p for p in LOCKS if p.is_file()), None)
    have = kit_version()
    if kit_lock is None or have is None:
        raise InitError(
            "this installation of the kit carries no requirements.lock: reinstall the kit from "
            "its wheel (`uv build --wheel` in its repository)"
        )
    return (
        "# The packages this project runs with: the streamshift kit's own lock, and the kit.\n"
        "# Install with `uv pip sync requirements.lock` (add `--find-links wheels` when the kit's\n"
        "# wheel is in wheels/); the image (Dockerfile) does the same.\n"
        f"{_without_header(kit_lock.read_text(encoding='utf-8'))}\n"
        f"streamshift=={have}\n    # the kit\n"
    )


def _without_header(lock: str) -> str:
    """The lock's packages, without the comment that says how the kit's lock was compiled."""
    lines = lock.strip().splitlines()
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "\n".join(lines)


def render(template: str, words: dict[str, str]) -> str:
    for word, value in words.items():
        template = template.replace(word, value)
    return template


def project_name(folder: Path, name: str | None) -> str:
    chosen = name or folder.name
    slug = re.sub(r"[^a-z0-9]+", "_", chosen.lower()).strip("_")
    if not slug or slug[0].isdigit():
        raise InitError(f"{chosen!r} cannot name a project: use letters, digits and _ (--name)")
    return slug


def init_project(folder: Path, name: str | None = None) -> list[Path]:
    """Write a project into ``folder`` (new or empty); the files written."""
    folder = folder.expanduser().resolve()
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise InitError(
            f"{folder} is not an empty folder: `streamshift init` writes a new project into an "
            "empty or new folder, never over files"
        )
    slug = project_name(folder, name)
    words = {"__NAME__": slug, "__FLOWS__": FLOWS, "__KIT__": kit_pin(), "__IMAGE_TAG__": IMAGE_TAG}
    lock = project_lock()
    written = []
    for source in sorted(p for p in TEMPLATE.rglob("*") if p.is_file()):
        relative = source.relative_to(TEMPLATE).as_posix()
        if "__pycache__" in relative:
            continue
        target = folder / render(DOTTED.get(relative, relative), words).removesuffix(".tmpl")
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.suffix == ".tmpl":
            target.write_text(render(source.read_text(encoding="utf-8"), words), encoding="utf-8")
        else:
            target.write_bytes(source.read_bytes())
        written.append(target)
    (folder / "requirements.lock").write_text(lock, encoding="utf-8")
    written.append(folder / "requirements.lock")
    for empty in EMPTY:
        keep = folder / empty / ".gitkeep"
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.touch()
        written.append(keep)
    for flow in written_flows(folder):  # the example's starter data-quality suites
        written += write_starter_suites(flow, folder / "expectations" / "gx")
    return written


def written_flows(folder: Path) -> list[Flow]:
    """The flows a new project's template declares, imported from the files ``init`` wrote
    (under a private module name: the project's own ``flows`` package is not imported here)."""
    flows = []
    for package in sorted((folder / FLOWS).glob("*/__init__.py")):
        name = f"_streamshift_init_{package.parent.name}"
        spec = importlib.util.spec_from_file_location(name, package)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if hasattr(module, "FLOW"):
            flows.append(module.FLOW)
    return flows
