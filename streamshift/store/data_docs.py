"""Data Docs that render offline: local copies of the front-end files Great Expectations'
pages load from CDNs (Bootstrap, jQuery, bootstrap-table, Font Awesome, Vega) and its logo.

GE 1.x writes absolute CDN addresses into every page, so on a machine without internet (a
bank's air-gapped install, this project's CI) the docs show as plain, unstyled HTML with a
broken logo. ``scripts/setup`` installs the same packages from the npm registry
(``expectations/assets/package-lock.json``, ``npm ci``); after each build, :func:`localize`
copies the files the pages need into ``data_docs/vendor`` and rewrites the addresses in the
pages just written to relative ones, so the folder is self-contained and can be served or
copied anywhere (the Airflow plugin serves it as it is).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

from streamshift.spec.settings import REPO_ROOT

# A wheel carries the files the pages need (setup.py copies them from the repository's npm
# install); the repository reads its own.
BUNDLED = Path(__file__).resolve().parents[1] / "data_docs_assets"
ASSETS = BUNDLED if BUNDLED.is_dir() else REPO_ROOT / "expectations" / "assets"
VENDOR = "vendor"

# CDN address GE writes -> the file in node_modules (and under data_docs/vendor) that replaces
# it. Versions follow the lock; where GE names two patch versions of one package, or a popper
# older than the Bootstrap it loads allows, the lock's one version serves both.
FILES = {
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": (
        "bootstrap/dist/css/bootstrap.min.css"
    ),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": (
        "bootstrap/dist/js/bootstrap.min.js"
    ),
    "https://code.jquery.com/jquery-3.7.1.min.js": "jquery/dist/jquery.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": (
        "popper.js/dist/umd/popper.min.js"
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css": (
        "bootstrap-datepicker/dist/css/bootstrap-datepicker.min.css"
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js": (
        "bootstrap-datepicker/dist/js/bootstrap-datepicker.min.js"
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": (
        "@fortawesome/fontawesome-free/css/all.min.css"
    ),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css": (
        "@forevolve/bootstrap-dark/dist/css/bootstrap-prefers-dark.css"
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": (
        "bootstrap-table/dist/bootstrap-table.min.css"
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": (
        "bootstrap-table/dist/bootstrap-table.min.js"
    ),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css": (
        "bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.css"
    ),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css": (
        "bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.min.css"
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js": (
        "bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.min.js"
    ),
    # jsDelivr serves a package's "jsdelivr" file for a bare version range.
    "https://cdn.jsdelivr.net/npm/vega@5": "vega/build/vega.min.js",
    "https://cdn.jsdelivr.net/npm/vega-lite@5": "vega-lite/build/vega-lite.min.js",
    "https://cdn.jsdelivr.net/npm/vega-embed@6": "vega-embed/build/vega-embed.min.js",
}
# Folders copied whole: what a copied file loads relative to itself (Font Awesome's fonts).
FOLDERS = ["@fortawesome/fontawesome-free/webfonts"]
# GE's logo, from its S3 bucket with a cache-busting query; GE ships the same image in the
# docs' own static/images folder.
_LOGO = re.compile(
    r"https://great-expectations-web-assets\.s3\.us-east-2\.amazonaws\.com/"
    r"(?:logo-long|full_logo_dark)\.png(?:\?[^\"')\s]*)?"
)
LOGO = "static/images/logo-long.png"
# An address followed by more of a path ("…/npm/vega@5.1/…") is not the one GE writes.
_WHOLE = re.compile(
    "(?:" + "|".join(re.escape(url) for url in sorted(FILES, key=len, reverse=True)) + ")"
    r"(?=[\"'\s)])"
)


def bundle(assets: Path, into: Path) -> int:
    """Copy the files of FILES and FOLDERS (and the install's stamp) from ``assets`` to
    ``into``, for a wheel; the number of files copied (0: the npm install is missing)."""
    if installed(assets):
        return 0
    source, target = modules_dir(assets), modules_dir(into)
    count = 0
    for rel in sorted(set(FILES.values())):
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / rel, target / rel)
        count += 1
    stamp = source / ".stamp"  # scripts/setup's: which install the docs' vendor copy is of
    (target / ".stamp").write_text(stamp.read_text() if stamp.is_file() else "bundled")
    for rel in FOLDERS:
        shutil.copytree(source / rel, target / rel, dirs_exist_ok=True)
        count += sum(1 for p in (target / rel).rglob("*") if p.is_file())
    return count


def modules_dir(assets: Path = ASSETS) -> Path:
    return assets / "node_modules"


def _installed_version(assets: Path) -> str:
    """The hash of package.json and the lock that scripts/setup installed (its stamp)."""
    stamp = modules_dir(assets) / ".stamp"
    return stamp.read_text().strip() if stamp.is_file() else ""


def installed(assets: Path = ASSETS) -> list[str]:
    """What of FILES and FOLDERS is missing from node_modules (empty: all installed)."""
    root = modules_dir(assets)
    return [p for p in [*FILES.values(), *FOLDERS] if not (root / p).exists()]


def _vendor(docs: Path, assets: Path) -> bool:
    """Copy the files into ``docs/vendor`` once per install (a stamp holds setup's hash)."""
    target, stamp = docs / VENDOR, docs / VENDOR / ".lock-hash"
    want = _installed_version(assets)
    if stamp.is_file() and stamp.read_text() == want:
        return True
    missing = installed(assets)
    if missing:
        print(
            f"[quality] Data Docs keep their CDN links (they need internet to render styled): "
            f"{len(missing)} front-end files missing from {modules_dir(assets)}, e.g. "
            f"{missing[0]}. Run scripts/setup (it runs npm ci in {assets}).",
            file=sys.stderr,
        )
        return False
    staging = docs / f".{VENDOR}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    root = modules_dir(assets)
    for rel in sorted(set(FILES.values())):
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, staging / rel)
    for rel in FOLDERS:
        shutil.copytree(root / rel, staging / rel)
    (staging / ".lock-hash").write_text(want)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return True


def rewrite(text: str, page: Path, docs: Path) -> str:
    """``text`` of ``page`` (under ``docs``) with CDN and logo addresses made relative."""
    up = os.path.relpath(docs, page.parent)

    def local(rel: str) -> str:
        return Path(up, rel).as_posix()

    text = _WHOLE.sub(lambda m: local(f"{VENDOR}/{FILES[m.group(0)]}"), text)
    return _LOGO.sub(local(LOGO), text)


def localize(docs: Path, since: float = 0.0, assets: Path = ASSETS) -> int:
    """Point the pages under ``docs`` written at or after ``since`` (a time.time()) at local
    copies; returns how many pages (and style sheets) changed. Without the installed assets, pages are left as
    GE wrote them and a warning says how to install them."""
    if not docs.is_dir() or not _vendor(docs, assets):
        return 0
    changed = 0
    # The default style sheet GE copies beside the pages names the dark logo by address too.
    for page in [*docs.rglob("*.html"), *(docs / "static" / "styles").glob("*.css")]:
        if VENDOR in page.relative_to(docs).parts[:1] or page.stat().st_mtime < since:
            continue
        text = page.read_text(encoding="utf-8")
        new = rewrite(text, page, docs)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed += 1
    return changed


def remaining_addresses(docs: Path) -> dict[str, list[str]]:
    """Resource addresses (src=, href= of style sheets, url()) still pointing off the machine,
    per page: what a browser without internet would fail to load."""
    found: dict[str, list[str]] = {}
    resource = re.compile(
        r"""(?:src=["']|<link[^>]*href=["']|url\(['"]?)(https?://[^"')\s]+)""", re.IGNORECASE
    )
    for page in [*docs.rglob("*.html"), *docs.rglob("*.css")]:
        if VENDOR in page.relative_to(docs).parts[:1]:
            continue
        urls = sorted(set(resource.findall(page.read_text(encoding="utf-8"))))
        if urls:
            found[page.relative_to(docs).as_posix()] = urls
    return found
