"""What a flow's data generator (``flows/<flow>/generate.py``) writes for one business date."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Rows in the first day the demo generates (``streamshift demo --rows``).
DEMO_ROWS = 5_000


@dataclass(frozen=True)
class DayFiles:
    """One business date's files: ``eod`` (the day's file), ``corrections`` (a delta file),
    ``replacement`` (the whole day again, to replace), ``late`` (rows arriving after the day
    closed), ``poison`` (one row per rule the flow enforces) and ``external`` (an outside
    party's view of the day, with a few deliberate breaks, to reconcile against)."""

    eod: Path
    corrections: Path
    replacement: Path
    late: Path
    poison: Path
    external: Path

    @classmethod
    def named(cls, out_dir: Path, flow: str, day: object, external: str) -> DayFiles:
        """The landing convention's names: ``<flow>_eod_<date>.csv`` and so on."""
        return cls(
            eod=out_dir / f"{flow}_eod_{day}.csv",
            corrections=out_dir / f"{flow}_corrections_{day}.csv",
            replacement=out_dir / f"{flow}_replacement_{day}.csv",
            late=out_dir / f"{flow}_late_{day}.csv",
            poison=out_dir / f"{flow}_poison_{day}.csv",
            external=out_dir / f"{external}_{day}.csv",
        )

    def as_dict(self) -> dict[str, Path]:
        return dict(self.__dict__)


def write_csv(path: Path, rows: Iterable[list[str]], header: list[str]) -> None:
    """A CSV with a header row; values are written as given (already formatted strings)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
