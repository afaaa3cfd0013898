"""spark-submit entry point for data quality: the same arguments as `streamshift quality`.

    eval spark-submit "$(streamshift spark-submit-args)" spark_jobs/quality.py \\
        --flow <flow> --date 2026-11-20 --layer batch --file landing/<flow>/.../<flow>_eod.csv

Exits 1 when an expectation with policy `fail` fails (the task fails, naming it).
"""

from __future__ import annotations

import sys

from streamshift.cli import main

if __name__ == "__main__":
    sys.exit(main(["quality", *sys.argv[1:]]))
