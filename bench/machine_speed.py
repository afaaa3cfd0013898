"""The day's machine speed: a 30M-iteration Python loop, the yardstick BENCHMARKS.md quotes.

The machine's speed moves from day to day by up to ~3x; each figure is a ratio taken in one run,
and the loop's seconds beside it say what kind of day the run had. Prints the median of
``--runs`` loops (``total += i`` over ``range(30_000_000)`` at a module's level, in this
Python).

Run: .venv/bin/python bench/machine_speed.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

# At a module's level, as ``python -c`` runs it (its names are globals, each step a dictionary
# lookup), the form the seconds BENCHMARKS.md quotes match. Inside a function the same loop
# takes about half as long.
LOOP = compile("total = 0\nfor i in range(30_000_000):\n    total += i\n", "loop", "exec")


def loop_seconds() -> float:
    started = time.perf_counter()
    exec(LOOP, {})  # noqa: S102 — the fixed loop above
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = [loop_seconds() for _ in range(args.runs)]
    print(
        f"30M-iteration Python loop: {statistics.median(runs):.2f} s (median of {args.runs}: "
        + ", ".join(f"{r:.2f}" for r in runs)
        + ")"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
