"""Stream soak: streamshift's stream for 30 minutes at 1,000 events/s; does it slow down?

Runs the streamshift pipeline of bench/stream_latency.py (same broker set-up, warm-up and
sampling) for ``--seconds`` (default 1,800) and compares the last ``--window`` seconds with the
first (default 300 s each): median micro-batch duration, median batch size and p50 latency
(sent → positions MERGE committed). Issue 14's goal: last ÷ first batch duration ≤ 1.2. Then
prints, per Delta table of the stream layer, its version and number of live files (read through
deltalake, no JVM), which is what `streamshift maintain` compacts.

Run: .venv/bin/python bench/stream_soak.py [--seconds 1800] [--window 300] [--rate 1000]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stream_latency import _percentile, _report, parser, run


def _window(result: dict, start: float, end: float) -> dict[str, float]:
    batches = [b for b in result["batches"] if start <= b["views_committed_at"] < end]
    latencies = [lat for sent, lat in result["samples"] if start <= sent < end]
    durations = [b["duration_ms"] / 1000 for b in batches if b.get("duration_ms") is not None]
    return {
        "batches": len(batches),
        "duration": statistics.median(durations) if durations else float("nan"),
        "size": statistics.median(b["input_rows"] for b in batches) if batches else float("nan"),
        "p50": _percentile(latencies, 0.5) if latencies else float("nan"),
    }


def _tables(home: Path) -> list[str]:
    from deltalake import DeltaTable

    layer = home / "warehouse" / "stream"
    lines = []
    for log in sorted(layer.glob("*/_delta_log")):
        dt = DeltaTable(str(log.parent))
        lines.append(f"  {log.parent.name}: v{dt.version()}, {len(dt.file_uris())} files")
    return lines


def main() -> int:
    p = parser(__doc__, 1800.0, ["streamshift"])
    p.add_argument("--window", type=float, default=300.0, help="seconds compared at each end")
    args = p.parse_args()
    if args.seconds < 2 * args.window:
        p.error("--seconds must be at least twice --window")
    pipelines, results, work = run(args)
    print(f"\nproduced: {int(args.rate * args.seconds)} events at {args.rate:.0f}/s")
    for name, result in results.items():
        _report(pipelines[name], result)
        first_sent = result["samples"][0][0]
        last_sent = result["samples"][-1][0]
        first = _window(result, first_sent, first_sent + args.window)
        last = _window(result, last_sent - args.window, float("inf"))
        for label, w in (("first", first), ("last", last)):
            print(
                f"  {label} {args.window:.0f}s: {w['batches']} batches, median "
                f"{w['size']:.0f} events in {w['duration']:.1f}s, latency p50 {w['p50']:.1f}s"
            )
        print(
            f"  soak {name}: last ÷ first median batch duration = "
            f"{last['duration'] / first['duration']:.2f} (goal <= 1.2)"
        )
    print("tables at the end (stream layer):")
    print("\n".join(_tables(work / "home")) or "  none found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
