"""spark-submit entry point for the daily report: the same arguments as `streamshift report`.

    spark-submit $(streamshift spark-submit-args) spark_jobs/report.py \\
        --flow trades --date 2026-11-20
"""

from __future__ import annotations

import sys

from streamshift.cli import main

if __name__ == "__main__":
    sys.exit(main(["report", *sys.argv[1:]]))
