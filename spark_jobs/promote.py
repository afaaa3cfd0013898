"""spark-submit entry point for a stage change: the same arguments as `streamshift promote`.

    eval spark-submit "$(streamshift spark-submit-args)" spark_jobs/promote.py \\
        --flow <flow> --to stream --by alice
"""

from __future__ import annotations

import sys

from streamshift.cli import main

if __name__ == "__main__":
    sys.exit(main(["promote", *sys.argv[1:]]))
