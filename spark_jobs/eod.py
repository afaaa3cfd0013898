"""spark-submit entry point for EOD loads: the same arguments as `streamshift eod`.

    eval spark-submit "$(streamshift spark-submit-args)" spark_jobs/eod.py \\
        --flow <flow> --date 2026-11-20 --file <flow>_eod_2026-11-20.csv [--replace]
"""

from __future__ import annotations

import sys

from streamshift.cli import main

if __name__ == "__main__":
    sys.exit(main(["eod", *sys.argv[1:]]))
