"""``streamshift setup``: an installed kit made ready to run, idempotently, offline afterwards.

* the JVM jars of ``streamshift/jars.lock`` (Spark's Kafka connector and Delta; the Kafka
  broker), fetched from Maven Central into a per-user cache, each checked against its SHA-256
  (a wrong or half-downloaded file is never used); no Maven needed;
* the stream's JSON decoder jar, built with the wheel (``streamshift/jars/``), beside them;
* the Spark driver's class-data-sharing archive (``streamshift.engine.cds``), trained on the
  kit's bundled example project and keyed by this virtualenv.

A kit run from its repository (``scripts/setup``: Maven fills ``jvm/``) needs none of it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.settings import JARS_LOCK, KIT_JARS, Settings, jars_cache

CENTRAL = os.environ.get("STREAMSHIFT_MAVEN_REPOSITORY", "https://repo.maven.apache.org/maven2")
UDF_JAR = "streamshift-udf.jar"


class SetupError(StreamshiftError):
    final = True


@dataclass(frozen=True)
class LockedJar:
    folder: str
    path: str  # on Maven Central
    sha256: str

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def locked_jars(lock: Path = JARS_LOCK) -> list[LockedJar]:
    jars = []
    for line in lock.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            folder, path, digest = line.split()
            jars.append(LockedJar(folder, path, digest))
    return jars


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _fetch(jar: LockedJar, target: Path) -> None:
    partial = target.with_suffix(".part")
    url = f"{CENTRAL.rstrip('/')}/{jar.path}"
    try:
        with urllib.request.urlopen(url, timeout=120) as answer, open(partial, "wb") as out:
            shutil.copyfileobj(answer, out)
    except (urllib.error.URLError, OSError) as exc:
        partial.unlink(missing_ok=True)
        raise SetupError(
            f"could not fetch {url}: {exc}; check access to Maven Central (or point "
            "STREAMSHIFT_MAVEN_REPOSITORY at a mirror) and run `streamshift setup` again"
        ) from None
    got = _digest(partial)
    if got != jar.sha256:
        partial.unlink()
        raise SetupError(
            f"{url} has SHA-256 {got}, and streamshift/jars.lock pins {jar.sha256}: the file "
            "was not used; check the repository (a mirror serving another file?)"
        )
    partial.replace(target)


def fetch_jars(dest: Path, say: Callable[[str], None]) -> int:
    """The lock's jars in ``dest/<folder>/lib``; the number fetched (0: all there already)."""
    fetched = 0
    jars = locked_jars()
    for n, jar in enumerate(jars, 1):
        target = dest / jar.folder / "lib" / jar.name
        if target.is_file() and _digest(target) == jar.sha256:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        say(f"fetching {jar.name} ({n}/{len(jars)})")
        _fetch(jar, target)
        fetched += 1
    return fetched


def place_decoder(dest: Path) -> None:
    """The decoder jar the wheel was built with, beside Spark's other jars."""
    bundled = KIT_JARS / UDF_JAR
    if not bundled.is_file():
        raise SetupError(
            f"this kit has no {UDF_JAR} (a wheel builds it with javac): reinstall the kit from "
            "its wheel, or run scripts/setup in the kit's repository"
        )
    target = dest / "spark" / "lib" / UDF_JAR
    if not target.is_file() or _digest(target) != _digest(bundled):
        shutil.copy2(bundled, target)


def setup(settings: Settings, say: Callable[[str], None], *, archive: bool = True) -> Path:
    """Make ``settings.jars_dir`` ready (see the module's doc); returns it."""
    from streamshift.engine.spark import archive_path

    dest = settings.jars_dir
    if dest != jars_cache():
        say(f"jars from {dest} (STREAMSHIFT_JARS_DIR or the kit's repository): nothing to fetch")
        return dest
    fetched = fetch_jars(dest, say)
    place_decoder(dest)
    say(f"{len(locked_jars())} jars in {dest} ({fetched} fetched, every hash checked)")
    path = archive_path(settings)
    if archive and not path.is_file():
        say("training the Spark driver's class-data-sharing archive (a minute or two)")
        done = subprocess.run(
            [sys.executable, "-m", "streamshift.engine.cds", "--output", str(path)], check=False
        )
        if done.returncode != 0:
            say("no class-data-sharing archive: Spark jobs run, only slower")
    return dest
