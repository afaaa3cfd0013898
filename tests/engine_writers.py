"""Two jobs applying to one layer at once on the warm engine, each in a Spark Connect session
of its own, as two commands handed to the engine are. ``tests/test_writepath.py`` runs this in
a process of its own (PySpark's Connect mode is process-wide) and checks the tables.

Run: python -m tests.engine_writers ENGINE_URL LAYER_FOLDER ROUNDS
Prints, per round, the version written and what each writer accepted, as JSON lines.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pyspark.sql import SparkSession

from flows.trades import FLOW
from streamshift.engine.write.apply import apply_changes
from streamshift.engine.write.target import Target, load_reference
from streamshift.spec.catalog import LayerTables
from tests.trades_data import frame, trade, two_writers_round


def main(url: str, folder: Path, rounds: int) -> None:
    sessions = [SparkSession.builder.remote(url).create() for _ in range(2)]
    targets = [
        Target(s, FLOW, LayerTables(folder, FLOW, "batch"), load_reference(s, FLOW))
        for s in sessions
    ]
    apply_changes(FLOW, frame(sessions[0], [trade("a", 1), trade("b", 1)]), "test", targets[0])
    for v in range(2, rounds + 2):
        rows = two_writers_round(v)
        start = threading.Barrier(2)

        def writer(i: int, rows=rows, start=start) -> int:  # type: ignore[no-untyped-def]
            batch = frame(sessions[i], rows)
            start.wait()
            source = ("eod-correction", "stream")[i]
            return apply_changes(FLOW, batch, source, targets[i]).accepted

        with ThreadPoolExecutor(2) as pool:
            accepted = list(pool.map(writer, [0, 1]))
        print(json.dumps({"version": v, "accepted": accepted}), flush=True)


if __name__ == "__main__":
    code = 0
    try:
        main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))
    except Exception as exc:  # noqa: BLE001 - any failure: its first line last, for the test
        traceback.print_exc()
        print(f"{type(exc).__name__}: {str(exc).splitlines()[0][:1000]}", file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # No interpreter shutdown: a Connect client whose operation failed can keep retrying its
    # release at exit for minutes.
    os._exit(code)
