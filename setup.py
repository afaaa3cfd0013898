"""The wheel carries the stream's JSON decoder (jvm/udf) as a jar, compiled here against the
build environment's PySpark jars (a build with no isolation: `uv build --wheel
--no-build-isolation`, the lock's setuptools and pyspark). Everything else is pyproject.toml."""

from __future__ import annotations

import pathlib
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent
SOURCES = ROOT / "jvm" / "udf" / "src"


class BuildWithDecoder(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # a repository's editable install: scripts/setup builds it
            return
        import pyspark

        jars = pathlib.Path(pyspark.__file__).parent / "jars"
        target = pathlib.Path(self.build_lib) / "streamshift" / "jars" / "streamshift-udf.jar"
        target.parent.mkdir(parents=True, exist_ok=True)
        sources = sorted(str(p) for p in SOURCES.rglob("*.java"))
        with tempfile.TemporaryDirectory() as classes:
            subprocess.run(
                ["javac", "--release", "17", "-Xlint:all,-path", "-Werror", "-cp", f"{jars}/*",
                 "-d", classes, *sources],
                check=True,
            )  # fmt: skip
            subprocess.run(["jar", "cf", str(target), "-C", classes, "."], check=True)


setup(cmdclass={"build_py": BuildWithDecoder})
