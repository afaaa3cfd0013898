"""The Python side of `streamshift serve`'s state processor, per event, without the JVM.

Runs the processor of the trades flow's ``positions`` (``serve.state_spec`` → ``_processor``)
on pandas batches of new trades, with its two MapStates kept in Python dicts: what remains is
the processor's own work per event (sorting, the per-key loop, moving contributions,
finishing the changed groups), and the number of state calls the real job sends to the JVM.
Compare with the ``state updates`` phase of a real batch (bench/stream_latency.py prints it):
the difference is the state calls. A local Spark session only derives the flow's state schema
(``state_schema``); the processor runs without it.
Run: .venv/bin/python bench/serve_python_cost.py [--events N] [--batches B]
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd

from flows.trades import FLOW
from streamshift.engine.jobs import serve
from streamshift.engine.spark import get_spark
from streamshift.engine.write.target import state_schema
from streamshift.spec.settings import load_settings


class _Map:
    """A MapState in a dict, counting the calls a real one would send to the JVM."""

    calls = 0

    def __init__(self) -> None:
        self.values: dict[Any, Any] = {}

    def getValue(self, key: Any) -> Any:
        _Map.calls += 1
        return self.values.get(key)

    def updateValue(self, key: Any, value: Any) -> None:
        _Map.calls += 1
        self.values[key] = value

    def removeKey(self, key: Any) -> None:
        _Map.calls += 1
        self.values.pop(key, None)


class _Handle:
    def getMapState(self, *_: Any) -> _Map:
        return _Map()


def _batch(n: int, start: int, rng: random.Random) -> pd.DataFrame:
    books = [f"BOOK-{i}" for i in range(12)]
    instruments = [f"INST-{i}" for i in range(13)]
    return pd.DataFrame(
        {
            "k": [f"T{i}" for i in range(start, start + n)],
            "v": [Decimal(1)] * n,
            "ref": [f"bench:{i}" for i in range(start, start + n)],
            "deleted": [False] * n,
            "g0": [dt.date(2026, 11, 20)] * n,
            "g1": [rng.choice(books) for _ in range(n)],
            "g2": [rng.choice(instruments) for _ in range(n)],
            "m0": [Decimal(rng.randint(-500, 500)) for _ in range(n)],
            "m1": [Decimal(rng.randint(-(10**9), 10**9)).scaleb(-6) for _ in range(n)],
            "m2": [Decimal(rng.randint(0, 10**9)).scaleb(-6) for _ in range(n)],
        }
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2500, help="events per batch")
    parser.add_argument("--batches", type=int, default=5)
    args = parser.parse_args()
    spark = get_spark(load_settings(), app_name="bench-serve-python-cost")
    spec = serve.state_spec(FLOW, FLOW.view("positions"), state_schema(spark, FLOW))
    processor = serve._processor(spec)
    processor.init(_Handle())
    rng = random.Random(1)
    per_event, calls = [], []
    for b in range(args.batches):
        frame = _batch(args.events, b * args.events, rng)
        before = _Map.calls
        started = time.perf_counter()
        for _ in processor.handleInputRows(("all",), iter([frame]), None):
            pass
        seconds = time.perf_counter() - started
        per_event.append(seconds / args.events * 1000)
        calls.append((_Map.calls - before) / args.events)
        print(
            f"batch {b + 1}: {args.events} new trades in {seconds:.3f}s of Python, "
            f"{per_event[-1]:.3f} ms per event, {calls[-1]:.2f} state calls per event",
            flush=True,
        )
    print(
        f"\nmedian: {statistics.median(per_event):.3f} ms of Python per event, "
        f"{statistics.median(calls):.2f} state calls per event"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
