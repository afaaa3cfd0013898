"""spark-submit application of the batch jobs (``spark_jobs/run.py`` tells how to call it)."""

from __future__ import annotations

import sys

from streamshift.cli import batch_job_main

if __name__ == "__main__":
    sys.exit(batch_job_main(sys.argv[1:]))
