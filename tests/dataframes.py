"""DataFrame equality that ignores row order and names the differing rows."""

from __future__ import annotations

from collections import Counter
from typing import Any


def rows_of(df: Any, columns: list[str] | None = None) -> list[tuple[Any, ...]]:
    """Rows of a DataFrame as sorted tuples (``columns`` picks and orders the columns)."""
    if columns is not None:
        df = df.select(*columns)
    return sorted((tuple(r) for r in df.collect()), key=repr)


def assert_same_rows(actual: Any, expected: Any, columns: list[str] | None = None) -> None:
    """Assert two DataFrames (or a DataFrame and a list of tuples) hold the same rows."""
    got = Counter(rows_of(actual, columns))
    want = Counter(expected if isinstance(expected, list) else rows_of(expected, columns))
    missing, extra = want - got, got - want
    assert not missing and not extra, (
        f"rows differ\n  missing: {sorted(missing.elements(), key=repr)[:10]}"
        f"\n  unexpected: {sorted(extra.elements(), key=repr)[:10]}"
    )
