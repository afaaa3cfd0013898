"""spark-submit entry point for Kafka replays: the same arguments as `streamshift replay`.

    eval spark-submit "$(streamshift spark-submit-args)" spark_jobs/replay.py \\
        --flow <flow> --from 2026-11-20T00:00:00Z --to 2026-11-21T00:00:00Z --into stream
"""

from __future__ import annotations

import sys

from streamshift.cli import main

if __name__ == "__main__":
    sys.exit(main(["replay", *sys.argv[1:]]))
