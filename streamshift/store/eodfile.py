"""File-level checks of EOD CSV files: pure Python, no Spark (the Airflow DAG runs them).

A file that cannot be read as the flow's schema (empty, wrong delimiter, missing columns,
truncated last line) raises :class:`BadFileError` naming the file, the line and the problem
*before* anything is written. Rows inside a readable file that are malformed (wrong number of
fields) or break a rule are quarantined with their line number and raw text by the Spark
reader, :mod:`streamshift.engine.eodread`.
"""

from __future__ import annotations

import csv
import io
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.flow import Completeness, Flow
from streamshift.spec.settings import load_settings

_DELIMITERS = {";": "semicolon", "\t": "tab", "|": "pipe"}


class BadFileError(StreamshiftError, ValueError):
    """The file as a whole cannot be read as the flow's EOD format."""

    final = True

    def __init__(self, path: Path | str, line: int | None, problem: str):
        where = f"{path}, line {line}" if line else str(path)
        super().__init__(f"{where}: {problem}; nothing was loaded")
        self.path, self.line, self.problem = str(path), line, problem


class IncompleteFileError(BadFileError):
    """The file is not complete yet (no marker, no trailer, still growing): wait and retry."""

    final = False


@dataclass(frozen=True)
class Trailer:
    """A file's trailer line: where it is, and the control totals it carries."""

    line: int
    rows: int
    total: Decimal | None


@dataclass(frozen=True)
class FileLayout:
    header: list[str]
    data_lines: int  # lines after the header, blank ones (and a trailer) included
    trailer: Trailer | None = None
    # Header columns the flow does not declare (ignored), and optional columns the header lacks
    # (each loads as its default).
    unknown: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()


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
    missing = [c for c in flow.columns if c not in header and c not in flow.optional]
    if missing:
        raise BadFileError(
            path, 1, f"missing columns {', '.join(missing)}; the header has {', '.join(header)}"
        )
    unknown = tuple(h for h in header if h not in flow.columns)
    if unknown and load_settings().unknown_fields == "refuse":
        raise BadFileError(
            path,
            1,
            f"columns the flow {flow.name} does not declare: {', '.join(unknown)}; add them to "
            "the flow (as optional columns) or set STREAMSHIFT_UNKNOWN_FIELDS=ignore",
        )
    absent = tuple(c for c in flow.columns if c not in header)
    n_lines, unterminated_tail = _count_lines(path)
    trailer = _trailer(path, flow.completeness, n_lines) if flow.completeness.trailer else None
    if trailer is not None:
        unterminated_tail = b""  # the trailer is the last line, ended or not
    if unterminated_tail and n_lines > 1:
        fields = next(csv.reader(io.StringIO(unterminated_tail.decode("utf-8", "replace"))), [])
        if len(fields) < len(header):
            raise BadFileError(
                path,
                n_lines,
                f"truncated last line ({len(fields)} of {len(header)} fields and "
                "no line end): the file looks cut off; fetch it again",
            )
    data_rows = n_lines - 1 - (trailer is not None)
    if data_rows <= 0 and whole_day:
        raise BadFileError(path, None, "no data rows; a replacement file must hold the whole day")
    return FileLayout(header, n_lines - 1, trailer, unknown, absent)


def _last_line(path: Path) -> str:
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - 65536))
        lines = [b for b in handle.read().splitlines() if b.strip()]
    return lines[-1].decode("utf-8", "replace") if lines else ""


def _trailer(path: Path, completeness: Completeness, n_lines: int) -> Trailer:
    """The trailer line the flow declares, or :class:`IncompleteFileError`."""
    tag = completeness.trailer
    expected = f"{tag},<rows>" + (",<sum>" if completeness.trailer_sum else "")
    fields = [f.strip() for f in next(csv.reader([_last_line(path)]), [])]
    if not fields or fields[0] != tag:
        raise IncompleteFileError(
            path,
            None,
            f"no trailer line ({expected}) at the end: the file is incomplete, perhaps still "
            "being copied; wait for the copy to finish",
        )
    try:
        rows = int(fields[1])
        total = Decimal(fields[2]) if completeness.trailer_sum else None
    except (IndexError, ValueError, InvalidOperation):
        raise BadFileError(
            path, n_lines, f"unreadable trailer {','.join(fields)!r}; expected {expected}"
        ) from None
    return Trailer(line=n_lines, rows=rows, total=total)


def waiting_for(
    path: Path, completeness: Completeness, stable_seconds: float, now: float | None = None
) -> str:
    """What the file still lacks to count as complete ('' when complete): its done-marker,
    its trailer, or — declaring neither — a size that stayed the same ``stable_seconds``."""
    if not path.exists():
        return f"{path} to arrive"
    if completeness.marker:
        markers = [path.with_name(path.name + ".done"), path.parent / "_SUCCESS"]
        if not any(m.exists() for m in markers):
            return f"its done-marker ({markers[0].name} beside it, or _SUCCESS in its folder)"
        return ""
    if completeness.trailer:
        if path.stat().st_size == 0:
            return f"its trailer line ({completeness.trailer},<rows>...)"
        try:
            _trailer(path, completeness, 0)
        except IncompleteFileError:
            return f"its trailer line ({completeness.trailer},<rows>...)"
        except BadFileError:
            return ""  # there, but unreadable: the file check says so
        return ""
    age = _unchanged_for(path, now)
    if age < stable_seconds:
        return f"its size to stay the same for {stable_seconds:g}s (last change {age:.1f}s ago)"
    return ""


def _unchanged_for(path: Path, now: float | None = None) -> float:
    """Seconds since ``path`` last changed."""
    return (time.time() if now is None else now) - path.stat().st_mtime


def settles_in(
    path: Path, completeness: Completeness, stable_seconds: float, now: float | None = None
) -> float | None:
    """Seconds until ``path``, if it does not change meanwhile, counts as complete by its size
    staying the same (0: it does now); ``None`` when that is not what it waits for (it has not
    arrived, or its flow declares a done-marker or a trailer, which no wait brings)."""
    if completeness.marker or completeness.trailer or not path.exists():
        return None
    return max(0.0, stable_seconds - _unchanged_for(path, now))


def wait_until_complete(
    path: Path,
    flow: Flow,
    stable_seconds: float,
    progress: Callable[[str], None] = lambda _: None,
) -> None:
    """Wait (at most one stability window) for a file that may still be growing; raise
    :class:`IncompleteFileError` naming what is missing when it is not complete.

    A missing marker or trailer is refused at once (the producer has not said the file is
    whole); a file changed within the last ``stable_seconds`` is watched that long."""
    missing = waiting_for(path, flow.completeness, stable_seconds)
    if missing and not flow.completeness.marker and not flow.completeness.trailer:
        before = os.stat(path)
        progress(f"waiting {stable_seconds:g}s for {path.name} to stop changing")
        time.sleep(max(0.0, stable_seconds - (time.time() - before.st_mtime)))
        after = os.stat(path)
        changed = (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns)
        missing = "" if not changed else f"its size to stop changing ({after.st_size} bytes now)"
    if missing:
        raise IncompleteFileError(
            path,
            None,
            f"incomplete: waiting for {missing}. Run again once the file is complete",
        )
