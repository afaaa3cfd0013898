"""spark-submit entry point of the always-on streaming job.

    eval spark-submit "$(streamshift spark-submit-args)" streaming/run.py --flow <flow> [--available-now]

Takes the same arguments as ``streamshift stream``.
"""

from __future__ import annotations

import sys

from streamshift.cli import stream_job_main

if __name__ == "__main__":
    sys.exit(stream_job_main(sys.argv[1:]))
