"""The wheel carries the stream's JSON decoder (jvm/udf) as a jar, compiled here against the
build environment's PySpark jars (a build with no isolation: `uv build --wheel
--no-build-isolation`, the lock's setuptools and pyspark). Everything else is pyproject.toml."""

from __future__ import annotations

import pathlib
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent


class BuildWithDecoder(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # a repository's editable install: `streamshift setup` builds it
            return
        sys.path.insert(0, str(ROOT))
        from streamshift.local.kit_setup import UDF_JAR, build_decoder

        target = pathlib.Path(self.build_lib) / "streamshift" / "jars" / UDF_JAR
        build_decoder(ROOT / "jvm" / "udf" / "src", target)


setup(cmdclass={"build_py": BuildWithDecoder})
