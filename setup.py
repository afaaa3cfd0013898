"""The wheel carries the stream's JSON decoder (jvm/udf) as a jar, compiled here against the
build environment's PySpark jars, the kit's requirements.lock, and Data Docs' front-end files
(a build with no isolation: `uv build --wheel --no-build-isolation`, the lock's setuptools and
pyspark). Everything else is pyproject.toml."""

from __future__ import annotations

import pathlib
import shutil
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
        from streamshift.store.data_docs import bundle

        package = pathlib.Path(self.build_lib) / "streamshift"
        build_decoder(ROOT / "jvm" / "udf" / "src", package / "jars" / UDF_JAR)
        # The kit's lock, which `streamshift init` writes into a project's requirements.lock.
        shutil.copyfile(ROOT / "requirements.lock", package / "requirements.lock")
        # Data Docs' front-end files, from scripts/setup's npm install (without it the wheel's
        # Data Docs keep their CDN links, and say so).
        if not bundle(ROOT / "expectations" / "assets", package / "data_docs_assets"):
            print(
                "warning: no Data Docs front-end files (run scripts/setup first)", file=sys.stderr
            )


setup(cmdclass={"build_py": BuildWithDecoder})
