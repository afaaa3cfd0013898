"""File-level checks of EOD CSV files: pure Python, no Spark (the Airflow DAG runs them).

A file that cannot be read as the flow's schema (empty, wrong delimiter, missing columns,
truncated last line) raises :class:`BadFileError` naming the file, the line and the problem
*before* anything is written. Rows inside a readable file that are malformed (wrong number of
fields) or break a rule are quarantined with their line number and raw text by the Spark
reader, :mod:`streamshift.sources.eodread`.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from streamshift.core.errors import StreamshiftError
from streamshift.core.flow import Flow

_DELIMITERS = {";": "semicolon", "\t": "tab", "|": "pipe"}


class BadFileError(StreamshiftError, ValueError):
    """The file as a whole cannot be read as the flow's EOD format."""

    final = True

    def __init__(self, path: Path | str, line: int | None, problem: str):
        where = f"{path}, line {line}" if line else str(path)
        super().__init__(f"{where}: {problem}; nothing was loaded")
        self.path, self.line, self.problem = str(path), line, problem


@dataclass(frozen=True)
class FileLayout:
    header: list[str]
    data_lines: int  # lines after the header, blank ones included


def _count_lines(path: Path) -> tuple[int, bytes]:
    """Number of lines and the last line's bytes, read in blocks (files may be large)."""
    lines, last = 0, b""
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            lines += block.count(b"\n")
            last = (last + block)[-65536:]
    ends_with_newline = last.endswith(b"\n")
    if not ends_with_newline:
        lines += 1
    tail = last.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    return lines, tail if not ends_with_newline else b""


def check_file(path: Path, flow: Flow, *, whole_day: bool) -> FileLayout:
    """File-level checks; raises :class:`BadFileError`. ``whole_day``: a replacement file."""
    if not path.exists():
        raise BadFileError(path, None, "file not found")
    if path.stat().st_size == 0:
        raise BadFileError(path, None, "empty file (0 bytes), expected a header row and data")
    # utf-8-sig: a byte-order mark (spreadsheets write one) is not part of the first column's
    # name; Spark never parses the header line, so the data rows are unaffected by it.
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as handle:
        first = handle.readline().rstrip("\r\n")
    header = [h.strip().lower() for h in next(csv.reader([first]))]
    if len(header) == 1:
        for delimiter, name in _DELIMITERS.items():
            if delimiter in first:
                raise BadFileError(
                    path,
                    1,
                    f"wrong delimiter: the header is split by {name} ({delimiter!r}), "
                    "expected commas",
                )
    missing = [c for c in flow.columns if c not in header]
    if missing:
        raise BadFileError(
            path, 1, f"missing columns {', '.join(missing)}; the header has {', '.join(header)}"
        )
    n_lines, unterminated_tail = _count_lines(path)
    if unterminated_tail and n_lines > 1:
        fields = next(csv.reader(io.StringIO(unterminated_tail.decode("utf-8", "replace"))), [])
        if len(fields) < len(header):
            raise BadFileError(
                path,
                n_lines,
                f"truncated last line ({len(fields)} of {len(header)} fields and "
                "no line end): the file looks cut off; fetch it again",
            )
    if n_lines <= 1 and whole_day:
        raise BadFileError(path, None, "no data rows; a replacement file must hold the whole day")
    return FileLayout(header=header, data_lines=n_lines - 1)
