"""The one spark-submit entry point of the batch jobs, for a cluster without the warm engine.

It takes what the CLI takes — a command line, or a typed job request as JSON:

    eval spark-submit "$(streamshift spark-submit-args)" spark_jobs/run.py \\
        eod --flow <flow> --date 2026-11-20 --file <flow>_eod_2026-11-20.csv
    eval spark-submit "$(streamshift spark-submit-args)" spark_jobs/run.py \\
        '{"kind": "maintain", "flow": "<flow>"}'

Either way the job is ``streamshift.engine.jobs.requests.run(spark, request)`` in this driver's
session; it exits 0 when done, 1 when a reconciliation asked to fail on breaks found some or
an expectation with policy ``fail`` failed, and 2 on a refused request (the error says why).
"""

from __future__ import annotations

import sys

from streamshift.cli import batch_job_main

if __name__ == "__main__":
    sys.exit(batch_job_main(sys.argv[1:]))
