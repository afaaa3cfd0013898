"""spark-submit entry point for closing a date at its cut-off: the arguments of `streamshift close`.

    eval spark-submit "$(streamshift spark-submit-args)" spark_jobs/close.py \\
        --flow <flow> --date 2026-11-20 [--force --reason TEXT]
"""

from __future__ import annotations

import sys

from streamshift.cli import main

if __name__ == "__main__":
    sys.exit(main(["close", *sys.argv[1:]]))
