"""The kit's spark-submit applications, as files inside the installed package.

``spark-submit`` takes a Python file, not a module: the DAGs and the stream supervisor name
these, so a kit installed from a wheel runs without its repository. The repository's
``spark_jobs/run.py`` and ``streaming/run.py`` are the same two calls, for a cluster that
submits from a checkout.
"""

from __future__ import annotations

from pathlib import Path

BATCH_JOB = Path(__file__).with_name("batch_job.py")
STREAM_JOB = Path(__file__).with_name("stream_job.py")
