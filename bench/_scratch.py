"""A bench's scratch folder: the one ``--workdir`` (or ``--keep``) names, kept; else a new one
under the temp folder, removed when the bench exits. Benches build warehouses of millions of
rows, Kafka logs and Airflow homes, which would otherwise stay in the temp folder run after run.
Each bench stops the brokers, engines and stacks it started before it exits."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path


def scratch(given: Path | None, prefix: str) -> Path:
    """``given`` when set (kept), else a new temp folder removed at exit."""
    if given is not None:
        return given
    work = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, work, True)
    return work
