"""``streamshift setup``: an installed kit made ready to run, idempotently, offline afterwards.

* the JVM jars of ``streamshift/jars.lock`` (Spark's Kafka connector and Delta; the Kafka
  broker), fetched from Maven Central into a per-user cache, each checked against its SHA-256
  (a wrong or half-downloaded file is never used); no Maven needed;
* the stream's JSON decoder jar, in the package (``streamshift/jars/``): the one the wheel was
  built with, or in the kit's repository compiled from ``jvm/udf`` with javac;
* the Spark driver's class-data-sharing archive (``streamshift.engine.cds``), trained on the
  kit's bundled example project, inside this virtualenv (it serves no other, and goes with
  it); trained again when Java, the jars, the decoder or the training change (a stamp beside
  it).

``scripts/setup`` (a kit's repository) is the virtualenv from the lock, then this.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.settings import JARS_LOCK, KIT_JARS, REPO_ROOT, Settings, jars_cache

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


def build_decoder(sources: Path, target: Path) -> None:
    """Compile the decoder's Java sources against this PySpark's jars into ``target``."""
    import tempfile

    import pyspark

    if shutil.which("javac") is None:
        raise SetupError(
            "javac not found: the stream's decoder (jvm/udf) is compiled here; install a Java "
            "17 JDK (e.g. apt-get install openjdk-17-jdk-headless)"
        )
    jars = Path(pyspark.__file__).parent / "jars"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as classes:
        javac = ["javac", "--release", "17", "-Xlint:all,-path", "-Werror", "-cp", f"{jars}/*"]
        done = subprocess.run(
            [*javac, "-d", classes, *sorted(str(p) for p in sources.rglob("*.java"))],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SetupError(f"javac could not build {sources}:\n{done.stderr[-3000:]}")
        partial = target.with_suffix(".part")
        subprocess.run(["jar", "cf", str(partial), "-C", classes, "."], check=True)
        partial.replace(target)


def _decoder_key(sources: Path) -> str:
    import pyspark

    sha = hashlib.sha256(pyspark.__version__.encode())
    for path in sorted(sources.rglob("*.java")):
        sha.update(path.read_bytes())
    return sha.hexdigest()


def place_decoder(dest: Path, say: Callable[[str], None]) -> Path:
    """The decoder jar of this kit: the wheel's, or built from the repository's jvm/udf, in
    the package (``streamshift/jars``), never in the shared jars folder (another virtualenv's
    kit would rewrite it under this one's class archive)."""
    for old in (UDF_JAR, "streamshift-udf.stamp"):  # where an older kit put it
        (dest / "spark" / "lib" / old).unlink(missing_ok=True)
    target = KIT_JARS / UDF_JAR
    sources = REPO_ROOT / "jvm" / "udf" / "src"
    if not sources.is_dir():
        if not target.is_file():
            raise SetupError(
                f"this kit has no {UDF_JAR} (a wheel builds it with javac): reinstall the kit "
                "from its wheel"
            )
        return target
    stamp = target.with_suffix(".stamp")
    key = _decoder_key(sources)
    if target.is_file() and stamp.is_file() and stamp.read_text() == key:
        return target
    say(f"building the stream's JSON decoder ({sources.relative_to(REPO_ROOT)}) with javac")
    build_decoder(sources, target)
    stamp.write_text(key)
    return target


def _archive_key(dest: Path) -> str:
    """What the class archive depends on: Java, the jars (their folder too: the archive names
    their paths), the training, this virtualenv."""
    from streamshift.engine import cds

    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    sha = hashlib.sha256((java.stderr + sys.prefix + str(dest.resolve())).encode())
    sha.update(JARS_LOCK.read_bytes())
    sha.update(Path(cds.__file__).read_bytes())
    decoder = KIT_JARS / UDF_JAR
    sha.update(_digest(decoder).encode() if decoder.is_file() else b"")
    return sha.hexdigest()


def other_locks(dest: Path) -> list[Path]:
    """The cache's jar folders of other locks than ``dest``'s (an earlier kit's, or another
    virtualenv's kit): folders beside ``dest`` named by a lock's digest, as ``jars_cache`` names
    them. A ``jars_dir`` set elsewhere has none."""
    cache = jars_cache()
    if dest.resolve() != cache or not cache.parent.is_dir():
        return []
    return sorted(
        p
        for p in cache.parent.iterdir()
        if p.is_dir() and p.name != cache.name and re.fullmatch(r"[0-9a-f]{16}", p.name)
    )


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def prune_other_locks(dest: Path, say: Callable[[str], None], *, remove: bool) -> int:
    """Say (``remove=False``) or remove the jar folders of other locks; how many there were."""
    others = other_locks(dest)
    if not others:
        return 0
    megabytes = sum(_size(p) for p in others) / 1e6
    folders = f"{len(others)} jar folder{'s' if len(others) > 1 else ''} of other locks"
    if remove:
        for folder in others:
            shutil.rmtree(folder)
        say(f"removed {folders} ({megabytes:,.0f} MB)")
    else:
        say(
            f"{folders} in {dest.parent} ({megabytes:,.0f} MB): "
            "`streamshift setup --prune` removes them (a kit that uses one fetches it again with "
            "its own `streamshift setup`)"
        )
    return len(others)


def remove_cached_archives(dest: Path, say: Callable[[str], None]) -> int:
    """Remove the class archives earlier kits kept in the jars folder, one per virtualenv
    (``spark/classes-<virtualenv>.jsa``) and never removed: a clone's own virtualenv left one
    there each time. Their virtualenvs are not recorded; one still in use trains its archive
    again at its next ``setup`` and runs, only slower, until then. How many there were."""
    folder = dest / "spark"
    archives = sorted(folder.glob("classes-*.jsa")) if folder.is_dir() else []
    if not archives:
        return 0
    megabytes = sum(a.stat().st_size for a in archives) / 1e6
    for archive in archives:
        archive.unlink()
        archive.with_suffix(".stamp").unlink(missing_ok=True)
    count = len(archives)
    say(
        f"removed {count} class archive{'s' if count > 1 else ''} of earlier kits from "
        f"{folder} ({megabytes:,.0f} MB); each virtualenv now keeps its own"
    )
    return count


def setup(
    settings: Settings, say: Callable[[str], None], *, archive: bool = True, prune: bool = False
) -> Path:
    """Make ``settings.jars_dir`` ready (see the module's doc); returns it. ``prune``: remove
    the cache's jar folders of other locks (else only say they are there)."""
    from streamshift.engine.spark import archive_path

    dest = settings.jars_dir
    fetched = fetch_jars(dest, say)
    place_decoder(dest, say)
    say(f"{len(locked_jars())} jars in {dest} ({fetched} fetched, every hash checked)")
    prune_other_locks(dest, say, remove=prune)
    remove_cached_archives(dest, say)
    path = archive_path()
    stamp = path.with_suffix(".stamp")
    key = _archive_key(dest) if archive else ""
    if archive and not (path.is_file() and stamp.is_file() and stamp.read_text() == key):
        stamp.unlink(missing_ok=True)
        say("training the Spark driver's class-data-sharing archive (a minute or two)")
        done = subprocess.run(
            [sys.executable, "-m", "streamshift.engine.cds", "--output", str(path)], check=False
        )
        if done.returncode == 0:
            stamp.write_text(key)
        else:
            say("no class-data-sharing archive: Spark jobs run, only slower")
    return dest
