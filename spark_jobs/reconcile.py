"""spark-submit entry point for reconciliation: the same arguments as `streamshift reconcile`.

    eval spark-submit "$(streamshift spark-submit-args)" spark_jobs/reconcile.py \\
        --flow <flow> --date 2026-11-20 [--against clearing.csv] [--eod-file eod.csv] \\
        [--correct] [--fail-on-breaks]
"""

from __future__ import annotations

import sys

from streamshift.cli import main

if __name__ == "__main__":
    sys.exit(main(["reconcile", *sys.argv[1:]]))
