"""SQL text for the statements that must be text: one typed literal encoder and a small
expression builder for MERGE conditions.

Delta's ``MERGE INTO`` is the one write that Spark Connect offers only as SQL (Delta's Python
``DeltaTable`` needs a server plugin that is not published for every Spark/Delta pair), and
Delta resolves a MERGE before Spark binds parameter markers (``:name`` fails with
UNBOUND_SQL_PARAMETER). So a value (a key, a date, a version) becomes text here, and only here:

* a string is its UTF-8 bytes in hex, cast back (``CAST(X'4F27...' AS STRING)``): no quote,
  backslash or brace of a key such as ``BK\\7`` or ``O'Brien`` reaches the parser, whatever
  ``spark.sql.parser.escapedStringLiterals`` says;
* a date, timestamp, integer, decimal or boolean is its typed literal.

Names (columns from a flow's spec, table paths from settings) are quoted identifiers with
their back-ticks doubled. Nothing here imports pyspark: :meth:`Sql.column` does, lazily.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column


def identifier(name: str) -> str:
    """``name`` as one quoted SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def delta_path(path: str) -> str:
    """The Delta table at ``path`` as a table name (``delta.`/warehouse/x```)."""
    return f"delta.{identifier(path)}"


def literal(value: object) -> str:
    """``value`` as a typed SQL literal (see the module's note)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return f"{value}L" if not -(2**31) <= value < 2**31 else str(value)
    if isinstance(value, float):
        return f"CAST('{value!r}' AS DOUBLE)"
    if isinstance(value, decimal.Decimal):
        return f"{value}BD"
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return f"TIMESTAMP_NTZ'{value.isoformat(sep=' ')}'"
        return f"TIMESTAMP'{value.astimezone(dt.UTC).isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE'{value.isoformat()}'"
    if isinstance(value, str):
        return f"CAST(X'{value.encode('utf-8').hex().upper()}' AS STRING)" if value else "''"
    raise TypeError(f"no SQL literal for {type(value).__name__} {value!r}")


@dataclass(frozen=True)
class Sql:
    """A SQL expression as text; combine with ``&``, ``|`` and ``~``."""

    text: str

    def __and__(self, other: Sql) -> Sql:
        if self is TRUE:
            return other
        if other is TRUE:
            return self
        return Sql(f"({self.text}) AND ({other.text})")

    def __or__(self, other: Sql) -> Sql:
        return Sql(f"({self.text}) OR ({other.text})")

    def __invert__(self) -> Sql:
        return Sql(f"NOT ({self.text})")

    def eq(self, other: Sql) -> Sql:
        return Sql(f"{self.text} = {other.text}")

    def eq_null_safe(self, other: Sql) -> Sql:
        return Sql(f"{self.text} <=> {other.text}")

    def gt(self, other: Sql) -> Sql:
        return Sql(f"{self.text} > {other.text}")

    def is_not_null(self) -> Sql:
        return Sql(f"{self.text} IS NOT NULL")

    def isin(self, values: Iterable[object]) -> Sql:
        """One of ``values`` (none: false)."""
        items = [literal(v) for v in values]
        return Sql(f"{self.text} IN ({', '.join(items)})") if items else FALSE

    def between(self, low: object, high: object) -> Sql:
        return Sql(f"{self.text} BETWEEN {literal(low)} AND {literal(high)}")

    def column(self) -> Column:
        """The same expression as a DataFrame column (for a filter beside the MERGE)."""
        from pyspark.sql import functions as F

        return F.expr(self.text)


TRUE = Sql("TRUE")
FALSE = Sql("FALSE")


def col(name: str, alias: str = "") -> Sql:
    """Column ``name`` (of the MERGE's ``t`` or ``s`` when ``alias`` is given)."""
    return Sql(f"{alias}.{identifier(name)}" if alias else identifier(name))


def lit(value: object) -> Sql:
    return Sql(literal(value))


def coalesce(*parts: Sql) -> Sql:
    return Sql(f"coalesce({', '.join(p.text for p in parts)})")
