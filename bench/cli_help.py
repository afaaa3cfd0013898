"""How long ``streamshift --help`` takes: this checkout's CLI against an earlier commit's, A/B.

``--help`` builds every command group's parser, so what a group imports at its top is paid by
every command a user types. Each side runs ``python -m streamshift.cli --help`` in a fresh
interpreter with the package importable from its own tree (the base commit's from a ``git
worktree``), the sides alternating ``--runs`` times after one warm-up each; the script prints
each side's median wall seconds and the ratio of this checkout to the base. Run:

    .venv/bin/python bench/cli_help.py [--base REV] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASE = "d593dd0"  # the CLI as one module, before the command groups


def once(code: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(code)}
    env = {k: v for k, v in env.items() if not k.startswith("STREAMSHIFT_")}
    probe = "import streamshift, sys; assert streamshift.__file__.startswith(sys.argv[1])"
    subprocess.run([sys.executable, "-c", probe, str(code)], env=env, cwd=code, check=True)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "streamshift.cli", "--help"],
        env=env,
        cwd=code,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=BASE, help=f"the commit to compare with ({BASE})")
    parser.add_argument("--runs", type=int, default=20, help="timed runs per side (20)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cli-help-ab-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), args.base],
            check=True,
            capture_output=True,
        )
        try:
            sides = {"base": base, "head": REPO}
            for code in sides.values():
                once(code)  # warm-up: the file cache, the bytecode
            seconds: dict[str, list[float]] = {name: [] for name in sides}
            for _ in range(args.runs):
                for name, code in sides.items():
                    seconds[name].append(once(code))
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], check=False
            )
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    for name, value in medians.items():
        print(f"{name}: streamshift --help {value:.3f} s (median of {args.runs})")
    print(f"head / base: {medians['head'] / medians['base']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
