"""spark-submit entry point for table upkeep: the same arguments as `streamshift maintain`.

eval spark-submit "$(streamshift spark-submit-args)" spark_jobs/maintain.py --flow <flow>
"""

from __future__ import annotations

import sys

from streamshift.cli import main

if __name__ == "__main__":
    sys.exit(main(["maintain", *sys.argv[1:]]))
