"""``streamshift init DIR``: a team's project, written from the kit's template
(``streamshift/scaffold``: each ``*.tmpl`` file is written without its suffix, its
``__NAME__``, ``__FLOWS__`` and ``__KIT__`` filled in)."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from streamshift.spec.errors import StreamshiftError

TEMPLATE = Path(__file__).resolve().parents[1] / "scaffold"
FLOWS = "flows"
# Folders Great Expectations' stores expect; git keeps them by a placeholder.
EMPTY = ("expectations/gx/expectations", "expectations/gx/checkpoints",
         "expectations/gx/validation_definitions")  # fmt: skip


class InitError(StreamshiftError):
    final = True


def kit_pin() -> str:
    """This kit's minor series, e.g. ``>=0.1,<0.2`` (the kit's checkout: its pyproject's)."""
    try:
        have = version("streamshift")
    except PackageNotFoundError:  # pragma: no cover - the kit always runs installed
        return ""
    major, minor = (int(part) for part in have.split(".")[:2])
    return f">={major}.{minor},<{major}.{minor + 1}"


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
    words = {"__NAME__": slug, "__FLOWS__": FLOWS, "__KIT__": kit_pin()}
    written = []
    for source in sorted(p for p in TEMPLATE.rglob("*") if p.is_file()):
        relative = source.relative_to(TEMPLATE).as_posix()
        if "__pycache__" in relative:
            continue
        if relative == "gitignore.tmpl":
            relative = ".gitignore.tmpl"
        for word, value in words.items():
            relative = relative.replace(word, value)
        target = folder / relative.removesuffix(".tmpl")
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.suffix == ".tmpl":
            text = source.read_text(encoding="utf-8")
            for word, value in words.items():
                text = text.replace(word, value)
            target.write_text(text, encoding="utf-8")
        else:
            target.write_bytes(source.read_bytes())
        written.append(target)
    for empty in EMPTY:
        keep = folder / empty / ".gitkeep"
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.touch()
        written.append(keep)
    return written
