"""spark-submit application of the always-on stream job (``streaming/run.py`` tells how)."""

from __future__ import annotations

import sys

from streamshift.cli import stream_job_main

if __name__ == "__main__":
    sys.exit(stream_job_main(sys.argv[1:]))
